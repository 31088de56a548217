"""The ACL model: Kafka's codes and names, filter semantics, binding validation."""

from __future__ import annotations

import pytest

from tokensvc.authz.acl import (
    CLUSTER_NAME,
    AccessControlEntry,
    AccessControlEntryFilter,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
    binding_problem,
    supported_operations,
    validate_binding,
    validate_filter,
)
from tokensvc.core.errors import Errors, KafkaError

T, G, C, U = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER, ResourceType.USER
LIT, PRE = PatternType.LITERAL, PatternType.PREFIXED
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
Op = AclOperation


def entry(principal="User:alice", host="*", op=Op.READ, perm=ALLOW) -> AccessControlEntry:
    return AccessControlEntry(principal, host, op, perm)


def binding(rtype=T, name="foo", ptype=LIT, **kw) -> AclBinding:
    return AclBinding(ResourcePattern(rtype, name, ptype), entry(**kw))


# --- codes and names ---------------------------------------------------------------------


def test_wire_codes_are_kafkas():
    assert [int(t) for t in ResourceType] == list(range(8))
    assert ResourceType.DELEGATION_TOKEN == 6 and ResourceType.USER == 7
    assert (PatternType.MATCH, PatternType.LITERAL, PatternType.PREFIXED) == (2, 3, 4)
    assert (Op.ALL, Op.DESCRIBE, Op.CLUSTER_ACTION, Op.IDEMPOTENT_WRITE) == (2, 8, 9, 12)
    assert (Op.CREATE_TOKENS, Op.DESCRIBE_TOKENS) == (13, 14)
    assert (AclPermissionType.DENY, AclPermissionType.ALLOW) == (2, 3)


def test_unknown_wire_code_decodes_to_unknown():
    assert ResourceType(42) is ResourceType.UNKNOWN
    assert AclOperation(99) is AclOperation.UNKNOWN
    assert PatternType(-1) is PatternType.UNKNOWN


def test_kafka_names_are_pascal_case():
    assert ResourceType.TRANSACTIONAL_ID.kafka_name == "TransactionalId"
    assert ResourceType.DELEGATION_TOKEN.kafka_name == "DelegationToken"
    assert Op.DESCRIBE_CONFIGS.kafka_name == "DescribeConfigs"
    assert Op.CREATE_TOKENS.kafka_name == "CreateTokens"
    assert AclPermissionType.ALLOW.kafka_name == "Allow"
    assert PatternType.PREFIXED.kafka_name == "Prefixed"


@pytest.mark.parametrize("text", ["TransactionalId", "TRANSACTIONAL_ID", "transactional-id"])
def test_parse_accepts_kafka_enum_and_cli_spellings(text):
    assert ResourceType.parse(text) is ResourceType.TRANSACTIONAL_ID


def test_parse_round_trips_every_name():
    for enum_type in (ResourceType, PatternType, AclOperation, AclPermissionType):
        for member in enum_type:
            assert enum_type.parse(member.kafka_name) is member


def test_parse_of_unknown_name_lists_the_choices():
    with pytest.raises(ValueError, match="expected one of .*Read"):
        AclOperation.parse("Reed")


def test_plain_ints_become_enum_members_in_values():
    e = AccessControlEntry("User:a", "*", 3, 3)
    assert e.operation is Op.READ and e.permission_type is ALLOW
    assert ResourcePattern(2, "t", 4).pattern_type is PRE


# --- supported operations -------------------------------------------------------------------


def test_supported_operations_match_kafkas_lists():
    assert supported_operations(C) == {
        Op.ALTER, Op.ALTER_CONFIGS, Op.CLUSTER_ACTION, Op.CREATE, Op.DESCRIBE,
        Op.DESCRIBE_CONFIGS, Op.IDEMPOTENT_WRITE,
    }
    assert supported_operations(T) == {
        Op.READ, Op.WRITE, Op.CREATE, Op.DESCRIBE, Op.DELETE, Op.ALTER,
        Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS,
    }
    assert supported_operations(G) == {Op.READ, Op.DESCRIBE, Op.DELETE}
    assert supported_operations(ResourceType.TRANSACTIONAL_ID) == {Op.DESCRIBE, Op.WRITE}
    assert supported_operations(ResourceType.DELEGATION_TOKEN) == {Op.DESCRIBE}
    assert supported_operations(U) == {Op.CREATE_TOKENS, Op.DESCRIBE_TOKENS}


@pytest.mark.parametrize("rtype", [ResourceType.ANY, ResourceType.UNKNOWN])
def test_supported_operations_of_a_non_concrete_type_is_an_error(rtype):
    with pytest.raises(ValueError):
        supported_operations(rtype)


# --- resource pattern filters ------------------------------------------------------------------


LIT_FOO = ResourcePattern(T, "foo", LIT)
LIT_STAR = ResourcePattern(T, "*", LIT)
PRE_FO = ResourcePattern(T, "fo", PRE)
PRE_FOO = ResourcePattern(T, "foo", PRE)
LIT_BAR = ResourcePattern(T, "bar", LIT)
GROUP_FOO = ResourcePattern(G, "foo", LIT)
ALL_PATTERNS = [LIT_FOO, LIT_STAR, PRE_FO, PRE_FOO, LIT_BAR, GROUP_FOO]


def matched(f: ResourcePatternFilter) -> list[ResourcePattern]:
    return [p for p in ALL_PATTERNS if f.matches(p)]


