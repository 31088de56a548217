"""``kafka-delegation-token --agent`` against a real 3-broker cluster with compressed token
lifetimes (expiry 20 s, max lifetime 60 s: a week in a minute), as a subprocess:

- three minutes of an agent with four running clients (confluent-kafka through
  ``set_sasl_credentials``, aiokafka, kafka-python, tokensvc's AdminClient), each asking the
  cluster every second: every request answered (a request that meets the close of a retired
  token's session is sent again once, on the client's new connection: a reconnect), each client on >= 3 tokens, >= 3
  replacements and >= 6 renewals, one live token at the end and none after SIGTERM, and a
  reader that parses the credentials file all along never sees a partial file;
- kill -9 of the agent five times, once between a create and the file write: after each
  restart the job holds one live token;
- kill -9 of the controller just before a renewal: the renewal completes on the new
  controller before the token expires;
- bad input: one line naming the cause, a non-zero exit, no token left behind;
- ``--once`` for cron.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import threading
import time
from collections import defaultdict
from pathlib import Path

import pytest
from aiokafka.client import AIOKafkaClient
from confluent_kafka.admin import AdminClient as ConfluentAdmin
from kafka import KafkaAdminClient

from tests.support.agent import JOB, OVERLAP_MS, AgentProcess
from tests.support.local_cluster import admin_client
from tests.support.wait import wait_for
from tokensvc.admin import AdminClient
from tokensvc.agent.clients import (
    CredentialsWatcher,
    aiokafka_config,
    confluent_config,
    follow_admin,
    follow_aiokafka,
    follow_confluent,
    follow_kafka_python,
    kafka_python_config,
)
from tokensvc.agent.credentials import CredentialsError, parse
from tokensvc.client_config import client_config_from_properties
from tokensvc.cluster import LocalCluster
from tokensvc.jvm import free_port

EXPIRY_MS, MAX_MS = 20_000, 60_000


pytestmark = [pytest.mark.heavy(minutes=4), pytest.mark.cluster(brokers=3, overrides={
    "delegation.token.expiry.time.ms": str(EXPIRY_MS),
    "delegation.token.max.lifetime.ms": str(MAX_MS),
    "delegation.token.expiry.check.interval.ms": "2000",
    "zookeeper.session.timeout.ms": "4000",
}, users=[("mallory", "SCRAM-SHA-512", "mallory-pw")])]


def _admin(cluster: LocalCluster) -> AdminClient:
    return admin_client(cluster, timeout_s=15)


def _live_tokens(cluster: LocalCluster, owner: str) -> list[str]:
    with _admin(cluster) as admin:
        now = time.time() * 1000
        return sorted(t.token_id for t in admin.describe_tokens(owners=[owner])
                      if t.expiry_ms > now)


def _wait_no_live_tokens(cluster: LocalCluster, owner: str) -> None:
    """Wait, bounded, until the broker a describe reaches shows no live token of ``owner``.

    The agent expired them through the broker its own client reached, which need not be
    that one: read-your-writes holds only on the answering broker, the others follow
    within zookeeper.max.staleness.ms.
    """
    wait_for(lambda: _live_tokens(cluster, owner) == [], 5, f"no live token of {owner}")


# --- the four clients ------------------------------------------------------------------


class Clients:
    """Four clients of four libraries, each asking the cluster once a second."""

    def __init__(self, cluster: LocalCluster, watcher: CredentialsWatcher) -> None:
        bootstrap = cluster.info["bootstrap_servers"]
        creds = watcher.current
        self.requests: dict[str, int] = defaultdict(int)
        self.failures: dict[str, list[str]] = defaultdict(list)
        self.reconnects: dict[str, list[str]] = defaultdict(list)
        self.stop = threading.Event()
        self.confluent = ConfluentAdmin({"bootstrap.servers": bootstrap,
                                         "client.id": "agent-test-confluent",
                                         **confluent_config(creds)})
        follow_confluent(self.confluent, watcher)
        self.kafka_python = KafkaAdminClient(bootstrap_servers=bootstrap.split(","),
                                             client_id="agent-test-kafka-python",
                                             **kafka_python_config(creds))
        follow_kafka_python(self.kafka_python, watcher)
        props = {"security.protocol": creds.security_protocol,
                 "sasl.mechanism": creds.sasl_mechanism,
                 "sasl.jaas.config": creds.jaas_config}
        self.admin = AdminClient(bootstrap, client_config_from_properties(props), timeout_s=10,
                                 client_id="agent-test-tokensvc")
        follow_admin(self.admin, watcher)
        self.loop = asyncio.new_event_loop()

        async def start() -> AIOKafkaClient:
            client = AIOKafkaClient(bootstrap_servers=bootstrap, client_id="agent-test-aiokafka",
                                    **aiokafka_config(creds))
            await client.bootstrap()
            return client

        self.aiokafka = self.loop.run_until_complete(start())
        follow_aiokafka(self.aiokafka, watcher)
        self.threads = [threading.Thread(target=self._every_second, args=(name, ask), daemon=True)
                        for name, ask in (
                            ("confluent-kafka", lambda: self.confluent.list_topics(timeout=10)),
                            ("kafka-python", self.kafka_python.describe_cluster),
                            ("tokensvc", self.admin.describe_cluster),
                            ("aiokafka", lambda: self.loop.run_until_complete(
                                self.aiokafka.fetch_all_metadata())))]

    def _every_second(self, name: str, ask) -> None:
        while not self.stop.wait(1.0):
            try:
                ask()
                self.requests[name] += 1
                continue
            except Exception as exc:  # noqa: BLE001 - every client raises its own kinds
                # The broker closed the retired token's session under the request: the
                # request is sent again, the client reconnecting (with the new token).
                self.reconnects[name].append(f"{time.strftime('%X')} {exc!r}")
            try:
                ask()
                self.requests[name] += 1
            except Exception as exc:  # noqa: BLE001
                self.failures[name].append(f"{time.strftime('%X')} {exc!r}")

    def start(self) -> None:
        for thread in self.threads:
            thread.start()

    def close(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=15)
        self.kafka_python.close()
        self.admin.close()
        self.loop.run_until_complete(self.aiokafka.close())
        self.loop.close()
        # confluent-kafka's admin client has no close: it stops when its last reference
        # goes (the watcher lets go of its listener when closed). Kept, it would retry the
        # module's stopped brokers for the rest of the run.
        self.confluent = None


def _tokens_used_by_client(cluster: LocalCluster) -> dict[str, set[str]]:
    """client id -> token ids it logged in with, from every broker's audit log."""
    used: dict[str, set[str]] = defaultdict(set)
    for path in Path(cluster.info["audit_dir"]).rglob("*.jsonl"):
        for line in path.read_text().splitlines():
            event = json.loads(line)
            if (event.get("type") == "authentication" and event.get("outcome") == "success"
                    and event.get("token_id") and event.get("client_id")):
                used[event["client_id"]].add(event["token_id"])
    return used


