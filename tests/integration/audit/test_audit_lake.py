"""The lake: streaming ingest against real Spark, the lake report against the JSON report,
and exactly-once after kill -9 in the middle of a batch (a real subprocess).

One SparkSession (tests/spark_support.py) serves the in-process runs; the crash test
runs ``tokensvc audit ingest`` in its own process group, as a person would, kills it with
SIGKILL mid-batch, then runs the command again in this process (on that session: a Spark
JVM start is most of such a run's cost) until a SIGTERM.

Reports cost the same whatever the input's size (a report of 20 events about as much as
one of 2,500: Spark's jobs, not the rows): tests reuse the module's reports where they
read the same input rather than run them again.
"""

from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from cli.audit_cmd import audit
from tests.spark_support import shared_spark
from tests.support.wait import wait_for
from tokensvc.audit import aggregates
from tokensvc.audit.events import authentication_event, stamp
from tokensvc.audit.generator import SNAPSHOT_FILE, generate
from tokensvc.audit.ingest import STALL_ENV, IngestOptions, run_ingest
from tokensvc.audit.lake import (
    ID_HASH,
    distinct_id_hashes,
    lake_layout,
    read_partials,
    read_stats,
)
from tokensvc.audit.reporting.job import run_report
from tokensvc.audit.reporting.options import REPORTS, build_options

# The longest module of the suite (a loaded 2-core machine: 12 min): handed out first.
# Its shared set-up (an ingest and two reports) alone can take minutes when the machine
# is busy: a test's time limit here counts that set-up too.
pytestmark = [pytest.mark.spark, pytest.mark.heavy(minutes=12), pytest.mark.timeout(900)]

T0 = 1_704_067_200_000  # 2024-01-01T00:00:00Z
# Generated events of the module's shared data: enough for two dates and every planted
# anomaly (the generator plants them at fractions of the count). Spark's cost here is per
# job, not per row: the ingest and two reports of 2,500 events cost a few CPU s more.
EVENTS = 600
ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="session")
def spark() -> SparkSession:
    return shared_spark()


def login_line(ts: int, token: int, broker: int = 4, host: str = "10.9.9.9") -> str:
    body = authentication_event(outcome="failure", mechanism="SCRAM-SHA-256", kind="token",
                                username=f"tok{token:019d}", token_id=f"tok{token:019d}",
                                client_host=host, reason="bad_proof")
    return json.dumps(stamp(body, ts=ts, broker_id=broker, event_id=f"{broker:04d}{ts:028d}"))


BAD_LINES = [
    "this is not json",
    '{"schema":1,"ts":"yesterday","broker_id":4,"event_id":"x1","type":"authentication"}',
    '{"schema":2,"ts":1704067200000,"broker_id":4,"event_id":"x2","type":"authentication"}',
    '{"schema":1,"ts":1704067200000,"broker_id":4,"event_id":"x3","type":"mystery"}',
    '{"schema":1,"ts":1704067200000,"event_id":"x4","type":"authentication"}',
]


def lake_rows(spark: SparkSession, lake: Path) -> list[Any]:
    return spark.read.parquet(str(lake_layout(lake).events)).select("event_id").collect()


