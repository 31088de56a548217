"""SCRAM user credentials in a real ZooKeeper: Kafka's exact znode JSON, the change
notification written with it, delete semantics, guards, and syncs that follow each other."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from kazoo.client import KazooClient

from cli.users_cmd import users as users_cli
from tests.support.wait import poll_until
from tests.support.zkclient import client_factory
from tokensvc.jvm import free_port
from tokensvc.scram.formatter import ScramCredential, ScramMechanism, derive_credential
from zk.client import ZkSettings, open_client
from zk.credential_store import CHANGES_PATH, CredentialStore
from zk.credential_sync import CredentialSync, UserCredentialCache
from zk.errors import NotControllerError, StoreError
from zk.server import ManagedZooKeeper

SHA256 = ScramMechanism.SCRAM_SHA_256
SHA512 = ScramMechanism.SCRAM_SHA_512

CRED_256 = ScramCredential(b"salt", b"\x01" * 32, b"\x02" * 32, 4096)
CRED_256_TEXT = (
    "salt=c2FsdA==,stored_key=AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE=,"
    "server_key=AgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgI=,iterations=4096"
)
CRED_512 = ScramCredential(b"salt", b"\x03" * 64, b"\x03" * 64, 8192)


@pytest.fixture
def open_zk(zk_connect: str) -> Iterator[Callable[[], KazooClient]]:
    with client_factory(zk_connect) as opener:
        yield opener


@pytest.fixture
def zk(open_zk: Callable[[], KazooClient]) -> KazooClient:
    return open_zk()


@pytest.fixture
def free_zk_port() -> int:
    return free_port()


def _changes(zk: KazooClient) -> list[dict]:
    return [
        json.loads(zk.get(f"{CHANGES_PATH}/{child}")[0])
        for child in sorted(zk.get_children(CHANGES_PATH))
    ]


def _eventually(check: Callable[[], bool], timeout: float = 15.0) -> bool:
    return poll_until(check, timeout)


def test_upsert_writes_kafka_user_config_json(zk: KazooClient) -> None:
    CredentialStore(zk).upsert("alice", SHA256, CRED_256)
    data, _ = zk.get("/config/users/alice")
    assert data == (
        b'{"version":1,"config":{"SCRAM-SHA-256":"' + CRED_256_TEXT.encode() + b'"}}'
    )


def test_upsert_writes_one_change_notification_with_the_entity_path(zk: KazooClient) -> None:
    CredentialStore(zk).upsert("alice", SHA256, CRED_256)
    children = zk.get_children(CHANGES_PATH)
    assert children == ["config_change_0000000000"]
    data, _ = zk.get(f"{CHANGES_PATH}/config_change_0000000000")
    assert data == b'{"version":2,"entity_path":"users/alice"}'


def test_user_names_are_sanitized_like_kafka(zk: KazooClient) -> None:
    store = CredentialStore(zk)
    store.upsert("alice@example.com", SHA512, CRED_512)
    store.upsert("bob smith", SHA256, CRED_256)
    assert sorted(zk.get_children("/config/users")) == ["alice%40example.com", "bob%20smith"]
    assert [c["entity_path"] for c in _changes(zk)] == [
        "users/alice%40example.com",
        "users/bob%20smith",
    ]
    assert store.users() == ["alice@example.com", "bob smith"]
    assert store.get("bob smith") == {SHA256: CRED_256}


def test_second_mechanism_is_added_next_to_the_first(zk: KazooClient) -> None:
    store = CredentialStore(zk)
    store.upsert("alice", SHA256, CRED_256)
    store.upsert("alice", SHA512, CRED_512)
    config = json.loads(zk.get("/config/users/alice")[0])["config"]
    assert sorted(config) == ["SCRAM-SHA-256", "SCRAM-SHA-512"]
    assert store.get("alice") == {SHA256: CRED_256, SHA512: CRED_512}
    assert len(_changes(zk)) == 2


def test_upsert_keeps_other_config_keys_of_the_user(zk: KazooClient) -> None:
    zk.ensure_path("/config/users")
    zk.create("/config/users/alice", b'{"version":1,"config":{"producer_byte_rate":"1024"}}')
    store = CredentialStore(zk)
    store.upsert("alice", SHA256, CRED_256)
    config = json.loads(zk.get("/config/users/alice")[0])["config"]
    assert config == {"producer_byte_rate": "1024", "SCRAM-SHA-256": CRED_256_TEXT}


def test_delete_removes_only_that_mechanism(zk: KazooClient) -> None:
    store = CredentialStore(zk)
    store.upsert("alice", SHA256, CRED_256)
    store.upsert("alice", SHA512, CRED_512)
    assert store.delete("alice", SHA512) is True
    assert store.get("alice") == {SHA256: CRED_256}
    assert _changes(zk)[-1] == {"version": 2, "entity_path": "users/alice"}
    assert len(_changes(zk)) == 3


def test_deleting_the_last_credential_leaves_an_empty_config_znode_as_kafka_does(
    zk: KazooClient,
) -> None:
    store = CredentialStore(zk)
    store.upsert("alice", SHA256, CRED_256)
    assert store.delete("alice", SHA256) is True
    assert zk.get("/config/users/alice")[0] == b'{"version":1,"config":{}}'
    assert store.get("alice") == {}
    assert store.users() == []


def test_delete_of_a_missing_credential_is_false_and_writes_nothing(zk: KazooClient) -> None:
    store = CredentialStore(zk)
    assert store.delete("nobody", SHA256) is False
    store.upsert("alice", SHA256, CRED_256)
    version = zk.exists("/config/users/alice").version
    assert store.delete("alice", SHA512) is False
    assert zk.exists("/config/users/alice").version == version
    assert len(_changes(zk)) == 1


def test_load_all_returns_only_users_with_scram_credentials(zk: KazooClient) -> None:
    store = CredentialStore(zk)
    for i in range(50):
        store.upsert(f"user-{i:02d}", SHA512, CRED_512)
    zk.create("/config/users/quota-only", b'{"version":1,"config":{"consumer_byte_rate":"1"}}')
    loaded = store.load_all()
    assert sorted(loaded) == [f"user-{i:02d}" for i in range(50)]
    assert all(creds == {SHA512: CRED_512} for creds in loaded.values())


def test_a_derived_credential_round_trips_through_zookeeper(zk: KazooClient) -> None:
    store = CredentialStore(zk)
    credential = derive_credential("s3cret", SHA512, 4096)
    store.upsert("alice", SHA512, credential)
    assert store.get("alice")[SHA512] == credential
    assert b"s3cret" not in zk.get("/config/users/alice")[0]


def test_write_with_a_matching_guard_succeeds(zk: KazooClient) -> None:
    zk.create("/controller", b"{}")
    version = zk.exists("/controller").version
    store = CredentialStore(zk)
    store.upsert("alice", SHA256, CRED_256, guard=("/controller", version))
    assert store.delete("alice", SHA256, guard=("/controller", version)) is True


def test_write_with_a_stale_guard_fails_and_writes_nothing(zk: KazooClient) -> None:
    zk.create("/controller", b"{}")
    stale = zk.exists("/controller").version
    zk.set("/controller", b'{"brokerid":2}')
    store = CredentialStore(zk)
    with pytest.raises(NotControllerError):
        store.upsert("alice", SHA256, CRED_256, guard=("/controller", stale))
    with pytest.raises(NotControllerError):
        store.upsert("alice", SHA256, CRED_256, guard=("/gone", 0))
    assert zk.exists("/config/users/alice") is None
    assert zk.get_children(CHANGES_PATH) == []


def test_concurrent_upserts_of_one_user_lose_no_mechanism(
    open_zk: Callable[[], KazooClient],
) -> None:
    stores = [CredentialStore(open_zk()) for _ in range(4)]
    mechanisms = [SHA256, SHA512] * 2
    barrier = threading.Barrier(len(stores))
    errors: list[Exception] = []

    def write(store: CredentialStore, mechanism: ScramMechanism, n: int) -> None:
        barrier.wait()
        try:
            for _ in range(5):
                store.upsert("alice", mechanism, CRED_256 if n % 2 == 0 else CRED_512)
        except StoreError as exc:  # collected and asserted below
            errors.append(exc)

    threads = [
        threading.Thread(target=write, args=(s, m, i))
        for i, (s, m) in enumerate(zip(stores, mechanisms, strict=True))
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert errors == []
    assert set(stores[0].get("alice")) == {SHA256, SHA512}
    assert len(stores[0].change_sequences()) == 20


def test_purge_removes_notifications_older_than_the_limit(zk: KazooClient) -> None:
    store = CredentialStore(zk)
    store.upsert("alice", SHA256, CRED_256)
    store.upsert("bob", SHA256, CRED_256)
    purger = CredentialSync(store, UserCredentialCache())
    ctime = max(zk.exists(f"{CHANGES_PATH}/{c}").ctime for c in zk.get_children(CHANGES_PATH))
    assert purger.purge(now_ms=ctime + 60_000) == 0
    assert purger.purge(now_ms=ctime + 15 * 60 * 1000 + 1) == 2
    assert zk.get_children(CHANGES_PATH) == []


def _started_sync(client: KazooClient) -> tuple[CredentialSync, UserCredentialCache]:
    cache = UserCredentialCache()
    sync = CredentialSync(CredentialStore(client), cache)
    sync.start()
    return sync, cache


def test_sync_start_loads_existing_credentials(open_zk: Callable[[], KazooClient]) -> None:
    writer = CredentialStore(open_zk())
    writer.upsert("alice", SHA256, CRED_256)
    writer.upsert("bob", SHA512, CRED_512)
    sync, cache = _started_sync(open_zk())
    try:
        assert cache.users() == ["alice", "bob"]
        assert cache.user_credential("alice", SHA256) == CRED_256
        assert cache.user_credential("alice", SHA512) is None
        assert cache.user_credential("nobody", SHA256) is None
        assert sync.resync_count == 1
    finally:
        sync.close()


def test_two_syncs_see_each_others_changes(
    open_zk: Callable[[], KazooClient],
) -> None:
    client_a, client_b = open_zk(), open_zk()
    sync_a, cache_a = _started_sync(client_a)
    sync_b, cache_b = _started_sync(client_b)
    try:
        CredentialStore(client_a).upsert("alice", SHA256, CRED_256)
        assert _eventually(lambda: cache_b.user_credential("alice", SHA256) == CRED_256)
        CredentialStore(client_b).upsert("alice", SHA512, CRED_512)
        assert _eventually(lambda: cache_a.credentials("alice") == {SHA256: CRED_256, SHA512: CRED_512})
        CredentialStore(client_b).delete("alice", SHA256)
        assert _eventually(lambda: cache_a.credentials("alice") == {SHA512: CRED_512})
        CredentialStore(client_a).delete("alice", SHA512)
        assert _eventually(lambda: cache_b.users() == [] and cache_a.users() == [])
        assert sync_a.applied_changes >= 4 and sync_b.applied_changes >= 4
    finally:
        sync_a.close()
        sync_b.close()


def test_sync_ignores_notifications_about_other_entities(
    open_zk: Callable[[], KazooClient],
) -> None:
    client = open_zk()
    sync, cache = _started_sync(client)
    try:
        client.create(f"{CHANGES_PATH}/config_change_", b'{"version":2,"entity_path":"topics/t"}',
                      sequence=True)
        client.create(f"{CHANGES_PATH}/config_change_",
                      b'{"version":2,"entity_path":"users/alice/clients/c1"}', sequence=True)
        client.create(f"{CHANGES_PATH}/config_change_", b"not json", sequence=True)
        CredentialStore(client).upsert("alice", SHA256, CRED_256)
        assert sync.wait_caught_up(2.0)
        assert cache.users() == ["alice"]
        assert sync.applied_changes == 4  # handled in order; only alice's changes the cache
        assert sync.last_sequence == 3
    finally:
        sync.close()


def test_sync_resyncs_after_its_session_expires(
    zk_connect: str, open_zk: Callable[[], KazooClient]
) -> None:
    client = open_zk()
    writer = CredentialStore(open_zk())
    writer.upsert("alice", SHA256, CRED_256)
    sync, cache = _started_sync(client)
    try:
        # Expire the session: a second client with the same session id closes it.
        session_id, password = client.client_id
        twin = KazooClient(hosts=ZkSettings(zk_connect).hosts + ZkSettings(zk_connect).chroot,
                           client_id=(session_id, password))
        twin.start(timeout=10)
        twin.stop()
        twin.close()
        writer.delete("alice", SHA256)
        writer.upsert("bob", SHA512, CRED_512)
        # Notifications purged meanwhile: only a full resync can find the changes.
        purger = CredentialSync(writer, UserCredentialCache())
        purger.purge(now_ms=int(time.time() * 1000) + 10**9)
        assert _eventually(lambda: cache.users() == ["bob"], timeout=15.0)
        assert sync.resync_count >= 2
        writer.upsert("carol", SHA256, CRED_256)
        assert _eventually(lambda: cache.user_credential("carol", SHA256) == CRED_256)
    finally:
        sync.close()


def test_closed_sync_stops_following(open_zk: Callable[[], KazooClient]) -> None:
    client = open_zk()
    sync, cache = _started_sync(client)
    sync.close()
    CredentialStore(client).upsert("alice", SHA256, CRED_256)
    time.sleep(0.3)
    assert cache.users() == []


# -- `tokensvc users bootstrap` ------------------------------------------------------------


def test_users_bootstrap_writes_both_mechanisms_for_the_password(
    zk_connect: str, zk: KazooClient
) -> None:
    result = CliRunner().invoke(
        users_cli, ["bootstrap", "--zookeeper", zk_connect, "--user", "admin", "--password", "pw1"]
    )
    assert result.exit_code == 0, result.output
    assert "pw1" not in result.output
    creds = CredentialStore(zk).get("admin")
    assert set(creds) == {SHA256, SHA512}
    for mechanism, cred in creds.items():
        assert cred.iterations == 4096
        assert derive_credential("pw1", mechanism, 4096, salt=cred.salt) == cred


def test_users_bootstrap_reads_the_password_file_and_honors_mechanism_and_iterations(
    zk_connect: str, zk: KazooClient, tmp_path: Path
) -> None:
    secret = tmp_path / "password"
    secret.write_text("from file\n")
    result = CliRunner().invoke(users_cli, [
        "bootstrap", "--zookeeper", zk_connect, "--user", "alice", "--password-file", str(secret),
        "--mechanism", "SCRAM-SHA-512", "--iterations", "8192",
    ])
    assert result.exit_code == 0, result.output
    creds = CredentialStore(zk).get("alice")
    assert list(creds) == [SHA512]
    assert creds[SHA512] == derive_credential("from file", SHA512, 8192, salt=creds[SHA512].salt)


def test_users_bootstrap_writes_under_the_chroot_of_the_connect_string(
    zookeeper: ManagedZooKeeper, zk_connect: str
) -> None:
    result = CliRunner().invoke(
        users_cli, ["bootstrap", "--zookeeper", zk_connect, "--user", "bob", "--password", "x"]
    )
    assert result.exit_code == 0, result.output
    chroot = zk_connect.split("/", 1)[1]
    root = open_client(ZkSettings(zookeeper.connect))
    try:
        assert root.exists(f"/{chroot}/config/users/bob") is not None
        assert root.exists("/config/users/bob") is None
    finally:
        root.stop()
        root.close()


@pytest.mark.parametrize("iterations", ["4095", "16385"])
def test_users_bootstrap_refuses_iterations_out_of_range(
    zk_connect: str, zk: KazooClient, iterations: str
) -> None:
    result = CliRunner().invoke(users_cli, [
        "bootstrap", "--zookeeper", zk_connect, "--user", "alice", "--password", "p",
        "--iterations", iterations,
    ])
    assert result.exit_code == 2
    assert "--iterations" in result.output
    assert CredentialStore(zk).users() == []


@pytest.mark.parametrize("password_args", [[], ["--password", "p", "--password-file", "f"]])
def test_users_bootstrap_needs_exactly_one_password_source(
    zk_connect: str, password_args: list[str]
) -> None:
    result = CliRunner().invoke(
        users_cli, ["bootstrap", "--zookeeper", zk_connect, "--user", "alice", *password_args]
    )
    assert result.exit_code == 2
    assert "exactly one of --password and --password-file" in result.output


def test_users_bootstrap_reports_an_unreachable_zookeeper(free_zk_port: int) -> None:
    result = CliRunner().invoke(users_cli, [
        "bootstrap", "--zookeeper", f"127.0.0.1:{free_zk_port}", "--user", "a", "--password", "p",
        "--zookeeper-timeout-ms", "500",
    ])
    assert result.exit_code == 1
    assert "could not connect to ZooKeeper" in result.output


def test_credential_and_acl_store_calls_are_capped_when_zookeeper_is_gone(tmp_path: Path) -> None:
    """A partition (here: ZooKeeper stopped under a connected client) answers a write and a
    read with StoreUnavailable / a retriable error within the cap, never holding the
    calling thread (issue 27)."""
    from tokensvc.authz.acl import (
        AccessControlEntry,
        AclBinding,
        AclOperation,
        AclPermissionType,
        ResourcePattern,
        ResourceType,
    )
    from tokensvc.core.errors import Errors, KafkaError
    from tokensvc.scram.changes import CredentialChange
    from zk.acl_store import AclStore
    from zk.errors import StoreUnavailable

    server = ManagedZooKeeper(tmp_path / "zk")
    server.start()
    client = open_client(ZkSettings(server.connect, session_timeout_ms=30_000,
                                    connection_timeout_ms=30_000))
    try:
        credentials = CredentialStore(client, request_timeout_s=1.0)
        acls = AclStore(client, request_timeout_s=1.0)
        credentials.ensure_paths()
        server.stop()
        started = time.monotonic()
        with pytest.raises(StoreUnavailable):
            credentials.alter([CredentialChange("zed", ScramMechanism.SCRAM_SHA_256,
                                                derive_credential("pw", ScramMechanism.SCRAM_SHA_256,
                                                                  4096))])
        assert time.monotonic() - started < 5
        started = time.monotonic()
        with pytest.raises(KafkaError) as refused:
            acls.add([AclBinding(ResourcePattern(ResourceType.TOPIC, "t"),
                                 AccessControlEntry("User:a", "*", AclOperation.READ,
                                                    AclPermissionType.ALLOW))])
        assert refused.value.error == Errors.REQUEST_TIMED_OUT
        assert time.monotonic() - started < 5
    finally:
        client.stop()
        client.close()
