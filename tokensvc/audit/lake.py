"""The audit lake: its directory layout, and reading it back for the reports.

``LAKE_DIR`` holds:

* ``events/date=<yyyy-mm-dd>/b<batch>-part-*.parquet``: every valid event,
  partitioned by its UTC date, one column per field of
  :data:`tokensvc.audit.lines.EVENT_FIELDS`;
  plus ``id_hash``, the 64-bit ``xxhash64`` of ``event_id`` (null on quarantine rows);
* ``stats/b<batch>-stats.json``: one small JSON object per committed batch:
  ``events`` (valid events), ``malformed`` (quarantined lines by reason) and
  ``distinct_ids`` (distinct ``id_hash`` values among the batch's events) and
  ``aggregates`` (:data:`AGGREGATES_VERSION`, when the batch wrote ``agg/``),
  read by :func:`read_stats`;
* ``agg/<table>/b<batch>-part-*.parquet``: the batch's partial tables
  (``tokens``, ``hours``, ``types``, ``grouped``: :mod:`tokensvc.audit.aggregates`),
  which the report merges instead of reading every event (:func:`read_partials`);
* ``quarantine/b<batch>-part-*.parquet``: malformed lines with ``malformed_reason``,
  ``line`` (the text), ``source`` (the spool chunk) and ``ingested_ms``;
* ``_spool/`` (chunks of whole lines, :mod:`tokensvc.audit.spool`),
  ``_checkpoint/`` (the streaming query's offsets and commits) and
  ``_batches/`` (a batch being written), which belong to
  :mod:`tokensvc.audit.ingest`.

The event and quarantine files are written by one pass over a batch's lines, so
they share one Parquet schema (an event file's quarantine columns are null and the
other way round); readers name the columns they want. Files are named by the micro-batch
that wrote them, which is what makes a batch
that is run again after a crash replace its own leftovers instead of adding to
them. This module must not write to the lake; it only names and reads it.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from tokensvc.audit import aggregates
from tokensvc.audit.counts import count_each
from tokensvc.audit.lines import EVENT_FIELDS, REPORT_FIELDS

QUARANTINE_FIELDS = T.StructType([
    T.StructField("malformed_reason", T.StringType()), T.StructField("line", T.StringType()),
    T.StructField("source", T.StringType()), T.StructField("ingested_ms", T.LongType()),
])
LAKE_EVENT_SCHEMA = T.StructType([*EVENT_FIELDS.fields, T.StructField("date", T.StringType())])
ID_HASH = "id_hash"
# A batch's statistics file says ``"aggregates": AGGREGATES_VERSION`` when the batch
# wrote its partial tables (agg/); a change of their columns changes the version.
AGGREGATES_VERSION = 1
STATS_SUFFIX = "-stats.json"
_BATCH_FILE = re.compile(r"^b(\d{12})-")


class LakeError(Exception):
    """The lake directory is missing or is not a lake."""


@dataclass(frozen=True)
class LakeLayout:
    root: Path

    @property
    def events(self) -> Path:
        return self.root / "events"

    @property
    def quarantine(self) -> Path:
        return self.root / "quarantine"

    @property
    def spool(self) -> Path:
        return self.root / "_spool"

    @property
    def checkpoint(self) -> Path:
        return self.root / "_checkpoint"

    @property
    def agg(self) -> Path:
        return self.root / "agg"

    @property
    def stats(self) -> Path:
        return self.root / "stats"

    def stats_file(self, batch_id: int) -> Path:
        return self.stats / f"{self.batch_prefix(batch_id)[:-1]}{STATS_SUFFIX}"

    @property
    def batches(self) -> Path:
        return self.root / "_batches"

    def batch_prefix(self, batch_id: int) -> str:
        """Name prefix of every file batch ``batch_id`` puts in the lake."""
        return f"b{batch_id:012d}-"


def lake_layout(root: str | os.PathLike[str]) -> LakeLayout:
    return LakeLayout(Path(root))


def _parquet_files(directory: Path) -> bool:
    return any(name.endswith(".parquet") for _, _, files in os.walk(directory)
               for name in files)


@dataclass(frozen=True)
class LakeStats:
    """What the batches' statistics files say about the whole lake.

    ``aggregate_rows``: rows of each partial table (``agg/``) over all batches, or
    None if some batch wrote none (a lake written before they existed).
    ``statuses``: line counts by status (``ok`` and the quarantine reasons), as the
    report's scan would count them. ``ids_repeat``: True if some batch holds fewer
    distinct id hashes than events (an id repeats: the report de-duplicates), False
    if there is at most one batch with events and its hashes are all distinct (no
    id repeats), None if every batch is unique alone but several hold events (only
    a check of ``id_hash`` across the batches can tell).
    """

    statuses: dict[str, int]
    ids_repeat: bool | None
    aggregate_rows: dict[str, int] | None = None


def _batch_ids(directory: Path) -> set[int]:
    found = set()
    for _root, _dirs, files in os.walk(directory):
        for name in files:
            match = _BATCH_FILE.match(name)
            if match and name.endswith(".parquet"):
                found.add(int(match.group(1)))
    return found


def read_stats(root: str | os.PathLike[str]) -> LakeStats | None:
    """The lake's statistics from its batches' files, or None if some batch that has
    files in the lake has no statistics (a lake written before they existed, or a
    batch being committed): then the report counts by scanning."""
    lake = lake_layout(root)
    stats: dict[int, dict[str, Any]] = {}
    if lake.stats.is_dir():
        for path in lake.stats.iterdir():
            match = _BATCH_FILE.match(path.name)
            if match and path.name.endswith(STATS_SUFFIX):
                stats[int(match.group(1))] = json.loads(path.read_text(encoding="utf-8"))
    written = _batch_ids(lake.events) | _batch_ids(lake.quarantine) | _batch_ids(lake.agg)
    if not written <= stats.keys():
        return None
    statuses: dict[str, int] = {"ok": 0}
    repeat = False
    with_events = 0
    for batch in stats.values():
        events = int(batch["events"])
        statuses["ok"] += events
        for reason, n in batch["malformed"].items():
            statuses[reason] = statuses.get(reason, 0) + int(n)
        repeat = repeat or int(batch["distinct_ids"]) < events
        with_events += events > 0
    aggregate_rows: dict[str, int] | None = None
    if all(batch.get("aggregates") == AGGREGATES_VERSION for batch in stats.values()):
        aggregate_rows = {name: sum(int(batch["aggregate_rows"][name]) for batch in stats.values())
                          for name in aggregates.TABLES}
    return LakeStats(statuses, True if repeat else (False if with_events <= 1 else None),
                     aggregate_rows)


def read_partials(spark: SparkSession, root: str | os.PathLike[str],
                  expected_rows: dict[str, int]) -> dict[str, DataFrame] | None:
    """The lake's per-batch partial tables (:mod:`tokensvc.audit.aggregates`), each
    as one DataFrame of every batch's rows, for the report to merge; None if their
    rows (from the Parquet footers) are not ``expected_rows`` (files removed or
    added by hand: then the report reads the events)."""
    lake = lake_layout(root)
    tables, present = {}, {}
    for name, schema in aggregates.partial_schemas(spark, LAKE_EVENT_SCHEMA).items():
        directory = lake.agg / name
        if _parquet_files(directory):
            tables[name] = present[name] = spark.read.schema(schema).parquet(str(directory))
        else:
            tables[name] = spark.createDataFrame([], schema)
    rows = count_each(present)  # one job for every table (from the Parquet footers)
    if any(rows.get(name, 0) != expected_rows.get(name) for name in tables):
        return None
    return tables


def row_counts(spark: SparkSession, root: str | os.PathLike[str]) -> tuple[int, int]:
    """Rows in the lake's event files and in its quarantine files (from the Parquet
    footers: no column is read), to check the statistics against what is there."""
    lake = lake_layout(root)
    present = {name: spark.read.schema(schema).parquet(str(directory))
               for name, directory, schema in (("events", lake.events, LAKE_EVENT_SCHEMA),
                                               ("quarantine", lake.quarantine, QUARANTINE_FIELDS))
               if _parquet_files(directory)}
    rows = count_each(present)  # one job for both (from the Parquet footers)
    return rows.get("events", 0), rows.get("quarantine", 0)


def distinct_id_hashes(spark: SparkSession, root: str | os.PathLike[str]) -> int:
    """Distinct ``id_hash`` values among all the lake's events (one column of longs,
    for when :func:`read_stats` cannot tell whether an id repeats across batches)."""
    events = lake_layout(root).events
    if not _parquet_files(events):
        return 0
    row = (spark.read.schema(f"{ID_HASH} long").parquet(str(events))
           .agg(F.count_distinct(ID_HASH).alias("ids")).first())
    return int(row["ids"]) if row is not None else 0


def read_lake(spark: SparkSession, root: str | os.PathLike[str]) -> DataFrame:
    """Every lake row as ``status`` (``ok``, or the quarantine reason) and
    :data:`~tokensvc.audit.lines.REPORT_FIELDS`: the same shape the JSON path of the
    report classifies lines into, so both paths share everything after it."""
    lake = lake_layout(root)
    if not lake.root.is_dir():
        raise LakeError(f"lake directory does not exist: {lake.root}")
    if not lake.checkpoint.is_dir() and not lake.events.is_dir():
        raise LakeError(f"not an audit lake (no events/ or _checkpoint/): {lake.root}")
    events_schema = T.StructType([f for f in LAKE_EVENT_SCHEMA.fields
                                  if f.name in REPORT_FIELDS or f.name == "date"])
    if _parquet_files(lake.events):
        events = (spark.read.schema(events_schema).option("basePath", str(lake.events))
                  .parquet(str(lake.events)))
    else:
        events = spark.createDataFrame([], events_schema)
    rows = events.select(F.lit("ok").alias("status"), *REPORT_FIELDS)
    if _parquet_files(lake.quarantine):
        bad = spark.read.schema(QUARANTINE_FIELDS).parquet(str(lake.quarantine)).select(
            F.col("malformed_reason").alias("status"),
            *[F.lit(None).cast(events_schema[name].dataType).alias(name)
              for name in REPORT_FIELDS])
        rows = rows.unionByName(bad)
    return rows
