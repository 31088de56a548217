"""The stall meter: how late the broker's event loop runs a callback, and how long the
GIL is held in one stretch.

Owns two measurements, taken by one sampling thread (:class:`LoopWatch`) every
:data:`SAMPLE_INTERVAL_S` on a fixed grid of instants:

* **event-loop lag** -- at each instant ``due`` the thread asks the loop to run a
  callback now (``call_soon_threadsafe``); the lag is how long after ``due`` that
  callback ran. It counts everything that kept the loop from it: a long piece of work on
  the loop (a describe slice that ran long, a batch of cache listeners), another thread
  holding the GIL, or no CPU for the process at all. One callback is in flight at a
  time, so a stall of the loop is one sample as long as the stall (less at most one
  interval: the stall may start just after an instant), not many overlapping ones.
* **GIL hold** -- the thread sleeps until ``due`` with the GIL released; the time past
  ``due`` at which it runs again is how long it waited for the GIL (and, on a starved
  machine, for a CPU). CPython hands the GIL to a waiting thread after the switch
  interval (0.5 ms in a broker, :mod:`tokensvc.broker.loop.eventloop`) unless its holder is
  in one C call that never checks (a ``json.loads``, ``bytes.join``, ``sorted`` or
  ``zlib`` of something big): a wait much longer than the interval is one such
  stretch, by the loop or by a worker thread (the token sync, the notification
  followers, the snapshot writer, the sweep). Which thread held it is not measured
  (that would need a sampling profiler); that the loop lag moves with it, or not, tells
  a GIL stall from work on the loop.

* **the lag's CPU share** -- of each lag sample, the CPU time the process used
  meanwhile (``time.process_time``, capped at the lag): a machine that gives the broker
  no CPU (two cores shared by ZooKeeper, three brokers and a load generator) makes lag
  with no CPU behind it; the broker's own stall makes lag with its CPU behind it.

They go into :class:`StallHistogram` (the pure core: buckets, count, sum, largest;
no clock of its own) and are exported by :mod:`tokensvc.broker.metrics` as
``tokensvc_event_loop_lag_seconds``, ``tokensvc_event_loop_lag_cpu_seconds`` and
``tokensvc_gil_hold_seconds``.

Why a thread and not a timer on the loop: a timer measures the loop alone, and a
C call holding the GIL for 200 ms would show as lag without telling it from the
loop's own work; the thread measures both from one instant. Its cost is one wake-up
of the thread and one of the loop per interval: on an idle broker of a 2-core virtual
machine, 4.3% of a core at 5 ms (2.4% the thread's wake-ups, 1.8% the loop's), 2.8% at
10 ms, 1.6% at 20 ms. The interval is ``metrics.stall.sample.interval.ms`` (default 5 ms,
the resolution B13's 20 ms target needs).

Must not: hold a lock the loop waits for, log per sample, or change the loop (it only
adds a callback with ``call_soon_threadsafe``).
"""

from __future__ import annotations

import asyncio
import threading
import time
from bisect import bisect_left
from collections.abc import Callable

# Sampling period of the stall meter (a stall shows at least this much shorter than it
# was, at worst).
SAMPLE_INTERVAL_S = 0.005

# Bucket upper bounds (seconds): fine around the 20 ms target, then up to 5 s.
STALL_BUCKETS = (0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04,
                 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 2.0, 5.0)


class StallHistogram:
    """Durations in fixed buckets, with their count, sum and the largest one.

    One thread writes (``observe``), any thread reads (``counts``): plain ints and
    floats, so a reader may miss an update in flight, never corrupt one.
    """

    def __init__(self, buckets: tuple[float, ...] = STALL_BUCKETS) -> None:
        if list(buckets) != sorted(set(buckets)) or not buckets:
            raise ValueError("buckets must be increasing and distinct")
        self.buckets = buckets
        self._counts = [0] * (len(buckets) + 1)  # the last: above every bound (+Inf)
        self.count = 0
        self.sum = 0.0
        self.largest = 0.0

    def observe(self, seconds: float) -> None:
        seconds = max(0.0, seconds)
        self._counts[bisect_left(self.buckets, seconds)] += 1
        self.count += 1
        self.sum += seconds
        self.largest = max(self.largest, seconds)

    def cumulative(self) -> list[tuple[float, int]]:
        """``(upper bound, samples at or below it)`` per bucket, ``inf`` last
        (Prometheus' cumulative buckets)."""
        out, total = [], 0
        counts = list(self._counts)
        for bound, count in zip((*self.buckets, float("inf")), counts, strict=True):
            total += count
            out.append((bound, total))
        return out


