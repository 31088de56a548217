"""B6: the audit lake -- ingest rate, the report over the lake, alert latency; local[2].

Set-up (not measured): ``tokensvc.audit.generator.generate`` writes two synthetic
audit datasets (1M and 10M events in full mode: three brokers' file series and a
token snapshot); one SparkSession (``local[2]``) is started and its start-up is
reported apart.

Measured, all in one run:

1. **Ingest**: ``tokensvc.audit.ingest.run_ingest`` with ``once`` (trigger
   availableNow) over each dataset into a fresh lake -- spool copy, Spark's file
   source, parse and classify every line, write Parquet by date, commit each
   batch. Figure: events/s at the larger size.
2. **Report over the lake** against **a plain-Python script over the JSON files**:
   ``run_report`` on the lake (every output: Parquet, CSV, summary, HTML and
   charts), and the same reports by one Python process -- every file's lines merged
   in timestamp order, ``json.loads`` per line, fed to
   :class:`tokensvc.audit.rules.ReferenceAudit`, no files written. Their row counts
   must match, or the benchmark fails. ``--quick`` (a smoke test of a few thousand
   events) runs the report over the larger lake only: there a report is Spark's fixed
   cost of some forty small jobs, and a second one would measure the same again.
3. **Alert latency**: a live 3-broker local cluster (2 with ``--quick``: one per burst)
   writes its audit files; ``audit watch`` runs on them (default trigger 2 s, spool
   poll 1 s) in the same SparkSession; bursts of 10 failed token logins with unknown
   token ids are sent a few seconds apart. Each burst makes an ``unknown_token`` and a
   ``failed_login_burst_token`` finding, both naming the id's keyed fingerprint (the
   brokers audit a name that is no token and no user as ``fp:...``); latency = the alert's ``raised_ms`` minus
   the ``ts`` of the event that decided it (first failure, tenth failure).

Targets: ingest >= 150,000 events/s; the lake report >= 3x the plain-Python
script; time linear from the smaller to the larger size (ingest and report
``t(large) / t(small)`` at most 1.25x the size ratio; the ingest alone with
``--quick``); alert latency p99 <= 60 s.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import json
import os
import secrets
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from datetime import datetime
from operator import itemgetter
from pathlib import Path
from typing import Any

from bench import env
from bench.common import MECHANISM
from bench.suite import BenchContext, Outcome, Target, ratio
from bench.wire import WireConnection, WireError, login
from tokensvc.audit.events import name_fingerprint
from tokensvc.core.keys import AUDIT_FINGERPRINT_LABEL, MasterKeys, derived_secret

ID = "B6"
TITLE = "audit lake, local[2]: ingest events/s at the larger size"
TARGET_INGEST = 150_000
TARGET_REPORT_RATIO = 3.0
TARGET_ALERT_P99_S = 60.0
LINEARITY_SLACK = 1.25
MASTER = "local[2]"
BURST = 10


def _events(path: str) -> Iterator[dict[str, Any]]:
    with open(path, encoding="utf-8") as lines:
        for line in lines:
            if line.strip():
                yield json.loads(line)


def python_report(files: list[str], snapshot: str) -> dict[str, int]:
    """The reports by plain Python, one process: their row counts."""
    from tokensvc.audit.rules import DEFAULT_SETTINGS, ReferenceAudit
    from tokensvc.audit.token_export import read_tokens

    audit = ReferenceAudit(DEFAULT_SETTINGS)
    observe = audit.observe
    for event in heapq.merge(*(_events(f) for f in files), key=itemgetter("ts")):
        observe(event)
    with open(snapshot, encoding="utf-8") as lines:
        tokens = [token.as_record() for token in read_tokens(lines)]
    result = audit.result(tokens)
    return {
        "token_usage": len(result.token_usage),
        "owner_usage": len(result.owner_usage),
        "lifecycle": len(result.lifecycle),
        "logins_hourly": len(result.logins_hourly),
        "findings": len(result.findings),
    }


async def _bad_logins(address: str, token_id: str) -> None:
    host, _, port = address.rpartition(":")
    for _ in range(BURST):
        conn = await WireConnection.open(host, int(port))
        try:
            await login(conn, MECHANISM, token_id, "not-the-password", token=True)
        except WireError:
            pass
        finally:
            conn.close()


def alert_latency(ctx: BenchContext, spark: Any, bursts: int, gap_s: float
                  ) -> dict[str, Any]:
    """Seconds from event to alert for every finding the bursts raise."""
    from tokensvc.audit.watch import WatchError, WatchOptions, run_watch

    with contextlib.ExitStack() as stack:
        # One broker per burst, three at most: the bursts go to the brokers in turn.
        handle = env.start_cluster(ctx, stack, "b6-cluster", min(3, bursts))
        audit_dir = handle.cluster.info["audit_dir"]
        alerts = ctx.directory("b6-alerts")
        stop = threading.Event()
        errors: list[WatchError] = []

        def watch() -> None:
            try:
                run_watch(spark, WatchOptions(audit_dir, str(alerts)), stop=stop,
                          echo=lambda line: None)
            except WatchError as exc:
                errors.append(exc)

        thread = threading.Thread(target=watch, name="b6-watch", daemon=True)
        thread.start()
        stack.callback(thread.join, 120)
        stack.callback(stop.set)
        brokers = handle.cluster.broker_ids()
        # The brokers audit a name that is no token and no user as its keyed
        # fingerprint (it may be a misplaced password), so the findings name that.
        fingerprint_key = derived_secret(MasterKeys(ctx.master_key), AUDIT_FINGERPRINT_LABEL)
        audited = []
        for n in range(bursts):
            token_id = secrets.token_urlsafe(16)
            audited.append(name_fingerprint(fingerprint_key, token_id))
            asyncio.run(_bad_logins(handle.address(brokers[n % len(brokers)]), token_id))
            time.sleep(gap_s)
        wanted = {(rule, t) for t in audited
                  for rule in ("unknown_token", "failed_login_burst_token")}
        deadline = time.monotonic() + 180
        found: dict[tuple[str, str], dict[str, Any]] = {}
        while time.monotonic() < deadline and len(found) < len(wanted) and not errors:
            for path in alerts.glob("alerts-*.jsonl"):
                for line in path.read_text().splitlines():
                    alert = json.loads(line)
                    if (alert["rule"], alert["token_id"]) in wanted:
                        found[(alert["rule"], alert["token_id"])] = alert
            time.sleep(0.2)
        if errors:
            raise RuntimeError(f"watch failed: {errors[0]}")
    latencies = []
    for (rule, _), alert in found.items():
        decided = alert["first_ts"] if rule == "unknown_token" else alert["last_ts"]
        latencies.append((alert["raised_ms"] - decided) / 1000)
    stats = env.summary(latencies)
    stats["missing"] = len(wanted) - len(found)
    stats["p99_s"] = round(stats["p99_ms"] / 1000, 2) if latencies else None
    return stats


def _spark_jobs(spark: Any, after: int) -> tuple[list[dict[str, Any]], int]:
    """Spark jobs numbered ``after`` or higher, from the UI's REST API: where the time
    of a step went (job name, seconds, tasks); and the next job number."""
    url = f"{spark.sparkContext.uiWebUrl}/api/v1/applications/{spark.sparkContext.applicationId}"
    try:
        with urllib.request.urlopen(f"{url}/jobs", timeout=30) as response:
            jobs = json.load(response)
    except (OSError, ValueError):
        return [], after

    def moment(text: str) -> datetime:
        return datetime.strptime(text.replace("GMT", "+0000"), "%Y-%m-%dT%H:%M:%S.%f%z")

    rows = [{"job": j["jobId"], "name": j["name"][:80], "tasks": j["numTasks"],
             "seconds": round((moment(j["completionTime"]) - moment(j["submissionTime"]))
                              .total_seconds(), 2)}
            for j in jobs if j["jobId"] >= after and "completionTime" in j]
    rows.sort(key=itemgetter("job"))
    return rows, max((j["jobId"] + 1 for j in jobs), default=after)


def _longest(jobs: list[dict[str, Any]], n: int = 4) -> str:
    top = sorted(jobs, key=itemgetter("seconds"), reverse=True)[:n]
    return ", ".join(f"{j['seconds']}s {j['name']}" for j in top)


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def _progress(text: str) -> None:
    """A step's figure as soon as it is known (the full run takes many minutes)."""
    print(f"  B6 {time.strftime('%H:%M:%S')} {text} (load {_load()})", file=sys.stderr,
          flush=True)