@pytest.fixture(scope="module")
def both(tmp_path_factory: pytest.TempPathFactory, spark: SparkSession) -> dict[str, Any]:
    """Generated events plus a compressed rotated file, extra fields and bad lines;
    ingested once, and reported both from the lake and from the JSON files."""
    data = tmp_path_factory.mktemp("audit")
    generate(data, EVENTS, seed=21, brokers=3)
    with gzip.open(data / "audit-4-20240101T000000-0.jsonl.1.gz", "wt") as fh:
        for n in range(12):  # a burst on one token from a fourth broker, rotated away
            fh.write(login_line(T0 + 3_600_000 + n * 1000, 7) + "\n")
    with open(data / "audit-4-20240101T020000-0.jsonl", "w") as fh:
        for n, bad in enumerate(BAD_LINES):
            event = json.loads(login_line(T0 + 7_200_000 + n, 100 + n))
            event["implicit"] = True
            event["fingerprint"] = "k1:9f2c"  # a field this reader does not know
            fh.write(json.dumps(event) + "\n" + bad + "\n\n")
    lake = tmp_path_factory.mktemp("lake")
    totals = run_ingest(spark, IngestOptions(str(data), str(lake), once=True), echo=print)
    from_lake = tmp_path_factory.mktemp("from-lake")
    from_json = tmp_path_factory.mktemp("from-json")
    snapshot = str(data / SNAPSHOT_FILE)
    return {
        "data": data, "lake": lake, "totals": totals, "out_lake": from_lake,
        "out_json": from_json,
        "lake_summary": run_report(spark, build_options(None, str(from_lake), lake=str(lake),
                                                        tokens=snapshot)),
        "json_summary": run_report(spark, build_options(str(data), str(from_json),
                                                        tokens=snapshot)),
    }


def test_every_valid_event_is_in_the_lake_once(spark: SparkSession, both: dict) -> None:
    ids = [r["event_id"] for r in lake_rows(spark, both["lake"])]
    assert len(ids) == len(set(ids)) == both["json_summary"]["events_read"] == EVENTS + 12 + 5
    assert both["totals"].events == len(ids)


def test_malformed_lines_are_quarantined_with_their_reason(spark: SparkSession,
                                                           both: dict) -> None:
    rows = spark.read.parquet(str(lake_layout(both["lake"]).quarantine)).collect()
    by_reason: dict[str, int] = {}
    for row in rows:
        by_reason[row["malformed_reason"]] = by_reason.get(row["malformed_reason"], 0) + 1
    assert by_reason == {"not_json": 1, "wrong_types": 1, "unknown_schema": 1,
                         "unknown_type": 1, "missing_fields": 1}
    assert {r["line"] for r in rows} == set(BAD_LINES)
    assert all(r["source"].startswith("audit-4-20240101T020000-0.jsonl.") for r in rows)
    assert both["totals"].quarantined == 5
    assert both["lake_summary"]["malformed_by_reason"] == \
        both["json_summary"]["malformed_by_reason"]


def test_invalid_lines_in_several_chunks_of_a_batch_are_each_quarantined_once(
        tmp_path: Path, spark: SparkSession) -> None:
    # Lines that parse but are invalid, in the first and the last of three files of one
    # batch, and a file of good lines between them (re-read with them, nothing of it
    # quarantined) and after them.
    data, lake = tmp_path / "audit", tmp_path / "lake"
    data.mkdir()
    invalid = BAD_LINES[1:]  # parse as JSON, fail the checks
    for broker, bad in ((4, invalid[:2]), (5, []), (6, invalid[2:]), (7, [])):
        good = [login_line(T0 + broker * 100 + n, broker * 100 + n, broker=broker)
                for n in range(10)]
        (data / f"audit-{broker}-20240101T000000-0.jsonl").write_text(
            "".join(f"{x}\n" for x in good[:5] + bad + good[5:]))
    totals = run_ingest(spark, IngestOptions(str(data), str(lake), once=True), echo=print)
    assert (totals.batches, totals.events, totals.quarantined) == (1, 40, 4)
    rows = spark.read.parquet(str(lake_layout(lake).quarantine)).collect()
    assert sorted(r["line"] for r in rows) == sorted(invalid)
    assert {r["line"]: r["source"].split(".")[0] for r in rows} == {
        **dict.fromkeys(invalid[:2], "audit-4-20240101T000000-0"),
        **dict.fromkeys(invalid[2:], "audit-6-20240101T000000-0")}
    ids = [r["event_id"] for r in lake_rows(spark, lake)]
    assert len(ids) == len(set(ids)) == 40


def test_lake_is_partitioned_by_event_date(both: dict) -> None:
    dates = sorted(p.name for p in lake_layout(both["lake"]).events.iterdir())
    assert dates == ["date=2024-01-01", "date=2024-01-02"]


