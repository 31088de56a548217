"""``tokensvc audit watch``: findings from the live audit stream, each raised once.

This module owns the streaming query that raises, within seconds of the event,
the findings a stream can decide: failed-login bursts (per token and per host),
unknown token, use of an expired token, token requests from token sessions, and
too many hosts per token, and a token used after it was revoked (live only). The thresholds are :class:`~tokensvc.audit.rules.RuleSettings`,
the report's options; the detail texts are the report's.

Pipeline: a :class:`~tokensvc.audit.spool.Spool` copies whole new lines of the
live audit files into ``ALERTS_DIR/_spool`` every ``poll_s``; Spark's file source
reads the spool; valid events become *signals* keyed by (rule, key, host);
``applyInPandasWithState`` keeps per key the recent failure times (bursts: the
same closed window of ``burst_window_s`` as the report), the hosts seen
(too_many_hosts), and whether the finding was raised; an event-time watermark
(``lateness_s`` behind the newest event) drops state that can no longer matter
and events too late to count. A raised finding is remembered for good, so it is
raised once; a host set not yet over the threshold is forgotten after
``host_memory_s`` without a login of that token.

Each micro-batch writes its findings to ``ALERTS_DIR/alerts-<batch>.jsonl``
(temporary name, then rename; a batch run again after a crash rewrites the same
file), so with the checkpoint in ``ALERTS_DIR/_checkpoint`` every finding is in
the alert files exactly once. They are printed too (a batch run again prints
again).

Each finding about a token names the token's labels (``labels``, an object; null when
unknown): events other than a token's create and revocation carry only its id
(docs/audit.md), so :class:`TokenLabels` learns the labels from those events as the spool
receives them -- read once from each new chunk on the driver, kept for
:data:`LABEL_MEMORY` tokens -- and the sink looks each flagged token up there, after
reading every chunk spooled so far. Alert lines are JSON (labels escaped as JSON strings).

Findings that need the whole history (``created_for_other_owner`` needs no state
and is left to the report as are ``unused_before_expiry``, which needs expiry
times) stay with ``tokensvc audit report``. It must not be imported by the broker.
"""

from __future__ import annotations

import json
import os
import threading
import time
from bisect import bisect_left
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.streaming.state import GroupState, GroupStateTimeout

from tokensvc.audit.lines import parse_text, status_column
from tokensvc.audit.rules import (
    DEFAULT_SETTINGS,
    FINDING_COLUMNS,
    RULE_SEVERITY,
    RuleSettings,
    burst_detail,
    expired_token_detail,
    revoked_token_detail,
    token_session_detail,
    too_many_hosts_detail,
    unknown_token_detail,
)
from tokensvc.audit.spool import CHUNK_SUFFIX, DEFAULT_CLOSED_AFTER_S, DEFAULT_GLOB, Spool

WATCH_RULES = (
    "failed_login_burst_token", "failed_login_burst_host", "unknown_token",
    "expired_token_use", "too_many_hosts", "token_session_token_request",
)
# Only the live watch raises it: a login attempt with a token after its revocation (the
# audit's ``token``/``revoke`` event), however the login ended.
REVOKED_USE = "revoked_token_use"
# How long a revocation is remembered: Kafka's default max lifetime (the token could not
# be used longer than that had it not been revoked).
_REVOKED_MEMORY_MS = 7 * 86_400_000
_BURSTS = ("failed_login_burst_token", "failed_login_burst_host")
_FIRST_SEEN = ("unknown_token", "expired_token_use", "token_session_token_request")
_FOREVER_MS = 100 * 365 * 86_400_000

_S, _L, _B = T.StringType(), T.LongType(), T.BooleanType()
ALERT_SCHEMA = T.StructType([
    T.StructField("rule", _S), T.StructField("token_id", _S), T.StructField("owner", _S),
    T.StructField("client_host", _S), T.StructField("detail", _S),
    T.StructField("first_ts", _L), T.StructField("last_ts", _L), T.StructField("count", _L),
    T.StructField("severity", _S),
])
STATE_SCHEMA = T.StructType([
    T.StructField("raised", _B), T.StructField("times", T.ArrayType(_L)),
    T.StructField("hosts", T.ArrayType(_S)), T.StructField("owner", _S),
])


class WatchError(Exception):
    """A problem the person running watch can fix."""


