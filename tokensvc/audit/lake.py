"""The audit lake: its directory layout, and reading it back for the reports.

``LAKE_DIR`` holds:

* ``events/date=<yyyy-mm-dd>/b<batch>-part-*.parquet``: every valid event,
  partitioned by its UTC date, one column per field of
  :data:`tokensvc.audit.lines.EVENT_FIELDS`;
* ``quarantine/b<batch>-part-*.parquet``: malformed lines with ``malformed_reason``,
  ``line`` (the text), ``source`` (the spool chunk) and ``ingested_ms``;
* ``_spool/`` (chunks of whole lines, :mod:`tokensvc.audit.spool`),
  ``_checkpoint/`` (the streaming query's offsets and commits) and
  ``_batches/`` (a batch being written), which belong to
  :mod:`tokensvc.audit.ingest`.

Both tables are written by one pass over a batch's lines, so their files share one
Parquet schema (an event file's quarantine columns are null and the other way
round); readers name the columns they want. Files are named by the micro-batch
that wrote them, which is what makes a batch
that is run again after a crash replace its own leftovers instead of adding to
them. This module must not write to the lake; it only names and reads it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from tokensvc.audit.lines import EVENT_FIELDS, REPORT_FIELDS

QUARANTINE_FIELDS = T.StructType([
    T.StructField("malformed_reason", T.StringType()), T.StructField("line", T.StringType()),
    T.StructField("source", T.StringType()), T.StructField("ingested_ms", T.LongType()),
])
LAKE_EVENT_SCHEMA = T.StructType([*EVENT_FIELDS.fields, T.StructField("date", T.StringType())])


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