def test_report_from_lake_agrees_with_json_row_for_row(spark: SparkSession,
                                                       both: dict) -> None:
    for name in REPORTS:
        lake_rows_ = spark.read.parquet(str(both["out_lake"] / name / "parquet")).collect()
        json_rows = spark.read.parquet(str(both["out_json"] / name / "parquet")).collect()
        assert [r.asDict() for r in lake_rows_] == [r.asDict() for r in json_rows], name
        assert json_rows or name in ("lifecycle", "revocations")  # no revocation in this data
    for name in REPORTS:
        csv_lake = next((both["out_lake"] / name / "csv").glob("part-*.csv")).read_text()
        assert csv_lake == next((both["out_json"] / name / "csv").glob("part-*.csv")).read_text()
    skip = {"input", "lake", "output", "elapsed_s"}
    lake_summary = {k: v for k, v in both["lake_summary"].items() if k not in skip}
    assert lake_summary == {k: v for k, v in both["json_summary"].items() if k not in skip}
    assert both["lake_summary"]["findings_by_rule"]["failed_login_burst_token"] >= 2


MERGES = {aggregates.TOKENS: aggregates.merge_tokens, aggregates.HOURS: aggregates.merge_hours,
          aggregates.TYPES: aggregates.merge_types, aggregates.GROUPED: aggregates.merge_grouped}


def _sorted_rows(df: Any) -> list[dict[str, Any]]:
    """Rows as dicts, arrays sorted (a merged set has no order), in a stable order."""
    rows = [{k: sorted(v) if isinstance(v, list) else v for k, v in r.asDict(True).items()}
            for r in df.collect()]
    return sorted(rows, key=repr)


def assert_partials_match_events(spark: SparkSession, lake: Path) -> dict[str, int]:
    """The lake's stored partial tables, merged, equal the same tables built from the
    lake's events now; their rows per table."""
    stats = read_stats(lake)
    assert stats is not None and stats.aggregate_rows is not None
    stored = read_partials(spark, lake, stats.aggregate_rows)
    assert stored is not None
    events = spark.read.parquet(str(lake_layout(lake).events))
    for name, merge in MERGES.items():
        assert _sorted_rows(merge(stored[name])) == \
            _sorted_rows(merge(aggregates.PARTIALS[name](events))), name
    return stats.aggregate_rows


def test_batch_partial_tables_merge_to_what_the_events_give(spark: SparkSession,
                                                            both: dict) -> None:
    rows = assert_partials_match_events(spark, both["lake"])
    assert all(rows[table] > 0 for table in aggregates.TABLES), rows  # none left empty


def test_report_merges_the_partial_tables_of_many_batches(tmp_path: Path, spark: SparkSession,
                                                          both: dict) -> None:
    # The module's audit files (five: three batches of at most two chunks) into a lake of
    # their own; the report from those files is the module's JSON report.
    data, lake = both["data"], tmp_path / "lake"
    run_ingest(spark, IngestOptions(str(data), str(lake), once=True, max_files_per_batch=2),
               echo=print)
    layout = lake_layout(lake)
    assert len(list(layout.stats.iterdir())) == 3
    assert sorted(p.name[:14] for p in (layout.agg / aggregates.TOKENS).iterdir()) == [
        layout.batch_prefix(n) for n in range(3)]
    snapshot = str(data / SNAPSHOT_FILE)

    def usage(out: Path) -> dict[str, Any]:
        rows = spark.read.parquet(str(out / "token_usage" / "parquet")).collect()
        return {r["token_id"]: r.asDict() for r in rows}

    def lake_usage(out: str) -> dict[str, Any]:
        run_report(spark, build_options(None, str(tmp_path / out), tokens=snapshot,
                                        lake=str(lake)))
        return usage(tmp_path / out)

    from_json = usage(both["out_json"])
    assert lake_usage("lake") == from_json

    # The report reads the partial tables: one batch's token rows changed by hand
    # (same number of rows) show in its token_usage.
    part = next((layout.agg / aggregates.TOKENS).glob("b000000000001-*.parquet"))
    changed = spark.read.parquet(str(part)).withColumn("logins_ok", F.col("logins_ok") + 1000)
    changed.coalesce(1).write.parquet(str(tmp_path / "changed"))
    part.unlink()
    os.replace(next((tmp_path / "changed").glob("part-*.parquet")), part)
    doctored = lake_usage("doctored")
    assert {t: r["logins_ok"] - from_json[t]["logins_ok"] for t, r in doctored.items()
            if r["logins_ok"] != from_json[t]["logins_ok"]}
    assert {r["logins_ok"] - from_json[t]["logins_ok"] for t, r in doctored.items()} <= {0, 1000}

    # A partial table file removed: its rows no longer match the statistics, so the
    # report does not use the tables (it reads the events, as for a lake without them).
    part.unlink()
    stats = read_stats(lake)
    assert stats is not None and stats.aggregate_rows is not None
    assert read_partials(spark, lake, stats.aggregate_rows) is None


