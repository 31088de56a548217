"""B11: a job on the token agent across many replacements -- time without a valid
credential, failed requests, and what the agent costs.

Measured: a 3-broker cluster of its own with compressed lifetimes (expiry 1 s, max
lifetime 3 s; overlap 300 ms, margin 200 ms: a replacement about every 1.8 s), and
``kafka-delegation-token --agent`` as a subprocess writing a credentials file. Two clients
follow the file through :class:`~tokensvc.agent.clients.CredentialsWatcher`:

* a **prober** that, every 20 ms, logs in with the token the file holds now on the next
  broker in turn (a fresh connection each time): the time without a valid credential is
  the sum of the spans from a failed login to the next success;
* a **requester**: tokensvc's AdminClient following the file, asking DescribeCluster every
  100 ms on one kept connection (reconnecting when a retired token's session is closed):
  its failed requests are counted.

The run lasts until the agent has published 100 replacements (3 with ``--quick``). The
agent's CPU seconds and peak RSS come from ``/proc`` when it is stopped.

Targets: 0 ms without a valid credential, 0 failed requests.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

from bench import env
from bench.suite import BenchContext, Outcome, Target
from tokensvc.admin import AdminClient
from tokensvc.admin.connection import BrokerConnection
from tokensvc.agent.clients import CredentialsWatcher, follow_admin
from tokensvc.client_config import ClientConfig, client_config_from_properties
from tokensvc.jvm import free_port

ID = "B11"
TITLE = "token agent: time without a valid credential over many replacements"
EXPIRY_MS, MAX_MS, OVERLAP_MS, MARGIN_MS = 1_000, 3_000, 300, 200
ROOT = Path(__file__).resolve().parents[1]


def _metric(port: int, name: str) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as page:
        for line in page.read().decode().splitlines():
            if line.startswith(f"{name} "):
                return float(line.split()[1])
    return 0.0


def _proc_usage(pid: int) -> tuple[float, int]:
    """(CPU seconds, peak RSS in bytes) of a live process."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    cpu = (int(fields[11]) + int(fields[12])) / ticks
    peak = 0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            peak = int(line.split()[1]) * 1024
    return cpu, peak


def _config(watcher: CredentialsWatcher) -> ClientConfig:
    """A client configuration with the token the file holds now."""
    creds = watcher.current
    return client_config_from_properties({
        "security.protocol": creds.security_protocol, "sasl.mechanism": creds.sasl_mechanism,
        "sasl.jaas.config": creds.jaas_config})


def run(ctx: BenchContext) -> Outcome:
    replacements = 3 if ctx.quick else 100
    extra = {"delegation.token.expiry.time.ms": str(EXPIRY_MS),
             "delegation.token.max.lifetime.ms": str(MAX_MS),
             "delegation.token.expiry.check.interval.ms": "1000"}
    handle = ctx.shared("cluster-b11", lambda stack: env.start_cluster(
        ctx, stack, "cluster-b11", 3, extra=extra), users=(ID,))
    cluster = handle.cluster
    workdir = ctx.directory("b11-agent")
    creds_path, state_path = workdir / "job.properties", workdir / "agent.state"
    port = free_port()
    args = [sys.executable, "-m", "cli.delegation_token", "--agent",
            "--bootstrap-server", cluster.info["bootstrap_servers"],
            "--command-config", cluster.info["admin"]["properties"],
            "--credentials-file", str(creds_path), "--state-file", str(state_path),
            "--overlap-ms", str(OVERLAP_MS), "--margin-ms", str(MARGIN_MS),
            "--metrics-port", str(port), "--timeout", "5"]
    log = open(workdir / "agent.log", "wb")  # noqa: SIM115 - the child keeps it
    agent = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
    log.close()
    stop = threading.Event()
    probes = {"ok": 0, "failed": 0}
    gaps: list[float] = []
    requests = {"ok": 0, "failed": 0}
    try:
        deadline = time.monotonic() + 60
        while not creds_path.exists():
            if time.monotonic() > deadline or agent.poll() is not None:
                raise RuntimeError("the agent published no token")
            time.sleep(0.05)
        watcher = CredentialsWatcher(creds_path, poll_interval_s=0.02).start()
        addresses = cluster.info["bootstrap_servers"].split(",")

        def prober() -> None:
            failing_since: float | None = None
            i = 0
            while not stop.is_set():
                conn = BrokerConnection(addresses[i % len(addresses)], _config(watcher),
                                        client_id="b11-prober")
                i += 1
                try:
                    conn.open(time.monotonic() + 5)
                    ok = True
                except Exception:  # noqa: BLE001 - any refusal counts as no credential
                    ok = False
                finally:
                    conn.close()
                now = time.monotonic()
                if ok:
                    probes["ok"] += 1
                    if failing_since is not None:
                        gaps.append(now - failing_since)
                        failing_since = None
                else:
                    probes["failed"] += 1
                    failing_since = failing_since or now
                stop.wait(0.02)

        requester_admin = AdminClient(addresses, _config(watcher), timeout_s=10,
                                      client_id="b11-requester")
        follow_admin(requester_admin, watcher)

        def requester() -> None:
            while not stop.wait(0.1):
                try:
                    requester_admin.describe_cluster()
                    requests["ok"] += 1
                except Exception:  # noqa: BLE001 - a failed request is what is counted
                    requests["failed"] += 1

        threads = [threading.Thread(target=prober, daemon=True),
                   threading.Thread(target=requester, daemon=True)]
        for thread in threads:
            thread.start()
        started = time.monotonic()
        limit = started + replacements * 10 + 60
        while _metric(port, "tokensvc_agent_replacements_total") < replacements:
            if time.monotonic() > limit or agent.poll() is not None:
                raise RuntimeError("the agent stopped replacing tokens")
            time.sleep(0.5)
        elapsed = time.monotonic() - started
        renewals = _metric(port, "tokensvc_agent_renewals_total")
        failures = _metric(port, "tokensvc_agent_failures_total")
        cpu, peak = _proc_usage(agent.pid)
        stop.set()
        for thread in threads:
            thread.join(timeout=15)
        requester_admin.close()
        watcher.close()
    finally:
        stop.set()
        agent.send_signal(signal.SIGTERM)
        agent.wait(timeout=60)
    without_ms = round(sum(gaps) * 1000, 1)
    return Outcome(
        ID, TITLE,
        measured=without_ms, unit="ms without a valid credential",
        targets=[Target("0 ms without a valid credential", without_ms == 0),
                 Target("0 failed requests", requests["failed"] == 0)],
        details={
            "replacements": replacements, "renewals": renewals, "seconds": round(elapsed, 1),
            "agent_failed_attempts": failures,
            "probes": probes, "longest_gap_ms": round(max(gaps, default=0) * 1000, 1),
            "requests": requests,
            "agent_cpu_s": round(cpu, 2), "agent_cpu_per_replacement_ms":
                round(cpu / replacements * 1000, 1),
            "agent_peak_rss_mb": round(peak / 2**20, 1),
            "lifetimes_ms": {"expiry": EXPIRY_MS, "max": MAX_MS, "overlap": OVERLAP_MS,
                             "margin": MARGIN_MS},
        },
    )
