"""Load generation in separate processes, so the broker under test and the clients
never share an interpreter (or its GIL) with the suite.

Owns starting N spawn-context worker processes that run one coroutine function
each, all measuring the same wall-clock window (``start_at`` .. ``start_at +
seconds``, after a warm-up), and adding up what they report. Workers import
their function by module path, so anything under ``bench`` can be a workload.

It must not interpret results beyond adding counts and pooling latencies.
"""

from __future__ import annotations

import asyncio
import importlib
import multiprocessing
import threading
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from tokensvc.broker.loop.eventloop import loop_factory

SPAWN_ALLOWANCE_S = 3.0


@dataclass
class Window:
    """The measured wall-clock window every worker shares (``time.time()`` seconds)."""

    start: float
    end: float

    def holds(self, t: float) -> bool:
        return self.start <= t < self.end


@dataclass
class WorkerReport:
    """What one worker saw inside the window; ``sent_at`` (wall-clock send times) is
    parallel to ``latencies`` when a workload records it."""

    done: int = 0
    errors: int = 0
    latencies: list[float] = field(default_factory=list)
    sent_at: list[float] = field(default_factory=list)
    error_samples: list[str] = field(default_factory=list)
    #: CPU seconds the worker process (all its threads) used inside the window.
    cpu_s: float = 0.0

    def merge(self, other: WorkerReport) -> None:
        self.done += other.done
        self.errors += other.errors
        self.latencies.extend(other.latencies)
        self.sent_at.extend(other.sent_at)
        self.error_samples.extend(other.error_samples[: max(0, 5 - len(self.error_samples))])
        self.cpu_s += other.cpu_s


Workload = Callable[[Window, dict[str, Any]], Awaitable[WorkerReport]]


class CpuWindow:
    """CPU seconds that ``sample`` (a process's CPU clock) advances between a window's
    start and end (wall-clock ``time.time()``), read from a thread of its own."""

    def __init__(self, sample: Callable[[], float], start: float, end: float) -> None:
        self.seconds: float | None = None
        self._thread = threading.Thread(target=self._run, args=(sample, start, end),
                                        daemon=True)
        self._thread.start()

    def _run(self, sample: Callable[[], float], start: float, end: float) -> None:
        time.sleep(max(0.0, start - time.time()))
        first = sample()
        time.sleep(max(0.0, end - time.time()))
        self.seconds = sample() - first

    def join(self) -> float | None:
        self._thread.join()
        return self.seconds


def run_worker(target: str, window: Window, params: dict[str, Any]) -> WorkerReport:
    module, _, name = target.partition(":")
    workload: Workload = getattr(importlib.import_module(module), name)
    cpu = CpuWindow(time.process_time, window.start, window.end)  # all its threads
    # The clients run on uvloop, as the broker does, so that the load generator (which
    # shares the 2 cores with the broker under test) spends less of the machine.
    with asyncio.Runner(loop_factory=loop_factory()[0]) as runner:
        report = runner.run(workload(window, params))
    report.cpu_s = cpu.join() or 0.0
    return report


def run_processes(
    target: str,
    params: dict[str, Any],
    *,
    processes: int,
    warmup_s: float,
    seconds: float,
    start_at: float | None = None,
    spawn_allowance_s: float = SPAWN_ALLOWANCE_S,
) -> tuple[WorkerReport, float]:
    """Run ``target`` (``"module:function"``) in ``processes`` fresh processes; the pooled
    report and the window's length in seconds. The window opens ``warmup_s`` after the
    workers have had ``spawn_allowance_s`` to start, or at wall-clock ``start_at`` when
    given."""
    start = start_at if start_at is not None else time.time() + spawn_allowance_s + warmup_s
    window = Window(start, start + seconds)
    context = multiprocessing.get_context("spawn")
    total = WorkerReport()
    with ProcessPoolExecutor(processes, mp_context=context) as pool:
        futures = [pool.submit(run_worker, target, window, dict(params, worker=n))
                   for n in range(processes)]
        for future in futures:
            total.merge(future.result(timeout=start - time.time() + seconds + 120))
    return total, seconds


async def until(t: float) -> None:
    """Sleep until wall-clock time ``t``."""
    delay = t - time.time()
    if delay > 0:
        await asyncio.sleep(delay)
