"""A rolling restart (``tokensvc cluster roll``) of 3 real brokers under client load, short
form: every broker restarted once, the controller last, each waited for until it serves a
token created after it was stopped.

The load is what a job sees: the token agent keeps a token (renewing every few seconds,
replacing it near its max lifetime) and the job's clients use it with their default
settings (retries included) -- confluent-kafka and kafka-python, each as one long-lived
client asking for metadata every 100 ms and as a new client per request (a login each);
and, with retries off, a new client of each per login bound to one broker in turn, with no
retry and no failover (its failures are the logins aimed at a stopped broker).
The test reports, per client, the requests and logins that failed during the roll and the
longest time without a success, and asserts what the procedure promises: it completes,
the controller goes last, every broker comes back from its token cache snapshot, every
client is served again without a restart of its own after gaps under 10 s with at most
one failed request per broker restarted (a request in flight on a connection to the
stopping broker: kafka-python's admin client does not send it again; 0-3 measured), and
the agent never failed or lost its token.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from itertools import pairwise
from pathlib import Path

import pytest
from click.testing import CliRunner
from confluent_kafka.admin import AdminClient as ConfluentAdmin
from kafka import KafkaAdminClient

from cli.cluster_cmd import cluster as cluster_cli
from tests.support.agent import AgentProcess
from tests.support.local_cluster import broker_metric
from tokensvc.admin import AdminClient
from tokensvc.agent.clients import (
    CredentialsWatcher,
    confluent_config,
    follow_confluent,
    follow_kafka_python,
    kafka_python_config,
)
from tokensvc.client_config import load_client_config
from tokensvc.cluster import LocalCluster
from tokensvc.cluster import down as cluster_down
from tokensvc.roll import roll_order

EXPIRY_MS, MAX_MS = 20_000, 60_000
SEEDED_TOKENS = 300


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    overrides = {"delegation.token.expiry.time.ms": str(EXPIRY_MS),
                 "delegation.token.max.lifetime.ms": str(MAX_MS)}
    c = LocalCluster.up(tmp_path / "cluster", brokers=3, overrides=overrides,
                        die_with_parent=True)
    try:
        yield c
    finally:
        cluster_down(c.directory)  # the brokers the roll started (their pids: cluster.json)
        c.down()


class Client:
    """One client's outcomes: (monotonic time, ok) per attempt, in one thread."""

    def __init__(self, name: str, attempt: Callable[[], None], pause: float) -> None:
        self.name = name
        self.attempt = attempt
        self.pause = pause
        self.outcomes: list[tuple[float, bool]] = []
        self.failed_from: list[float] = []  # when each failed attempt began
        self.errors: list[str] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True, name=name)

    def _run(self) -> None:
        while not self.stop.is_set():
            began = time.monotonic()
            try:
                self.attempt()
                ok = True
            except Exception as exc:  # noqa: BLE001 - each client raises its own kinds
                ok = False
                self.failed_from.append(began)
                self.errors.append(f"{type(exc).__name__}: {exc}"[:200])
            self.outcomes.append((time.monotonic(), ok))
            self.stop.wait(self.pause)

    def window(self, start: float, end: float) -> dict:
        inside = [(t, ok) for t, ok in self.outcomes if start <= t <= end]
        successes = [start] + [t for t, ok in inside if ok] + [end]
        return {
            "attempts": len(inside),
            "failed": sum(1 for _, ok in inside if not ok),
            "longest_gap_s": round(max(b - a for a, b in pairwise(successes)), 2),
        }


def _confluent_request(admin: ConfluentAdmin) -> None:
    admin.list_topics(timeout=10)


def _new_confluent(bootstrap: str, watcher: CredentialsWatcher) -> None:
    admin = ConfluentAdmin({"bootstrap.servers": bootstrap, "client.id": "roll-login",
                            **confluent_config(watcher.current)})
    admin.list_topics(timeout=10)


def _new_kafka_python(bootstrap: str, watcher: CredentialsWatcher) -> None:
    client = KafkaAdminClient(bootstrap_servers=bootstrap.split(","), client_id="roll-login",
                              **kafka_python_config(watcher.current))
    try:
        client.describe_cluster()
    finally:
        client.close()


class RoundRobin:
    """A client bound to one broker per request, the next broker each time, with no retry
    and no failover: what a job sees with retries off."""

    def __init__(self, bootstrap: str) -> None:
        self.brokers = bootstrap.split(",")
        self.turn = 0

    def next(self) -> str:
        self.turn += 1
        return self.brokers[self.turn % len(self.brokers)]


def _confluent_no_retries(brokers: RoundRobin, watcher: CredentialsWatcher) -> None:
    admin = ConfluentAdmin({"bootstrap.servers": brokers.next(), "client.id": "roll-no-retry",
                            "retries": 0, "reconnect.backoff.ms": 1000,
                            **confluent_config(watcher.current)})
    admin.list_topics(timeout=2)


def _kafka_python_no_retries(brokers: RoundRobin, watcher: CredentialsWatcher) -> None:
    client = KafkaAdminClient(bootstrap_servers=[brokers.next()], client_id="roll-no-retry",
                              request_timeout_ms=2000,
                              **kafka_python_config(watcher.current))
    try:
        client.describe_cluster()
    finally:
        client.close()


def _agent_failures(agent: AgentProcess) -> float:
    url = f"http://127.0.0.1:{agent.metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=5) as page:
        return sum(float(line.split()[-1]) for line in page.read().decode().splitlines()
                   if line.startswith("tokensvc_agent_failures_total"))


