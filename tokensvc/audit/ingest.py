"""``tokensvc audit ingest``: the brokers' audit files into the Parquet lake, exactly once.

This module owns the streaming job: a :class:`~tokensvc.audit.spool.Spool` pass
copies whole new lines of the audit files into ``LAKE_DIR/_spool`` (a closed file
not spooled before is hard-linked there, not copied); Spark
Structured Streaming's JSON file source reads and parses the spool with the
explicit event schema (its offsets in ``LAKE_DIR/_checkpoint``); each
micro-batch classifies its lines (:mod:`tokensvc.audit.lines`) and commits them
to the lake (:mod:`tokensvc.audit.lake` names the layout). The JSON source
parses about 1.5x faster than the text source plus ``from_json`` (measured in
docs/performance.md) but keeps the text of a line only when the line does not
parse; the few chunks holding lines that parse but are invalid
(:data:`~tokensvc.audit.lines.PARSED_BAD_REASONS`) are read again as text, in
the same batch, for the quarantine's ``line``.

Exactly once, step by step:

1. a spool chunk appears atomically (rename) and covers a byte range of one
   audit file that no other chunk covers;
2. the file source writes the set of chunks of batch *N* to the offset log
   before running it, and marks *N* committed only after the batch returns; a
   restarted query runs an uncommitted *N* again with the same chunks and the
   same *N*;
3. batch *N* first deletes every lake file whose name starts with its prefix
   (``b<N>-``: leftovers of a run of *N* that was killed), writes into
   ``_batches/<N>``, computes its partial tables (:mod:`tokensvc.audit.aggregates`)
   from those files into ``_batches/<N>-agg``, then moves the files into the lake
   under that prefix (events, quarantine, ``agg/``), and last writes its
   statistics file ``stats/b<N>-stats.json`` (atomically: a rename), which a
   report takes as the mark of a complete batch.

The statistics are what the report would otherwise scan every event for: the
batch's events, its quarantined lines by reason, and the number of distinct
64-bit hashes of its event ids (``id_hash``, a column of the event files). The
hashes are counted by Arrow in this process, from the ``id_hash`` column just
written to ``_batches/<N>`` (after one Spark job per partial table, whose row counts,
observed, go into the statistics too), so the report knows, without reading an event,
whether an id can repeat inside a batch; across batches it checks ``id_hash`` itself
(:func:`tokensvc.audit.lake.read_stats`).

So a kill -9 anywhere, then a new run, leaves each event in the lake once. A
reader that lists the lake while a batch is moving its files in sees part of
that batch; the report is meant to run between ingests or on dates already
complete.

It must not be imported by the broker (pyspark).
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow.compute as pc
import pyarrow.dataset as ds
from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, Observation, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from tokensvc.audit import aggregates
from tokensvc.audit.lake import (
    AGGREGATES_VERSION,
    ID_HASH,
    LAKE_EVENT_SCHEMA,
    LakeLayout,
    lake_layout,
)
from tokensvc.audit.lines import (
    CORRUPT,
    EVENT_FIELDS,
    EVENT_SCHEMA,
    MALFORMED_REASONS,
    PARSED_BAD_REASONS,
    json_reader_options,
    parse_text,
    status_column,
)
from tokensvc.audit.spool import DEFAULT_CLOSED_AFTER_S, DEFAULT_GLOB, Spool

QUARANTINE_PART = "__quarantine__"
# Session settings while ingest runs (restored after). A batch holds a few dates per
# task: a file writer per date avoids sorting the batch by date before writing it.
# The per-token partial table (collect_set) stays hash-based instead of falling back
# to sorting after 128 tokens per task (at 1M events: 5.2 s sorted, see
# docs/performance.md, B6).
_SESSION_CONF = {
    "spark.sql.maxConcurrentOutputFileWriters": "16",
    "spark.sql.objectHashAggregate.sortBased.fallbackThreshold": "1000000",
}
# Test hook: the batch with this id stops (blocks) after moving its first file into
# the lake, so a test can kill -9 the process in the middle of a batch.
STALL_ENV = "TOKENSVC_AUDIT_INGEST_STALL_BATCH"


class IngestError(Exception):
    """A problem the person running ingest can fix (bad path, bad option)."""


@dataclass(frozen=True)
class IngestOptions:
    input: str
    lake: str
    once: bool = False
    glob: str = DEFAULT_GLOB
    closed_after_s: float = DEFAULT_CLOSED_AFTER_S
    trigger_s: float = 5.0
    max_files_per_batch: int | None = None


@dataclass
class IngestTotals:
    batches: int = 0
    events: int = 0
    quarantined: int = 0
    quarantined_by_reason: dict[str, int] = field(default_factory=dict)
    spooled_bytes: int = 0
    spool_s: float = 0.0
    # Inside the batches: Spark's parse, classify and Parquet write into _batches/,
    # then the moves of the files into the lake (the exactly-once commit).
    write_s: float = 0.0
    commit_s: float = 0.0
    elapsed_s: float = 0.0

    @property
    def events_per_s(self) -> float:
        return self.events / self.elapsed_s if self.elapsed_s > 0 else 0.0


def _move_batch(src: Path, dst: Path, prefix: str, stall: Callable[[], None]) -> int:
    """Move the Parquet part files of ``src`` (and its ``k=v`` subdirectories) into
    ``dst`` with ``prefix`` on their names; the number moved."""
    moved = 0
    for root, _dirs, files in os.walk(src):
        rel = Path(root).relative_to(src)
        for name in sorted(files):
            if not (name.startswith("part-") and name.endswith(".parquet")):
                continue
            target = dst / rel
            target.mkdir(parents=True, exist_ok=True)
            os.replace(Path(root) / name, target / f"{prefix}{name}")
            moved += 1
            stall()
    return moved


def _remove_batch(lake: LakeLayout, batch_id: int) -> None:
    """Delete what an earlier, killed run of ``batch_id`` left in the lake."""
    prefix = lake.batch_prefix(batch_id)
    for directory in (lake.events, lake.quarantine, lake.agg, lake.stats):
        for root, _dirs, files in os.walk(directory):
            for name in files:
                if name.startswith(prefix):
                    os.unlink(Path(root) / name)
    shutil.rmtree(lake.batches / str(batch_id), ignore_errors=True)
    shutil.rmtree(_agg_staging(lake, batch_id), ignore_errors=True)


def _agg_staging(lake: LakeLayout, batch_id: int) -> Path:
    return lake.batches / f"{batch_id}-agg"


class BatchCommitter:
    """The ``foreachBatch`` function of the ingest query (see the module docstring)."""

    def __init__(self, lake: LakeLayout, totals: IngestTotals,
                 echo: Callable[[str], None]) -> None:
        self.lake = lake
        self.totals = totals
        self.echo = echo
        self.started = time.monotonic()
        stall = os.environ.get(STALL_ENV)
        self._stall_batch = int(stall) if stall else None

    def _stall(self, batch_id: int) -> Callable[[], None]:
        if batch_id != self._stall_batch:
            return lambda: None

        def block() -> None:
            (self.lake.root / f"stalled-{batch_id}").touch()
            threading.Event().wait()
        return block

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        started = time.monotonic()
        lake = self.lake
        _remove_batch(lake, batch_id)
        staging = lake.batches / str(batch_id)
        now_ms = int(time.time() * 1000)
        rows = batch.select(
            *[F.col(f.name) for f in EVENT_FIELDS.fields],
            status_column().alias("status"), F.col(CORRUPT).alias("line"), "source",
        )
        status = F.col("status")
        parsed_bad = status.isin(*PARSED_BAD_REASONS)
        observation = Observation(f"ingest-{batch_id}")
        rows = rows.observe(
            observation, F.count(F.when(status == "ok", 1)).alias("ok"),
            *[F.count(F.when(status == r, 1)).alias(r) for r in MALFORMED_REASONS],
            # (as one string: an observed array comes back as a Java object)
            F.array_join(F.collect_set(F.when(parsed_bad, F.col("source"))), "\n")
            .alias("reread"))
        # Lines that parsed but are invalid have no text here: they are written by
        # _quarantine_parsed_bad from a text read of their chunks.
        _write_staging(rows.filter(~parsed_bad), staging, now_ms, "overwrite")
        counts = observation.get
        reread = sorted(filter(None, (counts.get("reread") or "").split("\n")))
        if reread:
            lines = batch.sparkSession.read.text(
                [str(lake.spool / name) for name in reread]).select(
                "value", F.col("_metadata.file_name").alias("source"))
            again = parse_text(lines).select(
                *[F.col(f.name) for f in EVENT_FIELDS.fields],
                status_column().alias("status"), "line", "source")
            _write_staging(again.filter(F.col("status").isin(*PARSED_BAD_REASONS)),
                           staging, now_ms, "append")
        events = int(counts.get("ok", 0))
        bad = {r: int(counts.get(r, 0)) for r in MALFORMED_REASONS}
        agg_staging = _agg_staging(lake, batch_id)
        ids, agg_rows = _write_aggregates(batch.sparkSession, staging, agg_staging, batch_id) \
            if events else (0, dict.fromkeys(aggregates.TABLES, 0))
        written = time.monotonic()
        prefix = lake.batch_prefix(batch_id)
        stall = self._stall(batch_id)
        quarantine_dir = staging / f"date={QUARANTINE_PART}"
        if quarantine_dir.is_dir():
            _move_batch(quarantine_dir, lake.quarantine, prefix, stall)
            shutil.rmtree(quarantine_dir)
        _move_batch(staging, lake.events, prefix, stall)
        shutil.rmtree(staging, ignore_errors=True)
        if agg_staging.is_dir():
            _move_batch(agg_staging, lake.agg, prefix, stall)
            shutil.rmtree(agg_staging)
        _write_stats(lake, batch_id, {"batch": batch_id, "events": events,
                                      "distinct_ids": ids, "malformed": bad,
                                      "aggregates": AGGREGATES_VERSION,
                                      "aggregate_rows": agg_rows})

        totals = self.totals
        totals.write_s += written - started
        totals.commit_s += time.monotonic() - written
        totals.batches += 1
        totals.events += events
        totals.quarantined += sum(bad.values())
        for reason, n in bad.items():
            totals.quarantined_by_reason[reason] = totals.quarantined_by_reason.get(reason, 0) + n
        took = time.monotonic() - started
        elapsed = time.monotonic() - self.started
        self.echo(
            f"batch {batch_id}: {events:,} events, {sum(bad.values()):,} quarantined, "
            f"{events / took if took > 0 else 0:,.0f} events/s; total {totals.events:,} events "
            f"in {totals.batches} batches, {totals.events / elapsed if elapsed else 0:,.0f} "
            f"events/s")


def _write_aggregates(spark: SparkSession, staging: Path, target: Path, batch_id: int
                      ) -> tuple[int, dict[str, int]]:
    """Write the partial tables of the events a batch wrote to ``staging`` under
    ``target/<table>`` (one file each). Returns the number of distinct ``id_hash``
    values and the rows written per table."""
    schema = T.StructType([*LAKE_EVENT_SCHEMA.fields, T.StructField(ID_HASH, T.LongType())])
    written = (spark.read.option("basePath", str(staging)).schema(schema)
               .parquet(str(staging)).filter(F.col("date") != QUARANTINE_PART))
    rows = {}
    for name, build in aggregates.PARTIALS.items():
        observation = Observation(f"ingest-{batch_id}-{name}")
        (build(written).observe(observation, F.count(F.lit(1)).alias("rows"))
         .coalesce(1).write.parquet(str(target / name)))
        rows[name] = int(observation.get.get("rows", 0))
    return _count_id_hashes(staging), rows


def _count_id_hashes(staging: Path) -> int:
    """The number of distinct non-null ``id_hash`` values in the Parquet files under
    ``staging`` (quarantined lines have none), counted here: the column read with
    Arrow, sorted by numpy, and the changes counted. At 10M hashes that is 0.4-0.6 s
    with the read, where Spark's ``count_distinct`` (a shuffle of every hash) took 4.7-7.2 s and
    Arrow's hash-based ``count_distinct`` 1.8-2.7 s (docs/performance.md, B6)."""
    files = ds.dataset(str(staging), format="parquet")  # '_' and '.' files skipped
    column = pc.drop_null(files.to_table(columns=[ID_HASH]).column(ID_HASH))
    if len(column) == 0:
        return 0
    hashes = np.sort(column.to_numpy())  # a copy: Arrow's buffer may be read-only
    return int(np.count_nonzero(hashes[1:] != hashes[:-1])) + 1


