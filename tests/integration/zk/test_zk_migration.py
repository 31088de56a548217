"""Moving a running cluster from open znodes to the declared ACLs, and back, under load.

A 3-broker cluster on an open ZooKeeper holds 1,000 tokens, 100 SCRAM users and 100 ACLs
while confluent-kafka logs in continuously with a user and with a token. The rolling
procedure of docs/operations.md gives each broker in turn a ZooKeeper identity and
``zookeeper.set.acl=true`` (controller last), then ``tokensvc zookeeper
security-migration --zookeeper.acl secure`` sets every existing znode's ACL. No login
fails but for a reconnect, nothing is lost, every znode has the declared ACL, a client
without the identity reads no secret and writes nowhere, a second run changes nothing,
an interrupted run is resumed, and ``--zookeeper.acl unsecure`` opens it all again.

The identity here is a digest one (the session ZooKeeper has no SASL users); the
procedure is the same with SASL or a client certificate (test_zk_security.py covers those).
"""

from __future__ import annotations

import base64
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Self

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient as ConfluentAdmin
from kazoo.client import KazooClient

from tests.support.intruder import attempts_that_succeeded
from tests.support.local_cluster import (
    addresses,
    admin_client,
    broker_metric,
    user_config,
    wait_served_everywhere,
)
from tests.support.tokens import token_client_config
from tests.support.wait import poll_until
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
from tokensvc.cluster import LocalCluster
from tokensvc.properties import properties_text, read_properties
from zk import znode_acls
from zk.client import ZkSettings, open_client

TOKENS, USERS, ACLS = 1_000, 100, 100
PACE_S = 0.2  # between one identity's logins (LoginLoad): five a second each
pytestmark = pytest.mark.heavy(minutes=4)  # 1,000 tokens, two rolling restarts
IDENTITY = "tokensvc:migration-secret"
ZK_KEYS = {"zookeeper.digest": IDENTITY, "zookeeper.set.acl": "true",
           # The brokers read the ACLs back every second: the gauge follows the migration.
           "zookeeper.acl.check.interval.ms": "1000"}


def acl(i: int) -> AclBinding:
    return AclBinding(ResourcePattern(ResourceType.TOPIC, f"topic-{i}", PatternType.LITERAL),
                      AccessControlEntry(f"User:user-{i}", "*", AclOperation.READ,
                                         AclPermissionType.ALLOW))


class LoginLoad:
    """confluent-kafka logging in again and again as one user and as one token, each
    login a new client; a login that fails once for a transport error and then works
    was a reconnect, anything else a failure. Each identity starts a login at most every
    :data:`PACE_S` after the last one ended, as the other fault tests' load loops do:
    logins keep running through every restart and migration step, without the loop
    spending a core on new clients as fast as they go."""

    def __init__(self, bootstrap: str, logins: dict[str, tuple[str, str]]) -> None:
        self.bootstrap = bootstrap
        self.logins = logins
        self.done = {name: 0 for name in logins}
        self.reconnects = 0
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(name,), daemon=True)
                         for name in logins]

    def _login(self, name: str) -> None:
        username, password = self.logins[name]
        admin = ConfluentAdmin({
            "bootstrap.servers": self.bootstrap,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-256",
            "sasl.username": username,
            "sasl.password": password,
        })
        admin.describe_cluster(request_timeout=15).result()

    def _run(self, name: str) -> None:
        while not self._stop.is_set():
            try:
                self._login(name)
            except KafkaException as first:
                try:
                    self._login(name)
                    self.reconnects += 1
                except KafkaException as second:
                    self.failures.append(f"{name}: {first}; then {second}")
            self.done[name] += 1
            self._stop.wait(PACE_S)

    def __enter__(self) -> Self:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=60)


@pytest.fixture(scope="module")
def populated(zookeeper, tmp_path_factory) -> Iterator[tuple[LocalCluster, str, dict]]:
    connect = f"{zookeeper.connect}/migration"
    directory = tmp_path_factory.mktemp("migration")
    with LocalCluster.up(directory, brokers=3, zookeeper=connect,
                         die_with_parent=True) as cluster:
        # Written through the broker counts() reads (read-your-writes); the load logs in
        # with user-7 and the first token on any broker, so it waits until every broker
        # serves them.
        with admin_client(cluster, address=addresses(cluster)[0], timeout_s=60) as admin:
            tokens = [admin.create_token() for _ in range(TOKENS)]
            for i in range(USERS):
                admin.upsert_user_scram_credential(f"user-{i}", "SCRAM-SHA-256", f"pw-{i}")
            admin.create_acls([acl(i) for i in range(ACLS)])
        wait_served_everywhere(cluster, user_config("user-7", "pw-7", "SCRAM-SHA-256"))
        wait_served_everywhere(cluster, token_client_config(tokens[0]))
        yield cluster, connect, {"token": tokens[0]}


def zk_tool_config(path: Path, connect: str) -> Path:
    path.write_text(properties_text({"zookeeper.connect": connect, **ZK_KEYS}))
    path.chmod(0o600)
    return path


def migration(config: Path, acl_mode: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "cli.tokensvc", "zookeeper", "security-migration",
         "--zookeeper.acl", acl_mode, "--zk-tls-config-file", str(config)],
        capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout.strip()


