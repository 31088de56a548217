"""The Spark report job on real files: known answers, bad lines, empty and missing input.

One SparkSession (tests/spark_support.py) serves every test; each scenario runs
the job once in a module fixture and the tests read what it wrote.
"""

from __future__ import annotations

import csv
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from pyspark.sql import SparkSession

from cli.audit_cmd import audit
from tests.spark_support import shared_spark
from tokensvc.audit.counts import count_each
from tokensvc.audit.events import (
    authentication_event,
    dropped_event,
    stamp,
    sweep_event,
    token_event,
)
from tokensvc.audit.generator import GROUND_TRUTH_FILE, SNAPSHOT_FILE, generate
from tokensvc.audit.reporting.job import run_report
from tokensvc.audit.reporting.options import REPORTS, ReportError, build_options, parse_time
from tokensvc.audit.rules import FINDING_COLUMNS, RULES, SEVERITIES, TOKEN_USAGE_COLUMNS

pytestmark = pytest.mark.spark

T0 = 1_704_067_200_000  # 2024-01-01T00:00:00Z


@pytest.fixture(scope="session")
def spark() -> SparkSession:
    return shared_spark()


def parquet(spark: SparkSession, out: Path, name: str) -> list[dict[str, Any]]:
    return [r.asDict() for r in spark.read.parquet(str(out / name / "parquet")).collect()]


def csv_rows(out: Path, name: str) -> tuple[list[str], list[dict[str, str]]]:
    (path,) = (out / name / "csv").glob("part-*.csv")
    with open(path, newline="") as fh:
        reader = csv.DictReader(fh)
        return list(reader.fieldnames or []), list(reader)


# --- generated data with known answers ------------------------------------------


@pytest.fixture(scope="module")
def known(tmp_path_factory: pytest.TempPathFactory, spark: SparkSession
          ) -> tuple[Path, dict[str, Any], dict[str, Any]]:
    data = tmp_path_factory.mktemp("generated")
    generate(data, 3_000, seed=11, brokers=3)
    out = tmp_path_factory.mktemp("report")
    summary = run_report(spark, build_options(str(data), str(out),
                                              tokens=str(data / SNAPSHOT_FILE)))
    truth = json.loads((data / GROUND_TRUTH_FILE).read_text())
    return out, summary, truth


def test_token_usage_is_exactly_the_ground_truth(spark: SparkSession, known: tuple) -> None:
    out, _, truth = known
    rows = parquet(spark, out, "token_usage")
    assert {r["token_id"]: r for r in rows} == truth["token_usage"]
    assert [r["token_id"] for r in rows] == sorted(truth["token_usage"])


def test_owner_usage_is_exactly_the_ground_truth(spark: SparkSession, known: tuple) -> None:
    out, _, truth = known
    assert {r["owner"]: r for r in parquet(spark, out, "owner_usage")} == truth["owner_usage"]


def test_hourly_reports_are_exactly_the_ground_truth(spark: SparkSession, known: tuple) -> None:
    out, _, truth = known
    lifecycle = {str(r.pop("hour_ms")): r for r in parquet(spark, out, "lifecycle")}
    assert {h: {k: v for k, v in r.items() if k != "hour"} for h, r in lifecycle.items()} == \
        truth["lifecycle"]
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:00Z", r["hour"]) for r in lifecycle.values())
    logins = {str(r["hour_ms"]): {"ok": r["ok"], "failed": r["failed"]}
              for r in parquet(spark, out, "logins_hourly")}
    assert logins == truth["logins_hourly"]


def test_findings_are_exactly_the_ground_truth_in_order(spark: SparkSession,
                                                        known: tuple) -> None:
    out, summary, truth = known
    assert parquet(spark, out, "findings") == truth["findings"]
    assert summary["findings_by_rule"] == {rule: truth["findings_by_rule"].get(rule, 0)
                                           for rule in RULES}
    assert all(summary["findings_by_rule"][rule] > 0 for rule in RULES)


def test_csv_matches_parquet_with_arrays_joined(spark: SparkSession, known: tuple) -> None:
    out, _, truth = known
    header, rows = csv_rows(out, "token_usage")
    assert header == list(TOKEN_USAGE_COLUMNS)
    assert len(rows) == len(truth["token_usage"])
    for row in rows:
        expected = truth["token_usage"][row["token_id"]]
        assert row["brokers"] == ";".join(str(b) for b in expected["brokers"])
        assert int(row["logins_ok"]) == expected["logins_ok"]
    header, rows = csv_rows(out, "findings")
    assert header == list(FINDING_COLUMNS) and len(rows) == len(truth["findings"])


