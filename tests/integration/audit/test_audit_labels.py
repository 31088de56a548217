"""The Spark report by job label: a generated day with two labelled jobs, and hostile label
values written safely into every output.

- a generated two-day log (tokens of the jobs ``etl-nightly`` and ``ingest``, a third
  unlabelled) gives a labels report whose tokens, successful and failed logins per job
  are exactly the generator's ground truth, with logins and failures for both jobs; the
  summary, the HTML page and the terminal summary show them;
- ``--group-by-label team``: hand-written events whose labels hold HTML, a spreadsheet
  formula, quotes and commas come out escaped in report.html, as an RFC 4180 CSV (a
  formula cell starts with ``'``), and as valid JSON in summary.json; the labels of a
  token come from its create event, its logins carry only its id.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from pyspark.sql import SparkSession

from cli.audit_cmd import audit
from tests.spark_support import shared_spark
from tokensvc.audit.events import authentication_event, stamp, token_event
from tokensvc.audit.generator import GROUND_TRUTH_FILE, SNAPSHOT_FILE, generate
from tokensvc.audit.reporting.job import run_report
from tokensvc.audit.reporting.options import build_options
from tokensvc.audit.reporting.output import format_summary

# Spark on a shared machine: a report takes minutes when the cores are busy.
pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]

T0 = 1_704_067_200_000


@pytest.fixture(scope="session")
def spark() -> SparkSession:
    return shared_spark()


def _parquet(spark: SparkSession, out: Path, name: str) -> list[dict[str, Any]]:
    return [r.asDict() for r in spark.read.parquet(str(out / name / "parquet")).collect()]


def test_a_generated_day_with_two_jobs_reports_each_jobs_logins_and_failures(
    spark: SparkSession, tmp_path: Path
) -> None:
    data = tmp_path / "generated"
    generate(data, 3_000, seed=5, brokers=3)
    truth = json.loads((data / GROUND_TRUTH_FILE).read_text())["labels"]["job"]
    assert set(truth) == {"etl-nightly", "ingest"}
    for job in truth.values():
        assert job["tokens"] > 0 and job["logins_ok"] > 0 and job["logins_failed"] > 0
    out = tmp_path / "report"
    summary = run_report(spark, build_options(str(data), str(out),
                                              tokens=str(data / SNAPSHOT_FILE)))
    rows = {r["value"]: r for r in _parquet(spark, out, "labels") if r["label"] == "job"}
    assert {job: {k: rows[job][k] for k in ("tokens", "logins_ok", "logins_failed")}
            for job in rows} == truth
    assert all(r["distinct_hosts"] >= 1 and r["hosts"] for r in rows.values())
    assert summary["labels"]["job"].keys() == truth.keys()
    for job, expected in truth.items():
        assert summary["labels"]["job"][job]["logins_failed"] == expected["logins_failed"]
    page = (out / "report.html").read_text()
    assert '<h2 id="labels">' in page
    for job, expected in truth.items():
        assert f"<td>{job}</td>" in page
    text = format_summary(summary)
    for job, expected in truth.items():
        assert (f"job={job}" in text
                and f"logins {expected['logins_ok']} ok / {expected['logins_failed']} failed"
                in text)


HOSTILE = {
    "job": "<script>alert('x')</script>",
    "team": "=HYPERLINK(\"http://evil\",\"click\")",
}


def _event(i: int, body: dict) -> str:
    return json.dumps(stamp(body, ts=T0 + i * 1000, broker_id=1, event_id=f"{i:032x}"))


def test_hostile_label_values_are_escaped_in_html_csv_and_json(
    spark: SparkSession, tmp_path: Path
) -> None:
    source = tmp_path / "in"
    source.mkdir()
    plain = {"job": "etl,nightly \"quoted\"", "team": "payments"}
    lines = [
        _event(0, token_event(action="create", outcome="success", requester="User:a",
                              owner="User:a", token_id="tok-evil", labels=HOSTILE)),
        _event(1, token_event(action="create", outcome="success", requester="User:a",
                              owner="User:a", token_id="tok-plain", labels=plain)),
    ]
    for i in range(2, 8):
        token = "tok-evil" if i % 2 else "tok-plain"
        lines.append(_event(i, authentication_event(
            outcome="success" if i < 6 else "failure", kind="token", username=token,
            token_id=token, principal="User:a" if i < 6 else None,
            client_host=f"10.0.0.{i}")))
    (source / "audit-1-0.jsonl").write_text("\n".join(lines) + "\n")
    out = tmp_path / "out"
    result = CliRunner().invoke(audit, ["report", "--input", str(source), "--output", str(out),
                                        "--group-by-label", "team"])
    assert result.exit_code == 0, result.output
    rows = {(r["label"], r["value"]): r for r in _parquet(spark, out, "labels")}
    assert set(rows) == {("job", HOSTILE["job"]), ("job", plain["job"]),
                         ("team", HOSTILE["team"]), ("team", "payments")}
    assert rows[("job", HOSTILE["job"])]["logins_ok"] == 2
    assert rows[("job", HOSTILE["job"])]["logins_failed"] == 1
    assert rows[("team", "payments")]["logins_ok"] == 2

    page = (out / "report.html").read_text()
    assert "<script>" not in page
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in page
    assert "=HYPERLINK(&quot;http://evil&quot;" in page

    (path,) = (out / "labels" / "csv").glob("part-*.csv")
    with open(path, newline="") as fh:
        cells = {(r["label"], r["value"]) for r in csv.DictReader(fh)}
    assert ("team", "'" + HOSTILE["team"]) in cells  # a formula is text, not a formula
    assert ("job", plain["job"]) in cells  # comma and quotes survive RFC 4180 quoting
    assert ("job", HOSTILE["job"]) in cells

    summary = json.loads((out / "summary.json").read_text())
    assert summary["labels"]["team"][HOSTILE["team"]]["tokens"] == 1
    assert summary["group_by_labels"] == ["job", "team"]


def test_a_bad_group_by_label_key_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "in").mkdir()
    result = CliRunner().invoke(audit, ["report", "--input", str(tmp_path / "in"), "--output",
                                        str(tmp_path / "out"), "--group-by-label", "Team"])
    assert result.exit_code == 1
    assert "--group-by-label: label key 'Team'" in result.output
