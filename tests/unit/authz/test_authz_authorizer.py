"""AclAuthorizer: Kafka's AclAuthorizer decisions, KIP-801 readiness, KIP-430 bitfields."""

from __future__ import annotations

import pytest

from tokensvc.authz.acl import (
    CLUSTER_NAME,
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
    supported_operations,
)
from tokensvc.authz.authorizer import (
    ALL_OPERATIONS_BITFIELD,
    NOT_REQUESTED_BITFIELD,
    AclAuthorizer,
    operations_bitfield,
)
from tokensvc.core.errors import AUTHORIZER_NOT_READY, Errors, KafkaError
from tokensvc.core.principal import KafkaPrincipal

Op = AclOperation
T, C = ResourceType.TOPIC, ResourceType.CLUSTER
LIT, PRE = PatternType.LITERAL, PatternType.PREFIXED
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
ALICE = KafkaPrincipal.user("alice")
BOB = KafkaPrincipal.user("bob")
HOST = "192.168.0.1"


def acl(name="foo", op=Op.READ, perm=ALLOW, principal="User:alice", host="*", ptype=LIT, rtype=T):
    return AclBinding(
        ResourcePattern(rtype, name, ptype), AccessControlEntry(principal, host, op, perm)
    )


def authorizer(*bindings, super_users=(), allow_everyone=False) -> AclAuthorizer:
    a = AclAuthorizer(super_users, allow_everyone_if_no_acl_found=allow_everyone)
    a.load(bindings)
    a.mark_ready()
    return a


def may(a, op, name="foo", principal=ALICE, host=HOST, rtype=T) -> bool:
    return a.authorize(principal, host, op, rtype, name)


# --- super users and readiness ------------------------------------------------------------


def test_super_user_is_allowed_without_any_acl():
    a = authorizer(super_users=["User:admin"])
    assert may(a, Op.ALTER, principal=KafkaPrincipal.user("admin"))
    assert not may(a, Op.ALTER)


def test_super_user_is_allowed_despite_a_deny():
    a = authorizer(acl(op=Op.ALL, perm=DENY, principal="User:*"), super_users=[ALICE])
    assert may(a, Op.READ)


def test_super_users_accept_principal_objects_and_strings_with_spaces():
    a = authorizer(super_users=[KafkaPrincipal.user("a"), " User:b "])
    assert a.is_super_user(KafkaPrincipal.user("a")) and a.is_super_user(KafkaPrincipal.user("b"))


def test_before_ready_non_super_users_get_authorizer_not_ready():
    a = AclAuthorizer(["User:admin"])
    a.load([acl()])
    assert not a.ready
    with pytest.raises(KafkaError) as info:
        may(a, Op.READ)
    assert info.value.error is AUTHORIZER_NOT_READY is Errors.COORDINATOR_LOAD_IN_PROGRESS
    assert info.value.error.retriable
    assert may(a, Op.READ, principal=KafkaPrincipal.user("admin"))
    a.mark_ready()
    assert a.ready and may(a, Op.READ)


# --- matching ------------------------------------------------------------------------------


def test_literal_acl_allows_only_its_operation_principal_and_resource():
    a = authorizer(acl())
    assert may(a, Op.READ)
    assert not may(a, Op.WRITE)
    assert not may(a, Op.READ, principal=BOB)
    assert not may(a, Op.READ, name="bar")


def test_token_authenticated_principal_matches_as_its_plain_principal():
    a = authorizer(acl())
    assert may(a, Op.READ, principal=KafkaPrincipal("User", "alice", token_authenticated=True))


def test_super_user_matching_ignores_the_token_flag():
    a = authorizer(super_users=["User:admin"])
    assert may(a, Op.ALTER, principal=KafkaPrincipal("User", "admin", token_authenticated=True))


def test_principal_type_is_part_of_the_match():
    a = authorizer(acl())
    assert not may(a, Op.READ, principal=KafkaPrincipal("Group", "alice"))


