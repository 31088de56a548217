"""The benchmark suite's frame: what a result is, the shared run context, the report.

Owns :class:`Outcome` (one benchmark's figure, its reference from the same run,
the ratio and the targets), :class:`BenchContext` (sizes for full or quick mode,
a scratch directory, and the expensive shared set-ups -- a 3-broker local
cluster, a ZooKeeper preloaded with tokens -- started on first use and torn
down at the end), the table printed to the terminal and the JSON written to
``bench/results/``.

It must not decide speed targets itself: each benchmark module states its own
targets and says whether they are met; this module only renders them.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import secrets
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

RESULTS_DIR = Path(__file__).resolve().parent / "results"


@dataclass
class Target:
    """One acceptance target, e.g. ``>= 2,000 logins/s``; ``met`` is None when unmeasured."""

    text: str
    met: bool | None


@dataclass
class Outcome:
    """One benchmark's result: the figure next to its reference, and the ratio.

    ``ratio`` is ``measured / reference`` unless ``ratio_label`` says otherwise
    (B4 reports how many times faster than the eager reference).
    """

    id: str
    title: str
    measured: float | None = None
    unit: str = ""
    reference: float | None = None
    reference_unit: str = ""
    reference_label: str = ""
    ratio: float | None = None
    ratio_label: str = "measured / reference"
    targets: list[Target] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0
    error: str | None = None

    @property
    def met(self) -> bool | None:
        """True when every target is met, False when one is missed, None without targets."""
        verdicts = [t.met for t in self.targets]
        if self.error is not None or any(v is False for v in verdicts):
            return False if verdicts or self.error else None
        if not verdicts or any(v is None for v in verdicts):
            return None
        return True


def ratio(measured: float | None, reference: float | None) -> float | None:
    if measured is None or not reference:
        return None
    return measured / reference


@dataclass(frozen=True)
class Sizes:
    """Every size knob of the suite, for full and quick mode."""

    b1_seconds: float
    b1_processes: int
    b1_concurrency: int
    b2_seconds: float
    b2_concurrency: int
    b3_samples: int
    tokens: int
    b4_eager_sample: int
    b5_due_fraction: float
    b5_window_s: float
    b5_sweep_allowance_s: float
    b5_round_gap_s: float
    b5_settle_s: float
    b6_events: tuple[int, int]
    b7_tokens: int
    # Load processes (bench.load): the time their spawn is given before the warm-up, and
    # the warm-up before a measured window opens.
    spawn_allowance_s: float
    warmup_s: float

    @classmethod
    def for_mode(cls, quick: bool) -> Sizes:
        if quick:
            return cls(
                b1_seconds=1.0, b1_processes=1, b1_concurrency=16,
                b2_seconds=1.0, b2_concurrency=16,
                b3_samples=10,
                tokens=2_000, b4_eager_sample=20,
                b5_due_fraction=0.01, b5_window_s=1.5, b5_sweep_allowance_s=1.5,
                b5_round_gap_s=1.0, b5_settle_s=1.0,
                b6_events=(1_000, 4_000),
                b7_tokens=2_000,
                spawn_allowance_s=1.0, warmup_s=0.5,
            )
        return cls(
            b1_seconds=10.0, b1_processes=1, b1_concurrency=64,
            b2_seconds=10.0, b2_concurrency=32,
            b3_samples=200,
            tokens=100_000, b4_eager_sample=2_000,
            b5_due_fraction=0.01, b5_window_s=8.0, b5_sweep_allowance_s=8.0,
            b5_round_gap_s=3.0, b5_settle_s=2.0,
            b6_events=(1_000_000, 10_000_000),
            b7_tokens=100_000,
            spawn_allowance_s=3.0, warmup_s=1.0,
        )


class BenchContext:
    """Sizes, a scratch directory and lazily started shared set-ups for one suite run.

    ``master_key`` is generated per run and handed to every broker the suite
    starts, so benchmarks can compute token HMACs (as a client that was given
    them would know them). It is never written into results.
    """

    def __init__(self, quick: bool, workdir: Path | None = None,
                 broker_settings: dict[str, str] | None = None,
                 insecure_zookeeper: bool = False, label_tokens: bool = False,
                 pin_cores: bool = False) -> None:
        self.quick = quick
        # ``--pin-cores``: B12 runs ZooKeeper and its load on one half of the CPUs and its
        # brokers on the other (``bench.pinning``).
        self.pin_cores = pin_cores
        # ``--label-tokens``: B1's and B2's tokens carry 4 labels of 32 bytes.
        self.label_tokens = label_tokens
        # ``--insecure-zookeeper``: the suite's local clusters start their ZooKeeper open
        # (plain port, no SASL, no ACLs), to measure what the secure default costs.
        self.insecure_zookeeper = insecure_zookeeper
        # ``--set KEY=VALUE``: extra broker settings for every cluster the suite starts
        # (e.g. an A/B of ``zookeeper.max.staleness.ms=-1``).
        self.broker_settings = dict(broker_settings or {})
        self.sizes = Sizes.for_mode(quick)
        self._own_workdir = workdir is None
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="tokensvc-bench-"))
        self.master_key = secrets.token_urlsafe(32)
        self._stack = contextlib.ExitStack()
        self._shared: dict[str, Any] = {}
        # Set-ups that name their users: each on a stack of its own, undone by
        # :meth:`finished` once no benchmark still to run uses it.
        self._scoped: dict[str, tuple[frozenset[str], contextlib.ExitStack]] = {}

    def directory(self, name: str) -> Path:
        path = self.workdir / name
        path.mkdir(parents=True, exist_ok=True)
        return path

    def shared(self, name: str, start: Callable[[contextlib.ExitStack], Any],
               users: Iterable[str] | None = None) -> Any:
        """The set-up called ``name``, started by ``start(stack)`` on first use; whatever
        ``start`` registers on the stack is undone when the suite closes, or, when
        ``users`` names the benchmarks (ids) that use it, as soon as none of them is
        left to run (:meth:`finished`): an idle cluster left up would take CPU from every
        later benchmark (five idle brokers took a fifth of a core in a full run)."""
        if name not in self._shared:
            stack = self._stack
            if users is not None:
                stack = contextlib.ExitStack()
                self._scoped[name] = (frozenset(users), stack)
            self._shared[name] = start(stack)
        return self._shared[name]

    def finished(self, still_to_run: Iterable[str]) -> None:
        """Undo the set-ups whose users are none of ``still_to_run`` (benchmark ids)."""
        left = set(still_to_run)
        for name, (users, stack) in list(self._scoped.items()):
            if not users & left:
                del self._scoped[name]
                self._shared.pop(name, None)
                stack.close()

    def close(self) -> None:
        try:
            self.finished(())
            self._stack.close()
        finally:
            if self._own_workdir:
                shutil.rmtree(self.workdir, ignore_errors=True)


# -- report -----------------------------------------------------------------------------


def _number(value: float | None, unit: str = "") -> str:
    if value is None:
        return "-"
    if abs(value) >= 100:
        text = f"{value:,.0f}"
    elif abs(value) >= 10:
        text = f"{value:.1f}"
    else:
        text = f"{value:.3g}"
    return f"{text} {unit}".rstrip()


def _verdict(outcome: Outcome) -> str:
    if outcome.error is not None:
        return "ERROR"
    return {True: "met", False: "MISSED", None: "-"}[outcome.met]


def table(outcomes: list[Outcome]) -> str:
    """The results as a Markdown table (readable in a terminal, pasteable into docs)."""
    rows = [("id", "what", "measured", "reference (same run)", "ratio", "target", "verdict")]
    for o in outcomes:
        reference = _number(o.reference, o.reference_unit)
        if o.reference_label and o.reference is not None:
            reference = f"{reference} ({o.reference_label})"
        ratio_text = "-" if o.ratio is None else f"{o.ratio:.2f} ({o.ratio_label})"
        targets = "; ".join(
            f"{t.text} {'ok' if t.met else 'MISS' if t.met is False else '?'}" for t in o.targets
        )
        rows.append((
            o.id,
            o.title,
            _number(o.measured, o.unit) if o.error is None else f"error: {o.error}"[:60],
            reference,
            ratio_text,
            targets or "-",
            _verdict(o),
        ))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = []
    for n, row in enumerate(rows):
        lines.append("| " + " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) + " |")
        if n == 0:
            lines.append("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


def machine() -> dict[str, Any]:
    return {
        "cpus": os.cpu_count(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
    }


def write_results(
    outcomes: list[Outcome],
    *,
    quick: bool,
    started: datetime,
    seconds: float,
    directory: Path = RESULTS_DIR,
) -> Path:
    """Write ``<timestamp>.json`` and ``latest.json`` under ``directory``; the first path."""
    directory.mkdir(parents=True, exist_ok=True)
    document = {
        "started": started.isoformat(timespec="seconds"),
        "quick": quick,
        "seconds": round(seconds, 1),
        "machine": machine(),
        "results": [dict(asdict(o), met=o.met) for o in outcomes],
    }
    text = json.dumps(document, indent=2, default=str) + "\n"
    stamp = started.strftime("%Y%m%dT%H%M%SZ") + ("-quick" if quick else "")
    path = directory / f"{stamp}.json"
    path.write_text(text, encoding="utf-8")
    (directory / "latest.json").write_text(text, encoding="utf-8")
    return path


def now_utc() -> datetime:
    return datetime.now(UTC)


def timed(fn: Callable[[], Outcome], bench_id: str, title: str) -> Outcome:
    """Run one benchmark; an exception becomes an outcome with ``error`` set."""
    started = time.monotonic()
    load_before = os.getloadavg()[0]
    steal_before = _steal_seconds()
    try:
        outcome = fn()
    except Exception as exc:  # noqa: BLE001 - one failing benchmark must not stop the suite
        outcome = Outcome(bench_id, title, error=f"{exc.__class__.__name__}: {exc}")
    outcome.seconds = round(time.monotonic() - started, 1)
    # Other work on the machine skews every figure: keep the 1-minute load with it.
    outcome.details["load_average_1m"] = [round(load_before, 2), round(os.getloadavg()[0], 2)]
    # On a virtual machine, CPU time the host gave to others (the same figures run slower).
    steal_after = _steal_seconds()
    if steal_before is not None and steal_after is not None:
        outcome.details["cpu_steal_s"] = round(steal_after - steal_before, 2)
    return outcome


def _steal_seconds() -> float | None:
    """Seconds of CPU stolen by the hypervisor since boot, all CPUs (Linux), else None."""
    try:
        fields = Path("/proc/stat").read_text().splitlines()[0].split()
        return int(fields[8]) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def run_alone(quick: bool, measure: Callable[[BenchContext], object], out: Path | None) -> int:
    """One benchmark's figures outside the suite (``python -m bench.bNN_...``): ``measure``
    on a context of its own, the figures printed as JSON and written to ``out`` if given."""
    ctx = BenchContext(quick)
    try:
        results = measure(ctx)
    finally:
        ctx.close()
    text = json.dumps(results, indent=1)
    if out is not None:
        out.write_text(text)
    print(text)
    return 0
