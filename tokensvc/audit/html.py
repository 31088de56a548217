"""``report.html`` and its charts, from data the report job has already collected.

This module owns the page a person reads: findings first, ordered by severity,
each with its evidence (token, its labels, owner, hosts, count, first and last time);
tokens, logins, failures and hosts per label value (the ``job`` label and those named
with ``--group-by-label``); a
chart of findings over time and one of logins; ``unused_before_expiry`` (the
noisy rule) grouped per owner; the top tokens; the counts last. Charts are PNG
files drawn with matplotlib's Agg backend, referenced relatively, so the output
directory can be copied anywhere.

It renders plain Python values only: no Spark, and nothing read from disk. Every value
is HTML-escaped where it is written (labels and other client-chosen text included).
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tokensvc.audit.rules import (
    RULE_SEVERITY,
    SEVERITIES,
    TOKEN_USAGE_COLUMNS,
)

HTML_FINDINGS = 500
HTML_TOP_TOKENS = 25
HTML_UNUSED_SAMPLE = 5
SEVERITY_COLOURS = {"high": "#c62828", "medium": "#ef6c00", "low": "#607d8b"}


@dataclass(frozen=True)
class PageData:
    """What the page shows; every list is already in display order."""

    summary: Mapping[str, Any]
    findings: Sequence[Mapping[str, Any]]  # not unused_before_expiry; severity first
    finding_hosts: Mapping[str, Sequence[str]]  # too_many_hosts: token id -> hosts
    unused_by_owner: Sequence[Mapping[str, Any]]  # owner, tokens, first_ts, last_ts, sample
    findings_hourly: Sequence[Mapping[str, Any]]  # hour_ms, high, medium, low
    logins_hourly: Sequence[Mapping[str, Any]]
    lifecycle: Sequence[Mapping[str, Any]]
    top_tokens: Sequence[Mapping[str, Any]]
    finding_labels: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    labels: Sequence[Mapping[str, Any]] = ()  # the labels report's rows


def labels_text(labels: Mapping[str, str] | None) -> str:
    """``k=v, k2=v2`` (the caller escapes it for HTML)."""
    return ", ".join(f"{k}={v}" for k, v in sorted((labels or {}).items()))

def iso(ms: int | None) -> str:
    if ms is None:
        return ""
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S")


def _hours(rows: Sequence[Mapping[str, Any]]) -> list[datetime]:
    return [datetime.fromtimestamp(r["hour_ms"] / 1000, UTC) for r in rows]


def draw_chart(path: Path, title: str, rows: Sequence[Mapping[str, Any]],
               series: Sequence[tuple[str, str, str | None]], stacked: bool) -> None:
    """An hourly bar (``stacked``) or line chart of ``series`` (column, label, colour)."""
    from matplotlib.dates import DateFormatter
    from matplotlib.figure import Figure

    fig = Figure(figsize=(10, 3.4), dpi=100)
    ax = fig.subplots()
    if rows:
        hours = _hours(rows)
        width = 1 / 24 * 0.9
        bottom = [0] * len(rows)
        for column, label, colour in series:
            values = [r[column] for r in rows]
            if stacked:
                ax.bar(hours, values, width=width, bottom=bottom, label=label, align="edge",
                       color=colour)
                bottom = [b + v for b, v in zip(bottom, values, strict=True)]
            else:
                ax.plot(hours, values, marker=".", label=label, color=colour)
        ax.xaxis.set_major_formatter(DateFormatter("%m-%d %H:00"))
        ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0))
        fig.autofmt_xdate()
    else:
        ax.text(0.5, 0.5, "nothing to show", ha="center", va="center", transform=ax.transAxes)
    ax.set_title(title)
    ax.set_xlabel("hour (UTC)")
    fig.tight_layout()
    fig.savefig(path, format="png")


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, list | tuple):
        return ", ".join(str(v) for v in value)
    return str(value)


def _table(columns: Sequence[str], rows: Sequence[Mapping[str, Any]],
           row_class: str | None = None) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = []
    for row in rows:
        cls = f' class="{html.escape(str(row.get(row_class, "")))}"' if row_class else ""
        cells = "".join(f"<td>{html.escape(_cell(row.get(c)))}</td>" for c in columns)
        body.append(f"<tr{cls}>{cells}</tr>")
    if not rows:
        body.append(f'<tr><td colspan="{len(columns)}">none</td></tr>')
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


_STYLE = """
body { font-family: sans-serif; margin: 2em; color: #222; max-width: 1400px; }
table { border-collapse: collapse; margin-bottom: 1.5em; font-size: 0.88em; }
th, td { border: 1px solid #bbb; padding: 0.25em 0.6em; text-align: left; vertical-align: top; }
th { background: #eee; }
tr.high td:first-child { border-left: 6px solid #c62828; }
tr.medium td:first-child { border-left: 6px solid #ef6c00; }
tr.low td:first-child { border-left: 6px solid #607d8b; }
.badge { display: inline-block; padding: 0.2em 0.7em; margin-right: 0.5em; border-radius: 1em;
         color: white; font-weight: bold; }
.note { color: #555; }
"""


def render(out: Path, data: PageData) -> Path:
    """Write ``out/report.html`` and its charts; the page's path."""
    summary = data.summary
    draw_chart(out / "findings_per_hour.png", "Findings per hour (by first event)",
               data.findings_hourly,
               [(s, s, SEVERITY_COLOURS[s]) for s in SEVERITIES], stacked=True)
    draw_chart(out / "logins_per_hour.png", "Logins per hour", data.logins_hourly,
               [("ok", "ok", "#2e7d32"), ("failed", "failed", "#c62828")], stacked=True)
    draw_chart(out / "lifecycle_per_hour.png", "Token lifecycle per hour", data.lifecycle,
               [("creates", "creates", None), ("renews", "renews", None),
                ("expiries", "expiries", None), ("sweeps", "sweep removals", None)],
               stacked=False)
    by_rule = summary["findings_by_rule"]
    by_severity = dict.fromkeys(SEVERITIES, 0)
    for rule, n in by_rule.items():
        by_severity[RULE_SEVERITY[rule]] += n
    badges = "".join(
        f'<span class="badge" style="background:{SEVERITY_COLOURS[s]}">{n} {s}</span>'
        for s, n in by_severity.items())
    findings = [dict(f, severity=RULE_SEVERITY[f["rule"]],
                     hosts=", ".join(data.finding_hosts.get(f["token_id"] or "", ()))
                     or f.get("client_host"),
                     labels=labels_text(data.finding_labels.get(f["token_id"] or "")),
                     first=iso(f["first_ts"]), last=iso(f["last_ts"]))
                for f in data.findings]
    shown_unused = sum(r["tokens"] for r in data.unused_by_owner)
    listed = summary["rows"]["findings"] - by_rule.get("unused_before_expiry", 0)
    more = listed - len(findings)
    unused = [dict(r, first=iso(r["first_ts"]), last=iso(r["last_ts"]),
                   sample=", ".join(r["sample"])) for r in data.unused_by_owner]
    top = [dict(r, first_use=iso(r["first_use"]), last_use=iso(r["last_use"]))
           for r in data.top_tokens]
    label_rows = [dict(r, first_use=iso(r["first_use"]), last_use=iso(r["last_use"]))
                  for r in data.labels]
    counts = [{"what": k, "value": summary[k]} for k in (
        "lines", "events", "malformed", "duplicates", "outside_time_range", "writer_dropped")]
    counts += [{"what": f"malformed: {k}", "value": v}
               for k, v in summary["malformed_by_reason"].items() if v]
    counts += [{"what": f"{k} rows", "value": v} for k, v in summary["rows"].items()]
    rules_table = [{"severity": RULE_SEVERITY[r], "rule": r, "findings": n}
                   for r, n in sorted(by_rule.items(),
                                      key=lambda kv: (SEVERITIES.index(RULE_SEVERITY[kv[0]]),
                                                      kv[0]))]
    tr = summary["time_range"]
    source = summary.get("lake") or summary.get("input") or ""
    page = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>tokensvc token audit</title>
<style>{_STYLE}</style></head><body>
<h1>Token audit report</h1>
<p>{badges}</p>
<p class="note">{html.escape(str(source))}: {summary["events"]:,} events from
{html.escape(iso(tr["first_ts"]))} to {html.escape(iso(tr["last_ts"]))} UTC.</p>
<h2 id="findings">Findings, most severe first</h2>
{_table(["severity", "rule", "token_id", "labels", "owner", "hosts", "count", "first",
         "last", "detail"], findings, row_class="severity")}
{f'<p class="note">{more:,} more in findings/csv.</p>' if more > 0 else ""}
<h2 id="over-time">Findings over time</h2>
<p><img src="findings_per_hour.png" alt="findings per hour by severity"></p>
<p><img src="logins_per_hour.png" alt="logins per hour, ok and failed"></p>
<h2 id="labels">Per job and label</h2>
<p class="note">Tokens, logins, failures and hosts per value of the labels
{html.escape(", ".join(summary.get("group_by_labels") or ()))}, for the tokens whose labels
are known (from their create or revocation event, or the token snapshot).</p>
{_table(["label", "value", "tokens", "owners", "logins_ok", "logins_failed",
         "distinct_hosts", "hosts", "first_use", "last_use"], label_rows)}
<h2 id="unused">Tokens unused before expiry, per owner</h2>
<p class="note">{shown_unused:,} tokens expired or were removed without a single successful
login. Usually harmless, but each one was a live credential nobody needed.</p>
{_table(["owner", "tokens", "first", "last", "sample"], unused)}
<h2 id="lifecycle">Token lifecycle</h2>
<p><img src="lifecycle_per_hour.png" alt="token lifecycle per hour"></p>
<h2 id="top-tokens">Top tokens by logins</h2>
{_table(TOKEN_USAGE_COLUMNS, top)}
<h2 id="counts">Counts</h2>
{_table(["severity", "rule", "findings"], rules_table, row_class="severity")}
{_table(["what", "value"], counts)}
</body></html>
"""
    path = out / "report.html"
    path.write_text(page, encoding="utf-8")
    return path