@dataclass(frozen=True)
class WatchOptions:
    input: str
    alerts: str
    settings: RuleSettings = DEFAULT_SETTINGS
    glob: str = DEFAULT_GLOB
    lateness_s: int = 120
    host_memory_s: int = 86_400
    trigger_s: float = 2.0
    poll_s: float = 1.0
    closed_after_s: float = DEFAULT_CLOSED_AFTER_S


def signals(events: DataFrame) -> DataFrame:
    """One row per (rule, key, host) the event feeds: ``rule``, ``key``, ``host``
    (the grouping), ``ts``, ``client_host`` and ``principal`` (evidence)."""
    login = F.col("type") == "authentication"
    failed = login & (F.col("outcome") != "success")
    token_login = (F.col("kind") == "token") & F.coalesce("token_id", "username").isNotNull()
    tid = F.coalesce("token_id", "username")
    none = F.lit(None).cast(_S)
    parts = [
        (failed & token_login, "failed_login_burst_token", tid, none),
        (failed & F.col("client_host").isNotNull(), "failed_login_burst_host",
         F.col("client_host"), none),
        (failed & (F.col("reason") == "unknown_token"), "unknown_token", tid,
         F.col("client_host")),
        (failed & (F.col("reason") == "expired_token"), "expired_token_use", tid,
         F.col("client_host")),
        ((F.col("type") == "token") & F.coalesce("token_authenticated", F.lit(False)),
         "token_session_token_request", F.col("requester"), F.col("client_host")),
        (login & (F.col("outcome") == "success") & token_login, "too_many_hosts", tid, none),
        # A revocation, and every later token login attempt, meet under the token id.
        ((F.col("type") == "token") & (F.col("action") == "revoke")
         & (F.col("outcome") == "success") & F.col("token_id").isNotNull(),
         REVOKED_USE, F.col("token_id"), none),
        (login & token_login, REVOKED_USE, tid, none),
    ]
    # One row per event and rule it feeds (an event can feed several); ``mark`` tells a
    # revocation from a use in the revoked_token_use group.
    revoke = F.col("type") == "token"
    rows = F.filter(F.array(*[
        F.when(cond, F.struct(F.lit(rule).alias("rule"), key.cast(_S).alias("key"),
                              host.cast(_S).alias("host"),
                              F.when(revoke, F.lit("revoke")).otherwise(F.lit("use"))
                              .alias("mark")))
        for cond, rule, key, host in parts]), lambda x: x.isNotNull())
    return events.select(
        F.explode(rows).alias("s"), "ts", "event_time", "client_host", "principal",
    ).select("s.rule", "s.key", "s.host", "s.mark", "ts", "event_time", "client_host",
             "principal")


def _first_burst(times: list[int], window_ms: int, threshold: int
                 ) -> tuple[int, int, int] | None:
    """(first_ts, last_ts, count) of the earliest closed window of ``window_ms``
    holding ``threshold`` failures, over sorted ``times``; None if there is none."""
    for i, end in enumerate(times):
        start = bisect_left(times, end - window_ms, 0, i + 1)
        if i + 1 - start >= threshold:
            return times[start], end, i + 1 - start
    return None


