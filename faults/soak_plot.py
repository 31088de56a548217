"""``python -m faults.soak_plot SAMPLES.csv --out PLOT.png``: the soak's series as one figure.

Owns the picture of a soak's ``samples.csv`` (written by ``faults.soakmeter``): panels
against the minute of the run, resident memory, open file descriptors and threads of
each broker and ZooKeeper node, then the bytes (the files' sizes and the blocks they
hold) and the files of ZooKeeper's data directories and of the brokers' audit files. A restart shows as a break in a line.
Drawn with matplotlib on its file-only backend; it reads the CSV and writes the PNG,
nothing else.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from faults.soakmeter import Row, read_rows

PANELS = (
    ("rss_bytes", "resident memory (MiB)", 2**20, True),
    ("fds", "open file descriptors", 1, True),
    ("threads", "threads", 1, True),
    ("bytes", "bytes of the files (MiB)", 2**20, False),
    ("disk_bytes", "bytes allocated on disk (MiB)", 2**20, False),
    ("files", "files on disk", 1, False),
)


def draw(rows: list[Row], out: Path, title: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # A panel only for the measures the CSV has (an older soak's has no allocated bytes).
    panels = [p for p in PANELS if any(getattr(r, p[0]) is not None for r in rows)]
    fig, axes = plt.subplots(len(panels), 1, figsize=(10, 2.6 * len(panels) + 2), sharex=True,
                             squeeze=False)
    axes = axes[:, 0]
    series_names = sorted({r.series for r in rows})
    for ax, (measure, label, scale, processes) in zip(axes, panels):
        for series in series_names:
            points = [r for r in rows if r.series == series and getattr(r, measure) is not None
                      and (r.pid is not None) == processes]
            if not points:
                continue
            xs: list[float | None] = []
            ys: list[float | None] = []
            for previous, row in zip([None, *points], points):
                if previous is not None and previous.pid != row.pid:
                    xs.append(None)     # a restart: break the line
                    ys.append(None)
                xs.append(row.minute)
                ys.append(getattr(row, measure) / scale)
            ax.plot([x if x is not None else float("nan") for x in xs],
                    [y if y is not None else float("nan") for y in ys], label=series, linewidth=1)
        ax.set_ylabel(label)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7, loc="upper left", ncol=3)
    axes[-1].set_xlabel("minute of the soak")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(out, dpi=80)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m faults.soak_plot",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("samples", type=Path, help="samples.csv of a soak (its --dir)")
    parser.add_argument("--out", type=Path, required=True, help="the PNG to write")
    parser.add_argument("--title", default="tokensvc soak: resources per minute")
    args = parser.parse_args(argv)
    try:
        rows = read_rows(args.samples)
    except (OSError, KeyError, ValueError) as exc:
        parser.error(f"cannot read {args.samples}: {exc}")
    if not rows:
        parser.error(f"{args.samples} has no samples")
    draw(rows, args.out, args.title)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