def test_three_minutes_of_an_agent_with_four_running_clients(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    agent = AgentProcess(cluster, tmp_path, metrics=True).start()
    try:
        agent.wait_published()
        bad_reads: list[str] = []
        reads = 0
        stop_reader = threading.Event()

        def reader() -> None:
            nonlocal reads
            while not stop_reader.is_set():
                try:
                    parse(agent.creds.read_bytes())
                    reads += 1
                except (OSError, CredentialsError) as exc:
                    bad_reads.append(repr(exc))
                time.sleep(0.005)

        reading = threading.Thread(target=reader, daemon=True)
        reading.start()
        watcher = CredentialsWatcher(agent.creds, poll_interval_s=0.2).start()
        clients = Clients(cluster, watcher)
        clients.start()
        time.sleep(185)
        clients.close()
        watcher.close()
        stop_reader.set()
        reading.join()

        assert dict(clients.failures) == {}, (clients.failures, clients.reconnects)
        print("requests", dict(clients.requests), "reconnects", dict(clients.reconnects))
        assert all(clients.requests[name] >= 170 for name in
                   ("confluent-kafka", "kafka-python", "tokensvc", "aiokafka")), clients.requests
        assert bad_reads == [] and reads > 1000
        assert agent.metric("tokensvc_agent_replacements_total") >= 3
        assert agent.metric("tokensvc_agent_renewals_total") >= 6
        used = _tokens_used_by_client(cluster)
        for client_id in ("agent-test-confluent", "agent-test-kafka-python",
                          "agent-test-tokensvc", "agent-test-aiokafka"):
            assert len(used[client_id]) >= 3, (client_id, used[client_id])
        # One live token of the job at the end (the last overlap may still be running).
        current = parse(agent.creds.read_bytes()).token_id
        wait_for(lambda: _live_tokens(cluster, JOB) == [current], OVERLAP_MS / 1000 + 10,
                 "exactly one live token of the job")
    finally:
        code = agent.terminate()
    assert code == 0, agent.log_text()[-2000:]
    _wait_no_live_tokens(cluster, JOB)
    assert not agent.state.exists()


def test_kill_9_five_times_never_leaves_a_second_live_token(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    owner = "User:killed-job"
    rng = random.Random(7)
    seen_tokens: set[str] = set()
    for round_ in range(5):
        agent = AgentProcess(cluster, tmp_path, owner=owner)
        if round_ == 0:
            # Between the create and the file write: a broker that does not answer holds
            # the agent in "wait until every broker serves it" after its create.
            with _admin(cluster) as admin:
                controller = admin.describe_cluster().controller_id
            victim = next(b for b in cluster.broker_ids() if b != controller)
            os.kill(cluster.broker_pid(victim), signal.SIGSTOP)
            try:
                agent.creds.unlink(missing_ok=True)
                agent.start()
                wait_for(lambda a=agent: "created token" in a.log_text(), 30, "a create")
                agent.kill()
                assert not agent.creds.exists(), "the file was written before every broker served"
            finally:
                os.kill(cluster.broker_pid(victim), signal.SIGCONT)
        else:
            agent.start()
            time.sleep(rng.uniform(0.3, 8.0))
            agent.kill()
        if agent.creds.exists():
            parse(agent.creds.read_bytes())  # whole, never partial
        # The restarted agent resumes: the job holds exactly its current token.
        agent.start()
        agent.wait_published() if round_ == 0 else wait_for(
            lambda a=agent: a.creds.exists(), 30, "a credentials file")

        def settled(a: AgentProcess = agent) -> bool:
            state = json.loads(a.state.read_text()) if a.state.exists() else {}
            current = (state.get("current") or {}).get("token_id")
            return (current is not None and not state.get("unpublished")
                    and not state.get("retiring")
                    and _live_tokens(cluster, owner) == [current]
                    and parse(a.creds.read_bytes()).token_id == current)

        wait_for(settled, 30, f"round {round_}: one live token, the one in the file")
        seen_tokens.add(parse(agent.creds.read_bytes()).token_id)
        agent.kill()
    agent = AgentProcess(cluster, tmp_path, owner=owner)
    before = len(agent.log_text())
    agent.start()
    wait_for(lambda: "resumed" in agent.log_text()[before:], 30, "resumed")
    assert agent.terminate() == 0
    _wait_no_live_tokens(cluster, owner)


def test_controller_killed_during_a_renewal_the_renewal_completes_before_expiry(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    owner = "User:failover-job"
    # Renew at half the 20 s period (+-1 s of jitter), not at 0.75: the kill comes 0.5 s
    # before the renewal, and a failover takes the 4 s ZooKeeper session timeout plus the
    # election; at 0.75 the late side of the jitter left 4.5 s to do it in, and a loaded CI
    # machine once missed it.
    agent = AgentProcess(cluster, tmp_path, "--renew-fraction", "0.5", owner=owner,
                          metrics=True).start()
    try:
        agent.wait_published()
        state = json.loads(agent.state.read_text())
        renew_at = state["current"]["renew_at_ms"] / 1000
        expiry = state["current"]["expiry_ms"] / 1000
        time.sleep(max(renew_at - time.time() - 0.5, 0))
        with _admin(cluster) as admin:
            controller = admin.describe_cluster().controller_id
        cluster.kill_broker(controller)
        try:
            wait_for(lambda: agent.metric("tokensvc_agent_renewals_total") >= 1,
                     expiry - time.time(), "the renewal before the token's expiry")
            renewed = json.loads(agent.state.read_text())["current"]
            assert renewed["expiry_ms"] > state["current"]["expiry_ms"]
            assert time.time() < expiry
        finally:
            cluster.start_broker(controller)
        assert agent.metric("tokensvc_agent_up") == 1
    finally:
        assert agent.terminate() == 0
    _wait_no_live_tokens(cluster, owner)


def test_once_creates_then_reuses_the_token_for_cron(cluster: LocalCluster, tmp_path: Path) -> None:
    owner = "User:cron-job"
    first = AgentProcess(cluster, tmp_path, "--once", owner=owner).run()
    assert first.returncode == 0, first.stderr
    token = parse((tmp_path / "job.properties").read_bytes()).token_id
    second = AgentProcess(cluster, tmp_path, "--once", owner=owner).run()
    assert second.returncode == 0, second.stderr
    assert parse((tmp_path / "job.properties").read_bytes()).token_id == token
    assert _live_tokens(cluster, owner) == [token]
    with _admin(cluster) as admin:
        for t in admin.describe_tokens(owners=[owner]):
            admin.expire_token(t.hmac)


def _properties(path: Path, user: str, password: str) -> str:
    path.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-512\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="{user}" password="{password}";\n')
    return str(path)


@pytest.mark.parametrize("case", [
    "unreachable", "wrong_password", "owner_not_allowed", "unwritable_directory",
    "max_lifetime_shorter_than_overlap", "cluster_max_lifetime_shorter_than_overlap",
])
def test_bad_input_is_one_line_a_non_zero_exit_and_no_token(
    cluster: LocalCluster, tmp_path: Path, case: str
) -> None:
    owner = f"User:bad-{case.replace('_', '-')}"
    kwargs: dict = {"owner": owner}
    extra: list[str] = []
    expected = {
        "unreachable": (4, "could not create a token"),
        "wrong_password": (3, "Authentication failed"),
        "owner_not_allowed": (3, "create a token"),
        "unwritable_directory": (1, "cannot write"),
        "max_lifetime_shorter_than_overlap": (2, "not longer than --overlap-ms"),
        "cluster_max_lifetime_shorter_than_overlap": (6, "not longer than the overlap"),
    }[case]
    if case == "unreachable":
        kwargs["bootstrap"] = f"127.0.0.1:{free_port()}"
    elif case == "wrong_password":
        kwargs["command_config"] = _properties(tmp_path / "bad.properties", "admin", "wrong")
    elif case == "owner_not_allowed":
        kwargs["command_config"] = _properties(tmp_path / "m.properties", "mallory",
                                               "mallory-pw")
    elif case == "max_lifetime_shorter_than_overlap":
        extra = ["--max-life-time-period", "4000"]
    agent = AgentProcess(cluster, tmp_path, *extra, **kwargs)
    if case == "unwritable_directory":
        # Refused even for root: sysfs takes no new files.
        agent.args[agent.args.index(str(agent.creds))] = "/sys/kernel/job.properties"
    if case == "cluster_max_lifetime_shorter_than_overlap":
        agent.args[agent.args.index("--overlap-ms") + 1] = str(MAX_MS + 1_000)
    result = agent.run()
    lines = result.stderr.strip().splitlines()
    assert result.returncode == expected[0], result.stderr
    assert expected[1] in lines[-1], result.stderr
    assert "Traceback" not in result.stderr
    # The cluster's-max-lifetime case creates a token, then expires it before it exits.
    _wait_no_live_tokens(cluster, owner)
    assert not (tmp_path / "job.properties").exists()
