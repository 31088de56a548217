"""CreateAcls, DescribeAcls and DeleteAcls on in-process brokers (real sockets, real
ZooKeeper): Kafka's permissions and per-item errors, forwarding to the controller, every
broker following the changes in order, audit, the ACL count metric, and the readiness rule
(KIP-801) while a broker is still loading its ACLs."""

from __future__ import annotations

import glob
import json
import threading
import time
import uuid
from pathlib import Path

import pytest

from tests.support.client import WireClient
from tests.support.inproc import (
    InProcessBroker,
    add_user,
    bootstrap_user,
    broker_properties,
    chroot_with_users,
    controller,
    followers,
    running_brokers,
    zk_client,
)
from tests.support.wait import retry
from tokensvc.authz.acl import (
    AccessControlEntry,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from tokensvc.core.config import BrokerConfig
from tokensvc.core.errors import Errors
from tokensvc.core.principal import KafkaPrincipal
from tokensvc.protocol.api import ApiKey
from zk.acl_store import AclStore
from zk.acl_sync import AclSync

USERS = [("admin", "admin-secret"), ("broker", "broker-secret"), ("alice", "alice-secret"),
         ("bob", "bob-secret"), ("carol", "carol-secret")]
PASSWORDS = dict(USERS)
TOPIC, CLUSTER = int(ResourceType.TOPIC), int(ResourceType.CLUSTER)
LITERAL, PREFIXED, MATCH = int(PatternType.LITERAL), int(PatternType.PREFIXED), int(PatternType.MATCH)
READ, ALTER, DESCRIBE = int(AclOperation.READ), int(AclOperation.ALTER), int(AclOperation.DESCRIBE)
ALLOW, DENY = int(AclPermissionType.ALLOW), int(AclPermissionType.DENY)


def eventually(check, timeout: float = 5.0):
    return retry(check, timeout, errors=(AssertionError,), interval=0.02)


@pytest.fixture(scope="module")
def zk_chroot(zookeeper) -> str:
    return chroot_with_users(zookeeper.connect, "acls", USERS)


@pytest.fixture(scope="module")
def audit_root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("acl-audit")


@pytest.fixture(scope="module")
def cluster(zk_chroot, audit_root):
    with running_brokers(zk_chroot, (1, 2, 3), audit_root=audit_root) as brokers:
        yield brokers


@pytest.fixture(scope="module")
def store(zk_chroot):
    with zk_client(zk_chroot) as client:
        yield AclStore(client)


def login(broker: InProcessBroker, user: str) -> WireClient:
    return WireClient(broker.address(), user, PASSWORDS[user])


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def creation(name: str, principal: str = "User:alice", *, rtype: int = TOPIC,
             pattern: int = LITERAL, host: str = "*", op: int = READ,
             permission: int = ALLOW) -> dict:
    return {"ResourceType": rtype, "ResourceName": name, "ResourcePatternType": pattern,
            "Principal": principal, "Host": host, "Operation": op, "PermissionType": permission}


def acl_filter(name: str | None = None, principal: str | None = None, *, rtype: int = TOPIC,
               pattern: int = LITERAL, op: int = 1, permission: int = 1) -> dict:
    return {"ResourceTypeFilter": rtype, "ResourceNameFilter": name, "PatternTypeFilter": pattern,
            "PrincipalFilter": principal, "HostFilter": None, "Operation": op,
            "PermissionType": permission}


def create(client: WireClient, *creations: dict, version: int = 3) -> list[int]:
    response = client.request(ApiKey.CREATE_ACLS, version, {"Creations": list(creations)})
    return [r["ErrorCode"] for r in response["Results"]]


def describe(client: WireClient, **filter_fields) -> dict:
    return client.request(ApiKey.DESCRIBE_ACLS, 3, acl_filter(**filter_fields))


def delete(client: WireClient, *filters: dict) -> list[dict]:
    return client.request(ApiKey.DELETE_ACLS, 3, {"Filters": list(filters)})["FilterResults"]


def described(response: dict) -> set[tuple]:
    assert response["ErrorCode"] == 0, response
    return {
        (r["ResourceType"], r["ResourceName"], r.get("PatternType", LITERAL), a["Principal"], a["Host"],
         a["Operation"], a["PermissionType"])
        for r in response["Resources"]
        for a in r["Acls"]
    }


def entry(principal: str = "User:alice", op: AclOperation = AclOperation.READ,
          permission: AclPermissionType = AclPermissionType.ALLOW) -> AccessControlEntry:
    return AccessControlEntry(principal, "*", op, permission)


def topic(name: str, pattern: PatternType = PatternType.LITERAL) -> ResourcePattern:
    return ResourcePattern(ResourceType.TOPIC, name, pattern)


def grant_cluster(cluster, principal: str, op: int) -> None:
    with login(controller(cluster), "admin") as admin:
        assert create(admin, creation("kafka-cluster", principal, rtype=CLUSTER, op=op)) == [0]
    for b in cluster:
        eventually(lambda b=b: _assert(
            b.broker.local.authorizer.authorize(KafkaPrincipal.parse(principal), "127.0.0.1",
                                          AclOperation(op), ResourceType.CLUSTER, "kafka-cluster")))


def _assert(condition: bool) -> None:
    assert condition


# --- the three APIs ----------------------------------------------------------------------


def test_controller_applies_a_create_to_its_authorizer_before_answering(cluster, store):
    name = unique("orders")
    ctl = controller(cluster)
    with login(ctl, "admin") as admin:
        assert create(admin, creation(name), creation(name, "User:bob", op=DESCRIBE)) == [0, 0]
        # No waiting: the controller answered only after applying the change.
        assert ctl.broker.local.authorizer.acls(topic(name)) == {
            entry(), entry("User:bob", AclOperation.DESCRIBE)}
        assert store.load_resource(topic(name)) == {
            entry(), entry("User:bob", AclOperation.DESCRIBE)}
        assert described(describe(admin, name=name)) == {
            (TOPIC, name, LITERAL, "User:alice", "*", READ, ALLOW),
            (TOPIC, name, LITERAL, "User:bob", "*", DESCRIBE, ALLOW),
        }
        results = delete(admin, acl_filter(name, "User:alice"))
        assert ctl.broker.local.authorizer.acls(topic(name)) == {entry("User:bob", AclOperation.DESCRIBE)}
    assert [r["ErrorCode"] for r in results] == [0]
    assert [(m["ResourceName"], m["Principal"], m["Operation"], m["PermissionType"])
            for m in results[0]["MatchingAcls"]] == [(name, "User:alice", READ, ALLOW)]


def test_create_on_a_non_controller_is_forwarded_and_every_broker_follows(cluster, store):
    name = unique("forwarded")
    with login(followers(cluster)[0], "admin") as admin:
        assert create(admin, creation(name, pattern=PREFIXED)) == [0]
    assert store.load_resource(topic(name, PatternType.PREFIXED)) == {entry()}
    for b in cluster:
        eventually(lambda b=b: _assert(
            b.broker.local.authorizer.acls(topic(name, PatternType.PREFIXED)) == {entry()}))
        assert b.broker.local.authorizer.authorize(
            KafkaPrincipal.user("alice"), "127.0.0.1", AclOperation.READ,
            ResourceType.TOPIC, name + ".eu")


def test_describe_right_after_a_forwarded_create_sees_it_on_another_broker(cluster):
    first, second = followers(cluster)
    for _ in range(5):
        name = unique("read-your-writes")
        with login(first, "admin") as writer, login(second, "admin") as reader:
            assert create(writer, creation(name)) == [0]
            assert described(describe(reader, name=name)) == {
                (TOPIC, name, LITERAL, "User:alice", "*", READ, ALLOW)}


def test_delete_on_a_non_controller_is_forwarded_and_reports_what_it_removed(cluster, store):
    name = unique("doomed")
    with login(followers(cluster)[1], "admin") as admin:
        assert create(admin, creation(name), creation(name, "User:bob")) == [0, 0]
        results = delete(admin, acl_filter(name), acl_filter(unique("nothing-here")))
    assert [r["ErrorCode"] for r in results] == [0, 0]
    assert sorted(m["Principal"] for m in results[0]["MatchingAcls"]) == ["User:alice", "User:bob"]
    assert results[1]["MatchingAcls"] == []
    assert store.load_resource(topic(name)) == set()
    for b in cluster:
        eventually(lambda b=b: _assert(b.broker.local.authorizer.acls(topic(name)) == frozenset()))


def test_version_0_requests_mean_literal_patterns(cluster):
    name = unique("v0")
    with login(controller(cluster), "admin") as admin:
        v0 = {k: v for k, v in creation(name).items() if k != "ResourcePatternType"}
        assert create(admin, v0, version=0) == [0]
        response = admin.request(ApiKey.DESCRIBE_ACLS, 0, {
            k: v for k, v in acl_filter(name).items() if k != "PatternTypeFilter"})
    assert described(response) == {(TOPIC, name, LITERAL, "User:alice", "*", READ, ALLOW)}


def test_invalid_bindings_fail_alone_with_invalid_request(cluster, store):
    name = unique("mixed")
    with login(followers(cluster)[0], "admin") as admin:
        codes = create(
            admin,
            creation(name),
            creation("not-the-cluster", rtype=CLUSTER, op=ALTER),
            creation(name, pattern=MATCH),
            creation(name, principal="alice"),
            creation(name, host=""),
            creation("", op=READ),
        )
    assert codes == [0] + [Errors.INVALID_REQUEST] * 5
    assert store.load_resource(topic(name)) == {entry()}


def test_filters_with_unknown_parts_are_invalid_request(cluster):
    name = unique("unknown-filter")
    with login(controller(cluster), "admin") as admin:
        assert create(admin, creation(name)) == [0]
        assert describe(admin, rtype=0)["ErrorCode"] == Errors.INVALID_REQUEST
        results = delete(admin, acl_filter(name, op=0), acl_filter(name))
    assert [r["ErrorCode"] for r in results] == [Errors.INVALID_REQUEST, 0]
    assert len(results[1]["MatchingAcls"]) == 1


# --- permissions -------------------------------------------------------------------------


def test_user_without_cluster_permissions_is_refused_per_item_and_nothing_is_written(
    cluster, store
):
    name = unique("refused")
    for broker in (controller(cluster), followers(cluster)[0]):
        with login(broker, "carol") as carol:
            assert create(carol, creation(name), creation(name, "User:bob")) == [
                Errors.CLUSTER_AUTHORIZATION_FAILED] * 2
            assert [r["ErrorCode"] for r in delete(carol, acl_filter(), acl_filter(name))] == [
                Errors.CLUSTER_AUTHORIZATION_FAILED] * 2
            assert describe(carol)["ErrorCode"] == Errors.CLUSTER_AUTHORIZATION_FAILED
    assert store.load_resource(topic(name)) == set()


def test_alter_on_the_cluster_lets_a_user_manage_acls_and_implies_describe(cluster, store):
    principal = f"User:{unique('ops')}"
    add_user(cluster, principal[5:], "ops-secret")
    grant_cluster(cluster, principal, ALTER)
    name = unique("by-ops")
    with WireClient(followers(cluster)[0].address(), principal[5:], "ops-secret") as ops:
        assert create(ops, creation(name)) == [0]
        assert described(describe(ops, name=name)) == {
            (TOPIC, name, LITERAL, "User:alice", "*", READ, ALLOW)}
        assert [r["ErrorCode"] for r in delete(ops, acl_filter(name))] == [0]
    assert store.load_resource(topic(name)) == set()


def test_describe_on_the_cluster_lets_a_user_list_but_not_change_acls(cluster):
    principal = f"User:{unique('viewer')}"
    add_user(cluster, principal[5:], "viewer-secret")
    grant_cluster(cluster, principal, DESCRIBE)
    with WireClient(controller(cluster).address(), principal[5:], "viewer-secret") as viewer:
        assert describe(viewer)["ErrorCode"] == 0
        assert create(viewer, creation(unique("no"))) == [Errors.CLUSTER_AUTHORIZATION_FAILED]
        assert [r["ErrorCode"] for r in delete(viewer, acl_filter())] == [
            Errors.CLUSTER_AUTHORIZATION_FAILED]


def test_describe_client_quotas_needs_describe_configs_on_the_cluster(cluster, zk_chroot):
    # Kafka's rule: DescribeConfigs on the cluster. The quota is written into the user's
    # config znode as Kafka's kafka-configs.sh writes it, beside its SCRAM credential.
    name = unique("quota-viewer")
    add_user(cluster, name, "viewer-secret")
    with zk_client(zk_chroot) as zk:
        path = f"/config/users/{name}"
        data, stat = zk.get(path)
        body = json.loads(data)
        body["config"]["producer_byte_rate"] = "1024"
        zk.set(path, json.dumps(body).encode(), version=stat.version)
    request = {"Components": [{"EntityType": "user", "MatchType": 0, "Match": name}],
               "Strict": True}
    with WireClient(followers(cluster)[0].address(), name, "viewer-secret") as viewer:
        refused = viewer.request(ApiKey.DESCRIBE_CLIENT_QUOTAS, 1, request)
        assert (refused["ErrorCode"], refused["Entries"]) == (
            Errors.CLUSTER_AUTHORIZATION_FAILED, None)
        grant_cluster(cluster, f"User:{name}", int(AclOperation.DESCRIBE_CONFIGS))
        answered = viewer.request(ApiKey.DESCRIBE_CLIENT_QUOTAS, 1, request)
    assert answered["ErrorCode"] == 0, answered
    assert answered["Entries"] == [{
        "Entity": [{"EntityType": "user", "EntityName": name}],
        "Values": [{"Key": "producer_byte_rate", "Value": 1024.0}]}]


# --- order, audit, metrics -----------------------------------------------------------------


def test_deny_then_allow_through_two_brokers_is_applied_in_order_on_every_broker(cluster):
    """DENY via one broker, ALLOW via another, then the DENY removed: every broker goes
    through exactly these states, in this order, and never holds the ALLOW without the
    DENY before the DENY's removal was written."""
    name = unique("ordered")
    pattern = topic(name)
    deny = entry(permission=AclPermissionType.DENY)
    allow = entry()
    steps = [frozenset(), frozenset({deny}), frozenset({deny, allow}), frozenset({allow})]
    seen: dict[int, list[frozenset]] = {b.broker.broker_id: [frozenset()] for b in cluster}
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            for b in cluster:
                state = b.broker.local.authorizer.acls(pattern)
                history = seen[b.broker.broker_id]
                if state != history[-1]:
                    history.append(state)
            time.sleep(0.001)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    alice = KafkaPrincipal.user("alice")
    first, second = cluster[0], cluster[1]

    def everywhere(expected: frozenset, allowed: bool) -> None:
        for b in cluster:
            eventually(lambda b=b: _assert(b.broker.local.authorizer.acls(pattern) == expected))
            # The watcher samples; wait until it has recorded this state too, so a
            # starved watcher thread cannot skip a stable state and fail the order check.
            eventually(lambda b=b: _assert(seen[b.broker.broker_id][-1] == expected))
            assert b.broker.local.authorizer.authorize(
                alice, "127.0.0.1", AclOperation.READ, ResourceType.TOPIC, name) is allowed

    try:
        with login(first, "admin") as admin:
            assert create(admin, creation(name, permission=DENY)) == [0]
        everywhere(steps[1], allowed=False)
        with login(second, "admin") as admin:
            assert create(admin, creation(name, permission=ALLOW)) == [0]
        everywhere(steps[2], allowed=False)  # DENY wins while both are there
        with login(first, "admin") as admin:
            assert [r["ErrorCode"] for r in delete(
                admin, acl_filter(name, "User:alice", permission=DENY))] == [0]
        everywhere(steps[3], allowed=True)
    finally:
        stop.set()
        watcher.join(5)
    for broker_id, history in seen.items():
        assert history == steps, (broker_id, history)


def _acl_events(audit_root: Path) -> list[dict]:
    events = []
    for path in glob.glob(str(audit_root / "*" / "*.jsonl")):
        with open(path, encoding="utf-8") as f:
            events.extend(e for line in f if (e := json.loads(line)).get("type") == "acl")
    return events


def test_every_change_and_refusal_is_audited(cluster, audit_root):
    name = unique("audited")
    with login(followers(cluster)[0], "admin") as admin:
        assert create(admin, creation(name, op=DESCRIBE)) == [0]
        assert [r["ErrorCode"] for r in delete(admin, acl_filter(name))] == [0]
    with login(followers(cluster)[0], "carol") as carol:
        assert create(carol, creation(name)) == [Errors.CLUSTER_AUTHORIZATION_FAILED]

    def mine() -> list[dict]:
        events = [e for e in _acl_events(audit_root) if e["resource_name"] == name]
        assert len(events) == 3
        return events

    events = sorted(eventually(mine), key=lambda e: e["ts"])
    common = {"resource_type": "TOPIC", "resource_name": name, "pattern_type": "LITERAL",
              "acl_principal": "User:alice", "host": "*"}
    assert [
        {k: e[k] for k in ("action", "outcome", "error_code", "requester", "operation",
                           "permission", *common)}
        for e in events
    ] == [
        {"action": "create", "outcome": "success", "error_code": 0, "requester": "User:admin",
         "operation": "DESCRIBE", "permission": "ALLOW", **common},
        {"action": "delete", "outcome": "success", "error_code": 0, "requester": "User:admin",
         "operation": "DESCRIBE", "permission": "ALLOW", **common},
        {"action": "create", "outcome": "failure", "error_code": 31, "requester": "User:carol",
         "operation": "READ", "permission": "ALLOW", **common},
    ]
    controller_id = controller(cluster).broker.broker_id
    assert [e["broker_id"] for e in events[:2]] == [controller_id, controller_id]


def _acl_count(broker: InProcessBroker) -> float:
    return broker.broker.local.metrics.registry.get_sample_value("tokensvc_acl_count")


def test_acl_count_metric_follows_creates_and_deletes_on_every_broker(cluster):
    name = unique("counted")
    # Earlier tests' changes may still be reaching some brokers: start from a converged state.
    eventually(lambda: _assert(len({_acl_count(b) for b in cluster}) == 1))
    before = {b.broker.broker_id: _acl_count(b) for b in cluster}
    with login(controller(cluster), "admin") as admin:
        assert create(admin, creation(name), creation(name, "User:bob")) == [0, 0]
        for b in cluster:
            eventually(lambda b=b: _assert(
                _acl_count(b) == before[b.broker.broker_id] + 2))
        assert [r["ErrorCode"] for r in delete(admin, acl_filter(name))] == [0]
    for b in cluster:
        eventually(lambda b=b: _assert(_acl_count(b) == before[b.broker.broker_id]))


# --- brokers on their own ------------------------------------------------------------------


def test_broker_without_an_authorizer_answers_security_disabled(zookeeper):
    connect = f"{zookeeper.connect}/acls-off-{time.monotonic_ns()}"
    bootstrap_user(connect, "admin", "admin-secret")
    props = broker_properties(1, connect, **{"authorizer.class.name": ""})
    broker = InProcessBroker(BrokerConfig.from_properties(props)).start()
    try:
        with login(broker, "admin") as admin:
            assert create(admin, creation("t")) == [Errors.SECURITY_DISABLED]
            assert describe(admin)["ErrorCode"] == Errors.SECURITY_DISABLED
            assert [r["ErrorCode"] for r in delete(admin, acl_filter())] == [
                Errors.SECURITY_DISABLED]
    finally:
        broker.stop()


class _HeldAclSync(AclSync):
    """A real AclSync whose start waits until the test lets it load."""

    entered = threading.Event()
    release = threading.Event()

    def start(self) -> None:
        type(self).entered.set()
        assert type(self).release.wait(30)
        super().start()


def test_until_the_acls_are_loaded_only_super_users_are_served(zookeeper, monkeypatch):
    connect = f"{zookeeper.connect}/acls-early-{time.monotonic_ns()}"
    for user in ("admin", "alice"):
        bootstrap_user(connect, user, PASSWORDS[user])
    monkeypatch.setattr("tokensvc.broker.assembly.AclSync", _HeldAclSync)
    props = broker_properties(1, connect, **{"early.start.listeners": "SASL_PLAINTEXT"})
    broker = InProcessBroker(BrokerConfig.from_properties(props))
    starting = threading.Thread(target=broker.start, daemon=True)
    starting.start()
    try:
        assert _HeldAclSync.entered.wait(30)
        assert not broker.broker.local.authorizer.ready
        # The early listener is open while the ACLs are still loading.
        with login(broker, "admin") as admin, login(broker, "alice") as alice:
            users = admin.request(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, {"Users": None})
            assert users["ErrorCode"] == 0
            assert {u["User"] for u in users["Results"]} == {"admin", "alice"}
            # A super user is authorized, but a listing would be incomplete: retriable.
            assert describe(admin)["ErrorCode"] == Errors.COORDINATOR_LOAD_IN_PROGRESS
            assert describe(alice)["ErrorCode"] == Errors.COORDINATOR_LOAD_IN_PROGRESS
            assert create(alice, creation("t")) == [Errors.COORDINATOR_LOAD_IN_PROGRESS]
            assert alice.request(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, {"Users": None})[
                "ErrorCode"] == Errors.COORDINATOR_LOAD_IN_PROGRESS
            _HeldAclSync.release.set()
            starting.join(30)
            assert broker.broker.local.authorizer.ready
            assert describe(alice)["ErrorCode"] == Errors.CLUSTER_AUTHORIZATION_FAILED
            assert describe(admin)["ErrorCode"] == 0
    finally:
        _HeldAclSync.release.set()
        starting.join(30)
        broker.stop()
