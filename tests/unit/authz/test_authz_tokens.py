"""Token permission checks: CREATE_TOKENS / DESCRIBE_TOKENS on User resources named
``User:<owner>``, DESCRIBE on the DelegationToken resource named by the token id."""

from __future__ import annotations

import pytest

from tokensvc.authz.acl import (
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from tokensvc.authz.authorizer import AclAuthorizer
from tokensvc.authz.tokens import (
    describe_permission,
    may_create_for_owner,
    may_describe_token,
)
from tokensvc.core.errors import AUTHORIZER_NOT_READY, KafkaError
from tokensvc.core.principal import KafkaPrincipal
from tokensvc.core.token import TokenInformation

ALICE = KafkaPrincipal.user("alice")
BOB = KafkaPrincipal.user("bob")
CAROL = KafkaPrincipal.user("carol")
HOST = "10.1.1.1"
Op = AclOperation


def allow(rtype, name, op, principal="User:alice", ptype=PatternType.LITERAL) -> AclBinding:
    return AclBinding(
        ResourcePattern(rtype, name, ptype),
        AccessControlEntry(principal, "*", op, AclPermissionType.ALLOW),
    )


def authorizer(*bindings) -> AclAuthorizer:
    a = AclAuthorizer(["User:admin"])
    a.load(bindings)
    a.mark_ready()
    return a


def token(owner=BOB, token_id="tok-1") -> TokenInformation:
    return TokenInformation(token_id, owner, owner, (), 0, 100, 200)


def test_creating_a_token_for_oneself_needs_no_acl():
    assert may_create_for_owner(authorizer(), ALICE, HOST, ALICE)
    token_session = KafkaPrincipal("User", "alice", token_authenticated=True)
    assert may_create_for_owner(authorizer(), token_session, HOST, ALICE)


def test_creating_for_another_owner_needs_create_tokens_on_user_owner():
    assert not may_create_for_owner(authorizer(), ALICE, HOST, BOB)
    a = authorizer(allow(ResourceType.USER, "User:bob", Op.CREATE_TOKENS))
    assert may_create_for_owner(a, ALICE, HOST, BOB)
    assert not may_create_for_owner(a, ALICE, HOST, CAROL)


def test_create_tokens_on_bare_user_name_does_not_count():
    a = authorizer(allow(ResourceType.USER, "bob", Op.CREATE_TOKENS))
    assert not may_create_for_owner(a, ALICE, HOST, BOB)


def test_create_tokens_can_be_granted_by_prefix_or_wildcard():
    a = authorizer(allow(ResourceType.USER, "User:svc-", Op.CREATE_TOKENS,
                         ptype=PatternType.PREFIXED))
    assert may_create_for_owner(a, ALICE, HOST, KafkaPrincipal.user("svc-etl"))
    w = authorizer(allow(ResourceType.USER, "*", Op.CREATE_TOKENS))
    assert may_create_for_owner(w, ALICE, HOST, CAROL)


def test_super_user_may_create_for_anyone():
    assert may_create_for_owner(authorizer(), KafkaPrincipal.user("admin"), HOST, BOB)


def test_no_authorizer_configured_allows():
    assert may_create_for_owner(None, ALICE, HOST, BOB)
    assert may_describe_token(None, ALICE, HOST, token())


def test_describe_of_another_owners_token_needs_an_acl():
    assert not may_describe_token(authorizer(), ALICE, HOST, token())


def test_describe_on_the_delegation_token_resource_grants_that_token_only():
    a = authorizer(allow(ResourceType.DELEGATION_TOKEN, "tok-1", Op.DESCRIBE))
    assert may_describe_token(a, ALICE, HOST, token())
    assert not may_describe_token(a, ALICE, HOST, token(token_id="tok-2"))


def test_describe_tokens_on_the_owner_grants_all_of_that_owners_tokens():
    a = authorizer(allow(ResourceType.USER, "User:bob", Op.DESCRIBE_TOKENS))
    assert may_describe_token(a, ALICE, HOST, token(token_id="a"))
    assert may_describe_token(a, ALICE, HOST, token(token_id="b"))
    assert not may_describe_token(a, ALICE, HOST, token(owner=CAROL))


def test_create_tokens_does_not_imply_describe_tokens():
    a = authorizer(allow(ResourceType.USER, "User:bob", Op.CREATE_TOKENS))
    assert not may_describe_token(a, ALICE, HOST, token())


def test_token_authenticated_requester_is_matched_as_plain_principal():
    a = authorizer(allow(ResourceType.USER, "User:bob", Op.DESCRIBE_TOKENS))
    session = KafkaPrincipal("User", "alice", token_authenticated=True)
    assert may_describe_token(a, session, HOST, token())


def test_describe_permission_binds_one_request():
    a = authorizer(allow(ResourceType.DELEGATION_TOKEN, "tok-1", Op.DESCRIBE))
    check = describe_permission(a, ALICE, HOST)
    assert check(token()) and not check(token(token_id="x"))


def test_not_ready_authorizer_refuses_with_authorizer_not_ready():
    a = AclAuthorizer()
    with pytest.raises(KafkaError) as info:
        may_create_for_owner(a, ALICE, HOST, BOB)
    assert info.value.error is AUTHORIZER_NOT_READY