def test_filter_any_with_no_name_matches_everything():
    assert matched(ResourcePatternFilter()) == ALL_PATTERNS


def test_filter_by_type_only():
    assert matched(ResourcePatternFilter(G)) == [GROUP_FOO]


def test_filter_any_pattern_type_matches_exact_name_in_both_pattern_types():
    assert matched(ResourcePatternFilter(T, "foo", PatternType.ANY)) == [LIT_FOO, PRE_FOO]


def test_filter_literal_matches_only_literal_with_exact_name():
    assert matched(ResourcePatternFilter(T, "foo", LIT)) == [LIT_FOO]
    # '*' in a LITERAL filter means the wildcard pattern itself, not every name.
    assert matched(ResourcePatternFilter(T, "*", LIT)) == [LIT_STAR]


def test_filter_prefixed_matches_only_prefixed_with_exact_name():
    assert matched(ResourcePatternFilter(T, "fo", PRE)) == [PRE_FO]
    assert matched(ResourcePatternFilter(T, "foo", PRE)) == [PRE_FOO]


def test_filter_match_finds_every_pattern_that_applies_to_the_name():
    assert matched(ResourcePatternFilter(T, "foo", PatternType.MATCH)) == [
        LIT_FOO, LIT_STAR, PRE_FO, PRE_FOO,
    ]
    assert matched(ResourcePatternFilter(T, "food", PatternType.MATCH)) == [
        LIT_STAR, PRE_FO, PRE_FOO,
    ]


def test_filter_match_without_name_matches_every_pattern_of_the_type():
    assert matched(ResourcePatternFilter(T, None, PatternType.MATCH)) == ALL_PATTERNS[:5]


# --- entry filters -------------------------------------------------------------------------------


def test_entry_filter_none_and_any_match_everything():
    f = AccessControlEntryFilter()
    assert f.matches(entry()) and f.matches(entry("User:*", "10.0.0.1", Op.ALL, DENY))


def test_entry_filter_fields_are_exact():
    f = AccessControlEntryFilter("User:alice", "*", Op.READ, ALLOW)
    assert f.matches(entry())
    assert not f.matches(entry(principal="User:bob"))
    assert not f.matches(entry(host="10.0.0.1"))
    assert not f.matches(entry(op=Op.WRITE))
    assert not f.matches(entry(perm=DENY))


def test_entry_filter_wildcard_principal_matches_only_wildcard_entries():
    f = AccessControlEntryFilter(principal="User:*")
    assert f.matches(entry(principal="User:*"))
    assert not f.matches(entry(principal="User:alice"))


def test_binding_filter_combines_pattern_and_entry():
    f = AclBindingFilter.of(T, "foo", PatternType.MATCH, principal="User:alice")
    assert f.matches(binding(name="*"))
    assert not f.matches(binding(name="*", principal="User:bob"))
    assert not f.matches(binding(rtype=G))


def test_exact_filter_matches_only_its_binding():
    b = binding()
    f = AclBindingFilter.exact(b)
    assert f.matches(b)
    assert not f.matches(binding(op=Op.WRITE))
    assert not f.matches(binding(ptype=PRE))


# --- validation ---------------------------------------------------------------------------------


def test_a_well_formed_binding_is_valid():
    assert binding_problem(binding()) is None
    assert binding_problem(binding(rtype=C, name=CLUSTER_NAME, op=Op.ALTER)) is None
    assert binding_problem(binding(rtype=U, name="User:bob", ptype=PRE, op=Op.CREATE_TOKENS)) is None


@pytest.mark.parametrize(
    "bad, reason",
    [
        (binding(rtype=ResourceType.ANY), "resource type"),
        (binding(rtype=ResourceType.UNKNOWN), "resource type"),
        (binding(ptype=PatternType.ANY), "pattern type"),
        (binding(ptype=PatternType.MATCH), "pattern type"),
        (binding(ptype=PatternType.UNKNOWN), "pattern type"),
        (binding(op=Op.ANY), "operation"),
        (binding(op=Op.UNKNOWN), "operation"),
        (binding(perm=AclPermissionType.ANY), "permission"),
        (binding(perm=AclPermissionType.UNKNOWN), "permission"),
        (binding(name=""), "empty"),
        (binding(rtype=C, name="my-cluster"), "kafka-cluster"),
        (binding(principal="alice"), "principal"),
        (binding(principal="User:"), "principal"),
        (binding(principal=":alice"), "principal"),
        (binding(host=""), "host"),
    ],
)
def test_bindings_that_cannot_be_created_are_invalid_request(bad, reason):
    assert reason in binding_problem(bad)
    with pytest.raises(KafkaError) as info:
        validate_binding(bad)
    assert info.value.error is Errors.INVALID_REQUEST


def test_filter_with_unknown_elements_is_invalid_request():
    validate_filter(AclBindingFilter())
    for bad in (
        AclBindingFilter.of(resource_type=ResourceType.UNKNOWN),
        AclBindingFilter.of(pattern_type=PatternType.UNKNOWN),
        AclBindingFilter.of(operation=Op.UNKNOWN),
        AclBindingFilter.of(permission_type=AclPermissionType.UNKNOWN),
    ):
        with pytest.raises(KafkaError) as info:
            validate_filter(bad)
        assert info.value.error is Errors.INVALID_REQUEST
