"""What the report job is asked to do: :class:`ReportOptions`, checked from command-line text.

This module owns the options of ``tokensvc audit report`` once parsed (:func:`build_options`:
exactly one source, the rule thresholds, the time range, the label keys), the times they
accept (:func:`parse_time`, :func:`iso`), the local-path checks made before a JVM starts
(:func:`check_exists`), the names of the reports (:data:`REPORTS`) and
:class:`ReportError`, the one error a person running the report can fix.

It must not import pyspark: the options are checked before a session exists.
"""

from __future__ import annotations

import glob as globlib
import os
from dataclasses import dataclass
from datetime import UTC, datetime
from urllib.parse import urlparse

from tokensvc.audit.rules import DEFAULT_SETTINGS, RuleSettings
from tokensvc.core.labels import LabelError, check_key

DEFAULT_GLOB = "audit-*.jsonl*"
REPORTS = ("token_usage", "owner_usage", "lifecycle", "logins_hourly", "findings",
           "token_origin", "revocations", "labels")
# The label keys the labels report groups by unless told otherwise.
DEFAULT_GROUP_BY_LABELS = ("job",)


class ReportError(Exception):
    """A problem the person running the report can fix (bad path, bad option)."""


@dataclass(frozen=True)
class ReportOptions:
    """``input`` is the audit files (JSON lines), or ``lake`` the Parquet lake of
    ``tokensvc audit ingest``: exactly one of them."""

    input: str | None
    output: str
    since_ms: int | None = None
    until_ms: int | None = None
    settings: RuleSettings = DEFAULT_SETTINGS
    tokens: str | None = None
    glob: str = DEFAULT_GLOB
    lake: str | None = None
    group_by_labels: tuple[str, ...] = DEFAULT_GROUP_BY_LABELS

    @property
    def whole_range(self) -> bool:
        """True when no time range is asked for (every event counts)."""
        return self.since_ms is None and self.until_ms is None


def parse_time(text: str) -> int:
    """Epoch milliseconds from ``text``: digits are epoch ms, anything else ISO-8601
    (a time without a zone is UTC)."""
    text = text.strip()
    if text.lstrip("-").isdigit():
        return int(text)
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise ReportError(f"not a time: {text!r} (use ISO-8601 or epoch milliseconds)") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def iso(ms: int | None) -> str | None:
    if ms is None:
        return None
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def _local_path(path: str) -> str | None:
    """The filesystem path if ``path`` is local (no scheme or file:), else None."""
    parsed = urlparse(path)
    if parsed.scheme in ("", "file"):
        return parsed.path if parsed.scheme == "file" else path
    return None


def check_exists(path: str, what: str) -> bool:
    """Raise ReportError if a local ``path`` (glob allowed) is missing. True if it is
    (or matches) a directory, or is remote and cannot be told."""
    local = _local_path(path)
    if local is None:
        return True
    if any(ch in local for ch in "*?["):
        matches = globlib.glob(local)
        if not matches:
            raise ReportError(f"{what} matches nothing: {path}")
        return any(os.path.isdir(m) for m in matches)
    if not os.path.exists(local):
        raise ReportError(f"{what} does not exist: {path}")
    return os.path.isdir(local)


def build_options(
    input_path: str | None,
    output: str,
    *,
    since: str | None = None,
    until: str | None = None,
    host_threshold: int = DEFAULT_SETTINGS.host_threshold,
    burst_threshold: int = DEFAULT_SETTINGS.burst_threshold,
    burst_window_s: int = DEFAULT_SETTINGS.burst_window_s,
    tokens: str | None = None,
    glob: str = DEFAULT_GLOB,
    lake: str | None = None,
    group_by_labels: tuple[str, ...] = (),
) -> ReportOptions:
    """Validated options from command-line values (raises ReportError). The labels report
    groups by ``job`` and by each key of ``group_by_labels``."""
    if (input_path is None) == (lake is None):
        raise ReportError("give exactly one of --input (audit files) and --lake (lake directory)")
    try:
        settings = RuleSettings(host_threshold, burst_threshold, burst_window_s)
    except ValueError as exc:
        raise ReportError(str(exc)) from None
    since_ms = parse_time(since) if since else None
    until_ms = parse_time(until) if until else None
    if since_ms is not None and until_ms is not None and since_ms >= until_ms:
        raise ReportError("--since must be before --until")
    if input_path is not None:
        check_exists(input_path, "input path")  # before a JVM starts, where we can tell
    elif lake is not None and not os.path.isdir(lake):
        raise ReportError(f"lake directory does not exist: {lake}")
    if tokens:
        check_exists(tokens, "token snapshot")
    keys = tuple(dict.fromkeys((*DEFAULT_GROUP_BY_LABELS, *group_by_labels)))
    for key in keys:
        try:
            check_key(key)
        except LabelError as exc:
            raise ReportError(f"--group-by-label: {exc.message}") from None
    return ReportOptions(input_path, output, since_ms, until_ms, settings, tokens, glob, lake,
                         keys)