def test_summary_counts_events_rows_and_time_range(known: tuple) -> None:
    out, summary, truth = known
    on_disk = json.loads((out / "summary.json").read_text())
    assert on_disk["rows"] == summary["rows"]
    assert summary["events"] == summary["events_read"] == summary["lines"] == 3_000
    assert summary["malformed"] == summary["duplicates"] == 0
    assert summary["time_range"]["first_ts"] == truth["first_ts"]
    assert summary["time_range"]["last_ts"] == truth["last_ts"]
    assert summary["as_of_ms"] == truth["as_of_ms"]
    assert summary["rows"]["token_usage"] == len(truth["token_usage"])
    assert summary["rows"]["findings"] == len(truth["findings"])


def test_html_report_shows_tables_and_charts_that_exist(known: tuple) -> None:
    out, _, truth = known
    page = (out / "report.html").read_text()
    images = re.findall(r'<img src="([^"]+)"', page)
    assert images == ["findings_per_hour.png", "logins_per_hour.png", "lifecycle_per_hour.png"]
    for image in images:
        assert (out / image).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    top = max(truth["token_usage"].values(),
              key=lambda u: (u["logins_ok"] + u["logins_failed"], u["token_id"]))
    assert top["token_id"] in page


def test_html_puts_findings_first_by_severity_and_groups_unused_per_owner(
        known: tuple) -> None:
    out, _, truth = known
    page = (out / "report.html").read_text()
    order = [page.index(f'id="{section}"') for section in (
        "findings", "over-time", "unused", "lifecycle", "top-tokens", "counts")]
    assert order == sorted(order)
    findings = page[page.index('id="findings"'):page.index('id="over-time"')]
    severities = re.findall(r'<tr class="(high|medium|low)">', findings)
    listed = [f for f in truth["findings"] if f["rule"] != "unused_before_expiry"]
    assert len(severities) == len(listed)
    assert severities == sorted(severities, key=SEVERITIES.index)
    for finding in listed:  # its evidence: token or host, and its count
        assert (finding["token_id"] or finding["client_host"]) in findings
    unused = [f for f in truth["findings"] if f["rule"] == "unused_before_expiry"]
    owners = {f["owner"] for f in unused}
    section = page[page.index('id="unused"'):page.index('id="lifecycle"')]
    assert section.count("<tr><td>") == len(owners)
    assert f"{len(unused):,} tokens expired" in section
    assert "unused_before_expiry" not in findings


# --- malformed lines, duplicates, time range, through the CLI --------------------


def line(body: dict[str, Any], ts: int, broker: int = 1, n: int = 0) -> str:
    return json.dumps(stamp(body, ts=ts, broker_id=broker, event_id=f"{ts:020d}{n:012d}"))


@pytest.fixture(scope="module")
def messy(tmp_path_factory: pytest.TempPathFactory, spark: SparkSession
          ) -> tuple[Path, dict[str, Any], str]:
    data = tmp_path_factory.mktemp("messy")
    login_ok = line(authentication_event(
        outcome="success", mechanism="SCRAM-SHA-256", kind="token", username="t1",
        token_id="t1", principal="User:alice", client_host="h1"), T0 + 1_000)
    good = [
        login_ok,
        line(authentication_event(outcome="failure", kind="token", username="t1",
                                  token_id="t1", client_host="h2", reason="bad_proof"),
             T0 + 2_000),
        line(token_event(action="create", outcome="success", requester="User:alice",
                         owner="User:bob", token_id="t2", client_host="h1"), T0 + 3_000),
        login_ok,  # the same event twice (files copied twice): counted once
        line(dropped_event(dropped=4, dropped_total=4), T0 + 4_000),
        line(authentication_event(outcome="success", kind="user", username="carol",
                                  principal="User:carol"), T0 - 3_600_000),  # before --since
    ]
    bad = [
        "this is not json",
        '{"schema":1,"ts":17040672',
        "[1, 2, 3]",
        '{"schema":1,"ts":"yesterday","broker_id":1,"event_id":"x","type":"sweep"}',
        # a wrong type in a field no report reads goes unseen (docs/audit.md): valid
        json.dumps({"schema": 1, "ts": T0 + 6_000, "broker_id": 1, "event_id": "w",
                    "type": "forward", "latency_ms": "slow"}),
        '{"schema":2,"ts":1,"broker_id":1,"event_id":"y","type":"sweep"}',
        '{"schema":1,"ts":1,"broker_id":1,"event_id":"z","type":"teleport"}',
        '{"schema":1,"ts":1,"type":"sweep","token_id":"t9"}',
        "",
    ]
    (data / "audit-1-20240101T000000-0.jsonl").write_text("\n".join(good + bad) + "\n")
    nested = data / "broker-2"
    nested.mkdir()
    (nested / "audit-2-20240101T000000-0.jsonl").write_text(
        line(sweep_event(token_id="t2", owner="User:bob", expiry_ms=T0, max_ms=T0),
             T0 + 5_000, broker=2) + "\n")
    (data / "notes.txt").write_text("not an audit file\n")
    out = tmp_path_factory.mktemp("messy-report")
    result = CliRunner().invoke(audit, [
        "report", "--input", str(data), "--output", str(out),
        "--since", "2024-01-01T00:00:00Z", "--until", str(T0 + 86_400_000),
    ])
    assert result.exit_code == 0, result.output
    return out, json.loads((out / "summary.json").read_text()), result.output


