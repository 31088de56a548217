"""What the soak records every minute, and the slopes it prints at its end.

Owns the soak's resource series: one row per sample and process (a broker, a ZooKeeper
node) with its resident memory, open file descriptors and threads, read from
``/proc/<pid>``; one row per sample for the bytes of ZooKeeper's data directories and
of the brokers' audit files; the CSV they are kept in; and the slope per hour of each
series (least squares), over the whole run and over its second half, so growth that
levels off shows apart from growth that does not.

The arithmetic (:func:`slope_per_hour`, :func:`summarize`) is pure and tested with no
I/O; :class:`Sampler` is the thin shell that reads ``/proc`` and the directories. A
process restarted by a fault starts a new *life* (a new pid): slopes are taken within
one life, the longest, never across a restart's drop.

It must not judge a slope: the soak prints them, and ``docs/operations.md`` explains
them.
"""

from __future__ import annotations

import csv
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

FIELDS = ("minute", "series", "pid", "rss_bytes", "fds", "threads", "bytes", "files",
          "disk_bytes")
PROCESS_MEASURES = ("rss_bytes", "fds", "threads")
DIRECTORY_MEASURES = ("bytes", "disk_bytes", "files")


@dataclass(frozen=True)
class Row:
    """One sample of one series: a process (pid, rss_bytes, fds, threads) or a directory
    (bytes: the files' sizes; disk_bytes: the blocks they hold, smaller for ZooKeeper's
    preallocated, sparse transaction logs; files); the measures that do not apply are
    None."""

    minute: float
    series: str
    pid: int | None = None
    rss_bytes: int | None = None
    fds: int | None = None
    threads: int | None = None
    bytes: int | None = None
    files: int | None = None
    disk_bytes: int | None = None


@dataclass(frozen=True)
class Slope:
    series: str
    measure: str
    first: float
    last: float
    per_hour: float | None          # over the longest life, whole
    per_hour_second_half: float | None
    minutes: float                  # how long that life was sampled
    lives: int


def slope_per_hour(points: Iterable[tuple[float, float]]) -> float | None:
    """Least-squares slope of (minute, value) points, per hour; None below 3 points or
    when every point has the same minute."""
    pts = list(points)
    if len(pts) < 3:
        return None
    n = len(pts)
    mx = sum(x for x, _ in pts) / n
    my = sum(y for _, y in pts) / n
    sxx = sum((x - mx) ** 2 for x, _ in pts)
    if sxx == 0:
        return None
    sxy = sum((x - mx) * (y - my) for x, y in pts)
    return sxy / sxx * 60.0


def _lives(rows: list[Row]) -> list[list[Row]]:
    """The rows of one series cut where the pid changes (a restart)."""
    lives: list[list[Row]] = []
    for row in rows:
        if not lives or lives[-1][-1].pid != row.pid:
            lives.append([])
        lives[-1].append(row)
    return lives


def summarize(rows: Iterable[Row]) -> list[Slope]:
    """One :class:`Slope` per series and measure, taken over the series' longest life."""
    by_series: dict[str, list[Row]] = {}
    for row in sorted(rows, key=lambda r: (r.series, r.minute)):
        by_series.setdefault(row.series, []).append(row)
    out: list[Slope] = []
    for series, series_rows in by_series.items():
        lives = _lives(series_rows)
        life = max(lives, key=lambda rs: (rs[-1].minute - rs[0].minute, len(rs)))
        measures = PROCESS_MEASURES if life[0].pid is not None else DIRECTORY_MEASURES
        for measure in measures:
            points = [(r.minute, float(getattr(r, measure))) for r in life
                      if getattr(r, measure) is not None]
            if not points:
                continue
            middle = (points[0][0] + points[-1][0]) / 2
            out.append(Slope(
                series, measure, points[0][1], points[-1][1], slope_per_hour(points),
                slope_per_hour([p for p in points if p[0] >= middle]),
                points[-1][0] - points[0][0], len(lives)))
    return out


