"""The token audit report: a Spark job over the brokers' audit files.

The job reads audit lines (any Spark-readable path; malformed lines are classified and
counted, never fatal) or the lake of ``tokensvc audit ingest``, builds the report
DataFrames (token_usage, owner_usage, lifecycle, logins_hourly, findings, token_origin,
revocations, and labels: tokens, logins, failures and hosts per value of the ``job`` label
and of every label named with ``--group-by-label``; a token's labels come from its create
or revocation event, or from the token snapshot), and writes each as Parquet and CSV,
``summary.json``, ``report.html`` with its PNG charts, and the text summary the CLI
prints. The rules are those of :mod:`tokensvc.audit.rules`, whose pure reference
implementation the tests hold this job to. Its parts live in :mod:`tokensvc.audit.reporting`
(options, inputs, frames, job, output).

This module owns the job's own command line (:func:`main`, the options of ``tokensvc
audit report``) and nothing else: run it as ``tokensvc audit report``, ``python -m
tokensvc.audit.report`` or ``spark-submit tokensvc/audit/report.py`` (same options). It
must not be imported by the broker: pyspark is loaded here.
"""

from __future__ import annotations

import argparse
import sys

from tokensvc.audit.reporting.job import run_report
from tokensvc.audit.reporting.options import DEFAULT_GLOB, ReportError, build_options
from tokensvc.audit.reporting.output import format_summary
from tokensvc.audit.rules import DEFAULT_SETTINGS
from tokensvc.audit.session import create_session


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
