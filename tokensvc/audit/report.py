"""The token audit report: a Spark job over the brokers' audit files.

This module owns reading audit lines (any Spark-readable path; malformed lines
are classified and counted, never fatal) or the lake of ``tokensvc audit ingest``
(:mod:`tokensvc.audit.lake`, the same rows from there on), the report DataFrames (token_usage,
owner_usage, lifecycle, logins_hourly, findings, token_origin, revocations, and labels:
tokens, logins, failures and hosts per value of the ``job`` label and of every label named
with ``--group-by-label``; a token's labels come from its create or revocation event, or
from the token snapshot), writing each as Parquet and
CSV, ``summary.json``, ``report.html`` with its PNG charts, and the text summary
the CLI prints. The rules are those of :mod:`tokensvc.audit.rules`, whose pure
reference implementation the tests hold this job to.

It uses DataFrame expressions only (no Python UDFs), so executors need nothing
but Spark. It must not be imported by the broker: pyspark is loaded only here.

Run it as ``tokensvc audit report``, ``python -m tokensvc.audit.report`` or
``spark-submit tokensvc/audit/report.py`` (same options).
"""

from __future__ import annotations

import argparse
import glob as globlib
import json
import os
import sys
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from pyspark.errors import AnalysisException
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from tokensvc.audit import aggregates
from tokensvc.audit.events import WRITER_EVENT_TYPE
from tokensvc.audit.html import HTML_FINDINGS, HTML_TOP_TOKENS, HTML_UNUSED_SAMPLE, PageData, render
from tokensvc.audit.lake import (
    LakeError,
    distinct_id_hashes,
    read_lake,
    read_partials,
    read_stats,
    row_counts,
)
from tokensvc.audit.lines import EVENT_SCHEMA, MALFORMED_REASONS, classify, json_reader_options
from tokensvc.audit.rules import (
    DEFAULT_SETTINGS,
    FINDING_COLUMNS,
    LIFECYCLE_COLUMNS,
    LOGINS_HOURLY_COLUMNS,
    OWNER_USAGE_COLUMNS,
    RULE_SEVERITY,
    RULES,
    SEVERITIES,
    TOKEN_USAGE_COLUMNS,
    UNUSED_DETAIL,
    RuleSettings,
)
from tokensvc.core.labels import LabelError, check_key, format_labels

DEFAULT_GLOB = "audit-*.jsonl*"
REPORTS = ("token_usage", "owner_usage", "lifecycle", "logins_hourly", "findings",
           "token_origin", "revocations", "labels")
# The label keys the labels report groups by unless told otherwise.
DEFAULT_GROUP_BY_LABELS = ("job",)
# Hosts listed per label value in the labels report (the count is exact).
LABEL_HOSTS_SHOWN = 20
LABELS_COLUMNS = ("label", "value", "tokens", "owners", "logins_ok", "logins_failed",
                  "distinct_hosts", "hosts", "first_use", "last_use")
_LABEL_MAP = T.MapType(T.StringType(), T.StringType())
# The client id of the token agent's requests (tokensvc.agent.runner.CLIENT_ID): tokens it
# created are "agent"-made in the token_origin report.
AGENT_CLIENT_ID = "tokensvc-agent"
_S, _L, _I = T.StringType(), T.LongType(), T.IntegerType()
SNAPSHOT_SCHEMA = T.StructType([
    T.StructField("token_id", _S), T.StructField("owner", _S), T.StructField("requester", _S),
    T.StructField("renewers", T.ArrayType(_S)), T.StructField("issue_ms", _L),
    T.StructField("expiry_ms", _L), T.StructField("max_ms", _L),
    T.StructField("labels", T.MapType(_S, _S)),
])


class ReportError(Exception):
    """A problem the person running the report can fix (bad path, bad option)."""


@dataclass(frozen=True)
class ReportOptions:
    """``input`` is the audit files (JSON lines), or ``lake`` the Parquet lake of
    ``tokensvc audit ingest``: exactly one of them."""

    input: str | None
    output: str
    since_ms: int | None = None
    until_ms: int | None = None
    settings: RuleSettings = DEFAULT_SETTINGS
    tokens: str | None = None
    glob: str = DEFAULT_GLOB
    lake: str | None = None
    group_by_labels: tuple[str, ...] = DEFAULT_GROUP_BY_LABELS


