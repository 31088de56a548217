"""The ACLs of the delegation token APIs, each allowed and refused, on two in-process brokers
whose inter-broker user is NOT a super user (so forwarding itself needs CLUSTER_ACTION).

- creating a token for another owner needs CREATE_TOKENS on that User resource;
- describing others' tokens needs ApiKey.DESCRIBE_DELEGATION_TOKEN on the DelegationToken resource or
  DESCRIBE_TOKENS on the owner's User resource;
- renewers must be User: principals;
- a forwarded request (EnvelopeRequest) needs CLUSTER_ACTION on the cluster.
"""

from __future__ import annotations

import time
import uuid

import pytest

from tests.support.client import WireClient
from tests.support.inproc import (
    InProcessBroker,
    add_user,
    bootstrap_user,
    broker_properties,
    controller,
    follower,
)
from tokensvc.authz.acl import AclOperation, PatternType, ResourceType
from tokensvc.core.config import BrokerConfig
from tokensvc.core.errors import Errors
from tokensvc.core.principal import KafkaPrincipal
from tokensvc.protocol import RequestHeader, decode_response, encode_request
from tokensvc.protocol.api import ApiKey
from tokensvc.protocol.principal_serde import serialize_principal

LOCALHOST = bytes([127, 0, 0, 1])


def password(user: str) -> str:
    return f"{user}-secret"


@pytest.fixture(scope="module")
def cluster(zookeeper):
    connect = f"{zookeeper.connect}/token-perms-{time.monotonic_ns()}"
    for user in ("admin", "broker", "alice", "bob", "carol"):
        bootstrap_user(connect, user, password(user))
    brokers = [
        InProcessBroker(BrokerConfig.from_properties(
            broker_properties(i, connect, **{"super.users": "User:admin"}))).start()
        for i in (1, 2)
    ]
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and not any(b.broker.is_controller for b in brokers):
        time.sleep(0.05)
    # The brokers' own user may forward writes to the controller.
    grant(brokers, "User:broker", ResourceType.CLUSTER, "kafka-cluster", AclOperation.CLUSTER_ACTION)
    yield brokers
    for b in brokers:
        b.stop()


def new_user(cluster, prefix: str) -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:6]}"
    add_user(cluster, name, password(name))
    return name


def login(broker: InProcessBroker, user: str) -> WireClient:
    return WireClient(broker.address(), user, password(user))


def grant(cluster, principal: str, rtype: ResourceType, name: str, op: AclOperation,
          pattern: PatternType = PatternType.LITERAL) -> None:
    """Create one ALLOW ACL as the super user, then wait until every broker applied it."""
    ctl = controller(cluster)
    with login(ctl, "admin") as admin:
        response = admin.request(ApiKey.CREATE_ACLS, 3, {"Creations": [{
            "ResourceType": int(rtype), "ResourceName": name, "ResourcePatternType": int(pattern),
            "Principal": principal, "Host": "*", "Operation": int(op), "PermissionType": 3}]})
    assert [r["ErrorCode"] for r in response["Results"]] == [0]
    probe = name + "x" if pattern is PatternType.PREFIXED else name
    deadline = time.monotonic() + 5
    for b in cluster:
        while not b.broker.local.authorizer.authorize(
            KafkaPrincipal.parse(principal), "127.0.0.1", op, rtype, probe
        ):
            assert time.monotonic() < deadline, f"broker {b.broker.broker_id} missed the ACL"
            time.sleep(0.02)


def create_token(client: WireClient, owner: str | None = None, renewers=()) -> dict:
    body = {"Renewers": [{"PrincipalType": t, "PrincipalName": n} for t, n in renewers],
            "MaxLifetimeMs": -1}
    if owner is not None:
        body.update(OwnerPrincipalType="User", OwnerPrincipalName=owner)
    return client.request(ApiKey.CREATE_DELEGATION_TOKEN, 3, body)


def visible_token_ids(client: WireClient, owners: list[str] | None = None) -> set[str]:
    body = {"Owners": None if owners is None else [
        {"PrincipalType": "User", "PrincipalName": o} for o in owners]}
    response = client.request(ApiKey.DESCRIBE_DELEGATION_TOKEN, 3, body)
    assert response["ErrorCode"] == 0, response
    return {t["TokenId"] for t in response["Tokens"]}


def tokens_of(cluster, owner: str, count: int) -> list[str]:
    with login(controller(cluster), owner) as client:
        created = [create_token(client) for _ in range(count)]
    assert [c["ErrorCode"] for c in created] == [0] * count
    return [c["TokenId"] for c in created]


# --- create for another owner ------------------------------------------------------------


@pytest.mark.parametrize("via", ["controller", "follower"])
def test_create_for_another_owner_needs_create_tokens_on_that_user(cluster, via):
    requester, owner, other = (new_user(cluster, p) for p in ("ops", "svc", "other"))
    broker = controller(cluster) if via == "controller" else follower(cluster)
    with login(broker, requester) as client:
        refused = create_token(client, owner=owner)
        assert refused["ErrorCode"] == Errors.DELEGATION_TOKEN_AUTHORIZATION_FAILED
        assert refused["TokenId"] == ""
        grant(cluster, f"User:{requester}", ResourceType.USER, f"User:{owner}",
              AclOperation.CREATE_TOKENS)
        created = create_token(client, owner=owner)
        assert created["ErrorCode"] == 0
        assert (created["PrincipalName"], created["TokenRequesterPrincipalName"]) == (
            owner, requester)
        # The grant names one user: others stay refused.
        assert create_token(client, owner=other)["ErrorCode"] == (
            Errors.DELEGATION_TOKEN_AUTHORIZATION_FAILED)


