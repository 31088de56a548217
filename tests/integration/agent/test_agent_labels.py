"""The token agent labels what it makes, on a real 3-broker cluster with compressed token
lifetimes (expiry 8 s, max lifetime 16 s: a replacement every dozen seconds):

- started with ``--label job=etl-nightly --label team=payments`` and a JSON credentials
  file, over at least 3 replacements and a kill -9 (restarted without ``--label
  team=payments``: the successor keeps its predecessor's labels), every token the agent
  created carries the labels and the host label ``agent/host``, as the brokers describe
  them and as their create events in the audit log record them; the credentials file's
  JSON has the labels of the token it holds;
- a label that breaks a rule stops the agent before any token exists.
"""

from __future__ import annotations

import json
import re
import socket
import time
from pathlib import Path

import pytest

from tests.support.agent import JOB, AgentProcess
from tests.support.local_cluster import ClusterFactory
from tests.support.wait import wait_for
from tokensvc.admin import AdminClient
from tokensvc.agent.credentials import parse
from tokensvc.client_config import load_client_config
from tokensvc.cluster import LocalCluster

EXPIRY_MS, MAX_MS = 8_000, 16_000
CREATED = re.compile(r"created token (\S+) ")


@pytest.fixture(scope="module")
def cluster(module_cluster_factory: ClusterFactory) -> LocalCluster:
    return module_cluster_factory(brokers=3, overrides={
        "delegation.token.expiry.time.ms": str(EXPIRY_MS),
        "delegation.token.max.lifetime.ms": str(MAX_MS),
        "delegation.token.expiry.check.interval.ms": "2000",
    })


def _created(agent: AgentProcess) -> list[str]:
    return CREATED.findall(agent.log_text())


def _audited_labels(cluster: LocalCluster) -> dict[str, dict]:
    found = {}
    for path in Path(cluster.info["audit_dir"]).rglob("*.jsonl"):
        for line in path.read_text().splitlines():
            event = json.loads(line)
            if (event.get("type") == "token" and event.get("action") == "create"
                    and event.get("outcome") == "success" and event.get("token_id")):
                found[event["token_id"]] = event.get("labels")
    return found


def _described_labels(cluster: LocalCluster) -> dict[str, dict]:
    with AdminClient(cluster.info["bootstrap_servers"],
                     load_client_config(cluster.info["admin"]["properties"]),
                     timeout_s=15) as admin:
        return {t.token_id: dict(t.labels) for t in admin.describe_tokens(owners=[JOB])}


def test_every_token_the_agent_makes_carries_its_labels_over_three_replacements(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    wanted = {"job": "etl-nightly", "team": "payments", "agent/host": socket.gethostname()}
    args = ("--format", "json", "--overlap-ms", "2000", "--margin-ms", "1000")
    first = AgentProcess(cluster, tmp_path, *args, "--label", "job=etl-nightly",
                         "--label", "team=payments").start()
    described: dict[str, dict] = {}
    try:
        first.wait_published()
        creds = parse(first.creds.read_bytes())
        assert dict(creds.labels) == wanted
        assert json.loads(first.creds.read_text())["labels"] == wanted

        def seen_replacements(agent: AgentProcess, count: int) -> bool:
            described.update(_described_labels(cluster))
            return len(_created(agent)) >= count

        wait_for(lambda: seen_replacements(first, 3), 60, "two replacements")
        first.kill()
    finally:
        if first.process is not None and first.process.poll() is None:
            first.kill()
    # Restarted without team=payments: its successors still carry it (the predecessor's).
    second = AgentProcess(cluster, tmp_path, *args, "--label", "job=etl-nightly")
    second.log = tmp_path / "agent-2.log"
    second.start()
    try:
        wait_for(lambda: seen_replacements(second, 2), 60, "two more replacements")
        creds = parse(second.creds.read_bytes())
        assert dict(creds.labels) == wanted
        assert second.terminate() == 0
    finally:
        if second.process is not None and second.process.poll() is None:
            second.kill()
    made = _created(first) + _created(second)
    assert len(set(made)) >= 5  # the first token and at least 4 replacements
    assert {t: described[t] for t in made if t in described} == {
        t: wanted for t in made if t in described}
    assert len([t for t in made if t in described]) >= 3

    def audited() -> bool:
        labels = _audited_labels(cluster)
        return all(t in labels for t in made)

    wait_for(audited, 10, "every create audited")
    labels = _audited_labels(cluster)
    assert {t: labels[t] for t in made} == {t: wanted for t in made}


def test_a_bad_label_stops_the_agent_before_any_token_exists(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    before = _described_labels(cluster)
    started = time.monotonic()
    result = AgentProcess(cluster, tmp_path, "--label", "Job=x").run()
    assert result.returncode == 2
    assert "'Job' is not 1-63 characters" in result.stderr
    assert time.monotonic() - started < 30
    assert _described_labels(cluster).keys() <= before.keys()