def parse_time(text: str) -> int:
    """Epoch milliseconds from ``text``: digits are epoch ms, anything else ISO-8601
    (a time without a zone is UTC)."""
    text = text.strip()
    if text.lstrip("-").isdigit():
        return int(text)
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise ReportError(f"not a time: {text!r} (use ISO-8601 or epoch milliseconds)") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def iso(ms: int | None) -> str | None:
    if ms is None:
        return None
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


# --- input ---------------------------------------------------------------------


def _local_path(path: str) -> str | None:
    """The filesystem path if ``path`` is local (no scheme or file:), else None."""
    parsed = urlparse(path)
    if parsed.scheme in ("", "file"):
        return parsed.path if parsed.scheme == "file" else path
    return None


def _check_exists(path: str, what: str) -> bool:
    """Raise ReportError if a local ``path`` (glob allowed) is missing. True if it is
    (or matches) a directory, or is remote and cannot be told."""
    local = _local_path(path)
    if local is None:
        return True
    if any(ch in local for ch in "*?["):
        matches = globlib.glob(local)
        if not matches:
            raise ReportError(f"{what} matches nothing: {path}")
        return any(os.path.isdir(m) for m in matches)
    if not os.path.exists(local):
        raise ReportError(f"{what} does not exist: {path}")
    return os.path.isdir(local)


def read_events(spark: SparkSession, path: str, glob: str = DEFAULT_GLOB) -> DataFrame:
    """Every non-blank line as a row of :data:`EVENT_SCHEMA`; a line that does not fit
    has its text in ``_corrupt_record``. A directory is searched recursively for files
    named like ``glob``; a named local file is read whatever its name."""
    is_dir = _check_exists(path, "input path")
    reader = (spark.read.schema(EVENT_SCHEMA).options(**json_reader_options())
              .option("recursiveFileLookup", "true"))
    if is_dir:
        reader = reader.option("pathGlobFilter", glob)
    try:
        return reader.json(path)
    except AnalysisException as exc:
        raise ReportError(f"cannot read input {path}: {exc.getMessage()}") from None


def read_snapshot(spark: SparkSession, path: str) -> DataFrame:
    """The token snapshot (JSON lines of ``tokensvc tokens export``); bad lines skipped."""
    _check_exists(path, "token snapshot")
    try:
        df = spark.read.schema(SNAPSHOT_SCHEMA).option("mode", "PERMISSIVE").json(path)
    except AnalysisException as exc:
        raise ReportError(f"cannot read token snapshot {path}: {exc.getMessage()}") from None
    return df.filter(F.col("token_id").isNotNull() & F.col("expiry_ms").isNotNull()
                     & F.col("max_ms").isNotNull())


def empty_snapshot(spark: SparkSession) -> DataFrame:
    return spark.createDataFrame([], SNAPSHOT_SCHEMA)


# --- reports -------------------------------------------------------------------


def _hour_text(hour_ms: Column) -> Column:
    return F.date_format(F.timestamp_millis(hour_ms), "yyyy-MM-dd'T'HH:00'Z'")


