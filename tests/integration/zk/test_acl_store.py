"""AclStore and AclSync against a real ZooKeeper: Kafka's znodes and bytes, compare-and-set
updates with their notifications in one transaction, and watch-driven sync."""

from __future__ import annotations

import json
import threading
import time

import pytest
from kazoo.client import KazooClient

from tests.support.wait import poll_until as wait_for
from tests.support.zkclient import client_factory, expire_session
from tokensvc.authz.acl import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from tokensvc.authz.authorizer import AclAuthorizer
from tokensvc.core.errors import Errors, KafkaError
from tokensvc.core.principal import KafkaPrincipal
from zk.acl_store import AclStore
from zk.acl_sync import AclSync

Op = AclOperation
T = ResourceType.TOPIC
LIT, PRE = PatternType.LITERAL, PatternType.PREFIXED
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
ALICE = KafkaPrincipal.user("alice")


def acl(name="foo", op=Op.READ, perm=ALLOW, principal="User:alice", host="*", ptype=LIT, rtype=T):
    return AclBinding(
        ResourcePattern(rtype, name, ptype), AccessControlEntry(principal, host, op, perm)
    )


@pytest.fixture
def clients(zk_connect):
    with client_factory(zk_connect, session_timeout_ms=6_000) as make:
        yield make


@pytest.fixture
def syncs():
    made: list[AclSync] = []

    def make(client: KazooClient, **kw) -> tuple[AclSync, AclAuthorizer]:
        authorizer = AclAuthorizer(**kw)
        sync = AclSync(AclStore(client), authorizer)
        sync.start()
        made.append(sync)
        return sync, authorizer

    yield make
    for sync in made:
        sync.close()


def changes(client: KazooClient, root: str) -> list[bytes]:
    return [client.get(f"{root}/{n}")[0] for n in sorted(client.get_children(root))]


# --- znodes and bytes ------------------------------------------------------------------------


def test_literal_acl_is_kafkas_znode_json_and_notification(clients):
    client = clients()
    store = AclStore(client)
    results, _ = store.add([acl(), acl(op=Op.WRITE, perm=DENY, principal="User:bob", host="10.0.0.1")])
    assert [r.error for r in results] == [Errors.NONE, Errors.NONE]
    data, _ = client.get("/kafka-acl/Topic/foo")
    assert json.loads(data) == {
        "version": 1,
        "acls": [
            {"principal": "User:alice", "permissionType": "Allow", "operation": "Read", "host": "*"},
            {"principal": "User:bob", "permissionType": "Deny", "operation": "Write",
             "host": "10.0.0.1"},
        ],
    }
    assert data.startswith(b'{"acls":[{"principal":"User:alice","permissionType"')
    # One resource, one update, one notification.
    assert changes(client, "/kafka-acl-changes") == [b"TOPIC:foo"]
    assert client.get_children("/kafka-acl-changes")[0].startswith("acl_changes_")


def test_prefixed_acl_goes_to_the_extended_store_with_a_json_notification(clients):
    client = clients()
    AclStore(client).add([acl(name="pay.", ptype=PRE, rtype=ResourceType.TRANSACTIONAL_ID,
                              op=Op.WRITE)])
    data, _ = client.get("/kafka-acl-extended/prefixed/TransactionalId/pay.")
    assert json.loads(data)["acls"][0]["operation"] == "Write"
    (payload,) = changes(client, "/kafka-acl-extended-changes")
    assert json.loads(payload) == {
        "version": 1, "resourceType": "TRANSACTIONAL_ID", "name": "pay.", "patternType": "PREFIXED",
    }
    assert client.get_children("/kafka-acl-changes") == []


def test_user_resource_is_named_by_the_principal_string(clients):
    client = clients()
    AclStore(client).add([acl(name="User:bob", rtype=ResourceType.USER, op=Op.CREATE_TOKENS)])
    assert client.exists("/kafka-acl/User/User:bob") is not None


def test_adding_an_existing_acl_succeeds_without_a_write(clients):
    client = clients()
    store = AclStore(client)
    store.add([acl()])
    version = client.exists("/kafka-acl/Topic/foo").version
    assert [r.error for r in store.add([acl()])[0]] == [Errors.NONE]
    assert client.exists("/kafka-acl/Topic/foo").version == version
    assert len(client.get_children("/kafka-acl-changes")) == 1


