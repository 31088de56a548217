"""The report's output: each report as Parquet and CSV, ``summary.json``, ``report.html``
and the text summary the CLI prints.

This module owns the files under the output directory and their bytes: a report's
Parquet and CSV (:func:`write_report`: arrays joined with ``;``; the labels report's CSV
quoted by RFC 4180 and made formula-safe, its cells being client-chosen text),
``summary.json`` (:func:`write_summary`), the page (:func:`write_page` collects the few,
small rows it shows and hands them to :mod:`tokensvc.audit.html`, which escapes and
renders), and :func:`format_summary` for the terminal.

It must not decide what a report holds (:mod:`.frames` does).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from tokensvc.audit import aggregates
from tokensvc.audit.html import HTML_FINDINGS, HTML_TOP_TOKENS, HTML_UNUSED_SAMPLE, PageData, render
from tokensvc.audit.reporting.frames import Reports, severity_rank
from tokensvc.audit.rules import RULE_SEVERITY, SEVERITIES
from tokensvc.core.labels import format_labels


def _csv_ready(df: DataFrame) -> DataFrame:
    """CSV has no arrays: join them with ';'."""
    return df.select(*[
        F.concat_ws(";", F.col(f.name).cast("array<string>")).alias(f.name)
        if isinstance(f.dataType, T.ArrayType) else F.col(f.name)
        for f in df.schema.fields
    ])


# A CSV cell a spreadsheet would run as a formula starts with one of these; the labels
# report's cells hold client-chosen text (label values), so such a cell gets a leading '.
_FORMULA_START = "^[=+\\-@\t\r]"


def _csv_safe(df: DataFrame) -> DataFrame:
    """String cells that start like a spreadsheet formula prefixed with ``'``."""
    return df.select(*[
        F.when(F.col(f.name).rlike(_FORMULA_START), F.concat(F.lit("'"), F.col(f.name)))
        .otherwise(F.col(f.name)).alias(f.name)
        if isinstance(f.dataType, T.StringType) else F.col(f.name)
        for f in df.schema.fields
    ])


def write_report(df: DataFrame, directory: str, name: str) -> None:
    """``directory/name/parquet`` and ``directory/name/csv`` (one file each). The labels
    report's CSV is RFC 4180 (a quote inside a quoted cell is doubled, every cell with a
    comma, quote or line break quoted) and formula-safe: its values are client-chosen."""
    base = f"{directory.rstrip('/')}/{name}"
    df.write.mode("overwrite").parquet(f"{base}/parquet")
    csv = _csv_ready(df)
    writer = csv.write.mode("overwrite").option("header", "true")
    if name == "labels":
        writer = _csv_safe(csv).write.mode("overwrite").option("header", "true") \
            .option("escape", '"').option("quoteAll", "true")
    writer.csv(f"{base}/csv")


def write_summary(out: Path, summary: dict[str, Any]) -> None:
    """``summary.json``: the summary, indented, with a final newline."""
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")


def write_page(out: Path, summary: dict[str, Any], frames: dict[str, DataFrame],
               reports: Reports, label_rows: list[dict[str, Any]]) -> None:
    """Collect what the page shows (small: limited or aggregated) and render it."""
    findings = frames["findings"]
    listed = findings.filter(F.col("rule") != "unused_before_expiry")
    shown = [r.asDict() for r in listed.orderBy(
        severity_rank(), F.col("count").desc(), "first_ts", F.coalesce("token_id", F.lit("")),
        F.coalesce("client_host", F.lit(""))).limit(HTML_FINDINGS).collect()]
    flagged = sorted({f["token_id"] for f in shown if f["token_id"]})
    # One read of the token table for every flagged token: its labels, and the hosts of
    # those flagged for too many hosts.
    flagged_rows = reports.tokens.filter(F.col("token_id").isin(flagged)).select(
        "token_id", "labels", "hosts").collect() if flagged else []
    finding_labels = {r["token_id"]: dict(r["labels"]) for r in flagged_rows
                      if r["labels"] is not None}
    many_hosts = {f["token_id"] for f in shown if f["rule"] == "too_many_hosts"}
    hosts = {r["token_id"]: sorted(r["hosts"]) for r in flagged_rows
             if r["token_id"] in many_hosts}
    unused = [r.asDict() for r in findings.filter(F.col("rule") == "unused_before_expiry")
              .groupBy(F.coalesce("owner", F.lit("(unknown owner)")).alias("owner")).agg(
                  F.count("*").alias("tokens"), F.min("first_ts").alias("first_ts"),
                  F.max("last_ts").alias("last_ts"),
                  F.slice(F.sort_array(F.collect_list("token_id")), 1, HTML_UNUSED_SAMPLE)
                  .alias("sample"))
              .orderBy(F.col("tokens").desc(), "owner").collect()]
    severity = F.element_at(F.create_map(*[
        x for rule, sev in RULE_SEVERITY.items() for x in (F.lit(rule), F.lit(sev))]),
        F.col("rule"))
    hourly = findings.groupBy(aggregates.hour_of(F.col("first_ts")).alias("hour_ms")).agg(*[
        F.count(F.when(severity == s, 1)).alias(s) for s in SEVERITIES]).orderBy("hour_ms")
    top = frames["token_usage"].orderBy(
        (F.col("logins_ok") + F.col("logins_failed")).desc(), "token_id").limit(HTML_TOP_TOKENS)
    render(out, PageData(
        summary=summary, findings=shown, finding_hosts=hosts, unused_by_owner=unused,
        findings_hourly=[r.asDict() for r in hourly.collect()],
        logins_hourly=[r.asDict() for r in frames["logins_hourly"].collect()],
        lifecycle=[r.asDict() for r in frames["lifecycle"].collect()],
        top_tokens=[r.asDict() for r in top.collect()],
        finding_labels=finding_labels, labels=label_rows,
    ))



def format_summary(summary: dict[str, Any]) -> str:
    """The few lines a person reads in the terminal after a run."""
    tr, rows = summary["time_range"], summary["rows"]
    lines = [
        (f"events: {summary['events']} (lines {summary['lines']}, "
         f"malformed {summary['malformed']}, duplicates {summary['duplicates']}, "
         f"outside range {summary['outside_time_range']})"),
        f"time range: {tr['first'] or '-'} .. {tr['last'] or '-'}",
        (f"tokens: {rows['token_usage']}  owners: {rows['owner_usage']}  "
         f"findings: {rows['findings']}"),
    ]
    lines += [f"  {rule:<28} {n}" for rule, n in summary["findings_by_rule"].items()]
    for key, values in (summary.get("labels") or {}).items():
        for value, row in values.items():
            lines.append(f"  {format_labels(((key, value),)):<28} tokens {row['tokens']}, "
                         f"logins {row['logins_ok']} ok / {row['logins_failed']} failed")
    lines.append(f"report: {Path(summary['output']) / 'report.html'}")
    return "\n".join(lines)
