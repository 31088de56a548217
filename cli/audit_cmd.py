"""`tokensvc audit`: lake ingest, reports, live findings (Spark) and the event generator.

Thin shells: options are parsed here, the work is done by
:mod:`tokensvc.audit.ingest`, :mod:`tokensvc.audit.reporting`,
:mod:`tokensvc.audit.watch` and :mod:`tokensvc.audit.generator`. pyspark is
imported only when a Spark command runs, so the rest of ``tokensvc`` starts fast.
``ingest`` and ``watch`` stop cleanly on Ctrl-C and SIGTERM: the running
micro-batch is stopped, its output is redone by the next run.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import click

from tokensvc.audit.rules import DEFAULT_SETTINGS, RuleSettings

_THRESHOLDS = [
    click.option("--host-threshold", default=DEFAULT_SETTINGS.host_threshold,
                 show_default=True, type=click.IntRange(min=0),
                 help="too_many_hosts: more distinct hosts than this."),
    click.option("--burst-threshold", default=DEFAULT_SETTINGS.burst_threshold,
                 show_default=True, type=click.IntRange(min=1),
                 help="Failed logins that make a burst."),
    click.option("--burst-window-s", default=DEFAULT_SETTINGS.burst_window_s,
                 show_default=True, type=click.IntRange(min=0), help="Burst window in seconds."),
]


def thresholds(func: Callable[..., Any]) -> Callable[..., Any]:
    """The rule thresholds, the same options on report and watch."""
    for option in reversed(_THRESHOLDS):
        func = option(func)
    return func


@contextmanager
def stop_on_signals() -> Iterator[threading.Event]:
    """An event set by SIGTERM or SIGINT (Ctrl-C) while the block runs."""
    stop = threading.Event()

    def handler(signum: int, frame: Any) -> None:
        click.echo(f"{signal.Signals(signum).name}: stopping after the current step", err=True)
        stop.set()

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield stop
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


@click.group("audit")
def audit() -> None:
    """Token audit reports over the brokers' audit logs."""


@audit.command("ingest")
@click.option("--input", "input_path", required=True, type=click.Path(file_okay=False),
              help="Audit directory of the brokers (searched recursively).")
@click.option("--lake", required=True, type=click.Path(file_okay=False),
              help="Lake directory (Parquet by date, quarantine, checkpoint).")
@click.option("--master", default=None, help="Spark master URL.  [default: local[*]]")
@click.option("--once", is_flag=True, help="Ingest what is there, then stop.")
@click.option("--glob", "file_glob", default="audit-*.jsonl*", show_default=True,
              help="Names of the audit files.")
@click.option("--closed-after-s", default=3600.0, show_default=True,
              type=click.FloatRange(min=0),
              help="A file unchanged this long is complete (its last line too, "
                   "even without a newline); match audit.file.rotate.ms.")
@click.option("--trigger-s", default=5.0, show_default=True, type=click.FloatRange(min=0.1),
              help="Seconds between micro-batches (without --once).")
@click.option("--max-files-per-batch", default=None, type=click.IntRange(min=1),
              help="Spool chunks per micro-batch.  [default: all]")
def ingest(input_path: str, lake: str, master: str | None, once: bool, file_glob: str,
           closed_after_s: float, trigger_s: float, max_files_per_batch: int | None) -> None:
    """Stream the audit files into the Parquet lake, exactly once."""
    from tokensvc.audit.ingest import (
        IngestError,
        IngestOptions,
        check_options,
        format_totals,
        run_ingest,
    )
    from tokensvc.audit.session import create_session

    options = IngestOptions(input_path, lake, once=once, glob=file_glob,
                            closed_after_s=closed_after_s, trigger_s=trigger_s,
                            max_files_per_batch=max_files_per_batch)
    try:
        check_options(options)
        spark = create_session(master, app_name="tokensvc-audit-ingest")
        with stop_on_signals() as stop:
            totals = run_ingest(spark, options, stop=stop,
                                echo=lambda line: click.echo(line))
    except IngestError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(format_totals(totals))


@audit.command("watch")
@click.option("--input", "input_path", required=True, type=click.Path(file_okay=False),
              help="Audit directory of the brokers (searched recursively).")
@click.option("--alerts", required=True, type=click.Path(file_okay=False),
              help="Directory for alerts-*.jsonl (and the query's checkpoint and spool).")
@click.option("--master", default=None, help="Spark master URL.  [default: local[*]]")
@thresholds
@click.option("--lateness-s", default=120, show_default=True, type=click.IntRange(min=0),
              help="Watermark: events older than the newest minus this are too late.")