def test_batch_statistics_count_what_the_lake_holds(spark: SparkSession, both: dict) -> None:
    stats = read_stats(both["lake"])
    assert stats is not None
    malformed = {r: n for r, n in stats.statuses.items() if r != "ok"}
    assert malformed == both["json_summary"]["malformed_by_reason"]
    assert stats.statuses["ok"] == both["json_summary"]["events_read"] == both["totals"].events
    assert stats.ids_repeat is False  # one batch, every id once
    events = spark.read.parquet(str(lake_layout(both["lake"]).events))
    assert events.filter(F.col(ID_HASH).isNull()
                         | (F.col(ID_HASH) != F.xxhash64("event_id"))).count() == 0


def _files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


def _lake_and_json_reports(spark: SparkSession, data: Path, lake: Path, out: Path
                           ) -> tuple[dict[str, Any], dict[str, Any]]:
    return (run_report(spark, build_options(None, str(out / "lake"), lake=str(lake))),
            run_report(spark, build_options(str(data), str(out / "json"))))


def test_duplicates_within_and_across_batches_are_counted_as_from_json(
        tmp_path: Path, spark: SparkSession) -> None:
    data, lake = tmp_path / "audit", tmp_path / "lake"
    data.mkdir()
    first = [login_line(T0 + n * 1000, n) for n in range(20)]
    (data / "audit-4-20240101T000000-0.jsonl").write_text("".join(f"{x}\n" for x in first))
    options = IngestOptions(str(data), str(lake), once=True)
    run_ingest(spark, options, echo=print)
    stats = read_stats(lake)
    assert stats is not None and stats.statuses["ok"] == 20 and stats.ids_repeat is False

    # A second file repeats five events of the first (a broker wrote them twice):
    # every batch is unique alone, so only a check across batches finds them.
    again = first[:5] + [login_line(T0 + n * 1000, n, broker=5) for n in range(20, 23)]
    (data / "audit-5-20240101T000000-0.jsonl").write_text("".join(f"{x}\n" for x in again))
    run_ingest(spark, options, echo=print)
    stats = read_stats(lake)
    assert stats is not None and stats.statuses["ok"] == 28 and stats.ids_repeat is None
    assert distinct_id_hashes(spark, lake) == 23
    from_lake, from_json = _lake_and_json_reports(spark, data, lake, tmp_path / "two")
    assert from_lake["duplicates"] == from_json["duplicates"] == 5
    assert from_lake["events"] == from_json["events"] == 23
    two_files, two_json = _files(data), from_json

    # A third file holds one event twice: its own batch says an id repeats.
    twice = login_line(T0 + 99_000, 99, broker=6)
    (data / "audit-6-20240101T000000-0.jsonl").write_text(f"{twice}\n{twice}\n")
    run_ingest(spark, options, echo=print)
    stats = read_stats(lake)
    assert stats is not None and stats.statuses["ok"] == 30 and stats.ids_repeat is True
    from_lake, from_json = _lake_and_json_reports(spark, data, lake, tmp_path / "three")
    assert from_lake["duplicates"] == from_json["duplicates"] == 6
    skip = {"input", "lake", "output", "elapsed_s"}
    assert {k: v for k, v in from_lake.items() if k not in skip} == \
        {k: v for k, v in from_json.items() if k not in skip}

    # The third batch's events removed by hand: its statistics no longer match the
    # files, so the report counts by scanning what is there. The audit files are those of
    # the second step again, byte for byte: its JSON report is theirs.
    for part in lake_layout(lake).events.rglob("b000000000002-*.parquet"):
        part.unlink()
    (data / "audit-6-20240101T000000-0.jsonl").unlink()
    assert _files(data) == two_files
    from_lake = run_report(spark, build_options(None, str(tmp_path / "removed"), lake=str(lake)))
    from_json = two_json
    assert (from_lake["lines"], from_lake["duplicates"], from_lake["events"]) == \
        (from_json["lines"], from_json["duplicates"], from_json["events"]) == (28, 5, 23)


