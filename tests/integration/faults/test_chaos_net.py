"""The partition suite's short form (``faults.chaos_net``, ``./dev chaos --net``), in CI.

Real processes on real links: 3 ZooKeeper nodes and 3 brokers, each in a network
namespace of its own joined by veth pairs to a bridge, and the fault suite's writers in
the root namespace. Each of the five link faults (a broker cut from ZooKeeper, the
controller cut from ZooKeeper, ZooKeeper split 2|1 with a broker on the minority side,
a broker cut from the controller only, a flapping link) runs for 10-12 s under load,
with revocations made on the majority side during the cut. The suite's checker, from
outside, must find no violation: no acknowledged write lost or duplicated, no revoked
credential accepted past the staleness bound, never two controllers, every write
answered in time, and recovery after the heal. The harness must leave no namespace,
link or process behind.

Needs root and iproute2 (``ip netns``), as the CI machine has; elsewhere the test is
skipped with that reason (the harness itself refuses in one line: tested below).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from faults import chaos_net, netns

pytestmark = pytest.mark.heavy(minutes=4)  # a cluster on network namespaces, five link faults

ROOT = os.geteuid() == 0 and shutil.which("ip") is not None
needs_root = pytest.mark.skipif(not ROOT, reason="network namespaces need root and `ip`")


def _leftovers(prefix: str) -> list[str]:
    names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True,
                           check=True).stdout.split()
    links = [line.split(":")[1].strip().split("@")[0] for line in subprocess.run(
        ["ip", "-o", "link", "show"], capture_output=True, text=True, check=True
    ).stdout.splitlines()]
    return [n for n in names + links if n.startswith(f"{prefix}-")]


def _processes_naming(directory: Path) -> list[int]:
    """Pids of live processes whose command line names ``directory`` (brokers' configs,
    ZooKeeper nodes' zoo.cfg)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if str(directory) in cmdline:
            found.append(int(proc.name))
    return found


@needs_root
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_five_link_faults_lose_nothing_accept_no_revoked_credential_and_recover(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # A prefix of this run's own: namespaces left on this kernel by a killed run (they
    # outlive its processes) neither block this run nor count as this run's leftovers, and
    # the run takes the first subnet they do not route.
    prefix = f"tn{os.getpid() % 10000}"
    results = chaos_net.run(list(chaos_net.NET_FAULTS), hold_s=16.0, flap_s=12.0, clients=3,
                            seed=27, session_timeout_ms=4000, directory=tmp_path, prefix=prefix)
    table = capsys.readouterr().out
    assert [r.name.split()[0] for r in results] == ["cut", "cut", "split", "cut", "flap"], table
    assert "controller" in results[1].name and "from controller" in results[3].name, table
    for result in results:
        assert result.violations == [], table
        assert result.recovery_s is not None, table
        assert result.ledger.writes(result.ledger.acknowledged) > 0, table
        assert any(n.startswith("revocations: ") and not n.startswith("revocations: 0 ")
                   for n in result.notes), table
    # The cut brokers answered some writes with a retriable error, within the time cap.
    errors = [e for r in results for (_, e) in r.ledger.errors]
    assert errors and set(errors) <= chaos_net.RETRIABLE, table
    # Nothing left behind: namespaces, links, brokers, ZooKeeper nodes.
    assert _leftovers(prefix) == [], table
    assert (tmp_path / "cluster" / "cluster.json").exists(), table
    assert _processes_naming(tmp_path) == [], table


@needs_root
def test_a_network_that_fails_half_way_is_removed(monkeypatch: pytest.MonkeyPatch) -> None:
    plan = netns.NetPlan(("x1", "x2"), subnet="10.213.9.0/24", prefix="tstest")
    real = netns.NetPlan.host_up

    def failing(self: netns.NetPlan, host: str) -> list[list[str]]:
        commands = real(self, host)
        if host == "x2":  # the second host fails after its namespace exists
            commands.insert(1, ["ip", "link", "set", "tstest-nonexistent", "up"])
        return commands

    monkeypatch.setattr(netns.NetPlan, "host_up", failing)
    with pytest.raises(netns.NetError, match="tstest-nonexistent"):
        netns.Network(plan).up()
    assert _leftovers("tstest") == []


def test_without_root_the_harness_refuses_in_one_line(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert chaos_net.main(["--faults", "zk-cut"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "needs root" in err, err