@click.option("--host-memory-s", default=86_400, show_default=True,
              type=click.IntRange(min=0),
              help="too_many_hosts forgets a token's hosts after this long without a login.")
@click.option("--trigger-s", default=2.0, show_default=True, type=click.FloatRange(min=0.1),
              help="Seconds between micro-batches.")
@click.option("--glob", "file_glob", default="audit-*.jsonl*", show_default=True,
              help="Names of the audit files.")
def watch(input_path: str, alerts: str, master: str | None, host_threshold: int,
          burst_threshold: int, burst_window_s: int, lateness_s: int, host_memory_s: int,
          trigger_s: float, file_glob: str) -> None:
    """Raise findings from the live audit files, each once, within seconds."""
    from tokensvc.audit.session import create_session
    from tokensvc.audit.watch import WatchError, WatchOptions, check_options, run_watch

    options = WatchOptions(
        input_path, alerts, RuleSettings(host_threshold, burst_threshold, burst_window_s),
        glob=file_glob, lateness_s=lateness_s, host_memory_s=host_memory_s,
        trigger_s=trigger_s)
    try:
        check_options(options)
        spark = create_session(master, app_name="tokensvc-audit-watch")
        with stop_on_signals() as stop:
            raised = run_watch(spark, options, stop=stop, echo=lambda line: click.echo(line))
    except WatchError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"watch stopped: {raised} findings raised in this run")


@audit.command("report")
@click.option("--input", "input_path", default=None,
              help="Audit files: a file, directory (searched recursively) or glob; any "
                   "Spark-readable path.")
@click.option("--lake", default=None, type=click.Path(file_okay=False),
              help="Read the lake of `tokensvc audit ingest` instead of --input.")
@click.option("--output", required=True, type=click.Path(file_okay=False),
              help="Directory for the reports (Parquet, CSV, summary.json, report.html).")
@click.option("--master", default=None, help="Spark master URL.  [default: local[*]]")
@click.option("--since", default=None, help="Only events at or after T (ISO-8601 or epoch ms).")
@click.option("--until", default=None, help="Only events before T (ISO-8601 or epoch ms).")
@thresholds
@click.option("--tokens", "tokens_path", default=None,
              help="Token snapshot from `tokensvc tokens export` (JSON lines).")
@click.option("--glob", "file_glob", default="audit-*.jsonl*", show_default=True,
              help="Names of the files read inside a directory.")
@click.option("--group-by-label", "group_by_labels", multiple=True, metavar="KEY",
              help="The labels report also groups tokens by this label key (repeatable; "
                   "job always).")
def report(input_path: str | None, lake: str | None, output: str, master: str | None, since: str | None,
           until: str | None, host_threshold: int, burst_threshold: int, burst_window_s: int,
           tokens_path: str | None, file_glob: str, group_by_labels: tuple[str, ...]) -> None:
    """Read audit events (files or the lake) with Spark and write the token audit reports."""
    from tokensvc.audit.reporting.job import run_report
    from tokensvc.audit.reporting.options import ReportError, build_options
    from tokensvc.audit.reporting.output import format_summary
    from tokensvc.audit.session import create_session

    try:
        options = build_options(
            input_path, output, since=since, until=until, host_threshold=host_threshold,
            burst_threshold=burst_threshold, burst_window_s=burst_window_s, tokens=tokens_path,
            glob=file_glob, lake=lake, group_by_labels=group_by_labels,
        )
        summary = run_report(create_session(master), options)
    except ReportError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(format_summary(summary))


@audit.command("generate")
@click.option("--events", "count", required=True, type=click.IntRange(min=0),
              help="How many events to write.")
@click.option("--out", required=True, type=click.Path(file_okay=False),
              help="Directory for the audit files, tokens.jsonl and ground_truth.json.")
@click.option("--seed", default=1, show_default=True, type=int)
@click.option("--brokers", default=3, show_default=True, type=click.IntRange(min=1))
@click.option("--workers", default=None, type=click.IntRange(min=1),
              help="Processes to use.  [default: one per CPU]")
def generate(count: int, out: str, seed: int, brokers: int, workers: int | None) -> None:
    """Write synthetic audit events with known ground truth (findings included)."""
    from tokensvc.audit.generator import generate as generate_events

    dataset = generate_events(out, count, seed=seed, brokers=brokers, workers=workers)
    click.echo(
        f"wrote {dataset.events} events in {len(dataset.files)} files to {dataset.directory} "
        f"({dataset.elapsed_s:.1f}s, {dataset.events_per_s:,.0f} events/s)\n"
        f"tokens: {dataset.tokens}  expected findings: {dataset.findings}\n"
        f"snapshot: {dataset.snapshot}\nground truth: {dataset.ground_truth}"
    )