def make_detector(settings: RuleSettings, host_memory_ms: int
                  ) -> Callable[[Any, Iterator[pd.DataFrame], GroupState],
                                Iterator[pd.DataFrame]]:
    """The ``applyInPandasWithState`` function for ``settings``."""
    window_ms = settings.burst_window_ms

    def detect(key: Any, batches: Iterator[pd.DataFrame], state: GroupState
               ) -> Iterator[pd.DataFrame]:
        rule, k, host = key
        if state.exists:
            raised, times, hosts, owner = state.get
            times, hosts = list(times or ()), list(hosts or ())
        else:
            raised, times, hosts, owner = False, [], [], None
        watermark = state.getCurrentWatermarkMs()
        if state.hasTimedOut:
            if not raised:
                state.remove()
                return
            state.update((True, [], [], owner))
            state.setTimeoutTimestamp(watermark + _FOREVER_MS)
            return
        rows = pd.concat(list(batches), ignore_index=True).sort_values("ts", kind="stable")
        if raised:
            state.update((True, [], [], owner))
            state.setTimeoutTimestamp(watermark + _FOREVER_MS)
            return
        new_ts = [int(t) for t in rows["ts"]]
        found: tuple[str, int, int, int] | None = None  # detail, first, last, count
        if rule in _BURSTS:
            times = sorted(times + new_ts)
            burst = _first_burst(times, window_ms, settings.burst_threshold)
            if burst:
                found = (burst_detail(burst[2], settings.burst_window_s), *burst)
            times = [t for t in times if t >= watermark - window_ms]
            timeout = max(times[-1] + window_ms + 1, watermark + 1) if times else watermark + 1
        elif rule == REVOKED_USE:
            revoked = [int(t) for t, m in zip(rows["ts"], rows["mark"], strict=True)
                       if m == "revoke"]
            revoked_at = min(times + revoked) if times or revoked else None
            used = [int(t) for t, m in zip(rows["ts"], rows["mark"], strict=True)
                    if m == "use" and revoked_at is not None and int(t) > revoked_at]
            if used:
                found = (revoked_token_detail(len(used)), used[0], used[-1], len(used))
            times = [revoked_at] if revoked_at is not None else []
            timeout = (revoked_at + _REVOKED_MEMORY_MS if revoked_at is not None
                       else watermark + 1)
            timeout = max(timeout, watermark + 1)
        elif rule in _FIRST_SEEN:
            n = len(new_ts)
            detail = {"unknown_token": unknown_token_detail,
                      "expired_token_use": expired_token_detail,
                      "token_session_token_request": token_session_detail}[rule](n)
            found = (detail, new_ts[0], new_ts[-1], n)
            timeout = watermark + 1
        else:  # too_many_hosts
            first = times[0] if times else new_ts[0]
            seen = set(hosts)
            for ts, client_host, principal in zip(new_ts, rows["client_host"],
                                                  rows["principal"], strict=True):
                owner = owner or principal
                if client_host is not None and client_host not in seen:
                    seen.add(client_host)
                    if len(seen) > settings.host_threshold and found is None:
                        found = (too_many_hosts_detail(len(seen), settings.host_threshold),
                                 first, ts, len(seen))
            times, hosts = [min(first, new_ts[0])], sorted(seen)
            timeout = max(new_ts[-1] + host_memory_ms, watermark + 1)
        if found is None:
            state.update((False, times, hosts, owner))
            state.setTimeoutTimestamp(timeout)
            return
        state.update((True, [], [], owner))
        state.setTimeoutTimestamp(watermark + _FOREVER_MS)
        detail, first_ts, last_ts, count = found
        token_id = k if rule not in ("failed_login_burst_host",
                                     "token_session_token_request") else None
        client_host = k if rule == "failed_login_burst_host" else host
        finding_owner = k if rule == "token_session_token_request" else owner
        yield pd.DataFrame([{
            "rule": rule, "token_id": token_id, "owner": finding_owner,
            "client_host": client_host, "detail": detail, "first_ts": first_ts,
            "last_ts": last_ts, "count": count, "severity": RULE_SEVERITY[rule],
        }])

    return detect


# Tokens whose labels the watch remembers (the least recently labelled are forgotten).
LABEL_MEMORY = 200_000
_LABELS_MARK = b'"labels"'


class TokenLabels:
    """Token id -> labels, learned from the create and revocation events in the spool's
    chunks (each chunk read once, only its lines that carry labels parsed)."""

    def __init__(self, spool_dir: Path, memory: int = LABEL_MEMORY) -> None:
        self.spool_dir = spool_dir
        self.memory = memory
        self._labels: dict[str, dict[str, str]] = {}
        self._read: set[str] = set()

    def refresh(self) -> None:
        """Read the chunks not read yet."""
        if not self.spool_dir.is_dir():
            return
        for path in sorted(self.spool_dir.glob(f"*{CHUNK_SUFFIX}")):
            if path.name in self._read:
                continue
            self._read.add(path.name)
            try:
                data = path.read_bytes()
            except OSError:
                continue
            for line in data.splitlines():
                if _LABELS_MARK in line:
                    self.learn(line)

    def learn(self, line: bytes | str) -> None:
        try:
            event = json.loads(line)
        except (ValueError, UnicodeDecodeError, RecursionError):
            return
        if not isinstance(event, dict):
            return
        labels = event.get("labels")
        token_id = event.get("token_id")
        if (event.get("type") == "token" and event.get("action") in ("create", "revoke")
                and event.get("outcome") == "success" and isinstance(token_id, str)
                and isinstance(labels, dict) and labels):
            self._labels.pop(token_id, None)
            self._labels[token_id] = {str(k): str(v) for k, v in labels.items()}
            if len(self._labels) > self.memory:
                del self._labels[next(iter(self._labels))]

    def of(self, token_id: str | None) -> dict[str, str] | None:
        return self._labels.get(token_id) if token_id else None


