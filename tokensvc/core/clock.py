"""Time as an injected dependency.

Pure code (token rules, SCRAM, the cache's expiry index) asks a :class:`Clock`
for the time instead of reading the wall clock, so tests move a
:class:`FakeClock` rather than sleeping.

:class:`CorrectedClock` is the clock a broker hands everything that decides with time
(expiry on login, token issue/expiry/max times, the expiry sweep): the cluster's time as
:class:`~tokensvc.core.clocksync.ClusterTimeEstimator` estimates it, i.e. this host's wall
clock corrected by its measured offset from ZooKeeper's time. This module only reads
clocks; measuring is the broker's (:mod:`tokensvc.broker.gates.clockskew`).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Protocol

from tokensvc.core.clocksync import ClockOffset, ClusterTimeEstimator


class Clock(Protocol):
    def now_ms(self) -> int:
        """Milliseconds since the epoch."""
        ...


class SystemClock:
    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000


class FakeClock:
    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        self._now = start_ms

    def now_ms(self) -> int:
        return self._now

    def advance(self, ms: int) -> None:
        self._now += ms

    def set(self, ms: int) -> None:
        self._now = ms


def wall_ms() -> float:
    """The host's wall clock, in epoch milliseconds."""
    return time.time_ns() / 1_000_000


def _boot_seconds() -> Callable[[], float]:
    boottime = getattr(time, "CLOCK_BOOTTIME", None)
    if boottime is None:
        return time.monotonic
    return functools.partial(time.clock_gettime, boottime)


_BOOT_SECONDS = _boot_seconds()


def boot_ms() -> float:
    """A clock that is never set and also counts a suspended machine (Linux
    CLOCK_BOOTTIME, else ``time.monotonic``), in milliseconds: the local timeline of the
    broker's clock samples."""
    return _BOOT_SECONDS() * 1000.0


class CorrectedClock:
    """The cluster's time on this host (see the module docstring).

    ``now_ms`` is the estimator's cluster time at this instant of the local timeline,
    which is the wall clock plus the offset measured now; before the first sample it is
    the host's wall clock (the broker refuses token logins and writes until then:
    :class:`~tokensvc.broker.gates.clockskew.ClockGate`). Safe from any thread.
    """

    def __init__(
        self,
        estimator: ClusterTimeEstimator,
        *,
        wall: Callable[[], float] = wall_ms,
        local: Callable[[], float] = boot_ms,
    ) -> None:
        self.estimator = estimator
        self.wall_ms = wall
        self.local_ms = local

    def now_ms(self) -> int:
        now = self.estimator.cluster_ms(self.local_ms())
        return int(self.wall_ms()) if now is None else int(now)

    def offset(self) -> ClockOffset | None:
        """This host's wall clock against the cluster's now (None before any sample)."""
        local = self.local_ms()
        return self.estimator.offset(local, self.wall_ms())