def test_wildcard_principal_matches_every_user():
    a = authorizer(acl(principal="User:*"))
    assert may(a, Op.READ, principal=BOB)


def test_host_must_match_exactly_or_be_wildcard():
    a = authorizer(acl(host="10.0.0.1"))
    assert may(a, Op.READ, host="10.0.0.1")
    assert not may(a, Op.READ, host="10.0.0.2")
    assert may(authorizer(acl(host="*")), Op.READ, host="10.0.0.2")


def test_wildcard_resource_applies_to_every_name_of_its_type():
    a = authorizer(acl(name="*"))
    assert may(a, Op.READ, name="anything")
    assert not may(a, Op.READ, rtype=ResourceType.GROUP, name="anything")


def test_prefixed_acl_applies_to_names_starting_with_the_prefix():
    a = authorizer(acl(name="payments.", ptype=PRE))
    assert may(a, Op.READ, name="payments.eu")
    assert may(a, Op.READ, name="payments.")
    assert not may(a, Op.READ, name="payments")
    assert not may(a, Op.READ, name="xpayments.eu")


def test_prefixes_of_several_lengths_all_apply():
    a = authorizer(
        acl(name="a", ptype=PRE, op=Op.READ),
        acl(name="abc", ptype=PRE, op=Op.WRITE),
        acl(name="abcdef", ptype=PRE, op=Op.DELETE),
    )
    assert a.authorized_operations(ALICE, HOST, T, "abcd") >= {Op.READ, Op.WRITE}
    assert Op.DELETE not in a.authorized_operations(ALICE, HOST, T, "abcd")
    assert Op.DELETE in a.authorized_operations(ALICE, HOST, T, "abcdefg")


def test_prefixed_star_is_a_literal_prefix_not_a_wildcard():
    a = authorizer(acl(name="*", ptype=PRE))
    assert may(a, Op.READ, name="*x")
    assert not may(a, Op.READ, name="x")


# --- DENY and implied operations ---------------------------------------------------------


def test_deny_wins_over_allow():
    a = authorizer(acl(op=Op.READ, perm=ALLOW), acl(op=Op.READ, perm=DENY))
    assert not may(a, Op.READ)


def test_deny_all_wins_over_allow_read():
    a = authorizer(acl(op=Op.READ, perm=ALLOW), acl(op=Op.ALL, perm=DENY))
    assert not may(a, Op.READ)


def test_deny_from_a_wildcard_pattern_wins_over_a_literal_allow():
    a = authorizer(acl(op=Op.READ), acl(name="f", ptype=PRE, principal="User:*", perm=DENY))
    assert not may(a, Op.READ)


def test_deny_for_another_host_does_not_apply():
    a = authorizer(acl(op=Op.READ), acl(op=Op.READ, perm=DENY, host="10.9.9.9"))
    assert may(a, Op.READ)


def test_deny_of_one_operation_leaves_others_allowed():
    a = authorizer(acl(op=Op.ALL), acl(op=Op.WRITE, perm=DENY))
    assert may(a, Op.READ) and not may(a, Op.WRITE)


def test_allow_all_allows_every_operation():
    a = authorizer(acl(op=Op.ALL))
    assert a.authorized_operations(ALICE, HOST, T, "foo") == supported_operations(T)


@pytest.mark.parametrize("granting", [Op.READ, Op.WRITE, Op.DELETE, Op.ALTER])
def test_read_write_delete_alter_imply_describe(granting):
    assert may(authorizer(acl(op=granting)), Op.DESCRIBE)


def test_alter_configs_implies_describe_configs():
    assert may(authorizer(acl(op=Op.ALTER_CONFIGS)), Op.DESCRIBE_CONFIGS)


def test_other_operations_imply_nothing():
    a = authorizer(acl(op=Op.CREATE), acl(op=Op.DESCRIBE_CONFIGS))
    assert not may(a, Op.DESCRIBE)
    assert not may(a, Op.ALTER_CONFIGS)
    assert not may(authorizer(acl(op=Op.DESCRIBE)), Op.READ)