class Reports:
    """The report DataFrames over one set of in-range, de-duplicated events.

    The counts, sums and sets come from partial tables (:mod:`tokensvc.audit.aggregates`):
    ``partials`` (the lake's per-batch tables) when given, else built from ``events``;
    either way one merge per table. The failed-login bursts and the findings per
    event read ``events`` (only the failed logins and the token creates).
    """

    def __init__(self, events: DataFrame, snapshot: DataFrame, settings: RuleSettings,
                 as_of_ms: int, partials: dict[str, DataFrame] | None = None,
                 group_by_labels: tuple[str, ...] = DEFAULT_GROUP_BY_LABELS) -> None:
        self.settings = settings
        self.as_of_ms = as_of_ms
        self.events = events
        self.snapshot = snapshot
        self.group_by_labels = group_by_labels
        self.logins = aggregates.logins(events)
        self.requests = aggregates.requests(events)
        if partials is None:
            partials = {name: build(events) for name, build in aggregates.PARTIALS.items()}
        self.partials = partials
        tokens = partials[aggregates.TOKENS]
        self.tokens = aggregates.merge_tokens(tokens.unionByName(
            aggregates.snapshot_tokens(snapshot, tokens))).persist()  # small, read by most

    def close(self) -> None:
        self.tokens.unpersist()

    def token_usage(self) -> DataFrame:
        return self.tokens.select(*TOKEN_USAGE_COLUMNS)

    def owner_usage(self) -> DataFrame:
        return self.tokens.filter(F.col("owner").isNotNull()).groupBy("owner").agg(
            F.count("*").alias("tokens"),
            F.sum("logins_ok").alias("logins_ok"),
            F.sum("logins_failed").alias("logins_failed"),
            F.size(F.array_distinct(F.flatten(F.collect_list("hosts")))).alias("distinct_hosts"),
        ).select(*OWNER_USAGE_COLUMNS)

    def token_origin(self) -> DataFrame:
        """Tokens created per owner, agent-made (client id ``tokensvc-agent...``: the token
        agent, docs/agent.md) or hand-made (any other client)."""
        created = self.events.filter(
            (F.col("type") == "token") & (F.col("action") == "create")
            & (F.col("outcome") == "success") & F.col("token_id").isNotNull())
        origin = F.when(F.coalesce(F.col("client_id"), F.lit("")).startswith(AGENT_CLIENT_ID),
                        F.lit("agent")).otherwise(F.lit("hand"))
        return created.groupBy(F.coalesce("owner", F.lit("(unknown)")).alias("owner"),
                               origin.alias("origin")).agg(
            F.countDistinct("token_id").alias("tokens"),
            F.min("ts").alias("first_ts"), F.max("ts").alias("last_ts"))

    def revocations(self) -> DataFrame:
        """Tokens revoked without their HMAC, by actor (the requester) and reason
        (``revoked_by_id``, ``revoked_by_owner``, ``owner_deleted``)."""
        revoked = self.events.filter(
            (F.col("type") == "token") & (F.col("action") == "revoke")
            & (F.col("outcome") == "success") & F.col("token_id").isNotNull())
        return revoked.groupBy(F.coalesce("requester", F.lit("(unknown)")).alias("actor"),
                               F.coalesce("reason", F.lit("(none)")).alias("reason")).agg(
            F.countDistinct("token_id").alias("tokens"),
            F.countDistinct("owner").alias("owners"),
            F.min("ts").alias("first_ts"), F.max("ts").alias("last_ts"))

    def token_labels(self) -> DataFrame:
        """``token_id``, ``labels`` (a map) of every token whose labels are known: from its
        create or revocation event (the only events that carry them, docs/audit.md), else
        from the token snapshot. Every other event about a token names it by id only."""
        from_events = self.events.filter(
            (F.col("type") == "token") & F.col("action").isin("create", "revoke")
            & (F.col("outcome") == "success") & F.col("token_id").isNotNull()
            & F.col("labels").isNotNull()
        ).select("token_id", F.from_json("labels", _LABEL_MAP).alias("labels"))
        from_snapshot = self.snapshot.filter(
            F.col("labels").isNotNull() & (F.size("labels") > 0)).select("token_id", "labels")
        return from_events.unionByName(from_snapshot).filter(F.col("labels").isNotNull()) \
            .groupBy("token_id").agg(F.first("labels").alias("labels"))

    def labels(self) -> DataFrame:
        """Per value of each label key in ``group_by_labels``: the tokens carrying it, their
        owners, successful and failed logins, distinct hosts (and the first
        :data:`LABEL_HOSTS_SHOWN` of them), first and last use."""
        labelled = self.tokens.join(self.token_labels(), "token_id", "inner")
        per_key = None
        for key in self.group_by_labels:
            rows = labelled.select(
                F.lit(key).alias("label"), F.col("labels").getItem(key).alias("value"),
                "token_id", "owner", "logins_ok", "logins_failed", "hosts", "first_use",
                "last_use",
            ).filter(F.col("value").isNotNull())
            per_key = rows if per_key is None else per_key.unionByName(rows)
        if per_key is None:
            return self.tokens.sparkSession.createDataFrame([], T.StructType([
                T.StructField("label", _S), T.StructField("value", _S),
                T.StructField("tokens", _L), T.StructField("owners", _L),
                T.StructField("logins_ok", _L), T.StructField("logins_failed", _L),
                T.StructField("distinct_hosts", _I), T.StructField("hosts", T.ArrayType(_S)),
                T.StructField("first_use", _L), T.StructField("last_use", _L)]))
        hosts = F.array_sort(F.array_distinct(F.flatten(F.collect_list("hosts"))))
        return per_key.groupBy("label", "value").agg(
            F.countDistinct("token_id").alias("tokens"),
            F.countDistinct("owner").alias("owners"),
            F.sum("logins_ok").cast(_L).alias("logins_ok"),
            F.sum("logins_failed").cast(_L).alias("logins_failed"),
            hosts.alias("all_hosts"),
            F.min("first_use").alias("first_use"), F.max("last_use").alias("last_use"),
        ).select("label", "value", "tokens", "owners", "logins_ok", "logins_failed",
                 F.size("all_hosts").alias("distinct_hosts"),
                 F.slice("all_hosts", 1, LABEL_HOSTS_SHOWN).alias("hosts"),
                 "first_use", "last_use")

    # -- per hour -----------------------------------------------------------------

    def hourly(self) -> DataFrame:
        """Logins and lifecycle changes per hour."""
        return aggregates.merge_hours(self.partials[aggregates.HOURS]).withColumn(
            "hour", _hour_text(F.col("hour_ms")))

    @staticmethod
    def lifecycle(hourly: DataFrame) -> DataFrame:
        busy = F.col("creates") + F.col("renews") + F.col("expiries") + F.col("sweeps") > 0
        return hourly.filter(busy).select(*LIFECYCLE_COLUMNS)

    @staticmethod
    def logins_hourly(hourly: DataFrame) -> DataFrame:
        return hourly.filter(F.col("ok") + F.col("failed") > 0).select(*LOGINS_HOURLY_COLUMNS)

    # -- findings -----------------------------------------------------------------

    def _owners(self) -> DataFrame:
        return self.tokens.select(F.col("token_id").alias("owner_of"), "owner")

    def _bursts(self) -> DataFrame:
        """Both burst rules: one window over (kind, key) of failed logins."""
        s = self.settings
        failures = self.logins.filter(~F.col("ok"))
        keyed = failures.filter((F.col("kind") == "token") & F.col("tid").isNotNull()).select(
            F.lit("failed_login_burst_token").alias("rule"), F.col("tid").alias("key"), "ts",
        ).unionByName(failures.filter(F.col("client_host").isNotNull()).select(
            F.lit("failed_login_burst_host").alias("rule"), F.col("client_host").alias("key"),
            "ts",
        ))
        window = Window.partitionBy("rule", "key").orderBy("ts").rangeBetween(
            0, s.burst_window_ms)
        bursts = (
            keyed.select("rule", "key", "ts", F.count(F.lit(1)).over(window).alias("n"),
                         F.max("ts").over(window).alias("end"))
            .filter(F.col("n") >= s.burst_threshold)
            .groupBy("rule", "key").agg(F.min("ts").alias("first_ts"),
                                        F.max("end").alias("last_ts"), F.max("n").alias("count"))
            .join(self._owners(), F.col("key") == F.col("owner_of"), "left")
        )
        by_token = F.col("rule") == "failed_login_burst_token"
        return self._finding(
            bursts, F.col("rule"),
            token_id=F.when(by_token, F.col("key")), owner=F.when(by_token, F.col("owner")),
            client_host=F.when(~by_token, F.col("key")),
            detail=F.format_string(f"%d failed logins within {s.burst_window_s}s",
                                   F.col("count")),
        )

    def _grouped(self) -> DataFrame:
        """unknown_token, expired_token_use and token_session_token_request, in one
        aggregation keyed by (rule, token id or requester, client host)."""
        grouped = aggregates.merge_grouped(self.partials[aggregates.GROUPED]).join(
            self._owners(), F.col("key") == F.col("owner_of"), "left")
        rule, count = F.col("rule"), F.col("count")
        session = rule == "token_session_token_request"
        detail = (
            F.when(rule == "unknown_token",
                   F.format_string("%d logins with an unknown token id", count))
            .when(rule == "expired_token_use",
                  F.format_string("%d logins with an expired token", count))
            .otherwise(F.format_string("%d token requests from a token-authenticated session",
                                       count))
        )
        return self._finding(
            grouped, rule, token_id=F.when(~session, F.col("key")),
            owner=F.when(session, F.col("key")).otherwise(F.col("owner")),
            client_host=F.col("client_host"), detail=detail,
        )

    def _per_token(self) -> DataFrame:
        """too_many_hosts and unused_before_expiry: filters of the token table."""
        s = self.settings
        many = F.col("distinct_hosts") > s.host_threshold
        unused = F.col("logins_ok") == 0
        from_log = unused & F.col("created").isNotNull() & F.col("ended").isNotNull()
        from_snapshot = (unused & ~from_log & F.col("in_snapshot")
                         & (F.col("snapshot_end_ms") < F.lit(self.as_of_ms)))
        rows = self.tokens.filter(many).select(
            F.lit("too_many_hosts").alias("rule"), "token_id", "owner",
            F.format_string(f"used from %d distinct hosts (threshold {s.host_threshold})",
                            F.col("distinct_hosts")).alias("detail"),
            F.col("first_use").alias("first_ts"), F.col("last_use").alias("last_ts"),
            F.col("distinct_hosts").cast(_L).alias("count"),
        ).unionByName(self.tokens.filter(from_log | from_snapshot).select(
            F.lit("unused_before_expiry").alias("rule"), "token_id", "owner",
            F.when(~from_log, UNUSED_DETAIL["snapshot"])
            .when(F.col("ended.how") == "sweep", UNUSED_DETAIL["sweep"])
            .otherwise(UNUSED_DETAIL["expire"]).alias("detail"),
            F.when(from_log, F.col("created")).otherwise(F.col("issue_ms")).alias("first_ts"),
            F.when(from_log, F.col("ended.ts")).otherwise(F.col("snapshot_end_ms"))
            .alias("last_ts"),
            F.lit(0).cast(_L).alias("count"),
        ))
        return self._finding(rows, F.col("rule"), token_id=F.col("token_id"),
                             owner=F.col("owner"), client_host=F.lit(None),
                             detail=F.col("detail"))

    def _other_owner(self) -> DataFrame:
        rows = self.requests.filter(
            (F.col("action") == "create") & F.col("ok") & F.col("owner").isNotNull()
            & F.col("requester").isNotNull() & (F.col("owner") != F.col("requester"))
        ).select("token_id", "owner", "client_host", "requester",
                 F.col("ts").alias("first_ts"), F.col("ts").alias("last_ts"),
                 F.lit(1).alias("count"))
        return self._finding(rows, F.lit("created_for_other_owner"), token_id=F.col("token_id"),
                             owner=F.col("owner"), client_host=F.col("client_host"),
                             detail=F.concat(F.lit("created by "), F.col("requester")))

    @staticmethod
    def _finding(df: DataFrame, rule: Column, *, token_id: Column, owner: Column,
                 client_host: Column, detail: Column) -> DataFrame:
        return df.select(
            rule.alias("rule"), token_id.cast(_S).alias("token_id"),
            owner.cast(_S).alias("owner"), client_host.cast(_S).alias("client_host"),
            detail.alias("detail"), F.col("first_ts").cast(_L).alias("first_ts"),
            F.col("last_ts").cast(_L).alias("last_ts"), F.col("count").cast(_L).alias("count"),
        )

    def findings(self) -> DataFrame:
        parts = [self._bursts(), self._grouped(), self._per_token(), self._other_owner()]
        union = parts[0]
        for df in parts[1:]:
            union = union.unionByName(df)
        return union.select(*FINDING_COLUMNS)


