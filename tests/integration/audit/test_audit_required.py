"""audit.required against real brokers whose audit directory is a small tmpfs (root only):

- with ``audit.required=true``, under a steady load of logins (tokensvc's client, and
  kafka-python with its defaults) and token creates through both brokers, a filler file
  fills the disk: every answered login and create has its event in the files, every
  token that exists has its create event, no line is torn and no event is written twice;
  while the disk is full logins and creates fail with REQUEST_TIMED_OUT (retriable), the
  gauge shows 0 and each broker logs the transition once; after the filler is deleted
  they succeed again without a restart;
- a kill -9 right after answered creates loses none of their events (required), and in
  the default mode none answered more than the flush interval before the kill;
- with the default (``audit.required=false``) the broker keeps serving while the disk is
  full and counts the events it drops.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Self

import pytest
from kafka import KafkaAdminClient

from tests.support.local_cluster import (
    admin_client,
    broker_metric,
    user_config,
    wait_served_everywhere,
)
from tests.support.wait import poll_until
from tokensvc.admin import AdminClient, AdminError
from tokensvc.admin.connection import BrokerConnection, ConnectionLost
from tokensvc.authz.acl import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
)
from tokensvc.client_config import ClientConfig, client_config_from_properties
from tokensvc.cluster import LocalCluster
from tokensvc.core.errors import Errors

pytestmark = [pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root"),
              pytest.mark.heavy(minutes=2)]

LOADER, LOADER_PW = "loader", "loader-pw"
REFUSED_USER = "refused-user"
REFUSED_ACL = AclBinding(ResourcePattern(ResourceType.TOPIC, "audit-refused"),
                         AccessControlEntry("User:loader", "*", AclOperation.READ,
                                            AclPermissionType.ALLOW))
KP_LOADER, KP_LOADER_PW = "kploader", "kploader-pw"


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "auditfs"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m,mode=0750", "tmpfs", str(mount)],
                   check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def _cluster(tmp_path: Path, audit_dir: Path, **settings: str) -> LocalCluster:
    overrides = {"audit.log.dir": str(audit_dir), "request.timeout.ms": "10000", **settings}
    cluster = LocalCluster.up(tmp_path / "cluster", brokers=2, overrides=overrides,
                              die_with_parent=True)
    with _admin(cluster) as admin:
        admin.upsert_user_scram_credential(LOADER, "SCRAM-SHA-512", LOADER_PW)
        admin.upsert_user_scram_credential(KP_LOADER, "SCRAM-SHA-512", KP_LOADER_PW)
    # The load logs in on every broker at once, and counts each refused login: it starts
    # only once every broker serves the users (written through one broker, the other
    # follows within zookeeper.max.staleness.ms).
    wait_served_everywhere(cluster, user_config(LOADER, LOADER_PW))
    wait_served_everywhere(cluster, user_config(KP_LOADER, KP_LOADER_PW))
    return cluster


def _admin(cluster: LocalCluster, address: str | None = None, timeout_s: float = 20) -> AdminClient:
    return admin_client(cluster, address=address, timeout_s=timeout_s)


def _loader_config() -> ClientConfig:
    return client_config_from_properties({
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required "
                            f'username="{LOADER}" password="{LOADER_PW}";',
    })


def _addresses(cluster: LocalCluster) -> dict[str, int]:
    return {b["listeners"]["SASL_PLAINTEXT"]: b["id"] for b in cluster.info["brokers"]}


def _fill(directory: Path) -> Path:
    """Write a filler file until the file system is full."""
    filler = directory / "filler"
    with open(filler, "wb", buffering=0) as f:
        for chunk in (65536, 4096, 512, 1):
            block = b"\0" * chunk
            try:
                while True:
                    f.write(block)
            except OSError:
                continue
    return filler


def _events(directory: Path) -> list[dict]:
    events = []
    for path in sorted(directory.glob("audit-*.jsonl")):
        text = path.read_text()
        assert text == "" or text.endswith("\n"), f"torn last line in {path.name}"
        events += [json.loads(line) for line in text.splitlines()]  # each line parses
    return events


class Load:
    """Logins (tokensvc's client and kafka-python) and creates, each in its own thread,
    recording what was answered and how each failure was answered."""

    def __init__(self, cluster: LocalCluster) -> None:
        self.cluster = cluster
        self.addresses = _addresses(cluster)
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.logins: list[tuple[int, int, float]] = []  # broker id, client port, answered at
        self.login_errors: Counter[str] = Counter()
        self.kp_ok: list[float] = []
        self.kp_failed: list[float] = []
        self.created: list[tuple[str, float]] = []
        self.create_errors: Counter[str] = Counter()
        self.threads = [threading.Thread(target=fn, daemon=True)
                        for fn in (self._logins, self._kafka_python, self._creates)]

    def __enter__(self) -> Self:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(60)

    def _logins(self) -> None:
        config = _loader_config()
        while not self.stop.is_set():
            for address, broker_id in self.addresses.items():
                conn = BrokerConnection(address, config, client_id="audit-required-test")
                try:
                    conn.open(time.monotonic() + 5)
                    port = conn._sock.getsockname()[1]
                    with self.lock:
                        self.logins.append((broker_id, port, time.monotonic()))
                except AdminError as exc:
                    with self.lock:
                        self.login_errors[exc.error.name] += 1
                except ConnectionLost as exc:
                    with self.lock:
                        self.login_errors[f"lost: {exc.reason}"] += 1
                finally:
                    conn.close()
                time.sleep(0.02)

    def _kafka_python(self) -> None:
        while not self.stop.is_set():
            try:
                client = KafkaAdminClient(
                    bootstrap_servers=self.cluster.info["bootstrap_servers"].split(","),
                    security_protocol="SASL_PLAINTEXT", sasl_mechanism="SCRAM-SHA-512",
                    sasl_plain_username=KP_LOADER, sasl_plain_password=KP_LOADER_PW)
                try:
                    client.describe_cluster()
                finally:
                    client.close()
                with self.lock:
                    self.kp_ok.append(time.monotonic())
            except Exception:  # noqa: BLE001 - kafka-python raises several kinds
                with self.lock:
                    self.kp_failed.append(time.monotonic())
            time.sleep(0.05)

    def _creates(self) -> None:
        admins = [_admin(self.cluster, address, timeout_s=3) for address in self.addresses]
        try:
            n = 0
            while not self.stop.is_set():
                admin = admins[n % len(admins)]
                n += 1
                try:
                    token = admin.create_token()
                    with self.lock:
                        self.created.append((token.token_id, time.monotonic()))
                except AdminError as exc:
                    with self.lock:
                        self.create_errors[exc.error.name] += 1
                time.sleep(0.02)
        finally:
            for admin in admins:
                admin.close()

    def counts(self) -> tuple[int, int, int]:
        with self.lock:
            return len(self.logins), len(self.created), len(self.kp_ok)

    def failures(self) -> int:
        with self.lock:
            return sum(self.login_errors.values()) + sum(self.create_errors.values())


def _all_metric(cluster: LocalCluster, name: str) -> list[float]:
    return [broker_metric(cluster, b, name) for b in cluster.broker_ids()]


def _log_count(cluster: LocalCluster, text: str) -> list[int]:
    return [Path(cluster.broker_info(b)["log"]).read_text().count(text)
            for b in cluster.broker_ids()]


def test_required_audit_refuses_while_the_disk_is_full_and_resumes_by_itself(
        tmp_path: Path, small_disk: Path) -> None:
    cluster = _cluster(tmp_path, small_disk, **{"audit.required": "true",
                                                "audit.required.reserve.bytes": "131072"})
    with cluster:
        assert _all_metric(cluster, "tokensvc_audit_writable") == [1.0, 1.0]
        logged_in = _admin(cluster, timeout_s=2)  # its connection logs in before the fill
        logged_in.describe_cluster()
        with Load(cluster) as load:
            assert poll_until(lambda: min(load.counts()) >= 5, timeout=60), load.counts()
            filler = _fill(small_disk)
            # Full: each broker's next write fails, its reserve takes the events of what
            # was admitted, and from then on logins and creates are refused, retriably.
            assert poll_until(lambda: _all_metric(cluster, "tokensvc_audit_writable")
                              == [0.0, 0.0], timeout=60)
            assert poll_until(lambda: load.login_errors["REQUEST_TIMED_OUT"] >= 5
                              and load.create_errors["REQUEST_TIMED_OUT"] >= 2, timeout=60), (
                load.login_errors, load.create_errors)
            # A credential and an ACL change are refused the same way, before anything changes.
            with pytest.raises(AdminError) as refused:
                logged_in.upsert_user_scram_credential(REFUSED_USER, "SCRAM-SHA-512", "pw-x")
            assert refused.value.error == Errors.REQUEST_TIMED_OUT
            with pytest.raises(AdminError) as refused:
                logged_in.create_acls([REFUSED_ACL])
            assert refused.value.error == Errors.REQUEST_TIMED_OUT
            logged_in.close()
            before_free = load.counts()
            filler.unlink()
            # Room again: no restart, the brokers take requests once they hold their reserve.
            assert poll_until(lambda: _all_metric(cluster, "tokensvc_audit_writable")
                              == [1.0, 1.0], timeout=30)
            assert poll_until(lambda: all(a > b for a, b in zip(load.counts(), before_free)),
                              timeout=60), (before_free, load.counts())
        # Only the errors a retrying client waits out.
        assert set(load.login_errors) <= {"REQUEST_TIMED_OUT"}, load.login_errors
        assert set(load.create_errors) <= {"REQUEST_TIMED_OUT"}, load.create_errors
        assert min(_all_metric(cluster, "tokensvc_audit_refused")) > 0
        # The tokens that exist, as every broker describes them: the load created through
        # both brokers, and each create is read-your-writes only on the broker that
        # answered it (the other may not have followed the last ones yet).
        existing: set[str] = set()
        for address in _addresses(cluster):
            with _admin(cluster, address) as admin:
                existing |= {t.token_id for t in admin.describe_tokens()}
        with _admin(cluster) as admin:
            assert REFUSED_USER not in admin.describe_user_scram_credentials()
            assert admin.describe_acls(AclBindingFilter(ResourcePatternFilter(
                ResourceType.TOPIC, REFUSED_ACL.pattern.name))) == []
        logs_down = _log_count(cluster, "audit log cannot be written")
        logs_up = _log_count(cluster, "audit log writable again")
    print(f"\nanswered: {len(load.logins)} logins, {len(load.kp_ok)} kafka-python clients, "
          f"{len(load.created)} creates; refused: {dict(load.login_errors)} logins, "
          f"{dict(load.create_errors)} creates, kafka-python failed {len(load.kp_failed)}")
    events = _events(small_disk)
    ids = [e["event_id"] for e in events]
    assert len(ids) == len(set(ids)), "an event was written twice"
    created_events = {e["token_id"] for e in events
                      if e["type"] == "token" and e["action"] == "create"
                      and e["outcome"] == "success" and e["token_id"]}
    answered = {token_id for token_id, _ in load.created}
    assert answered <= existing
    assert not answered - created_events, "an answered create has no event"
    assert not existing - created_events, "a token exists without its create event"
    login_events = {(e["broker_id"], e["client_port"]) for e in events
                    if e["type"] == "authentication" and e["outcome"] == "success"
                    and e["username"] == LOADER}
    missing = [(b, p) for b, p, _ in load.logins if (b, p) not in login_events]
    assert not missing, f"{len(missing)} answered logins have no event"
    kp_events = sum(1 for e in events if e["type"] == "authentication"
                    and e["outcome"] == "success" and e["username"] == KP_LOADER)
    assert kp_events >= len(load.kp_ok) > 0
    assert logs_down == [1, 1] and logs_up == [1, 1], (logs_down, logs_up)


def _create_then_kill(cluster: LocalCluster, count: int, settle_s: float) -> set[str]:
    with _admin(cluster) as admin:
        answered = {admin.create_token().token_id for _ in range(count)}
    # The premise of the default mode's promise: the flush interval has passed.
    time.sleep(settle_s)
    for broker_id in cluster.broker_ids():
        cluster.kill_broker(broker_id)
    return answered


def _created_ids(directory: Path) -> set[str]:
    return {e["token_id"] for e in _events(directory)
            if e["type"] == "token" and e["action"] == "create" and e["outcome"] == "success"}


def test_kill_9_right_after_answered_creates_loses_none_of_their_events(
        tmp_path: Path) -> None:
    audit_dir = tmp_path / "audit"
    with _cluster(tmp_path, audit_dir, **{"audit.required": "true"}) as cluster:
        answered = _create_then_kill(cluster, 200, 0.0)
    assert len(answered) == 200
    assert not answered - _created_ids(audit_dir)


def test_default_mode_loses_no_event_answered_a_flush_interval_before_a_kill_9(
        tmp_path: Path) -> None:
    audit_dir = tmp_path / "audit"
    with _cluster(tmp_path, audit_dir) as cluster:
        answered = _create_then_kill(cluster, 200, 0.5)  # flush interval: 200 ms
    assert not answered - _created_ids(audit_dir)


def test_default_mode_keeps_serving_on_a_full_disk_and_counts_the_drops(
        tmp_path: Path, small_disk: Path) -> None:
    with _cluster(tmp_path, small_disk) as cluster:
        with Load(cluster) as load:
            assert poll_until(lambda: min(load.counts()) >= 3, timeout=60), load.counts()
            _fill(small_disk)
            assert poll_until(lambda: min(_all_metric(cluster, "tokensvc_audit_dropped")) > 0,
                              timeout=60)
            during = load.counts()
            assert poll_until(lambda: all(a >= b + 5 for a, b in
                                          zip(load.counts()[:2], during[:2])), timeout=60)
        assert load.failures() == 0, (load.login_errors, load.create_errors)
        # Logged per transition: more than once if a broker's small write fit meanwhile.
        assert min(_log_count(cluster, "audit log cannot be written")) >= 1
    for event in _events(small_disk):  # no torn line: every line parsed
        assert event["schema"] == 1