def walk(client: KazooClient) -> Iterator[tuple[str, list]]:
    pending = [root for root in znode_acls.TOKENSVC_ROOTS if client.exists(root)]
    while pending:
        path = pending.pop()
        acls, _ = client.get_acls(path)
        yield path, list(acls)
        pending += [f"{path}/{child}" for child in client.get_children(path)]


def restart_with(cluster: LocalCluster, broker_id: int, changes: dict[str, str | None]) -> None:
    config = Path(cluster.broker_info(broker_id)["config"])
    cluster.stop_broker(broker_id)
    props = read_properties(config)
    for key, value in changes.items():
        if value is None:
            props.pop(key, None)
        else:
            props[key] = value
    config.write_text(properties_text(props))
    cluster.start_broker(broker_id)


def rolling(cluster: LocalCluster, changes: dict[str, str | None]) -> None:
    """Each broker in turn, the controller last (docs/operations.md)."""
    with admin_client(cluster, timeout_s=60) as admin:
        controller = admin.describe_cluster().controller_id

    for broker_id in sorted(cluster.broker_ids(), key=lambda b: b == controller):
        restart_with(cluster, broker_id, changes)


def acls_set(output: str) -> int:
    """The count of ``... N znodes read, M ACLs set, ...``."""
    return int(output.split(" ACLs set")[0].rsplit(" ", 1)[1])


def intruder_reads_and_writes(connect: str) -> list[str]:
    client = KazooClient(hosts=connect.split("/")[0], timeout=5)
    client.start(timeout=10)
    root = "/" + connect.split("/", 1)[1]
    tries = {
        "read a credential": lambda: client.get(f"{root}/config/users/user-1"),
        "list tokens": lambda: client.get_children(f"{root}/delegation_token/tokens"),
        "replace a credential": lambda: client.set(f"{root}/config/users/user-1", b"x"),
        "grant an ACL": lambda: client.create(f"{root}/kafka-acl/Cluster/kafka-cluster", b"{}"),
        "create in the chroot": lambda: client.create(f"{root}/evil", b"x"),
    }
    return attempts_that_succeeded(client, tries)


def counts(cluster: LocalCluster) -> tuple[int, int, int]:
    """Tokens, users and ACLs as the broker the fixture wrote through describes them."""
    with admin_client(cluster, address=addresses(cluster)[0], timeout_s=60) as admin:
        tokens = len(admin.describe_tokens())
        users = len([u for u in admin.describe_user_scram_credentials() if u.startswith("user-")])
        acls = len(admin.describe_acls(AclBindingFilter.of()))
    return tokens, users, acls


def test_rolling_migration_to_secure_acls_under_load_and_back(populated, tmp_path: Path) -> None:
    cluster, connect, made = populated
    token = made["token"]
    before = counts(cluster)
    assert before == (TOKENS, USERS, ACLS)
    # Before: open znodes, which every broker reports.
    for broker_id in cluster.broker_ids():
        assert broker_metric(cluster, broker_id, "tokensvc_zookeeper_insecure_paths") > 0
    config = zk_tool_config(tmp_path / "zk-tool.properties", connect)
    logins = {"user": ("user-7", "pw-7"),
              "token": (token.token_id, base64.b64encode(token.hmac).decode())}
    with LoginLoad(cluster.info["bootstrap_servers"], logins) as load:
        rolling(cluster, ZK_KEYS)
        secured = migration(config, "secure")
        again = migration(config, "secure")
        assert poll_until(lambda: min(load.done.values()) >= 5, timeout=60)
    assert load.failures == []
    assert min(load.done.values()) >= 5
    assert counts(cluster) == before
    assert acls_set(secured) > TOKENS  # every token znode, at least
    assert acls_set(again) == 0
    brokers = open_client(ZkSettings(connect, digest=IDENTITY))
    try:
        wrong = [p for p, a in walk(brokers) if not znode_acls.matches_declared(p, a, True)]
        assert wrong == []
    finally:
        brokers.stop()
        brokers.close()
    assert intruder_reads_and_writes(connect) == []
    for broker_id in cluster.broker_ids():
        assert poll_until(lambda b=broker_id: broker_metric(
            cluster, b, "tokensvc_zookeeper_insecure_paths") == 0, timeout=10)

    # Back: brokers stop setting ACLs, then every znode is opened again.
    rolling(cluster, {"zookeeper.set.acl": "false"})
    migration(config, "unsecure")
    brokers = open_client(ZkSettings(connect, digest=IDENTITY))
    try:
        closed = [p for p, a in walk(brokers) if not znode_acls.matches_declared(p, a, False)]
        assert closed == []
    finally:
        brokers.stop()
        brokers.close()
    assert counts(cluster) == before


def test_an_interrupted_migration_is_resumed_by_running_it_again(populated, tmp_path: Path) -> None:
    _, connect, _ = populated
    config = zk_tool_config(tmp_path / "zk-tool.properties", connect)
    migration(config, "unsecure")
    brokers = open_client(ZkSettings(connect, digest=IDENTITY))
    try:
        paths = [p for p, _ in walk(brokers)]
        # What a run killed half-way leaves: some znodes set, the others not.
        for path in paths[: len(paths) // 2]:
            brokers.set_acls(path, znode_acls.acl_for(path, secure=True))
        changed = acls_set(migration(config, "secure"))
        assert len(paths) - len(paths) // 2 <= changed <= len(paths) - len(paths) // 2 + 4
        assert all(znode_acls.matches_declared(p, a, True) for p, a in walk(brokers))
    finally:
        brokers.stop()
        brokers.close()
    migration(config, "unsecure")