# --- output --------------------------------------------------------------------


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


def _order(name: str) -> list[Column]:
    """The row order of each report (deterministic output)."""
    if name == "findings":
        return [F.col("rule"), F.col("first_ts"), F.coalesce("token_id", F.lit("")),
                F.coalesce("client_host", F.lit(""))]
    if name == "token_origin":
        return [F.col("owner"), F.col("origin")]
    if name == "revocations":
        return [F.col("actor"), F.col("reason")]
    if name == "labels":
        return [F.col("label"), F.col("value")]
    key = {"token_usage": "token_id", "owner_usage": "owner"}.get(name, "hour_ms")
    return [F.col(key)]


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
    previous = {key: spark.conf.get(key) for key in _JOB_CONF}
    for key, value in _JOB_CONF.items():
        spark.conf.set(key, value)
    try:
        summary = _run(spark, options, out)
    finally:
        for key, value in previous.items():
            spark.conf.set(key, value)
    summary["elapsed_s"] = round(time.monotonic() - started, 3)
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    return summary


def _statuses(spark: SparkSession, options: ReportOptions, classified: DataFrame
              ) -> tuple[dict[str, int], bool, dict[str, int] | None]:
    """Line counts by status, whether some event id repeats, and the rows of the
    lake's partial tables if they stand for its events. From the lake's
    per-batch statistics when they match the rows in the lake's Parquet footers (no
    event is read, except the ``id_hash`` column when only a check across batches can
    tell), else by one scan: distinct
    64-bit hashes of the ids (a collision only costs an unneeded exact
    de-duplication)."""
    lake = options.lake
    stats = read_stats(lake) if lake is not None else None
    if lake is not None and stats is not None:
        ok = stats.statuses["ok"]
        # Files removed or added by hand leave the statistics stale: then scan.
        if row_counts(spark, lake) == (ok, sum(stats.statuses.values()) - ok):
            repeat = stats.ids_repeat
            if repeat is None:
                repeat = distinct_id_hashes(spark, lake) < ok
            return stats.statuses, repeat, stats.aggregate_rows
    rows = classified.groupBy("status").agg(
        F.count("*").alias("n"),
        F.countDistinct(F.xxhash64("event_id")).alias("ids")).collect()
    statuses = {r["status"]: r["n"] for r in rows}
    ok_ids = sum(r["ids"] for r in rows if r["status"] == "ok")
    return statuses, ok_ids < statuses.get("ok", 0), None