def _human(measure: str, value: float | None) -> str:
    if value is None:
        return "-"
    if measure in ("rss_bytes", "bytes", "disk_bytes"):
        return f"{value / 2**20:+.2f} MiB" if value else "0 MiB"
    return f"{value:+.1f}"


def format_slopes(slopes: Iterable[Slope]) -> str:
    """The table the soak prints: per series and measure, first and last value and the
    slope per hour over the longest life and over its second half."""
    lines = [(f"{'series':22s} {'measure':9s} {'first':>12s} {'last':>12s} "
              f"{'per hour':>14s} {'2nd half/h':>14s} {'minutes':>8s} lives")]
    for s in slopes:
        scale = (lambda v: f"{v / 2**20:.1f} MiB") \
            if s.measure in ("rss_bytes", "bytes", "disk_bytes") \
            else (lambda v: f"{v:.0f}")
        lines.append(f"{s.series:22s} {s.measure:9s} {scale(s.first):>12s} {scale(s.last):>12s} "
                     f"{_human(s.measure, s.per_hour):>14s} "
                     f"{_human(s.measure, s.per_hour_second_half):>14s} "
                     f"{s.minutes:8.0f} {s.lives}")
    return "\n".join(lines)


def write_rows(path: Path, rows: Iterable[Row], *, header: bool) -> None:
    """Append ``rows`` to the CSV at ``path`` (with the header first when asked)."""
    with open(path, "a", newline="", encoding="utf-8") as out:
        writer = csv.writer(out)
        if header:
            writer.writerow(FIELDS)
        for row in rows:
            writer.writerow(["" if getattr(row, f) is None else getattr(row, f) for f in FIELDS])


def read_rows(path: Path) -> list[Row]:
    """The rows of a CSV written by :func:`write_rows`."""
    rows = []
    with open(path, newline="", encoding="utf-8") as source:
        for record in csv.DictReader(source):
            values = {f: _read_value(record, f) for f in FIELDS}
            rows.append(Row(
                float(values["minute"]), values["series"],
                *(None if values[f] is None else int(values[f]) for f in FIELDS[2:])))
    return rows


def _read_value(record: dict[str, str | None], name: str) -> str | None:
    value = record.get(name)  # a CSV of an older soak has no disk_bytes column
    return None if value in ("", None) else value


# -- the shell: /proc and the directories ------------------------------------------------

def process_row(minute: float, series: str, pid: int) -> Row | None:
    """The sample of a live process, or None if it is gone (killed by a fault)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        fds = len(os.listdir(f"/proc/{pid}/fd"))
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    if fields.get("State", "").strip().startswith("Z"):
        return None
    rss_kib = int(fields["VmRSS"].split()[0]) if "VmRSS" in fields else 0
    return Row(minute, series, pid, rss_kib * 1024, fds, int(fields["Threads"]))


def directory_row(minute: float, series: str, paths: Iterable[Path]) -> Row:
    """The bytes, allocated bytes and number of regular files under ``paths`` (missing
    ones count 0)."""
    total = allocated = files = 0
    for root in paths:
        for dirpath, _, names in os.walk(root):
            for name in names:
                try:
                    stat = os.stat(os.path.join(dirpath, name))
                except FileNotFoundError:
                    continue
                total += stat.st_size
                allocated += stat.st_blocks * 512
                files += 1
    return Row(minute, series, bytes=total, files=files, disk_bytes=allocated)


class Sampler:
    """Takes one sample of every process and directory it is given, appending to a CSV."""

    def __init__(self, path: Path, started_monotonic: float) -> None:
        self.path = path
        self.started = started_monotonic
        self._header = not path.exists()

    def sample(self, now_monotonic: float, processes: Mapping[str, int | None],
               directories: Mapping[str, list[Path]]) -> list[Row]:
        minute = (now_monotonic - self.started) / 60.0
        rows = [row for series, pid in processes.items() if pid is not None
                for row in [process_row(minute, series, pid)] if row is not None]
        rows.extend(directory_row(minute, series, paths) for series, paths in directories.items())
        write_rows(self.path, rows, header=self._header)
        self._header = False
        return rows
