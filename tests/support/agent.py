"""Running ``kafka-delegation-token --agent`` as a user would, from tests: the console
command as a subprocess with its log on a file, its metrics read over HTTP.

Owns only starting, reading and stopping the agent process; the tests decide what to check.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

from tests.support.wait import wait_for
from tokensvc.cluster import LocalCluster
from tokensvc.jvm import free_port

ROOT = Path(__file__).resolve().parents[2]
JOB = "User:etl-job"
OVERLAP_MS, MARGIN_MS = 5_000, 2_000


class AgentProcess:
    """The agent as a user runs it: the console command, its log on a file."""

    def __init__(self, cluster: LocalCluster, workdir: Path, *extra: str, owner: str = JOB,
                 command_config: str | None = None, bootstrap: str | None = None,
                 metrics: bool = False) -> None:
        self.workdir = workdir
        self.creds = workdir / "job.properties"
        self.state = workdir / "agent-state.json"
        self.log = workdir / "agent.log"
        # Only for a test that reads the metrics: a port picked free here may be taken by
        # another process's connection before the agent binds it (seen once in a full run:
        # "Address already in use" from a --once run that never read its metrics).
        self.metrics_port = free_port() if metrics else None
        self.args = [
            sys.executable, "-m", "cli.delegation_token", "--agent",
            "--bootstrap-server", bootstrap or cluster.info["bootstrap_servers"],
            "--command-config", command_config or cluster.info["admin"]["properties"],
            "--owner-principal", owner,
            "--credentials-file", str(self.creds), "--state-file", str(self.state),
            "--overlap-ms", str(OVERLAP_MS), "--margin-ms", str(MARGIN_MS),
            *(["--metrics-port", str(self.metrics_port)] if metrics else []),
            "--timeout", "5", *extra,
        ]
        self.process: subprocess.Popen | None = None

    def start(self) -> AgentProcess:
        handle = open(self.log, "ab")  # noqa: SIM115 - the child keeps it
        self.process = subprocess.Popen(self.args, stdout=handle, stderr=subprocess.STDOUT,
                                        cwd=ROOT)
        handle.close()
        return self

    def run(self, timeout: float = 60) -> subprocess.CompletedProcess:
        return subprocess.run(self.args, check=False, capture_output=True, text=True, cwd=ROOT,
                              timeout=timeout)

    def log_text(self) -> str:
        return self.log.read_text() if self.log.exists() else ""

    def metric(self, name: str) -> float:
        assert self.metrics_port is not None, "started without metrics=True"
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as page:
            for line in page.read().decode().splitlines():
                if line.startswith(f"{name} "):
                    return float(line.split()[1])
        raise AssertionError(f"{name} not exported")

    def wait_published(self, timeout: float = 30) -> None:
        wait_for(lambda: self.creds.exists() and "published token" in self.log_text(),
                 timeout, "published token")

    def terminate(self, timeout: float = 30) -> int:
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=timeout)

    def kill(self) -> None:
        assert self.process is not None
        self.process.kill()
        self.process.wait(timeout=10)