class AlertSink:
    """``foreachBatch``: the batch's findings to ``alerts-<batch>.jsonl``, and printed,
    each with the labels of its token (:class:`TokenLabels`) when they are known."""

    def __init__(self, directory: Path, echo: Callable[[str], None],
                 labels: TokenLabels | None = None) -> None:
        self.directory = directory
        self.echo = echo
        self.raised = 0
        self.labels = labels

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        rows = sorted((r.asDict() for r in batch.collect()),
                      key=lambda r: (r["last_ts"], r["rule"], r["token_id"] or "",
                                     r["client_host"] or ""))
        if not rows:
            return
        if self.labels is not None:
            self.labels.refresh()
        now_ms = int(time.time() * 1000)
        lines = [json.dumps({**{c: r[c] for c in FINDING_COLUMNS},
                             "labels": self.labels.of(r["token_id"]) if self.labels else None,
                             "severity": r["severity"],
                             "batch": batch_id, "raised_ms": now_ms}, sort_keys=False)
                 for r in rows]
        path = self.directory / f"alerts-{batch_id:012d}.jsonl"
        tmp = self.directory / f".alerts-{batch_id:012d}.tmp"
        tmp.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
        os.replace(tmp, path)
        self.raised += len(lines)
        for line in lines:
            self.echo(line)


def check_options(options: WatchOptions) -> None:
    if not Path(options.input).is_dir():
        raise WatchError(f"input directory does not exist: {options.input}")
    alerts = Path(options.alerts)
    if alerts.exists() and not alerts.is_dir():
        raise WatchError(f"alerts is not a directory: {options.alerts}")
    if Path(options.input).resolve() == alerts.resolve():
        raise WatchError("the alerts directory must not be the audit directory")
    if options.lateness_s < 0 or options.host_memory_s < 0:
        raise WatchError("--lateness-s and --host-memory-s must be >= 0")
    if options.trigger_s <= 0 or options.poll_s <= 0:
        raise WatchError("--trigger-s and --poll-s must be > 0")


def build_query(spark: SparkSession, options: WatchOptions, spool_dir: Path) -> DataFrame:
    """The streaming DataFrame of findings (before the sink)."""
    lines = (spark.readStream.format("text").option("pathGlobFilter", "*.chunk")
             .option("maxFileAge", "36500d").load(str(spool_dir)))
    parsed = parse_text(lines)
    events = (parsed.filter(status_column() == "ok")
              .withColumn("event_time", F.timestamp_millis("ts"))
              .withWatermark("event_time", f"{options.lateness_s} seconds"))
    return signals(events).groupBy("rule", "key", "host").applyInPandasWithState(
        make_detector(options.settings, options.host_memory_s * 1000),
        ALERT_SCHEMA, STATE_SCHEMA, "append", GroupStateTimeout.EventTimeTimeout)


def run_watch(spark: SparkSession, options: WatchOptions, *,
              stop: threading.Event | None = None,
              echo: Callable[[str], None] = print) -> int:
    """Run until ``stop`` is set (or the query fails); the findings raised."""
    check_options(options)
    stop = stop or threading.Event()
    alerts = Path(options.alerts)
    alerts.mkdir(parents=True, exist_ok=True)
    spool = Spool(options.input, alerts / "_spool", glob=options.glob,
                  closed_after_s=options.closed_after_s)
    spool.collect()
    sink = AlertSink(alerts, echo, TokenLabels(alerts / "_spool"))
    query = (build_query(spark, options, alerts / "_spool").writeStream
             .foreachBatch(sink)
             .option("checkpointLocation", str(alerts / "_checkpoint"))
             .trigger(processingTime=f"{int(options.trigger_s * 1000)} milliseconds")
             .queryName("tokensvc-audit-watch")
             .start())
    try:
        while not stop.is_set() and not query.awaitTermination(options.poll_s):
            spool.collect()
    except StreamingQueryException as exc:
        raise WatchError(f"watch query failed: {exc.getMessage()}") from None
    finally:
        if query.isActive:
            query.stop()
    return sink.raised