def test_ingest_again_adds_only_new_lines(tmp_path: Path, spark: SparkSession) -> None:
    data, lake = tmp_path / "audit", tmp_path / "lake"
    data.mkdir()
    live = data / "audit-5-20240101T000000-0.jsonl"
    live.write_text("".join(login_line(T0 + n, n, broker=5) + "\n" for n in range(30))
                    + login_line(T0 + 30, 30, broker=5)[:25])  # a line still being written
    options = IngestOptions(str(data), str(lake), once=True)
    first = run_ingest(spark, options, echo=print)
    assert (first.events, first.quarantined) == (30, 0)
    assert run_ingest(spark, options, echo=print).events == 0
    with open(live, "a") as fh:
        fh.write(login_line(T0 + 30, 30, broker=5)[25:] + "\n")
        fh.write(login_line(T0 + 31, 31, broker=5) + "\n")
    assert run_ingest(spark, options, echo=print).events == 2
    ids = [r["event_id"] for r in lake_rows(spark, lake)]
    assert len(ids) == len(set(ids)) == 32


def test_ingest_refuses_a_missing_input_and_changes_nothing(tmp_path: Path) -> None:
    result = CliRunner().invoke(audit, ["ingest", "--input", str(tmp_path / "nope"),
                                        "--lake", str(tmp_path / "lake"), "--once"])
    assert result.exit_code == 1
    assert "input directory does not exist" in result.output
    assert not (tmp_path / "lake").exists()


def test_report_needs_exactly_one_source(tmp_path: Path) -> None:
    result = CliRunner().invoke(audit, ["report", "--input", str(tmp_path), "--lake",
                                        str(tmp_path), "--output", str(tmp_path / "o")])
    assert result.exit_code == 1 and "exactly one of --input" in result.output
    result = CliRunner().invoke(audit, ["report", "--lake", str(tmp_path / "none"),
                                        "--output", str(tmp_path / "o")])
    assert result.exit_code == 1 and "lake directory does not exist" in result.output


def _ingest_args(data: Path, lake: Path) -> list[str]:
    return ["ingest", "--input", str(data), "--lake", str(lake), "--master", "local[1]",
            "--max-files-per-batch", "1", "--trigger-s", "0.5"]