def test_invalid_bindings_fail_alone(clients):
    client = clients()
    results, _ = AclStore(client).add(
        [acl(op=Op.ANY), acl(name="a/b"), acl(rtype=ResourceType.CLUSTER, name="c"), acl()]
    )
    assert [r.error for r in results] == [Errors.INVALID_REQUEST] * 3 + [Errors.NONE]
    assert "ZooKeeper" in results[1].message
    assert client.get_children("/kafka-acl/Topic") == ["foo"]


def test_remove_reports_per_filter_and_deletes_empty_resources(clients):
    client = clients()
    store = AclStore(client)
    store.add([acl(), acl(op=Op.WRITE), acl(name="pay", ptype=PRE), acl(name="*", op=Op.DESCRIBE)])
    results, _ = store.remove([
        AclBindingFilter.of(T, "foo", LIT, operation=Op.WRITE),
        AclBindingFilter.of(T, "payments", PatternType.MATCH),
        AclBindingFilter.of(operation=Op.UNKNOWN),
    ])
    assert results[0].deleted == (acl(op=Op.WRITE),)
    assert sorted(results[1].deleted, key=str) == sorted(
        [acl(name="pay", ptype=PRE), acl(name="*", op=Op.DESCRIBE)], key=str
    )
    assert results[2].error is Errors.INVALID_REQUEST and results[2].deleted == ()
    assert client.exists("/kafka-acl-extended/prefixed/Topic/pay") is None
    assert client.exists("/kafka-acl/Topic/*") is None
    assert store.load_all() == {ResourcePattern(T, "foo", LIT): {acl().entry}}


def test_remove_with_match_all_filter_empties_the_store(clients):
    client = clients()
    store = AclStore(client)
    store.add([acl(name=f"t{i}") for i in range(5)] + [acl(name="g", rtype=ResourceType.GROUP)])
    (result,), _ = store.remove([AclBindingFilter()])
    assert len(result.deleted) == 6
    assert store.load_all() == {}