def test_deny_does_not_imply():
    a = authorizer(acl(op=Op.DESCRIBE), acl(op=Op.READ, perm=DENY))
    assert may(a, Op.DESCRIBE)


def test_deny_describe_wins_over_implied_describe():
    a = authorizer(acl(op=Op.READ), acl(op=Op.DESCRIBE, perm=DENY))
    assert may(a, Op.READ) and not may(a, Op.DESCRIBE)


# --- allow.everyone.if.no.acl.found ------------------------------------------------------------


def test_no_acl_on_a_resource_is_denied_by_default():
    assert not may(authorizer(acl(name="other")), Op.READ)


def test_no_acl_on_a_resource_is_allowed_with_allow_everyone():
    a = authorizer(acl(name="other"), allow_everyone=True)
    assert may(a, Op.READ) and may(a, Op.ALTER, principal=BOB)


def test_allow_everyone_does_not_apply_once_any_acl_exists_for_the_resource():
    a = authorizer(acl(principal="User:bob"), allow_everyone=True)
    assert not may(a, Op.READ)  # bob's ACL makes the resource protected
    a2 = authorizer(acl(name="fo", ptype=PRE, principal="User:bob"), allow_everyone=True)
    assert not may(a2, Op.READ)


# --- updates ---------------------------------------------------------------------------------


def test_apply_resource_replaces_one_resource_atomically():
    a = authorizer(acl(op=Op.READ), acl(name="bar", op=Op.READ))
    pattern = ResourcePattern(T, "foo", LIT)
    a.apply_resource(pattern, {AccessControlEntry("User:alice", "*", Op.WRITE, ALLOW)})
    assert not may(a, Op.READ) and may(a, Op.WRITE)
    assert may(a, Op.READ, name="bar")
    assert a.acl_count == 2


def test_apply_resource_with_no_entries_removes_the_resource():
    a = authorizer(acl(name="p", ptype=PRE), acl(name="pq", ptype=PRE))
    a.apply_resource(ResourcePattern(T, "p", PRE), set())
    assert a.acl_count == 1
    assert not may(a, Op.READ, name="px") and may(a, Op.READ, name="pqx")
    a.apply_resource(ResourcePattern(T, "pq", PRE), [])
    assert a.acl_count == 0 and a.describe() == []


def test_deny_then_allow_applied_in_order_ends_allowed():
    a = authorizer()
    pattern = ResourcePattern(T, "foo", LIT)
    a.apply_resource(pattern, {AccessControlEntry("User:alice", "*", Op.READ, DENY)})
    assert not may(a, Op.READ)
    a.apply_resource(pattern, {AccessControlEntry("User:alice", "*", Op.READ, ALLOW)})
    assert may(a, Op.READ)


def test_load_replaces_everything():
    a = authorizer(acl(name="old"))
    a.load([acl(name="new")])
    assert a.acl_count == 1
    assert not may(a, Op.READ, name="old") and may(a, Op.READ, name="new")


def test_loading_a_filter_pattern_is_refused():
    a = AclAuthorizer()
    with pytest.raises(ValueError):
        a.apply_resource(ResourcePattern(T, "foo", PatternType.MATCH), set())
    with pytest.raises(ValueError):
        a.load([acl(rtype=ResourceType.ANY)])


def test_authorizing_a_non_concrete_operation_is_a_programming_error():
    with pytest.raises(ValueError):
        may(authorizer(), Op.ANY)


# --- describe ----------------------------------------------------------------------------------


def test_describe_returns_matching_bindings_in_stable_order():
    b1, b2, b3 = acl(name="foo"), acl(name="fo", ptype=PRE, principal="User:bob"), acl(name="x")
    a = authorizer(b3, b2, b1)
    assert a.describe() == [b1, b3, b2]
    assert a.describe(AclBindingFilter.of(T, "foo", PatternType.MATCH)) == [b1, b2]
    assert a.describe(AclBindingFilter.of(principal="User:bob")) == [b2]
    assert a.describe(AclBindingFilter.of(T, "foo", PatternType.LITERAL)) == [b1]
    assert a.acls(ResourcePattern(T, "fo", PRE)) == {b2.entry}