def test_malformed_lines_are_counted_by_reason_not_fatal(messy: tuple) -> None:
    _, summary, _ = messy
    assert summary["malformed_by_reason"] == {
        "not_json": 3, "wrong_types": 1, "unknown_schema": 1, "unknown_type": 1,
        "missing_fields": 1,
    }
    assert summary["malformed"] == 7
    # blank lines are skipped; notes.txt is not read; the nested broker file is
    assert summary["lines"] == 15


def test_duplicates_and_out_of_range_events_are_left_out(messy: tuple) -> None:
    _, summary, _ = messy
    assert summary["events_read"] == 8
    assert summary["duplicates"] == 1 and summary["outside_time_range"] == 1
    assert summary["events"] == 6
    assert summary["events_by_type"] == {"audit": 1, "authentication": 2, "forward": 1,
                                         "sweep": 1, "token": 1}
    assert summary["writer_dropped"] == 4
    assert summary["since_ms"] == T0 and summary["as_of_ms"] == T0 + 86_400_000


def test_reports_reflect_only_the_valid_events(spark: SparkSession, messy: tuple) -> None:
    out, _, _ = messy
    usage = {r["token_id"]: r for r in parquet(spark, out, "token_usage")}
    assert usage["t1"]["logins_ok"] == 1 and usage["t1"]["logins_failed"] == 1
    assert usage["t2"]["owner"] == "User:bob" and usage["t2"]["logins_ok"] == 0
    findings = {(f["rule"], f["token_id"]) for f in parquet(spark, out, "findings")}
    assert findings == {("created_for_other_owner", "t2"), ("unused_before_expiry", "t2")}


def test_cli_prints_a_short_summary(messy: tuple) -> None:
    _, _, output = messy
    assert "events: 6 (lines 15, malformed 7, duplicates 1, outside range 1)" in output
    assert re.search(r"created_for_other_owner\s+1", output)
    assert "report.html" in output


# --- empty and missing input ------------------------------------------------------


def test_empty_input_gives_every_output_with_zero_rows(spark: SparkSession,
                                                       tmp_path: Path) -> None:
    (tmp_path / "in").mkdir()
    out = tmp_path / "out"
    summary = run_report(spark, build_options(str(tmp_path / "in"), str(out)))
    assert summary["events"] == summary["lines"] == summary["malformed"] == 0
    assert summary["rows"] == dict.fromkeys(REPORTS, 0)
    assert summary["findings_by_rule"] == dict.fromkeys(RULES, 0)
    for name in REPORTS:
        assert parquet(spark, out, name) == []
        header, rows = csv_rows(out, name)
        assert header and rows == []
    assert {"report.html", "summary.json", "logins_per_hour.png", "findings_per_hour.png",
            "lifecycle_per_hour.png"} <= {p.name for p in out.iterdir()}


def test_missing_input_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ReportError, match="input path does not exist"):
        build_options(str(tmp_path / "nope"), str(tmp_path / "out"))
    with pytest.raises(ReportError, match="matches nothing"):
        build_options(str(tmp_path / "nope-*.jsonl"), str(tmp_path / "out"))
    with pytest.raises(ReportError, match="token snapshot does not exist"):
        build_options(str(tmp_path), str(tmp_path / "out"), tokens=str(tmp_path / "t.jsonl"))


def test_cli_missing_input_exits_with_a_message_not_a_traceback(tmp_path: Path) -> None:
    result = CliRunner().invoke(audit, ["report", "--input", str(tmp_path / "nope"),
                                        "--output", str(tmp_path / "out")])
    assert result.exit_code == 1
    assert "input path does not exist" in result.output
    assert "Traceback" not in result.output


def test_module_entry_point_runs_and_reports_errors(tmp_path: Path) -> None:
    """``python -m tokensvc.audit.report`` (what spark-submit runs) parses its options;
    a missing input fails before any JVM starts."""
    proc = subprocess.run(
        [sys.executable, "-m", "tokensvc.audit.report", "--input", str(tmp_path / "nope"),
         "--output", str(tmp_path / "out")],
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert proc.returncode == 2
    assert "input path does not exist" in proc.stderr


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("1704067200000", T0),
        ("2024-01-01T00:00:00Z", T0),
        ("2024-01-01T01:00:00+01:00", T0),
        ("2024-01-01", T0),
        ("2024-01-01T00:00:00.250", T0 + 250),
    ],
)
def test_times_are_iso_8601_or_epoch_ms(text: str, ms: int) -> None:
    assert parse_time(text) == ms


