"""Issue 52: the agent without a secret. ``kafka-delegation-token --agent
--oauthbearer-token-file F`` on a 3-broker cluster whose OAUTHBEARER issuer is a
Kubernetes-like one (``sasl.oauthbearer.jwks.endpoint.url=file:...``):

- the test plays the kubelet: it replaces the service-account token in F every 3 s
  (each JWT lives 8 s), >= 4 replacements while the agent renews its delegation token
  (lifetimes compressed: expiry 8 s) and logs in again with whatever F holds; the job's
  confluent-kafka client, on the tokens the agent writes, fails no request;
- no password anywhere: the agent's command config holds only ``security.protocol``;
- the identity removed from the mappings file: the agent's next login is refused and it
  exits with status 3 and a one-line reason naming the issuer and subject.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Self

import pytest
from confluent_kafka.admin import AdminClient as ConfluentAdmin

from tests.support.agent import AgentProcess
from tests.support.local_cluster import ClusterFactory
from tests.support.oidc import FileIssuer
from tokensvc.agent.clients import CredentialsWatcher, confluent_config, follow_confluent
from tokensvc.agent.runner import EXIT_REFUSED

JOB = "User:payments-etl"
JWT_LIFETIME_S, ROTATE_EVERY_S = 8, 3.0

MAPPING = """
[[mapping]]
name = "payments-etl"
issuer = "{issuer}"
subject = "system:serviceaccount:payments:etl"
principal = "User:payments-etl"
labels = {{ namespace = "payments", serviceaccount = "etl" }}
"""


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory, module_cluster_factory: ClusterFactory):
    directory = tmp_path_factory.mktemp("oauth-agent")
    k8s = FileIssuer(directory)
    mappings = directory / "mappings.toml"
    mappings.write_text(MAPPING.format(issuer=k8s.issuer))
    cluster = module_cluster_factory(brokers=3, overrides={
        "sasl.enabled.mechanisms": "SCRAM-SHA-512,OAUTHBEARER",
        "sasl.oauthbearer.jwks.endpoint.url": f"file:{k8s.jwks_file}",
        "sasl.oauthbearer.expected.issuer": k8s.issuer,
        "sasl.oauthbearer.expected.audience": k8s.audience,
        "sasl.oauthbearer.principal.mappings.file": str(mappings),
        "delegation.token.expiry.time.ms": "8000",
        "delegation.token.max.lifetime.ms": "30000",
        "delegation.token.expiry.check.interval.ms": "2000",
    })
    return {"cluster": cluster, "k8s": k8s, "mappings": mappings, "dir": directory}


class Kubelet:
    """Replaces the projected token file (atomically, as the kubelet does) on a timer."""

    def __init__(self, k8s: FileIssuer, path: Path) -> None:
        self.k8s, self.path = k8s, path
        self.written = 0
        self.stop = threading.Event()
        self.write()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def write(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(self.k8s.service_account_token("payments", "etl",
                                                      lifetime_s=JWT_LIFETIME_S))
        tmp.replace(self.path)
        self.written += 1

    def _run(self) -> None:
        while not self.stop.wait(ROTATE_EVERY_S):
            self.write()

    def __enter__(self) -> Self:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(10)


def _agent_jtis(cluster) -> set[str]:
    """The jti of every JWT the agent logged in with (successful OAUTHBEARER logins)."""
    jtis = set()
    for path in Path(cluster.info["audit_dir"]).glob("*.jsonl"):
        for line in path.read_text().splitlines():
            event = json.loads(line)
            if (event.get("type") == "authentication" and event.get("kind") == "oauth"
                    and event.get("outcome") == "success"
                    and event.get("principal") == JOB):
                jtis.add(event["oauth"]["jti"])
    return jtis


def test_agent_runs_on_a_rotating_token_file_and_stops_when_its_identity_is_unmapped(world):
    cluster, k8s, directory = world["cluster"], world["k8s"], world["dir"]
    token_file = directory / "token"
    command_config = directory / "client.properties"
    command_config.write_text("security.protocol=SASL_PLAINTEXT\n")
    with Kubelet(k8s, token_file) as kubelet:
        agent = AgentProcess(cluster, directory, "--oauthbearer-token-file", str(token_file),
                             "--renew-fraction", "0.5", owner=JOB,
                             command_config=str(command_config))
        agent.start()
        try:
            agent.wait_published()
            watcher = CredentialsWatcher(agent.creds, poll_interval_s=0.2).start()
            job = ConfluentAdmin({"bootstrap.servers": cluster.info["bootstrap_servers"],
                                  "client.id": "oauth-agent-job",
                                  **confluent_config(watcher.current)})
            follow_confluent(job, watcher)
            requests, failures = 0, []
            written_at_start = kubelet.written
            deadline = time.monotonic() + 40
            while time.monotonic() < deadline and (kubelet.written - written_at_start < 4
                                                   or len(_agent_jtis(cluster)) < 4):
                try:
                    job.list_topics(timeout=10)
                    requests += 1
                except Exception as exc:  # noqa: BLE001 - any failure of the job counts
                    failures.append(repr(exc))
                time.sleep(1.0)
            watcher.close()
            assert failures == []
            assert kubelet.written - written_at_start >= 4
            jtis = _agent_jtis(cluster)
            assert len(jtis) >= 4, jtis  # the agent logged in with >= 4 different JWTs
            assert requests >= 8
            print(f"oauth agent: {requests} job requests, {len(jtis)} JWTs used, "
                  f"{kubelet.written} token files written")
            for secretless in (command_config.read_text(), " ".join(agent.args)):
                assert "password" not in secretless and "secret" not in secretless
            assert agent.process.poll() is None, agent.log_text()[-2000:]

            world["mappings"].write_text("# the payments-etl mapping was removed\n")
            code = agent.process.wait(timeout=60)
        finally:
            if agent.process.poll() is None:
                agent.terminate()
    assert code == EXIT_REFUSED, agent.log_text()[-2000:]
    last = agent.log_text().strip().splitlines()[-1]
    assert "no principal mapping matches" in last
    assert k8s.issuer in last and "system:serviceaccount:payments:etl" in last
