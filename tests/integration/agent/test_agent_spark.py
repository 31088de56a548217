"""The Spark recipe of docs/agent.md on a real standalone cluster (master and worker from
the pyspark package, on loopback): one token agent on the host as a sidecar writes its
credentials file; every task of a job reads it on its executor, logs in with the token
(kafka-python) and asks the cluster for its brokers. Tokens live 10 s (max 30 s), so the
job runs across at least two replacements of the token: every task succeeds, and the
tasks used at least three different tokens.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.agent import AgentProcess
from tests.support.wait import wait_for
from tokensvc.cluster import LocalCluster
from tokensvc.jvm import free_port

ROOT = Path(__file__).resolve().parents[3]
SPARK_CLASS = str(Path(sys.executable).parent / "spark-class")


pytestmark = [pytest.mark.spark, pytest.mark.heavy(minutes=4), pytest.mark.cluster(brokers=3, overrides={
    "delegation.token.expiry.time.ms": "10000",
    "delegation.token.max.lifetime.ms": "30000",
    "delegation.token.expiry.check.interval.ms": "2000",
})]


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Spark standalone master and one worker (2 cores); yields the master URL."""
    work = tmp_path_factory.mktemp("spark-standalone")
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_LOG_DIR": str(work / "logs"),
           "SPARK_WORKER_DIR": str(work / "worker"), "PYSPARK_PYTHON": sys.executable,
           "SPARK_NO_DAEMONIZE": "1"}
    port = free_port()
    url = f"spark://127.0.0.1:{port}"
    processes: list[subprocess.Popen] = []
    try:
        with open(work / "master.log", "wb") as master_log, \
                open(work / "worker.log", "wb") as wl:
            processes.append(subprocess.Popen(
                [SPARK_CLASS, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                 "--port", str(port), "--webui-port", str(free_port())],
                env=env, stdout=master_log, stderr=subprocess.STDOUT))
            wait_for(lambda: b"I have been elected leader" in (work / "master.log").read_bytes(),
                     60, "the Spark master")
            processes.append(subprocess.Popen(
                [SPARK_CLASS, "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                 "--cores", "2", "--memory", "1G", "--webui-port", str(free_port()), url],
                env=env, stdout=wl, stderr=subprocess.STDOUT))
            wait_for(lambda: b"Successfully registered with master"
                     in (work / "worker.log").read_bytes(), 60, "the Spark worker")
        yield url
    finally:
        # Also when the master or the worker did not come up: nothing outlives the module.
        for process in reversed(processes):
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()


def test_executors_keep_working_across_two_replacements_of_the_token(
    cluster: LocalCluster, standalone: str, tmp_path: Path
) -> None:
    agent = AgentProcess(cluster, tmp_path, "--overlap-ms", "3000", "--margin-ms", "1000",
                         owner="User:spark-job", metrics=True)
    agent.start()  # (the overlap and margin given last win over AgentProcess's defaults)
    try:
        agent.wait_published()
        job = subprocess.run(
            [sys.executable, str(ROOT / "tests" / "support" / "spark_agent_job.py"), standalone,
             cluster.info["bootstrap_servers"], str(agent.creds), "22", "2"],
            capture_output=True, text=True, timeout=300, cwd=ROOT, check=False,
            env={**os.environ, "PYSPARK_PYTHON": sys.executable,
                 "SPARK_LOCAL_IP": "127.0.0.1"})
        assert job.returncode == 0, job.stderr[-3000:]
        rounds = [json.loads(line) for line in job.stdout.splitlines() if line.startswith("[")]
        assert len(rounds) == 22
        failed = [task for tasks in rounds for task in tasks if not task[1]]
        assert failed == []
        tokens = {task[0] for tasks in rounds for task in tasks}
        assert len(tokens) >= 3, tokens
        assert agent.metric("tokensvc_agent_replacements_total") >= 2
    finally:
        assert agent.terminate() == 0