class StallMeter:
    """The bookkeeping of one sampling thread: the grid of instants, and which histogram
    each measurement goes to. Pure: the caller hands it every time (seconds on one
    monotonic clock, and the process's CPU time on its own clock).

    ``lag_cpu`` takes, for each lag sample, the CPU time the whole process used from the
    moment the thread went to sleep for that instant until the loop ran the callback,
    capped at the lag: close to the lag, the broker's own work (on the loop or in a
    thread holding the GIL) made it; close to zero, the process was waiting for a CPU
    the machine did not give it. It may exceed the true share by up to one interval of
    CPU (the sleep before the instant is counted too).
    """

    def __init__(self, interval_s: float = SAMPLE_INTERVAL_S) -> None:
        if interval_s <= 0:
            raise ValueError("interval_s must be positive")
        self.interval_s = interval_s
        self.lag = StallHistogram()
        self.lag_cpu = StallHistogram()
        self.gil = StallHistogram()

    def first_due(self, now: float) -> float:
        return now + self.interval_s

    def woke(self, due: float, now: float) -> float:
        """The thread woke at ``now`` for the instant ``due``: records the GIL wait and
        returns the next instant of the grid after ``now`` (instants missed while the
        thread waited are skipped, not sampled in a burst)."""
        self.gil.observe(now - due)
        missed = int((now - due) // self.interval_s)
        return due + (missed + 1) * self.interval_s

    def ran(self, due: float, now: float, cpu_s: float = 0.0) -> None:
        """The loop ran the callback asked for at ``due`` at ``now``; the process used
        ``cpu_s`` of CPU since the thread went to sleep for ``due``."""
        lag = now - due
        self.lag.observe(lag)
        self.lag_cpu.observe(min(max(lag, 0.0), cpu_s))


class LoopWatch:
    """The sampling thread of one event loop (the shell around :class:`StallMeter`).

    ``start()`` from the loop's thread, ``close()`` from any thread (idempotent)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, meter: StallMeter, *,
                 clock: Callable[[], float] = time.monotonic,
                 cpu_clock: Callable[[], float] = time.process_time) -> None:
        self._loop = loop
        self.meter = meter
        self._clock = clock
        self._cpu_clock = cpu_clock
        self._stop = threading.Event()
        # A callback is in flight: set by the thread, cleared by the loop when it ran (a
        # plain attribute: one writer each way, no lock for the loop to take).
        self._in_flight = False
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="loop-watch", daemon=True)
            self._thread.start()

    def close(self) -> None:
        """Stop the thread (it notices within one interval)."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=2.0)

    def _ran(self, due: float, cpu_before: float) -> None:
        self.meter.ran(due, self._clock(), self._cpu_clock() - cpu_before)
        self._in_flight = False

    def _run(self) -> None:
        clock, cpu_clock, meter = self._clock, self._cpu_clock, self.meter
        due = meter.first_due(clock())
        while not self._stop.is_set():
            cpu_before = cpu_clock()
            pause = due - clock()
            if pause > 0:
                # time.sleep, not Event.wait: it waits in C with the GIL released (the
                # Event's Python-level condition code took 1-2% of a busy broker's GIL).
                time.sleep(pause)
                if self._stop.is_set():
                    return
            now = clock()
            next_due = meter.woke(due, now)
            if not self._in_flight:
                self._in_flight = True
                try:
                    self._loop.call_soon_threadsafe(self._ran, due, cpu_before)
                except RuntimeError:  # the loop is closed: the broker is gone
                    return
            due = next_due
