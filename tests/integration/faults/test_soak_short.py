"""The soak's short form (``./dev soak --minutes N``), in CI.

A real 3-node ZooKeeper ensemble and 3 broker processes under the soak's mixed load
(creates, renewals, expiries, token logins, describes) for a minute and a half, with a
fault every 15 s in the soak's rotation (kill -9 of the controller, a paused ZooKeeper
node, kill -9 of a broker, ...), broker 3 spared so one series spans the run. At the
end the soak checks from outside: no acknowledged token lost, every broker's cache equal
to ZooKeeper, no answer the load does not expect (a token login refused while its token
was live and decidable is one). It prints the resource table: for every broker and
ZooKeeper node its memory, descriptors and threads, and the data and audit bytes, with
the slope per hour, read back here from the samples it wrote.
"""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.heavy(minutes=3)  # a 3-node ensemble, 3 brokers, 90 s of load

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_short_soak_with_faults_loses_nothing_and_prints_its_slopes(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "faults.soak", "--minutes", "1.5", "--fault-every", "15",
         "--clients", "2", "--spare-broker", "3", "--sample-every", "5",
         "--dir", str(tmp_path / "soak")],
        cwd=ROOT, capture_output=True, text=True, timeout=540, check=False)
    out = done.stdout
    assert done.returncode == 0, out[-4000:] + done.stderr[-3000:]
    assert "RESULT: OK" in out and "tokens lost: 0" in out, out[-4000:]
    assert "caches diverged from ZooKeeper: none" in out, out[-4000:]
    assert "(UNEXPECTED)" not in out, out[-4000:]
    # Faults happened and were recovered from (each prints its resync time).
    assert out.count(": resync ") >= 3, out
    # The load ran: creates acknowledged and token logins tried.
    assert "tokens acknowledged: 0;" not in out, out[-4000:]
    assert "token login" in out, out[-4000:]
    # The resource table: every process and directory has its rows with a slope.
    table = out.split("slope per hour over each series' longest life:", 1)[1]
    for series in ("broker-1", "broker-2", "broker-3", "zookeeper-1", "zookeeper-2",
                   "zookeeper-3"):
        for measure in ("rss_bytes", "fds", "threads"):
            assert any(line.split()[:2] == [series, measure] for line in table.splitlines()), (
                series, measure, table)
    with open(tmp_path / "soak" / "samples.csv", newline="", encoding="utf-8") as source:
        rows = list(csv.DictReader(source))
    spared = [r for r in rows if r["series"] == "broker-3"]
    # Sampled every 5 s over the 90 s, one life: broker 3 was never killed.
    assert len(spared) >= 10, spared
    assert len({r["pid"] for r in spared}) == 1, spared
    assert all(int(r["rss_bytes"]) > 0 and int(r["fds"]) > 0 for r in spared), spared
