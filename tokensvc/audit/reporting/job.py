"""The report job: :func:`run_report` reads, computes and writes every output, step by step.

This module owns the order of a run and what it keeps in memory: the Spark settings while
it runs (restored after), the lines read once (:mod:`.inputs`), the valid events of the
time range with identical events counted once, the lake's partial tables used in place of
the events when they stand for them, the counts of ``summary.json``, the report frames
(:mod:`.frames`) sorted into one partition each and written (:mod:`.output`), and every
DataFrame it persisted, released when the run ends.

It must not build a report's rows itself (:mod:`.frames` does) nor format a file
(:mod:`.output` does).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from tokensvc.audit import aggregates
from tokensvc.audit.counts import count_each
from tokensvc.audit.events import WRITER_EVENT_TYPE
from tokensvc.audit.lake import read_partials
from tokensvc.audit.lines import MALFORMED_REASONS
from tokensvc.audit.reporting.frames import Reports, order_of, report_frames
from tokensvc.audit.reporting.inputs import (
    LineCounts,
    count_lines,
    empty_snapshot,
    read_classified,
    read_snapshot,
)
from tokensvc.audit.reporting.options import ReportOptions, iso
from tokensvc.audit.reporting.output import write_page, write_report, write_summary
from tokensvc.audit.rules import RULES

# Session settings while the job runs (restored after): hours in UTC, and the
# per-token aggregation (collect_set) kept hash-based instead of falling back to
# sorting after 128 tokens per task; its per-token state is a few small sets.
_JOB_CONF = {
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.objectHashAggregate.sortBased.fallbackThreshold": "1000000",
}


def run_report(spark: SparkSession, options: ReportOptions) -> dict[str, Any]:
    """Read, compute, write every output under ``options.output``; the summary."""
    started = time.monotonic()
    out = Path(options.output)
    out.mkdir(parents=True, exist_ok=True)
    with _job_conf(spark):
        summary = _run(spark, options, out)
    summary["elapsed_s"] = round(time.monotonic() - started, 3)
    write_summary(out, summary)
    return summary


@contextmanager
def _job_conf(spark: SparkSession) -> Iterator[None]:
    previous = {key: spark.conf.get(key) for key in _JOB_CONF}
    for key, value in _JOB_CONF.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, value in previous.items():
            spark.conf.set(key, value)


@dataclass
class _Cache:
    """The DataFrames this run persisted; :meth:`release` unpersists them all."""

    kept: list[DataFrame] = field(default_factory=list)

    def keep(self, df: DataFrame) -> DataFrame:
        return self.track(df.persist())

    def track(self, df: DataFrame) -> DataFrame:
        """Release ``df``, persisted elsewhere, with the rest."""
        self.kept.append(df)
        return df

    def release(self) -> None:
        for df in self.kept:
            df.unpersist()


@dataclass(frozen=True)
class _Totals:
    """The event counts of the summary: ``deduped`` valid events once identical ones
    count once, ``events`` of them in range, their first and last time, per type."""

    deduped: int
    events: int
    first_ts: int | None
    last_ts: int | None
    by_type: dict[str, int]
    writer_dropped: int


def _run(spark: SparkSession, options: ReportOptions, out: Path) -> dict[str, Any]:
    cache = _Cache()
    try:
        classified = read_classified(spark, options)
        if options.lake is None:
            # Each line is parsed once, into a cache every later step reads. (The lake is
            # Parquet: reading its columns again is cheaper than caching them.)
            classified = cache.keep(classified)
        lines = count_lines(spark, options, classified)
        partials = _usable_partials(spark, options, lines)
        deduped, events = _events_in_range(classified, options, lines.ids_repeat, cache)
        totals = _totals(deduped, events, partials)
        as_of = _as_of(options, totals)
        snapshot = cache.keep(read_snapshot(spark, options.tokens) if options.tokens
                              else empty_snapshot(spark))
        reports = Reports(events, snapshot, options.settings, as_of, partials,
                          options.group_by_labels)
        for df in reports.persisted():
            cache.track(df)
        hourly = cache.keep(reports.hourly())
        frames, rows = _write_reports(report_frames(reports, hourly), out, cache)
        label_rows = [r.asDict() for r in frames["labels"].collect()]
        summary = _summary(options, out, lines, totals, as_of, rows, frames, label_rows)
        write_page(out, summary, frames, reports, label_rows)
        return summary
    finally:
        cache.release()


def _usable_partials(spark: SparkSession, options: ReportOptions, lines: LineCounts
                     ) -> dict[str, DataFrame] | None:
    """The lake's partial tables, if they stand for the events: they hold every event
    once (no id repeats) and at any time, so not when a time range is asked for."""
    if (options.lake is None or lines.partial_rows is None or lines.ids_repeat
            or not options.whole_range):
        return None
    return read_partials(spark, options.lake, lines.partial_rows)


def _events_in_range(classified: DataFrame, options: ReportOptions, ids_repeat: bool,
                     cache: _Cache) -> tuple[DataFrame, DataFrame]:
    """The valid events, identical ones once, with an ``in_range`` column; and those in
    range (without it)."""
    in_range = F.lit(True)
    if options.since_ms is not None:
        in_range = in_range & (F.col("ts") >= options.since_ms)
    if options.until_ms is not None:
        in_range = in_range & (F.col("ts") < options.until_ms)
    valid = classified.filter(F.col("status") == "ok").drop("status")
    if ids_repeat:
        # Identical events (files collected twice) count once: hashes every
        # column of every event, so only done when some id repeats.
        valid = cache.keep(valid.distinct())
    deduped = valid.withColumn("in_range", in_range)
    return deduped, deduped.filter("in_range").drop("in_range")


def _totals(deduped: DataFrame, events: DataFrame, partials: dict[str, DataFrame] | None
            ) -> _Totals:
    """From the partial tables when they stand for the events, else one aggregation."""
    if partials is not None:
        type_rows = aggregates.merge_types(partials[aggregates.TYPES]).collect()
        count = sum(r["n"] for r in type_rows)
        firsts = [r["first_ts"] for r in type_rows if r["first_ts"] is not None]
        lasts = [r["last_ts"] for r in type_rows if r["last_ts"] is not None]
        deduped_count, in_range = count, count
        first, last = min(firsts, default=None), max(lasts, default=None)
    else:
        row = deduped.agg(
            F.count("*").alias("deduped"),
            F.count(F.when(F.col("in_range"), 1)).alias("events"),
            F.min(F.when(F.col("in_range"), F.col("ts"))).alias("first"),
            F.max(F.when(F.col("in_range"), F.col("ts"))).alias("last"),
        ).first()
        assert row is not None
        deduped_count, in_range = row["deduped"], row["events"]
        first, last = row["first"], row["last"]
        type_rows = events.groupBy("type").agg(F.count("*").alias("n"),
                                               F.sum("dropped").alias("dropped")).collect()
    return _Totals(
        deduped=deduped_count, events=in_range, first_ts=first, last_ts=last,
        by_type={r["type"]: r["n"] for r in type_rows},
        writer_dropped=sum(r["dropped"] or 0 for r in type_rows
                           if r["type"] == WRITER_EVENT_TYPE),
    )


def _as_of(options: ReportOptions, totals: _Totals) -> int:
    """The time expiries are judged at: ``--until``, else the last event, else now."""
    if options.until_ms is not None:
        return options.until_ms
    return totals.last_ts if totals.last_ts is not None else int(time.time() * 1000)


def _write_reports(frames: dict[str, DataFrame], out: Path, cache: _Cache
                   ) -> tuple[dict[str, DataFrame], dict[str, int]]:
    """Each report sorted, kept, counted and written; the kept frames and their rows."""
    # Reports are small: one partition, sorted locally (no range shuffle).
    kept = {name: cache.keep(df.coalesce(1).sortWithinPartitions(*order_of(name)))
            for name, df in frames.items()}
    rows = count_each(kept)  # one job, which also fills the caches the writes read
    for name, df in kept.items():
        write_report(df, str(out), name)
    return kept, rows


def _summary(options: ReportOptions, out: Path, lines: LineCounts, totals: _Totals, as_of: int,
             rows: dict[str, int], frames: dict[str, DataFrame],
             label_rows: list[dict[str, Any]]) -> dict[str, Any]:
    """``summary.json`` (less ``elapsed_s``), from the counts and the small reports."""
    statuses = lines.statuses
    origin_rows = frames["token_origin"].collect()
    revocation_rows = frames["revocations"].collect()
    findings_by_rule = dict.fromkeys(RULES, 0)
    for r in frames["findings"].groupBy("rule").count().collect():
        findings_by_rule[r["rule"]] = r["count"]
    valid_count = statuses.get("ok", 0)
    first_ts, last_ts = totals.first_ts, totals.last_ts
    return {
        "input": options.input,
        "lake": options.lake,
        "output": str(out),
        "tokens_snapshot": options.tokens,
        "lines": sum(statuses.values()),
        "malformed": sum(statuses.get(r, 0) for r in MALFORMED_REASONS),
        "malformed_by_reason": {r: statuses.get(r, 0) for r in MALFORMED_REASONS},
        "events_read": valid_count,
        "duplicates": valid_count - totals.deduped,
        "outside_time_range": totals.deduped - totals.events,
        "events": totals.events,
        "events_by_type": dict(sorted(totals.by_type.items())),
        "writer_dropped": totals.writer_dropped,
        "time_range": {"first_ts": first_ts, "last_ts": last_ts,
                       "first": iso(first_ts), "last": iso(last_ts)},
        "since_ms": options.since_ms,
        "until_ms": options.until_ms,
        "as_of_ms": as_of,
        "settings": asdict(options.settings),
        "rows": rows,
        "findings_by_rule": findings_by_rule,
        "revocations_by_reason": {
            reason: sum(r["tokens"] for r in revocation_rows if r["reason"] == reason)
            for reason in sorted({r["reason"] for r in revocation_rows})},
        "group_by_labels": list(options.group_by_labels),
        "labels": {
            key: {r["value"]: {"tokens": r["tokens"], "logins_ok": r["logins_ok"],
                               "logins_failed": r["logins_failed"],
                               "distinct_hosts": r["distinct_hosts"]}
                  for r in label_rows if r["label"] == key}
            for key in options.group_by_labels},
        "tokens_by_origin": {
            origin: sum(r["tokens"] for r in origin_rows if r["origin"] == origin)
            for origin in ("agent", "hand")},
    }