def _merged_counts(partials: dict[str, DataFrame]) -> tuple[dict[str, Any], list[Any]]:
    """The summary's counts and its rows per event type, from the partial tables."""
    type_rows = aggregates.merge_types(partials[aggregates.TYPES]).collect()
    events = sum(r["n"] for r in type_rows)
    firsts = [r["first_ts"] for r in type_rows if r["first_ts"] is not None]
    lasts = [r["last_ts"] for r in type_rows if r["last_ts"] is not None]
    return ({"deduped": events, "events": events, "first": min(firsts, default=None),
             "last": max(lasts, default=None)}, type_rows)


def _run(spark: SparkSession, options: ReportOptions, out: Path) -> dict[str, Any]:
    cached: list[DataFrame] = []
    if options.lake is not None:
        # Parquet: reading the columns again is cheaper than caching them.
        try:
            classified = read_lake(spark, options.lake)
        except LakeError as exc:
            raise ReportError(str(exc)) from None
    else:
        # Each line is parsed once, into a cache every later step reads.
        assert options.input is not None
        classified = classify(read_events(spark, options.input, options.glob)).persist()
        cached.append(classified)
    try:
        statuses, repeat, agg_rows = _statuses(spark, options, classified)
        # The lake's partial tables hold every event once (no id repeats) and at any
        # time: they stand for the events unless a time range is asked for.
        partials = (read_partials(spark, options.lake, agg_rows)
                    if options.lake is not None and agg_rows is not None and not repeat
                    and options.since_ms is None and options.until_ms is None else None)
        in_range = F.lit(True)
        if options.since_ms is not None:
            in_range = in_range & (F.col("ts") >= options.since_ms)
        if options.until_ms is not None:
            in_range = in_range & (F.col("ts") < options.until_ms)
        valid = classified.filter(F.col("status") == "ok").drop("status")
        if repeat:
            # Identical events (files collected twice) count once: hashes every
            # column of every event, so only done when some id repeats.
            valid = valid.distinct().persist()
            cached.append(valid)
        deduped = valid.withColumn("in_range", in_range)
        events = deduped.filter("in_range").drop("in_range")
        if partials is not None:
            counts, type_rows = _merged_counts(partials)
        else:
            row = deduped.agg(
                F.count("*").alias("deduped"),
                F.count(F.when(F.col("in_range"), 1)).alias("events"),
                F.min(F.when(F.col("in_range"), F.col("ts"))).alias("first"),
                F.max(F.when(F.col("in_range"), F.col("ts"))).alias("last"),
            ).first()
            assert row is not None
            counts = row.asDict()
            type_rows = events.groupBy("type").agg(F.count("*").alias("n"),
                                                   F.sum("dropped").alias("dropped")).collect()
        by_type = {r["type"]: r["n"] for r in type_rows}
        dropped = sum(r["dropped"] or 0 for r in type_rows if r["type"] == WRITER_EVENT_TYPE)
        first_ts, last_ts = counts["first"], counts["last"]
        as_of = options.until_ms if options.until_ms is not None else (
            last_ts if last_ts is not None else int(time.time() * 1000))
        snapshot = (read_snapshot(spark, options.tokens) if options.tokens
                    else empty_snapshot(spark)).persist()
        cached.append(snapshot)
        reports = Reports(events, snapshot, options.settings, as_of, partials,
                          options.group_by_labels)
        cached.append(reports.tokens)
        hourly = reports.hourly().persist()
        cached.append(hourly)
        frames = {
            "token_usage": reports.token_usage(),
            "owner_usage": reports.owner_usage(),
            "lifecycle": reports.lifecycle(hourly),
            "logins_hourly": reports.logins_hourly(hourly),
            "findings": reports.findings(),
            "token_origin": reports.token_origin(),
            "revocations": reports.revocations(),
            "labels": reports.labels(),
        }
        # Reports are small: one partition, sorted locally (no range shuffle).
        frames = {name: df.coalesce(1).sortWithinPartitions(*_order(name)).persist()
                  for name, df in frames.items()}
        cached += frames.values()
        rows = {name: df.count() for name, df in frames.items()}
        for name, df in frames.items():
            write_report(df, str(out), name)
        origin_rows = frames["token_origin"].collect()
        revocation_rows = frames["revocations"].collect()
        label_rows = [r.asDict() for r in frames["labels"].collect()]
        findings_by_rule = dict.fromkeys(RULES, 0)
        for r in frames["findings"].groupBy("rule").count().collect():
            findings_by_rule[r["rule"]] = r["count"]
        valid_count = statuses.get("ok", 0)
        summary: dict[str, Any] = {
            "input": options.input,
            "lake": options.lake,
            "output": str(out),
            "tokens_snapshot": options.tokens,
            "lines": sum(statuses.values()),
            "malformed": sum(statuses.get(r, 0) for r in MALFORMED_REASONS),
            "malformed_by_reason": {r: statuses.get(r, 0) for r in MALFORMED_REASONS},
            "events_read": valid_count,
            "duplicates": valid_count - counts["deduped"],
            "outside_time_range": counts["deduped"] - counts["events"],
            "events": counts["events"],
            "events_by_type": dict(sorted(by_type.items())),
            "writer_dropped": dropped,
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
        _write_html(out, summary, frames, reports, label_rows)
        return summary
    finally:
        for df in cached:
            df.unpersist()


# --- report.html ---------------------------------------------------------------


def _severity_rank() -> Column:
    rank = F.lit(len(SEVERITIES))
    for rule, severity in RULE_SEVERITY.items():
        rank = F.when(F.col("rule") == rule, SEVERITIES.index(severity)).otherwise(rank)
    return rank


def _write_html(out: Path, summary: dict[str, Any], frames: dict[str, DataFrame],
                reports: Reports, label_rows: list[dict[str, Any]]) -> None:
    """Collect what the page shows (small: limited or aggregated) and render it."""
    findings = frames["findings"]
    listed = findings.filter(F.col("rule") != "unused_before_expiry")
    shown = [r.asDict() for r in listed.orderBy(
        _severity_rank(), F.col("count").desc(), "first_ts", F.coalesce("token_id", F.lit("")),
        F.coalesce("client_host", F.lit(""))).limit(HTML_FINDINGS).collect()]
    flagged = sorted({f["token_id"] for f in shown if f["token_id"]})
    finding_labels = {r["token_id"]: dict(r["labels"]) for r in reports.token_labels().filter(
        F.col("token_id").isin(flagged)).collect()} if flagged else {}
    many_hosts = [f["token_id"] for f in shown if f["rule"] == "too_many_hosts"]
    hosts = {r["token_id"]: sorted(r["hosts"]) for r in reports.tokens.filter(
        F.col("token_id").isin(many_hosts)).select("token_id", "hosts").collect()
    } if many_hosts else {}
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


# --- running it ----------------------------------------------------------------


# A deeper thread stack for the driver: the streaming thread of `audit watch` once
# overflowed the default (a regular expression over a long plan description).
DRIVER_JAVA_OPTIONS = "-Xss16m"


def create_session(master: str | None = None, app_name: str = "tokensvc-audit-report"
                   ) -> SparkSession:
    """A SparkSession for the report: the active one if there is one (tests, notebooks),
    else a new one. Without ``master``: spark-submit's, else local[*]."""
    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    builder = SparkSession.builder.appName(app_name)
    if master is None and "PYSPARK_GATEWAY_PORT" not in os.environ:
        master = "local[*]"
    if master is not None:
        builder = builder.master(master)
        if master.startswith("local"):
            builder = (builder.config("spark.sql.shuffle.partitions", "8")
                       .config("spark.driver.memory", "2g")
                       .config("spark.driver.extraJavaOptions", DRIVER_JAVA_OPTIONS))
    # Python workers (watch's pandas state function) run this interpreter, so they
    # find the same packages as the driver (pyspark reads the variable at start).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = (builder.config("spark.sql.session.timeZone", "UTC")
               .config("spark.ui.showConsoleProgress", "false"))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark


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


