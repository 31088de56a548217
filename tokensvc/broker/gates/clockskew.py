"""ClockGate: the broker measures its clock against the cluster's, and refuses what it
cannot decide on a clock that is off (issue #36).

Owns this broker's measurements (rounds of samples of ZooKeeper's time, off the event
loop), the verdict on them against ``max.clock.skew.ms``, the refusal token logins and
token writes get while the verdict is not WITHIN, and the log line of each change of
verdict.

- **Measuring.** A round takes ``SAMPLES_PER_ROUND`` samples one after the other, each
  one ``setData`` of this broker's probe znode in a worker thread
  (:class:`zk.clock.ClockProbe`), and feeds them to the estimator of the broker's
  :class:`~tokensvc.core.clock.CorrectedClock`, which keeps the least uncertain
  (:mod:`tokensvc.core.clocksync`). The broker runs one round at start, before any
  listener opens, and then one every ``MEASURE_INTERVAL_S`` in the background (every
  ``RETRY_S`` while rounds fail). A failed sample changes nothing: the estimate ages
  and its uncertainty grows.
- **The verdict** (:func:`~tokensvc.core.clocksync.skew_state`) is read on the request
  path: two clock reads and some arithmetic. SKEWED: the wall clock is off by more than
  the bound even at the near end of the uncertainty. UNCHECKED: no sample yet (the
  start-up round failed), or an uncertainty larger than the bound.
- **Refusing.** While the verdict is not WITHIN, :meth:`ClockGate.refusal` returns a
  :class:`ClockSkewed` (REQUEST_TIMED_OUT, retriable, audit reason ``clock_skew``),
  which the SASL handler gives a token login that proved its HMAC, and the broker (or
  the controller's ledger) a token create, renew or expire; the expiry sweep asks
  :meth:`ClockGate.trusted` and skips its round. User logins and everything else are
  served: nothing else decides by the clock.
- **Listeners** (:meth:`ClockGate.add_listener`) hear each change of verdict: the
  controller election stands aside while the verdict is not WITHIN (issue #50).
- **Logging**: one line per change of verdict (and one at the first verdict), and one
  when samples start or stop failing; never one per request.

Must not: touch ZooKeeper itself (the probe is handed in), run a sample on the event
loop, or put more than the verdict on the request path.
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
from collections.abc import Callable

from tokensvc.broker.loop.tasks import cancel_and_wait
from tokensvc.core.clock import CorrectedClock
from tokensvc.core.clocksync import ClockOffset, ClockState, TimeSample, skew_state
from tokensvc.core.errors import Errors, KafkaError

log = logging.getLogger("tokensvc.broker.clockskew")

CLOCK_SKEW = "clock_skew"
# The start of the one line logged when refusing begins (operators grep for it).
SKEW_LOG_PREFIX = f"refusing token logins and token writes ({CLOCK_SKEW})"
MEASURE_INTERVAL_S = 10.0
RETRY_S = 1.0
SAMPLES_PER_ROUND = 3

# probe(local_ms, last offset) -> one sample; blocking (a ZooKeeper write).
Probe = Callable[[Callable[[], float], ClockOffset | None], TimeSample]


class ClockSkewed(KafkaError):
    """This broker's clock is beyond ``max.clock.skew.ms``, or not measured (retriable)."""

    reason = CLOCK_SKEW

    def __init__(self, message: str) -> None:
        super().__init__(Errors.REQUEST_TIMED_OUT, message)


def describe_offset(offset: ClockOffset) -> str:
    """``"600.0 s behind the cluster's time (±2 ms)"``: the wall clock against the
    cluster's time (milliseconds under a second)."""
    side = "behind" if offset.offset_ms > 0 else "ahead of"
    size = abs(offset.offset_ms)
    amount = f"{size / 1000:.1f} s" if size >= 1000 else f"{size:.0f} ms"
    return f"{amount} {side} the cluster's time (±{offset.uncertainty_ms:.0f} ms)"


