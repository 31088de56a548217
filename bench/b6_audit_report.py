"""B6: the Spark audit report over 1M and 10M generated events, local[2].

Set-up (not measured): ``tokensvc.audit.generator.generate`` writes the two
synthetic audit datasets (three brokers' file series and a token snapshot),
and one SparkSession (``local[2]``) is started; its start-up is reported apart.

Measured: ``tokensvc.audit.report.run_report`` on each dataset -- read and
classify every line, deduplicate, compute the five reports, write them as
Parquet and CSV, the summary and the HTML page with its charts -- timed per
dataset. Figure: events per second at the larger size; the growth from the
smaller to the larger is reported as ``t(large) / t(small)`` against the ratio
of the sizes.

Reference (same run): the same reports computed by a plain single-process Python
script -- every file's lines merged in timestamp order, ``json.loads`` per line,
fed to :class:`tokensvc.audit.rules.ReferenceAudit` (the rules' pure
implementation the Spark job is tested against). It writes no files. Its row
counts must match Spark's, or the benchmark fails.

Targets: >= 100,000 events/s at the larger size; time grows linearly
(``t(large) / t(small)`` at most 1.25x the size ratio).
"""

from __future__ import annotations

import heapq
import json
import time
from collections.abc import Iterator
from operator import itemgetter
from pathlib import Path
from typing import Any

from bench.suite import BenchContext, Outcome, Target, ratio

ID = "B6"
TITLE = "Spark audit report, local[2] (events/s at the larger size)"
TARGET_RATE = 100_000
LINEARITY_SLACK = 1.25
MASTER = "local[2]"


def _events(path: str) -> Iterator[dict[str, Any]]:
    with open(path, encoding="utf-8") as lines:
        for line in lines:
            if line.strip():
                yield json.loads(line)


def python_report(files: list[str], snapshot: str) -> dict[str, int]:
    """The reports by plain Python, one process: their row counts."""
    from tokensvc.audit.rules import DEFAULT_SETTINGS, ReferenceAudit

    audit = ReferenceAudit(DEFAULT_SETTINGS)
    observe = audit.observe
    for event in heapq.merge(*(_events(f) for f in files), key=itemgetter("ts")):
        observe(event)
    with open(snapshot, encoding="utf-8") as lines:
        tokens = [json.loads(line) for line in lines if line.strip()]
    result = audit.result(tokens)
    return {
        "token_usage": len(result.token_usage),
        "owner_usage": len(result.owner_usage),
        "lifecycle": len(result.lifecycle),
        "logins_hourly": len(result.logins_hourly),
        "findings": len(result.findings),
    }


def run(ctx: BenchContext) -> Outcome:
    from tokensvc.audit.generator import generate
    from tokensvc.audit.report import build_options, create_session, run_report

    sizes = ctx.sizes.b6_events
    datasets = {}
    for events in sizes:
        directory = ctx.directory(f"b6-events-{events}")
        datasets[events] = generate(directory / "audit", events, seed=7)

    started = time.monotonic()
    spark = create_session(MASTER, app_name="tokensvc-bench-b6")
    session_s = time.monotonic() - started
    spark_s: dict[int, float] = {}
    rows: dict[int, dict[str, int]] = {}
    try:
        for events, data in datasets.items():
            options = build_options(data.directory, str(Path(data.directory).parent / "report"),
                                    tokens=data.snapshot)
            started = time.monotonic()
            summary = run_report(spark, options)
            spark_s[events] = time.monotonic() - started
            rows[events] = dict(summary["rows"], events=summary["events"],
                                duplicates=summary["duplicates"], malformed=summary["malformed"])
    finally:
        spark.stop()

    python_s: dict[int, float] = {}
    agree = True
    for events, data in datasets.items():
        started = time.monotonic()
        counts = python_report(data.files, data.snapshot)
        python_s[events] = time.monotonic() - started
        agree = agree and all(rows[events][k] == v for k, v in counts.items())
        rows[events]["python"] = counts
    if not agree:
        raise RuntimeError(f"Spark and the Python reference disagree: {rows}")

    small, large = sizes
    measured = large / spark_s[large]
    reference = large / python_s[large]
    growth = spark_s[large] / spark_s[small]
    size_ratio = large / small
    return Outcome(
        ID,
        TITLE,
        measured=measured,
        unit="events/s",
        reference=reference,
        reference_unit="events/s",
        reference_label="plain Python, 1 process",
        ratio=ratio(measured, reference),
        targets=[
            Target(f">= {TARGET_RATE:,} events/s at {large:,}", measured >= TARGET_RATE),
            Target(f"linear: t({large:,})/t({small:,}) <= {LINEARITY_SLACK}x{size_ratio:.0f} "
                   f"(was {growth:.1f})", growth <= LINEARITY_SLACK * size_ratio),
        ],
        details={
            "master": MASTER,
            "session_start_s": round(session_s, 2),
            "spark_seconds": {str(k): round(v, 2) for k, v in spark_s.items()},
            "python_seconds": {str(k): round(v, 2) for k, v in python_s.items()},
            "spark_events_per_s": {str(k): round(k / v) for k, v in spark_s.items()},
            "python_events_per_s": {str(k): round(k / v) for k, v in python_s.items()},
            "growth": round(growth, 2),
            "generate_seconds": {str(k): round(d.elapsed_s, 1) for k, d in datasets.items()},
            "input_mb": {str(k): round(sum(Path(f).stat().st_size for f in d.files) / 2**20, 1)
                         for k, d in datasets.items()},
            "rows": {str(k): v for k, v in rows.items()},
        },
    )