def build_options(
    input_path: str | None,
    output: str,
    *,
    since: str | None = None,
    until: str | None = None,
    host_threshold: int = DEFAULT_SETTINGS.host_threshold,
    burst_threshold: int = DEFAULT_SETTINGS.burst_threshold,
    burst_window_s: int = DEFAULT_SETTINGS.burst_window_s,
    tokens: str | None = None,
    glob: str = DEFAULT_GLOB,
    lake: str | None = None,
    group_by_labels: tuple[str, ...] = (),
) -> ReportOptions:
    """Validated options from command-line values (raises ReportError). The labels report
    groups by ``job`` and by each key of ``group_by_labels``."""
    if (input_path is None) == (lake is None):
        raise ReportError("give exactly one of --input (audit files) and --lake (lake directory)")
    try:
        settings = RuleSettings(host_threshold, burst_threshold, burst_window_s)
    except ValueError as exc:
        raise ReportError(str(exc)) from None
    since_ms = parse_time(since) if since else None
    until_ms = parse_time(until) if until else None
    if since_ms is not None and until_ms is not None and since_ms >= until_ms:
        raise ReportError("--since must be before --until")
    if input_path is not None:
        _check_exists(input_path, "input path")  # before a JVM starts, where we can tell
    elif lake is not None and not os.path.isdir(lake):
        raise ReportError(f"lake directory does not exist: {lake}")
    if tokens:
        _check_exists(tokens, "token snapshot")
    keys = tuple(dict.fromkeys((*DEFAULT_GROUP_BY_LABELS, *group_by_labels)))
    for key in keys:
        try:
            check_key(key)
        except LabelError as exc:
            raise ReportError(f"--group-by-label: {exc.message}") from None
    return ReportOptions(input_path, output, since_ms, until_ms, settings, tokens, glob, lake,
                         keys)