class ClockGate:
    """See the module docstring. The verdict may be read from any thread; measuring runs
    on the event loop (its samples in worker threads)."""

    def __init__(
        self,
        clock: CorrectedClock,
        bound_ms: int,
        probe: Probe,
        *,
        interval_s: float = MEASURE_INTERVAL_S,
        retry_s: float = RETRY_S,
        samples_per_round: int = SAMPLES_PER_ROUND,
    ) -> None:
        self.clock = clock
        self.bound_ms = bound_ms
        self._probe = probe
        self._interval_s = interval_s
        self._retry_s = retry_s
        self._samples_per_round = samples_per_round
        self._state: ClockState | None = None
        self._state_lock = threading.Lock()
        self._background: asyncio.Task | None = None
        self._sampling = True
        self._listeners: list[Callable[[ClockState], None]] = []
        self.rounds = 0
        self.failed_samples = 0
        self.refusals = 0
        self.last_error: str | None = None

    # -- the verdict --------------------------------------------------------------------

    def state(self) -> ClockState:
        """The verdict now (logs it when it changed)."""
        offset = self.clock.offset()
        state = skew_state(offset, self.bound_ms)
        if state is not self._state:
            self._changed(state, offset)
        return state

    def add_listener(self, listener: Callable[[ClockState], None]) -> None:
        """Call ``listener(state)`` after each change of verdict (on the thread that saw
        it: the loop's, or a request's); it must not block."""
        self._listeners.append(listener)

    def trusted(self) -> bool:
        """True when decisions may be taken on the clock (the verdict is WITHIN)."""
        return self.state() is ClockState.WITHIN

    def refusal(self) -> ClockSkewed | None:
        """None when the clock is WITHIN the bound, else the error to refuse with."""
        offset = self.clock.offset()
        state = skew_state(offset, self.bound_ms)
        if state is not self._state:
            self._changed(state, offset)
        if state is ClockState.WITHIN:
            return None
        self.refusals += 1
        return ClockSkewed(self._why(state, offset))

    def _why(self, state: ClockState, offset: ClockOffset | None) -> str:
        if offset is None:
            return ("this broker's clock has not been measured against ZooKeeper's time yet: "
                    "token logins and token writes are refused until it is")
        if state is ClockState.SKEWED:
            return (f"this broker's clock is {describe_offset(offset)}, beyond "
                    f"max.clock.skew.ms={self.bound_ms}: token logins and token writes are "
                    "refused until it is fixed")
        return (f"this broker's clock offset is too uncertain to check "
                f"(±{offset.uncertainty_ms:.0f} ms, max.clock.skew.ms={self.bound_ms}): "
                "token logins and token writes are refused until it is measured again")

    def _changed(self, state: ClockState, offset: ClockOffset | None) -> None:
        with self._state_lock:
            if state is self._state:
                return
            first = self._state is None
            self._state = state
        for listener in self._listeners:
            listener(state)
        if state is ClockState.WITHIN:
            if offset is None:  # no bound (-1) and nothing measured yet
                log.info("clock not measured yet; max.clock.skew.ms=-1: nothing is refused")
            elif first:
                log.info("clock: %s, within max.clock.skew.ms=%d", describe_offset(offset),
                         self.bound_ms)
            else:
                log.info("clock back within max.clock.skew.ms=%d: %s; token logins and "
                         "token writes are served again", self.bound_ms,
                         describe_offset(offset))
            return
        log.error("%s: %s", SKEW_LOG_PREFIX, self._why(state, offset))

    # -- measuring ----------------------------------------------------------------------

    async def measure(self) -> bool:
        """One round of samples (each in a worker thread); True when one succeeded."""
        self.rounds += 1
        took = False
        for _ in range(self._samples_per_round):
            last = self.clock.offset()
            try:
                sample = await asyncio.to_thread(self._probe, self.clock.local_ms, last)
            except Exception as exc:  # noqa: BLE001 - a failed sample only ages the estimate
                self.failed_samples += 1
                self.last_error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
                log.debug("clock sample failed: %s", self.last_error)
                continue
            self.clock.estimator.add(sample)
            took = True
        if took != self._sampling:  # one line when sampling stops working, one when it is back
            self._sampling = took
            if took:
                log.info("clock samples of ZooKeeper's time succeed again")
            else:
                log.warning("clock samples of ZooKeeper's time fail (%s); the estimate ages and "
                            "its uncertainty grows until they succeed", self.last_error)
        self.state()
        return took

    def start(self) -> None:
        """Measure every ``interval_s`` on the running loop (``retry_s`` after a failed
        round)."""
        if self._background is None:
            self._background = asyncio.get_running_loop().create_task(self._keep_measuring())

    async def _keep_measuring(self) -> None:
        wait = self._interval_s
        while True:
            await asyncio.sleep(wait)
            wait = self._interval_s if await self.measure() else self._retry_s

    async def close(self) -> None:
        task, self._background = self._background, None
        await cancel_and_wait(task)

    # -- gauges -------------------------------------------------------------------------

    def offset_seconds(self) -> float:
        offset = self.clock.offset()
        return math.nan if offset is None else offset.offset_ms / 1000.0

    def uncertainty_seconds(self) -> float:
        offset = self.clock.offset()
        return math.nan if offset is None else offset.uncertainty_ms / 1000.0

    def estimate_age_seconds(self) -> float:
        """Seconds since the newest successful sample (NaN before the first)."""
        last = self.clock.estimator.last_sample_ms
        return math.nan if last is None else (self.clock.local_ms() - last) / 1000.0

    def refusing(self) -> float:
        return 0.0 if self.state() is ClockState.WITHIN else 1.0