def test_bad_time_and_inverted_range_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ReportError, match="not a time"):
        parse_time("last tuesday")
    with pytest.raises(ReportError, match="before"):
        build_options(str(tmp_path), str(tmp_path / "o"), since="2024-01-02", until="2024-01-01")


# --- agent-made and hand-made tokens ------------------------------------------------


def test_token_origin_tells_agent_made_tokens_from_hand_made(spark: SparkSession,
                                                             tmp_path: Path) -> None:
    (tmp_path / "in").mkdir()
    creates = [("a1", "User:etl", "tokensvc-agent"), ("a2", "User:etl", "tokensvc-agent"),
               ("h1", "User:etl", "kafka-delegation-token"), ("h2", "User:bob", None)]
    lines = [json.dumps(stamp(token_event(action="create", outcome="success",
                                          requester="User:svc", owner=owner, token_id=tid,
                                          client_id=client), ts=T0 + i, broker_id=1,
                              event_id=f"{i:032d}"))
             for i, (tid, owner, client) in enumerate(creates)]
    (tmp_path / "in" / "audit-1.jsonl").write_text("\n".join(lines) + "\n")
    out = tmp_path / "out"
    summary = run_report(spark, build_options(str(tmp_path / "in"), str(out)))
    rows = {(r["owner"], r["origin"]): r["tokens"] for r in parquet(spark, out, "token_origin")}
    assert rows == {("User:etl", "agent"): 2, ("User:etl", "hand"): 1, ("User:bob", "hand"): 1}
    assert summary["tokens_by_origin"] == {"agent": 2, "hand": 2}



def test_revocations_by_actor_and_reason(spark: SparkSession, tmp_path: Path) -> None:
    (tmp_path / "in").mkdir()
    revokes = [("t1", "User:alice", "User:sec", "revoked_by_owner"),
               ("t2", "User:alice", "User:sec", "revoked_by_owner"),
               ("t3", "User:bob", "User:sec", "revoked_by_id"),
               ("t4", "User:carol", "User:admin", "owner_deleted")]
    lines = [json.dumps(stamp(token_event(action="revoke", outcome="success", requester=actor,
                                          owner=owner, token_id=tid, reason=reason),
                              ts=T0 + i, broker_id=1, event_id=f"{i:032d}"))
             for i, (tid, owner, actor, reason) in enumerate(revokes)]
    (tmp_path / "in" / "audit-1.jsonl").write_text("\n".join(lines) + "\n")
    out = tmp_path / "out"
    summary = run_report(spark, build_options(str(tmp_path / "in"), str(out)))
    rows = {(r["actor"], r["reason"]): (r["tokens"], r["owners"])
            for r in parquet(spark, out, "revocations")}
    assert rows == {("User:sec", "revoked_by_owner"): (2, 1), ("User:sec", "revoked_by_id"): (1, 1),
                    ("User:admin", "owner_deleted"): (1, 1)}
    assert summary["revocations_by_reason"] == {"owner_deleted": 1, "revoked_by_id": 1,
                                                "revoked_by_owner": 2}


def test_count_each_counts_every_frame_in_one_job(spark: SparkSession, tmp_path: Path) -> None:
    spark.range(7).write.parquet(str(tmp_path / "seven"))
    frames = {
        "parquet": spark.read.parquet(str(tmp_path / "seven")),
        "cached": spark.range(100).filter("id % 3 = 0").persist(),
        "empty": spark.range(5).filter("id > 10"),
        "wide": spark.createDataFrame([("a", [1, 2]), ("b", None)], "name string, xs array<int>"),
    }
    tracker = spark.sparkContext.statusTracker()
    spark.sparkContext.setJobGroup("count-each", "count_each")
    try:
        assert count_each(frames) == {"parquet": 7, "cached": 34, "empty": 0, "wide": 2}
        assert len(tracker.getJobIdsForGroup("count-each")) == 1
    finally:
        spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)
        frames["cached"].unpersist()
    assert count_each({}) == {}


def test_the_tests_spark_driver_compiles_with_c1_only_and_keeps_the_products_options(
        spark: SparkSession) -> None:
    """tests/conftest.py: every Spark driver of the run starts with the client compiler
    only (``SPARK_SUBMIT_OPTS``), and the shared session's still with the product's own
    driver options."""
    runtime = spark.sparkContext._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean()
    arguments = list(runtime.getInputArguments())
    assert "-XX:TieredStopAtLevel=1" in arguments, arguments
    assert "-Xss16m" in arguments, arguments