def main(argv: list[str] | None = None) -> int:
    """``python -m tokensvc.audit.report`` / ``spark-submit tokensvc/audit/report.py``."""
    parser = argparse.ArgumentParser(prog="tokensvc-audit-report", description=__doc__.split(
        "\n\n")[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--input", help="audit files: any Spark-readable path")
    source.add_argument("--lake", help="the lake directory of `tokensvc audit ingest`")
    parser.add_argument("--output", required=True, help="local directory for the reports")
    parser.add_argument("--master", default=None, help="Spark master (default local[*])")
    parser.add_argument("--since", help="first time included (ISO-8601 or epoch ms)")
    parser.add_argument("--until", help="first time excluded (ISO-8601 or epoch ms)")
    parser.add_argument("--host-threshold", type=int, default=DEFAULT_SETTINGS.host_threshold)
    parser.add_argument("--burst-threshold", type=int, default=DEFAULT_SETTINGS.burst_threshold)
    parser.add_argument("--burst-window-s", type=int, default=DEFAULT_SETTINGS.burst_window_s)
    parser.add_argument("--tokens", help="token snapshot (JSON lines)")
    parser.add_argument("--glob", default=DEFAULT_GLOB, help="file names read in a directory")
    parser.add_argument("--group-by-label", action="append", default=[], metavar="KEY",
                        help="also group the labels report by this label key (repeatable; "
                             "job always)")
    args = parser.parse_args(argv)
    try:
        options = build_options(
            args.input, args.output, since=args.since, until=args.until,
            host_threshold=args.host_threshold, burst_threshold=args.burst_threshold,
            burst_window_s=args.burst_window_s, tokens=args.tokens, glob=args.glob,
            lake=args.lake, group_by_labels=tuple(args.group_by_label),
        )
        summary = run_report(create_session(args.master), options)
    except ReportError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(format_summary(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