def test_create_tokens_on_a_prefixed_user_pattern_covers_every_matching_owner(cluster):
    requester = new_user(cluster, "minter")
    prefix = f"svc{uuid.uuid4().hex[:6]}-"
    with login(controller(cluster), requester) as client:
        assert create_token(client, owner=prefix + "a")["ErrorCode"] == (
            Errors.DELEGATION_TOKEN_AUTHORIZATION_FAILED)
        grant(cluster, f"User:{requester}", ResourceType.USER, f"User:{prefix}",
              AclOperation.CREATE_TOKENS, PatternType.PREFIXED)
        assert create_token(client, owner=prefix + "a")["ErrorCode"] == 0
        assert create_token(client, owner=prefix + "b")["ErrorCode"] == 0
        assert create_token(client, owner="not" + prefix)["ErrorCode"] == (
            Errors.DELEGATION_TOKEN_AUTHORIZATION_FAILED)


def test_creating_a_token_for_oneself_needs_no_acl(cluster):
    user = new_user(cluster, "self")
    with login(follower(cluster), user) as client:
        created = create_token(client, owner=user)
    assert created["ErrorCode"] == 0
    assert created["PrincipalName"] == user


# --- describe others' tokens ----------------------------------------------------------------


def test_describing_anothers_token_needs_describe_on_that_token(cluster):
    owner, viewer = new_user(cluster, "owner"), new_user(cluster, "viewer")
    shown, hidden = tokens_of(cluster, owner, 2)
    with login(controller(cluster), viewer) as client:
        assert visible_token_ids(client, [owner]) == set()
        grant(cluster, f"User:{viewer}", ResourceType.DELEGATION_TOKEN, shown,
              AclOperation.DESCRIBE)
        assert visible_token_ids(client, [owner]) == {shown}
        assert hidden not in visible_token_ids(client)


def test_describing_anothers_tokens_needs_describe_tokens_on_the_owner(cluster):
    owner, other, auditor = (new_user(cluster, p) for p in ("owner", "other", "auditor"))
    owned = set(tokens_of(cluster, owner, 2))
    others = set(tokens_of(cluster, other, 1))
    with login(controller(cluster), auditor) as client:
        assert visible_token_ids(client, [owner, other]) == set()
        grant(cluster, f"User:{auditor}", ResourceType.USER, f"User:{owner}",
              AclOperation.DESCRIBE_TOKENS)
        assert visible_token_ids(client, [owner, other]) == owned
        assert not others & visible_token_ids(client)


def test_owners_and_renewers_see_their_tokens_without_acls(cluster):
    owner, renewer = new_user(cluster, "owner"), new_user(cluster, "renewer")
    with login(controller(cluster), owner) as client:
        created = create_token(client, renewers=[("User", renewer)])
        assert created["ErrorCode"] == 0
        assert created["TokenId"] in visible_token_ids(client)
    with login(controller(cluster), renewer) as client:
        assert created["TokenId"] in visible_token_ids(client)


# --- renewers -----------------------------------------------------------------------------


def test_renewers_must_be_user_principals(cluster):
    owner, renewer = new_user(cluster, "owner"), new_user(cluster, "renewer")
    with login(controller(cluster), owner) as client:
        refused = create_token(client, renewers=[("Group", renewer)])
        created = create_token(client, renewers=[("User", renewer)])
    assert refused["ErrorCode"] == Errors.INVALID_PRINCIPAL_TYPE
    assert created["ErrorCode"] == 0
    with login(controller(cluster), renewer) as client:
        renewed = client.request(ApiKey.RENEW_DELEGATION_TOKEN, 2,
                                 {"Hmac": created["Hmac"], "RenewPeriodMs": 60_000})
    assert renewed["ErrorCode"] == 0


# --- forwarding ----------------------------------------------------------------------------


def _envelope_create(principal: KafkaPrincipal) -> dict:
    data = encode_request(RequestHeader(ApiKey.CREATE_DELEGATION_TOKEN, 3, 77, "original-client"),
                          {"Renewers": [], "MaxLifetimeMs": -1})
    return {"RequestData": data, "RequestPrincipal": serialize_principal(principal),
            "ClientHostAddress": LOCALHOST}


def test_forwarded_request_needs_cluster_action_on_the_cluster(cluster):
    peer, owner = new_user(cluster, "peer"), new_user(cluster, "owner")
    envelope = _envelope_create(KafkaPrincipal.user(owner))
    with WireClient(controller(cluster).address("BROKER"), peer, password(peer)) as client:
        refused = client.request(ApiKey.ENVELOPE, 0, envelope)
        assert refused["ErrorCode"] == Errors.CLUSTER_AUTHORIZATION_FAILED
        assert refused["ResponseData"] is None
        grant(cluster, f"User:{peer}", ResourceType.CLUSTER, "kafka-cluster",
              AclOperation.CLUSTER_ACTION)
        accepted = client.request(ApiKey.ENVELOPE, 0, envelope)
    assert accepted["ErrorCode"] == 0
    correlation_id, inner = decode_response(ApiKey.CREATE_DELEGATION_TOKEN, 3,
                                            bytes(accepted["ResponseData"]))
    assert correlation_id == 77
    assert inner["ErrorCode"] == 0
    assert inner["PrincipalName"] == owner


def test_non_super_brokers_forward_once_granted_cluster_action(cluster):
    owner = new_user(cluster, "owner")
    with login(follower(cluster), owner) as client:
        created = create_token(client)
    assert created["ErrorCode"] == 0
    assert controller(cluster).broker.local.cache.by_id(created["TokenId"]) is not None
