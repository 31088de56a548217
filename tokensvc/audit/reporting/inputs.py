"""The report's input: audit lines (files or the lake) and the token snapshot, as DataFrames.

This module owns reading the events (any Spark-readable path, :func:`read_events`; or the
lake of ``tokensvc audit ingest``, :mod:`tokensvc.audit.lake`), each line classified by the
one rule of :mod:`tokensvc.audit.lines` (a malformed line is counted, never fatal); the
line counts by status (:func:`count_lines`, from the lake's per-batch statistics when they
can be trusted, else one scan); and the token snapshot of ``tokensvc tokens export``
(:func:`read_snapshot`: the fields of :mod:`tokensvc.audit.token_export` as a Spark schema;
unlike that module's strict decoder, a line the report cannot use is skipped).

It must not compute a report (:mod:`.frames` does) or write anything.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from tokensvc.audit.lake import LakeError, distinct_id_hashes, read_lake, read_stats, row_counts
from tokensvc.audit.lines import EVENT_SCHEMA, classify, json_reader_options
from tokensvc.audit.reporting.options import DEFAULT_GLOB, ReportError, ReportOptions, check_exists
from tokensvc.audit.token_export import FIELDS

_S = T.StringType()
# The Spark type of each kind of field of the token export.
_SPARK_TYPES = {"text": _S, "texts": T.ArrayType(_S), "ms": T.LongType(),
                "labels": T.MapType(_S, _S)}
SNAPSHOT_SCHEMA = T.StructType([T.StructField(name, _SPARK_TYPES[kind]) for name, kind in FIELDS])
# A snapshot line without these is skipped: the report cannot place the token in time.
SNAPSHOT_NEEDS = ("token_id", "expiry_ms", "max_ms")


def read_events(spark: SparkSession, path: str, glob: str = DEFAULT_GLOB) -> DataFrame:
    """Every non-blank line as a row of :data:`EVENT_SCHEMA`; a line that does not fit
    has its text in ``_corrupt_record``. A directory is searched recursively for files
    named like ``glob``; a named local file is read whatever its name."""
    is_dir = check_exists(path, "input path")
    reader = (spark.read.schema(EVENT_SCHEMA).options(**json_reader_options())
              .option("recursiveFileLookup", "true"))
    if is_dir:
        reader = reader.option("pathGlobFilter", glob)
    try:
        return reader.json(path)
    except AnalysisException as exc:
        raise ReportError(f"cannot read input {path}: {exc.getMessage()}") from None


def read_classified(spark: SparkSession, options: ReportOptions) -> DataFrame:
    """Every line of the source ``options`` names, with its ``status`` (``ok`` or why it
    is malformed): the lake's rows, or the audit files' lines classified."""
    if options.lake is not None:
        try:
            return read_lake(spark, options.lake)
        except LakeError as exc:
            raise ReportError(str(exc)) from None
    assert options.input is not None
    return classify(read_events(spark, options.input, options.glob))


def read_snapshot(spark: SparkSession, path: str) -> DataFrame:
    """The token snapshot (JSON lines of ``tokensvc tokens export``); bad lines skipped."""
    check_exists(path, "token snapshot")
    try:
        df = spark.read.schema(SNAPSHOT_SCHEMA).option("mode", "PERMISSIVE").json(path)
    except AnalysisException as exc:
        raise ReportError(f"cannot read token snapshot {path}: {exc.getMessage()}") from None
    token_id, expiry_ms, max_ms = (F.col(name) for name in SNAPSHOT_NEEDS)
    return df.filter(token_id.isNotNull() & expiry_ms.isNotNull() & max_ms.isNotNull())


def empty_snapshot(spark: SparkSession) -> DataFrame:
    return spark.createDataFrame([], SNAPSHOT_SCHEMA)


@dataclass(frozen=True)
class LineCounts:
    """What was read: lines by status (``ok`` or a malformed reason), whether some event
    id repeats, and the rows of the lake's partial tables if they stand for its events."""

    statuses: dict[str, int]
    ids_repeat: bool
    partial_rows: dict[str, int] | None


def count_lines(spark: SparkSession, options: ReportOptions, classified: DataFrame
                ) -> LineCounts:
    """The :class:`LineCounts` of ``classified``. From the lake's per-batch statistics
    when they match the rows in the lake's Parquet footers (no event is read, except the
    ``id_hash`` column when only a check across batches can tell), else by one scan:
    distinct 64-bit hashes of the ids (a collision only costs an unneeded exact
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
            return LineCounts(stats.statuses, repeat, stats.aggregate_rows)
    rows = classified.groupBy("status").agg(
        F.count("*").alias("n"),
        F.countDistinct(F.xxhash64("event_id")).alias("ids")).collect()
    statuses = {r["status"]: r["n"] for r in rows}
    ok_ids = sum(r["ids"] for r in rows if r["status"] == "ok")
    return LineCounts(statuses, ok_ids < statuses.get("ok", 0), None)