def test_rolling_restart_under_client_load(cluster: LocalCluster, tmp_path: Path) -> None:
    bootstrap = cluster.info["bootstrap_servers"]
    admin_config = load_client_config(cluster.info["admin"]["properties"])
    with AdminClient(bootstrap, admin_config, timeout_s=30) as admin:
        for _ in range(SEEDED_TOKENS):
            admin.create_token()
        controller_before = admin.describe_cluster().controller_id
    agent_dir = tmp_path / "agent"
    agent_dir.mkdir()
    agent = AgentProcess(cluster, agent_dir, "--renew-fraction", "0.25", metrics=True).start()
    watcher = None
    clients: list[Client] = []
    try:
        agent.wait_published()
        watcher = CredentialsWatcher(str(agent.creds)).start()
        confluent = ConfluentAdmin({"bootstrap.servers": bootstrap, "client.id": "roll-steady",
                                    **confluent_config(watcher.current)})
        follow_confluent(confluent, watcher)
        kafka_python = KafkaAdminClient(bootstrap_servers=bootstrap.split(","),
                                        client_id="roll-steady",
                                        **kafka_python_config(watcher.current))
        follow_kafka_python(kafka_python, watcher)
        clients = [
            Client("confluent-kafka requests", lambda: _confluent_request(confluent), 0.1),
            Client("confluent-kafka logins", lambda: _new_confluent(bootstrap, watcher), 0.2),
            Client("kafka-python requests", kafka_python.describe_cluster, 0.1),
            Client("kafka-python logins", lambda: _new_kafka_python(bootstrap, watcher), 0.2),
        ]
        turns = RoundRobin(bootstrap), RoundRobin(bootstrap)
        no_retries = [
            Client("confluent-kafka logins, retries off",
                   lambda: _confluent_no_retries(turns[0], watcher), 0.2),
            Client("kafka-python logins, retries off",
                   lambda: _kafka_python_no_retries(turns[1], watcher), 0.2),
        ]
        clients += no_retries
        for c in clients:
            c.thread.start()
        agent_failures_before = _agent_failures(agent)
        renewals_before = agent.metric("tokensvc_agent_renewals_total")
        time.sleep(2)  # a baseline before the roll (each client succeeds in it)
        started = time.monotonic()
        result = CliRunner().invoke(cluster_cli, ["roll", "--dir", str(cluster.directory),
                                                  "--timeout", "120"])
        ended = time.monotonic()
        assert result.exit_code == 0, result.output
        # Each client's first answer after the last restart (a request in flight across
        # it may wait out its own timeout first): a bound, not a fixed pause.
        settle = time.monotonic() + 30
        while time.monotonic() < settle and not all(
                any(ok for t, ok in c.outcomes if t > ended) for c in clients):
            time.sleep(0.1)
        agent_failures = _agent_failures(agent) - agent_failures_before
        renewals = agent.metric("tokensvc_agent_renewals_total") - renewals_before
        agent_up = agent.metric("tokensvc_agent_up")
    finally:
        for c in clients:
            c.stop.set()
        for c in clients:
            c.thread.join(30)
        if watcher is not None:
            watcher.close()
        agent.terminate()
    report = {c.name: c.window(started, ended) for c in clients}
    report["agent"] = {"failed": int(agent_failures), "renewals": int(renewals)}
    report["roll"] = {"seconds": round(ended - started, 1), "output": result.output.splitlines()}
    print("\nrolling restart:", json.dumps(report, indent=2))
    (tmp_path / "roll-report.json").write_text(json.dumps(report, indent=2))

    summary = [line for line in result.output.splitlines()
               if "answering after" in line and "caught up after" in line]
    assert len(summary) == 3
    assert summary[-1].startswith(f"broker {controller_before} (was controller)")
    order = ", ".join(map(str, roll_order(cluster.broker_ids(), controller_before)))
    assert f"order: {order}" in result.output
    for c in no_retries:
        # With retries off a login aimed at the broker being restarted fails: at most the
        # attempts that fell in the roll, and the client is served again after it.
        assert any(ok for t, ok in c.outcomes if t > ended), (c.name, c.errors[-3:])
        # Every failed attempt began before the roll ended: only a login that met a
        # restart fails. (Not "some attempt in the roll succeeded": a slow client -
        # kafka-python takes seconds per start on a loaded machine - may make one attempt
        # in the roll, aimed at the broker then restarting; a CI run saw that.)
        late = [round(b - ended, 2) for b in c.failed_from if b > ended]
        assert not late, (c.name, late, c.errors[-3:])
        window = report[c.name]
        assert window["failed"] <= window["attempts"], (c.name, window)
    for c in clients:
        if c in no_retries:
            continue
        # Served again after the roll without a restart of its own, never left waiting
        # long, and at most one request per restart cut by a stop (a request in flight on
        # the stopping broker's connection; a busy machine's run saw one per restart).
        assert any(ok for t, ok in c.outcomes if t > ended), (c.name, c.errors[-3:])
        assert report[c.name]["longest_gap_s"] < 10, (c.name, report[c.name])
        restarts = len(summary)
        assert report[c.name]["failed"] <= restarts, (c.name, report[c.name], c.errors[-3:])
    assert agent_failures == 0 and agent_up == 1.0 and renewals >= 1
    # Each broker came back from its snapshot (caught up from ZooKeeper), not a full load.
    for broker_id in cluster.broker_ids():
        assert broker_metric(cluster, broker_id,
                             'tokensvc_cache_snapshot_loads_total{result="loaded"}') == 1.0