# --- KIP-430 -------------------------------------------------------------------------------------


def cluster_acl(op, perm=ALLOW, principal="User:alice"):
    return acl(CLUSTER_NAME, op=op, perm=perm, principal=principal, rtype=C)


def bits(*ops) -> int:
    return sum(1 << int(op) for op in ops)


def test_cluster_bitfield_with_some_acls():
    a = authorizer(cluster_acl(Op.ALTER), cluster_acl(Op.ALTER_CONFIGS))
    got = a.authorized_operations_bitfield(ALICE, HOST, C, CLUSTER_NAME)
    # ALTER implies DESCRIBE, ALTER_CONFIGS implies DESCRIBE_CONFIGS.
    assert got == bits(Op.ALTER, Op.DESCRIBE, Op.ALTER_CONFIGS, Op.DESCRIBE_CONFIGS)


def test_cluster_bitfield_with_no_acls_is_zero_or_all_with_allow_everyone():
    assert authorizer().authorized_operations_bitfield(ALICE, HOST, C, CLUSTER_NAME) == 0
    everyone = authorizer(allow_everyone=True)
    assert everyone.authorized_operations_bitfield(ALICE, HOST, C, CLUSTER_NAME) == (
        ALL_OPERATIONS_BITFIELD(C)
    )


def test_cluster_bitfield_of_super_user_is_every_supported_operation():
    a = authorizer(cluster_acl(Op.ALL, DENY, "User:*"), super_users=["User:admin"])
    admin = KafkaPrincipal.user("admin")
    assert a.authorized_operations_bitfield(admin, HOST, C, CLUSTER_NAME) == (
        ALL_OPERATIONS_BITFIELD(C)
    )


def test_bitfield_never_contains_all_any_or_unknown():
    a = authorizer(cluster_acl(Op.ALL))
    got = a.authorized_operations_bitfield(ALICE, HOST, C, CLUSTER_NAME)
    for op in (Op.UNKNOWN, Op.ANY, Op.ALL):
        assert not got & (1 << int(op))


def test_all_operations_bitfield_values():
    # No authorizer configured: every supported operation (Kafka's numbers).
    assert ALL_OPERATIONS_BITFIELD(C) == bits(
        Op.CREATE, Op.CLUSTER_ACTION, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS,
        Op.IDEMPOTENT_WRITE, Op.ALTER, Op.DESCRIBE,
    ) == 8096
    assert ALL_OPERATIONS_BITFIELD(ResourceType.USER) == (1 << 13) | (1 << 14)
    assert operations_bitfield([]) == 0
    assert NOT_REQUESTED_BITFIELD == -2147483648


def test_topic_bitfield_with_deny_removes_that_bit_only():
    a = authorizer(acl(op=Op.ALL), acl(op=Op.DELETE, perm=DENY))
    got = a.authorized_operations_bitfield(ALICE, HOST, T, "foo")
    assert got == ALL_OPERATIONS_BITFIELD(T) & ~(1 << int(Op.DELETE))


# --- scale ----------------------------------------------------------------------------------------


def test_decisions_stay_correct_with_thousands_of_acls():
    bindings = [acl(name=f"t{i}", principal=f"User:u{i}") for i in range(3000)]
    bindings += [acl(name=f"p{i}.", ptype=PRE, principal=f"User:u{i}", op=Op.WRITE)
                 for i in range(3000)]
    a = authorizer(*bindings)
    assert a.acl_count == 6000
    u7 = KafkaPrincipal.user("u7")
    assert may(a, Op.READ, name="t7", principal=u7)
    assert not may(a, Op.READ, name="t8", principal=u7)
    assert may(a, Op.WRITE, name="p7.x", principal=u7)
    assert not may(a, Op.WRITE, name="p70x", principal=u7)