def _ingest_process(data: Path, lake: Path, log: Path, *, stall: int
                    ) -> subprocess.Popen[bytes]:
    """``tokensvc audit ingest --once`` in a process group of its own, with its own Spark
    JVM, whose batch ``stall`` blocks after moving its first file into the lake."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1")
    env[STALL_ENV] = str(stall)
    args = [sys.executable, "-m", "cli.tokensvc", "audit", *_ingest_args(data, lake), "--once"]
    with open(log, "wb") as out:
        return subprocess.Popen(args, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)


def _ingest_here_until_sigterm(data: Path, lake: Path, ready: Callable[[], bool]
                               ) -> tuple[Result, bool]:
    """``tokensvc audit ingest`` as a long-running job in this process (the command takes
    this process's Spark session: one JVM start fewer than a process of its own), stopped
    by a SIGTERM to this process once ``ready()``. Its result, and whether the signal went
    while the command was still running."""
    finished, sent = threading.Event(), threading.Event()
    failed: list[AssertionError] = []

    def terminate() -> None:
        try:
            wait_for(lambda: ready() or finished.is_set(), 300, "batch 2 of the second run")
        except AssertionError as exc:
            failed.append(exc)  # the job is stopped all the same
        if not finished.is_set():
            sent.set()
            os.kill(os.getpid(), signal.SIGTERM)  # as `kill PID` does

    # The command handles SIGTERM while it runs, then puts this handler back: a signal
    # that crosses its end is ignored rather than ending the test run.
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: None)
    thread = threading.Thread(target=terminate, name="sigterm-after-batch-2", daemon=True)
    thread.start()
    try:
        result = CliRunner().invoke(audit, _ingest_args(data, lake))
    finally:
        finished.set()
        thread.join(60)
        signal.signal(signal.SIGTERM, previous)
    if failed:
        raise failed[0]
    return result, sent.is_set()


CRASH_EVENTS = 300  # three files: three one-chunk batches


def test_kill_9_in_the_middle_of_a_batch_then_run_again_loses_and_repeats_nothing(
        tmp_path: Path, spark: SparkSession, monkeypatch: pytest.MonkeyPatch) -> None:
    data, lake = tmp_path / "audit", tmp_path / "lake"
    generate(data, CRASH_EVENTS, seed=3, brokers=3)
    layout = lake_layout(lake)
    first = _ingest_process(data, lake, tmp_path / "first.log", stall=1)
    try:
        wait_for(lambda: (lake / "stalled-1").exists() or first.poll() is not None, 300,
                 "batch 1 half written")
        assert first.poll() is None, (tmp_path / "first.log").read_text()[-3000:]
        # Mid-batch: batch 1 is planned, not committed, and part of it is in the lake.
        assert (layout.checkpoint / "offsets" / "1").exists()
        assert not (layout.checkpoint / "commits" / "1").exists()
        assert list(layout.events.rglob("b000000000001-*.parquet"))
        # ... so the lake's statistics are incomplete and a report would scan.
        assert not layout.stats_file(1).exists() and read_stats(lake) is None
    finally:
        os.killpg(first.pid, signal.SIGKILL)
        first.wait(60)

    # Run again, this time as a long-running job stopped by SIGTERM once batch 2 is in.
    monkeypatch.delenv(STALL_ENV, raising=False)
    second, running = _ingest_here_until_sigterm(
        data, lake, lambda: (layout.checkpoint / "commits" / "2").exists())
    text = second.output
    assert running, text[-3000:]
    assert second.exit_code == 0, (second.exception, text[-3000:])
    assert "batch 2:" in text
    assert "SIGTERM: stopping" in text and "ingested" in text
    ids = [r["event_id"] for r in lake_rows(spark, lake)]
    assert len(ids) == len(set(ids)) == CRASH_EVENTS
    assert not list(layout.batches.iterdir())
    # Each batch's statistics once: the re-run of batch 1 replaced nothing twice.
    stats = read_stats(lake)
    assert stats is not None and stats.statuses["ok"] == CRASH_EVENTS
    assert sorted(p.name for p in layout.stats.iterdir()) == [
        layout.stats_file(n).name for n in range(len(list(layout.stats.iterdir())))]
    assert distinct_id_hashes(spark, lake) == CRASH_EVENTS
    # ... and each batch's partial tables once: one file per table and batch, which
    # merged give what the events in the lake give.
    batches = len(list(layout.stats.iterdir()))
    for table in aggregates.TABLES:
        names = sorted(p.name[:14] for p in (layout.agg / table).glob("*.parquet"))
        assert names == [layout.batch_prefix(n) for n in range(batches)], table
    assert assert_partials_match_events(spark, lake)[aggregates.TYPES] >= 1