def _write_stats(lake: LakeLayout, batch_id: int, stats: dict[str, object]) -> None:
    """The batch's statistics file, written whole or not at all (temporary name,
    then a rename): the last step of a batch."""
    lake.stats.mkdir(parents=True, exist_ok=True)
    target = lake.stats_file(batch_id)
    temporary = target.with_name(f"{target.name}.tmp")  # removed with the batch's prefix
    temporary.write_text(json.dumps(stats, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(temporary, target)


def _write_staging(rows: DataFrame, staging: Path, now_ms: int, mode: str) -> None:
    """Write classified rows (event fields, ``status``, ``line``, ``source``) into a
    batch's staging directory: events by date, malformed lines under
    :data:`QUARANTINE_PART`."""
    ok = F.col("status") == "ok"
    part = F.when(ok, F.date_format(F.timestamp_millis("ts"), "yyyy-MM-dd")).otherwise(
        F.lit(QUARANTINE_PART))
    rows.select(
        *[F.col(f.name) for f in EVENT_FIELDS.fields],
        F.when(ok, F.xxhash64("event_id")).alias(ID_HASH),
        F.when(~ok, F.col("status")).alias("malformed_reason"),
        F.when(~ok, F.col("line")).alias("line"),
        F.when(~ok, F.col("source")).alias("source"),
        F.when(~ok, F.lit(now_ms)).alias("ingested_ms"),
        part.alias("date"),
    ).write.mode(mode).partitionBy("date").parquet(str(staging))


def check_options(options: IngestOptions) -> None:
    if not Path(options.input).is_dir():
        raise IngestError(f"input directory does not exist: {options.input}")
    lake = Path(options.lake)
    if lake.exists() and not lake.is_dir():
        raise IngestError(f"lake is not a directory: {options.lake}")
    if Path(options.input).resolve() == lake.resolve():
        raise IngestError("the lake must not be the audit directory")
    if options.closed_after_s < 0 or options.trigger_s <= 0:
        raise IngestError("--closed-after-s must be >= 0 and --trigger-s > 0")
    if options.max_files_per_batch is not None and options.max_files_per_batch < 1:
        raise IngestError("--max-files-per-batch must be >= 1")


def run_ingest(spark: SparkSession, options: IngestOptions, *,
               stop: threading.Event | None = None,
               echo: Callable[[str], None] = print) -> IngestTotals:
    """Run the ingest query: to the end of what is there (``once``), else until
    ``stop`` is set. Returns the totals of this run."""
    check_options(options)
    stop = stop or threading.Event()
    started = time.monotonic()
    lake = lake_layout(options.lake)
    for directory in (lake.events, lake.quarantine, lake.stats, lake.batches):
        directory.mkdir(parents=True, exist_ok=True)
    totals = IngestTotals()
    spool = Spool(options.input, lake.spool, glob=options.glob,
                  closed_after_s=options.closed_after_s)

    def spool_pass() -> None:
        done = spool.collect()
        totals.spooled_bytes += done.bytes
        totals.spool_s += done.elapsed_s

    spool_pass()
    reader = (spark.readStream.format("json").schema(EVENT_SCHEMA)
              .options(**json_reader_options())
              .option("pathGlobFilter", "*.chunk")
              .option("maxFileAge", "36500d"))
    if options.max_files_per_batch:
        reader = reader.option("maxFilesPerTrigger", str(options.max_files_per_batch))
    lines = reader.load(str(lake.spool)).select(
        "*", F.col("_metadata.file_name").alias("source"))
    writer = (lines.writeStream
              .foreachBatch(BatchCommitter(lake, totals, echo))
              .option("checkpointLocation", str(lake.checkpoint))
              .queryName("tokensvc-audit-ingest"))
    if options.once:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=f"{int(options.trigger_s * 1000)} milliseconds")
    previous = {key: spark.conf.get(key) for key in _SESSION_CONF}
    for key, value in _SESSION_CONF.items():
        spark.conf.set(key, value)
    query = writer.start()
    try:
        while not query.awaitTermination(1.0 if options.once else options.trigger_s):
            if stop.is_set():
                break
            if not options.once:
                spool_pass()
    except StreamingQueryException as exc:
        raise IngestError(f"ingest query failed: {exc.getMessage()}") from None
    finally:
        if query.isActive:
            query.stop()
        for key, value in previous.items():
            spark.conf.set(key, value)
    totals.elapsed_s = time.monotonic() - started
    return totals


def format_totals(totals: IngestTotals) -> str:
    reasons = ", ".join(f"{r} {n}" for r, n in totals.quarantined_by_reason.items() if n)
    return (f"ingested {totals.events:,} events in {totals.batches} batches, "
            f"{totals.elapsed_s:.1f}s ({totals.events_per_s:,.0f} events/s); "
            f"quarantined {totals.quarantined:,} malformed lines"
            + (f" ({reasons})" if reasons else ""))