def test_concurrent_writers_on_one_resource_lose_nothing(clients):
    stores = [AclStore(clients()) for _ in range(4)]
    for store in stores:
        store.ensure_paths()
    barrier = threading.Barrier(len(stores))

    def write(n: int) -> None:
        barrier.wait()
        for i in range(10):
            stores[n].add([acl(principal=f"User:w{n}-{i}")])

    threads = [threading.Thread(target=write, args=(n,)) for n in range(len(stores))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    entries = stores[0].load_resource(ResourcePattern(T, "foo", LIT))
    assert len(entries) == 40


def test_stale_guard_is_not_controller_and_writes_nothing(clients):
    client = clients()
    client.create("/controller_epoch", b"1")
    client.set("/controller_epoch", b"2")  # version moves to 1
    store = AclStore(client)
    with pytest.raises(KafkaError) as info:
        store.add([acl()], guard=("/controller_epoch", 0))
    assert info.value.error is Errors.NOT_CONTROLLER
    assert store.load_all() == {}
    assert client.get_children("/kafka-acl-changes") == []
    assert store.add([acl()], guard=("/controller_epoch", 1))[0][0].error is Errors.NONE


def test_load_all_reads_znodes_written_by_kafka(clients):
    client = clients()
    client.ensure_path("/kafka-acl/Group")
    client.create(
        "/kafka-acl/Group/g1",
        b'{"version":1,"acls":[{"host":"*","permissionType":"Deny","operation":"Read",'
        b'"principal":"User:mallory"}]}',
    )
    store = AclStore(client)
    store.add([acl(name="p", ptype=PRE)])
    assert store.load_all() == {
        ResourcePattern(ResourceType.GROUP, "g1", LIT): {
            AccessControlEntry("User:mallory", "*", Op.READ, DENY)
        },
        ResourcePattern(T, "p", PRE): {acl().entry},
    }


def test_purge_deletes_only_old_notifications(clients):
    client = clients()
    store = AclStore(client)
    store.add([acl(), acl(name="p", ptype=PRE)])
    purger = AclSync(store, RecordingAuthorizer())
    now = int(time.time() * 1000)
    assert purger.purge(now) == 0
    assert purger.purge(now + 16 * 60 * 1000) == 2
    assert client.get_children("/kafka-acl-changes") == []
    assert client.get_children("/kafka-acl-extended-changes") == []


# --- sync ------------------------------------------------------------------------------------


def test_start_loads_everything_then_marks_ready(clients, syncs):
    writer = AclStore(clients())
    writer.add([acl(), acl(name="p", ptype=PRE, op=Op.WRITE)])
    sync, authorizer = syncs(clients())
    assert authorizer.ready and authorizer.acl_count == 2
    assert authorizer.authorize(ALICE, "h", Op.WRITE, T, "px")
    assert sync.resync_count == 1


def test_two_syncs_see_each_others_changes(clients, syncs):
    client_a, client_b = clients(), clients()
    _, auth_a = syncs(client_a)
    _, auth_b = syncs(client_b)
    AclStore(client_a).add([acl(name="from-a")])
    assert wait_for(lambda: auth_b.acl_count == 1, timeout=15.0)
    AclStore(client_b).add([acl(name="from-b", ptype=PRE)])
    assert wait_for(lambda: auth_a.acl_count == 2, timeout=15.0)
    assert auth_a.authorize(ALICE, "h", Op.READ, T, "from-b-topic")
    AclStore(client_a).remove([AclBindingFilter.of(name="from-a")])
    assert wait_for(lambda: auth_b.acl_count == 1, timeout=15.0)


class RecordingAuthorizer(AclAuthorizer):
    """Remembers every resource update the sync applies, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.applied: list[frozenset[AccessControlEntry]] = []

    def apply_resource(self, pattern, entries) -> None:
        entries = frozenset(entries)
        self.applied.append(entries)
        super().apply_resource(pattern, entries)


def test_deny_then_allow_is_applied_in_order(clients):
    writer, reader = clients(), clients()
    authorizer = RecordingAuthorizer()
    sync = AclSync(AclStore(reader), authorizer)
    sync.start()
    try:
        store = AclStore(writer)
        for _ in range(3):
            store.add([acl(perm=DENY)])
            store.remove([AclBindingFilter.exact(acl(perm=DENY))])
            store.add([acl(perm=ALLOW)])
            store.remove([AclBindingFilter.exact(acl(perm=ALLOW))])
        store.add([acl(perm=DENY)])
        store.remove([AclBindingFilter.exact(acl(perm=DENY))])
        store.add([acl(perm=ALLOW)])
        newest = store.notifications(LIT)[-1][0]
        assert wait_for(lambda: sync.last_applied[LIT] == newest)
        assert authorizer.authorize(ALICE, "h", Op.READ, T, "foo")
        assert authorizer.describe() == [acl(perm=ALLOW)]
        # Every notification re-reads the resource, so the states applied follow
        # ZooKeeper's order: the final state is the last one applied.
        assert authorizer.applied[-1] == {acl(perm=ALLOW).entry}
        assert sync.applied_changes >= len(authorizer.applied) >= 1
    finally:
        sync.close()


def test_sync_applies_a_kafka_written_legacy_notification(clients, syncs):
    writer = clients()
    _, authorizer = syncs(clients())
    writer.create(
        "/kafka-acl/Topic/legacy",
        b'{"version":1,"acls":[{"host":"*","permissionType":"Allow","operation":"All",'
        b'"principal":"User:*"}]}',
    )
    writer.create("/kafka-acl-changes/acl_changes_", b"Topic:legacy", sequence=True)
    assert wait_for(lambda: authorizer.authorize(ALICE, "h", Op.ALTER, T, "legacy"))


def test_session_expiry_triggers_a_full_reload(clients, syncs):
    writer = clients()
    reader = clients()
    sync, authorizer = syncs(reader)
    # A change without a notification: only a full reload can see it.
    AclStore(writer).ensure_paths()
    writer.create(
        "/kafka-acl/Topic/silent",
        b'{"version":1,"acls":[{"host":"*","permissionType":"Allow","operation":"Read",'
        b'"principal":"User:alice"}]}',
    )
    time.sleep(0.2)
    assert not authorizer.authorize(ALICE, "h", Op.READ, T, "silent")
    expire_session(reader, attempts=1, wait_s=10)
    # At least one full reload (a follow-up that failed during the outage may add one).
    assert wait_for(lambda: sync.resync_count >= 2, timeout=30.0)
    assert authorizer.ready
    assert authorizer.authorize(ALICE, "h", Op.READ, T, "silent")
    # And notifications flow again on the new session.
    AclStore(writer).add([acl(name="after")])
    assert wait_for(lambda: authorizer.authorize(ALICE, "h", Op.READ, T, "after"))


def test_close_stops_following_changes(clients, syncs):
    writer = clients()
    sync, authorizer = syncs(clients())
    sync.close()
    AclStore(writer).add([acl()])
    time.sleep(0.3)
    assert authorizer.acl_count == 0