def run(ctx: BenchContext) -> Outcome:
    from tokensvc.audit.generator import generate
    from tokensvc.audit.ingest import IngestOptions, run_ingest
    from tokensvc.audit.reporting.job import run_report
    from tokensvc.audit.reporting.options import build_options
    from tokensvc.audit.session import create_session

    sizes = ctx.sizes.b6_events
    datasets = {}
    for events in sizes:
        directory = ctx.directory(f"b6-events-{events}")
        datasets[events] = generate(directory / "audit", events, seed=7)
        _progress(f"generated {events:,} in {datasets[events].elapsed_s:.1f}s")

    started = time.monotonic()
    spark = create_session(MASTER, app_name="tokensvc-bench-b6")
    session_s = time.monotonic() - started
    ingest_s: dict[int, float] = {}
    spool_s: dict[int, float] = {}
    write_s: dict[int, float] = {}
    commit_s: dict[int, float] = {}
    report_s: dict[int, float] = {}
    rows: dict[int, dict[str, Any]] = {}
    load: dict[str, list[float]] = {"start": _load()}
    jobs: dict[str, list[dict[str, Any]]] = {}
    next_job = _spark_jobs(spark, 0)[1]
    try:
        for events, data in datasets.items():
            lake = Path(data.directory).parent / "lake"
            totals = run_ingest(spark, IngestOptions(data.directory, str(lake), once=True,
                                                     closed_after_s=0), echo=lambda line: None)
            ingest_s[events] = totals.elapsed_s
            jobs[f"ingest_{events}"], next_job = _spark_jobs(spark, next_job)
            spool_s[events] = totals.spool_s
            write_s[events] = totals.write_s
            commit_s[events] = totals.commit_s
            _progress(f"ingest {events:,}: {totals.elapsed_s:.1f}s "
                      f"(spool {totals.spool_s:.1f}s, parse and write {totals.write_s:.1f}s, "
                      f"commit {totals.commit_s:.1f}s, {totals.batches} batches)")
            if totals.events != events:
                raise RuntimeError(f"ingest wrote {totals.events} events, not {events}")
            load[f"after_ingest_{events}"] = _load()
            if ctx.quick and events != sizes[-1]:
                continue  # quick: one report, over the larger lake (see the docstring)
            options = build_options(None, str(Path(data.directory).parent / "report"),
                                    tokens=data.snapshot, lake=str(lake))
            started = time.monotonic()
            summary = run_report(spark, options)
            report_s[events] = time.monotonic() - started
            jobs[f"report_{events}"], next_job = _spark_jobs(spark, next_job)
            _progress(f"report over the lake {events:,}: {report_s[events]:.1f}s; longest jobs "
                      f"{_longest(jobs[f'report_{events}'])}")
            load[f"after_report_{events}"] = _load()
            rows[events] = dict(summary["rows"], events=summary["events"],
                                duplicates=summary["duplicates"], malformed=summary["malformed"])
        latency = alert_latency(ctx, spark, bursts=2 if ctx.quick else 15,
                                gap_s=0.5 if ctx.quick else 3.0)
        load["after_alerts"] = _load()
        _progress(f"alert latency: {latency}")
    finally:
        spark.stop()

    python_s: dict[int, float] = {}
    agree = True
    for events, data in datasets.items():
        started = time.monotonic()
        counts = python_report(data.files, data.snapshot)
        python_s[events] = time.monotonic() - started
        _progress(f"plain Python {events:,}: {python_s[events]:.1f}s")
        if events in rows:
            agree = agree and all(rows[events][k] == v for k, v in counts.items())
            rows[events]["python"] = counts
    load["end"] = _load()
    if not agree:
        raise RuntimeError(f"the lake report and the Python reference disagree: {rows}")

    small, large = sizes
    size_ratio = large / small
    ingest_rate = large / ingest_s[large]
    report_rate = large / report_s[large]
    python_rate = large / python_s[large]
    ingest_growth = ingest_s[large] / ingest_s[small]
    report_growth = report_s[large] / report_s[small] if small in report_s else None
    growth = max(ingest_growth, report_growth or 0.0)
    report_growth_text = "not run" if report_growth is None else f"{report_growth:.1f}"
    speedup = python_s[large] / report_s[large]
    p99 = latency.get("p99_s")
    return Outcome(
        ID,
        TITLE,
        measured=ingest_rate,
        unit="events/s",
        reference=python_rate,
        reference_unit="events/s",
        reference_label="plain-Python report over JSON, 1 process",
        ratio=ratio(report_rate, python_rate),
        ratio_label="lake report / plain Python",
        targets=[
            Target(f"ingest >= {TARGET_INGEST:,} events/s at {large:,}",
                   ingest_rate >= TARGET_INGEST),
            Target(f"lake report >= {TARGET_REPORT_RATIO:.0f}x plain Python "
                   f"(was {speedup:.2f}x)", speedup >= TARGET_REPORT_RATIO),
            Target(f"linear: t({large:,})/t({small:,}) <= {LINEARITY_SLACK}x{size_ratio:.0f} "
                   f"(ingest {ingest_growth:.1f}, report {report_growth_text})",
                   growth <= LINEARITY_SLACK * size_ratio),
            Target(f"alert p99 <= {TARGET_ALERT_P99_S:.0f} s (was {p99} s, "
                   f"{latency['missing']} missing)",
                   p99 is not None and p99 <= TARGET_ALERT_P99_S and not latency["missing"]),
        ],
        details={
            "master": MASTER,
            "session_start_s": round(session_s, 2),
            "ingest_seconds": {str(k): round(v, 2) for k, v in ingest_s.items()},
            "ingest_spool_seconds": {str(k): round(v, 2) for k, v in spool_s.items()},
            "ingest_parse_write_seconds": {str(k): round(v, 2) for k, v in write_s.items()},
            "ingest_commit_seconds": {str(k): round(v, 2) for k, v in commit_s.items()},
            "ingest_events_per_s": {str(k): round(k / v) for k, v in ingest_s.items()},
            "report_lake_seconds": {str(k): round(v, 2) for k, v in report_s.items()},
            "report_lake_events_per_s": {str(k): round(k / v) for k, v in report_s.items()},
            "python_seconds": {str(k): round(v, 2) for k, v in python_s.items()},
            "python_events_per_s": {str(k): round(k / v) for k, v in python_s.items()},
            "report_speedup_over_python": round(speedup, 2),
            "growth": {"ingest": round(ingest_growth, 2),
                       "report": None if report_growth is None else round(report_growth, 2)},
            "alert_latency": latency,
            "load_average": load,
            "generate_seconds": {str(k): round(d.elapsed_s, 1) for k, d in datasets.items()},
            "input_mb": {str(k): round(sum(Path(f).stat().st_size for f in d.files) / 2**20, 1)
                         for k, d in datasets.items()},
            "rows": {str(k): v for k, v in rows.items()},
            "spark_jobs": jobs,
        },
    )
