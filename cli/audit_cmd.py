"""`tokensvc audit`: the token audit report (Spark) and the synthetic event generator.

Thin shells: options are parsed here, the work is done by
:mod:`tokensvc.audit.report` and :mod:`tokensvc.audit.generator`. pyspark is
imported only when ``report`` runs, so the rest of ``tokensvc`` starts fast.
"""

from __future__ import annotations

import click

from tokensvc.audit.rules import DEFAULT_SETTINGS


@click.group("audit")
def audit() -> None:
    """Token audit reports over the brokers' audit logs."""


@audit.command("report")
@click.option("--input", "input_path", required=True,
              help="Audit files: a file, directory (searched recursively) or glob; any "
                   "Spark-readable path.")
@click.option("--output", required=True, type=click.Path(file_okay=False),
              help="Directory for the reports (Parquet, CSV, summary.json, report.html).")
@click.option("--master", default=None, help="Spark master URL.  [default: local[*]]")
@click.option("--since", default=None, help="Only events at or after T (ISO-8601 or epoch ms).")
@click.option("--until", default=None, help="Only events before T (ISO-8601 or epoch ms).")
@click.option("--host-threshold", default=DEFAULT_SETTINGS.host_threshold, show_default=True,
              type=click.IntRange(min=0), help="too_many_hosts: more distinct hosts than this.")
@click.option("--burst-threshold", default=DEFAULT_SETTINGS.burst_threshold, show_default=True,
              type=click.IntRange(min=1), help="Failed logins that make a burst.")
@click.option("--burst-window-s", default=DEFAULT_SETTINGS.burst_window_s, show_default=True,
              type=click.IntRange(min=0), help="Burst window in seconds.")
@click.option("--tokens", "tokens_path", default=None,
              help="Token snapshot from `tokensvc tokens export` (JSON lines).")
@click.option("--glob", "file_glob", default="audit-*.jsonl*", show_default=True,
              help="Names of the files read inside a directory.")
def report(input_path: str, output: str, master: str | None, since: str | None,
           until: str | None, host_threshold: int, burst_threshold: int, burst_window_s: int,
           tokens_path: str | None, file_glob: str) -> None:
    """Read audit events with Spark and write the token audit reports."""
    from tokensvc.audit.report import (
        ReportError,
        build_options,
        create_session,
        format_summary,
        run_report,
    )

    try:
        options = build_options(
            input_path, output, since=since, until=until, host_threshold=host_threshold,
            burst_threshold=burst_threshold, burst_window_s=burst_window_s, tokens=tokens_path,
            glob=file_glob,
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
