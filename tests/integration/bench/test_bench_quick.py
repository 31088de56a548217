"""The benchmark suite's quick mode (``python -m bench --quick``) runs end to end.

It starts real ZooKeeper servers, broker processes and a local Spark session, so it
is an integration test. It checks that the suite completes and writes its JSON with
every benchmark present and none failed -- never how fast anything was (speed
belongs to the full run, see docs/performance.md).
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.__main__ import AUTHZ_ID, BENCHMARKS
from tests.spark_support import SPARK_CONF_DIR_ENV

pytestmark = pytest.mark.heavy(minutes=8)  # the whole quick benchmark suite

ROOT = Path(__file__).resolve().parents[3]
# Every registered benchmark (B1-B9 at least, plus those added since: B11 the token agent,
# B12 revocation, B13 event-loop stalls, B14-B16 beside Apache Kafka brokers).
BENCH_IDS = {importlib.import_module(name).ID for name in BENCHMARKS}


@pytest.mark.timeout(1500)
def test_quick_suite_completes_and_writes_every_benchmark(tmp_path: Path, kafka_jvm: None) -> None:
    # kafka_jvm: B14-B16's Kafka brokers start as every Kafka broker of the tests does
    # (client compiler, serial collector, class-data archive); their speed is not checked.
    done = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--results-dir", str(tmp_path)],
        check=False,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1440,
        # B6 runs Spark as the product does (code generation on), not with the suite's
        # settings for small inputs.
        env={k: v for k, v in os.environ.items() if k != SPARK_CONF_DIR_ENV},
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    latest = json.loads((tmp_path / "latest.json").read_text())
    assert latest["quick"] is True
    results = {r["id"]: r for r in latest["results"]}
    assert BENCH_IDS <= set(results), sorted(results)
    assert {f"B{n}" for n in range(1, 10)} | {"B11", "B12", "B13", "B14", "B15",
                                               "B16"} <= BENCH_IDS
    assert len(BENCHMARKS) == len(BENCH_IDS)
    assert set(results) <= BENCH_IDS | {AUTHZ_ID}
    for bench_id in BENCH_IDS:
        result = results[bench_id]
        assert result["error"] is None, (bench_id, result["error"])
        assert result["measured"] is not None and result["measured"] >= 0, bench_id
        # B8 has no target of its own ("no worse than before" is judged across runs), nor
        # has B16 (what a Kafka broker's start costs is Kafka's, reported for sizing).
        assert result["targets"] or bench_id in ("B8", "B16"), bench_id
    stamped = [p for p in tmp_path.glob("*.json") if p.name != "latest.json"]
    assert len(stamped) == 1 and json.loads(stamped[0].read_text()) == latest
    assert "| B1 " in done.stdout and "| B7 " in done.stdout and "| B9 " in done.stdout
