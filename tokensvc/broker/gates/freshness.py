"""FreshnessGate: no authentication decision from a stale view of ZooKeeper (issue #20).

Owns when this broker's view of ZooKeeper was last *confirmed current* and the rule that
a login (token or SCRAM user) and every request on a token-authenticated connection wait
for a confirmation once that is older than ``zookeeper.max.staleness.ms``.

- **Confirmed at.** A confirmation round takes the time (monotonic) *before* it asks
  ZooKeeper, then runs ``confirm`` (``sync`` and the notification roots' cversions, then
  the wait until the caches have applied them: see :mod:`zk.notifications`). When it
  succeeds the view reflects every change committed before that time, so that time
  becomes ``confirmed_at``. A round that fails or times out changes nothing.
- **Fresh** means ``now - confirmed_at <= bound``: one clock read, the only cost on the
  request path of a healthy broker. A background task runs a round every ``bound / 3``
  so a healthy broker stays fresh; it also runs one at once after a process pause,
  because its timer is overdue.
- **Stale** (a pause made the monotonic clock jump, the connection is lost or suspended,
  the session expired): :meth:`catch_up` waits for a round that leaves the view fresh.
  Concurrent callers share one round; a round that ends still stale (it began before a
  pause, or took longer than the bound) is followed by another, until the caller's
  timeout; failed rounds are spaced ``RETRY_S`` apart. Past the timeout,
  :class:`StaleView` (REQUEST_TIMED_OUT, retriable), logged here (at most one line per
  ``WARN_INTERVAL_S``) and audited by the caller with reason ``stale_view``.
- ``bound_ms = -1`` disables all of it (Kafka's behaviour: answer from the cache).
- **Clocks.** Staleness is measured on Linux ``CLOCK_BOOTTIME`` (monotonic, and it also
  counts a suspended machine), else ``time.monotonic``; injectable for tests. The
  caller's timeout is counted on the event loop's clock.

Must not: touch ZooKeeper itself (``confirm`` is handed in), read the wall clock, or put
anything but the clock read on the fast path.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Awaitable, Callable

from tokensvc.broker.loop.tasks import cancel_and_wait
from tokensvc.core.errors import Errors, KafkaError

log = logging.getLogger("tokensvc.broker.freshness")

STALE_VIEW = "stale_view"
BACKGROUND_FRACTION = 3
RETRY_S = 0.1
WARN_INTERVAL_S = 5.0


class StaleView(KafkaError):
    """The view could not be confirmed current within the request's time (retriable)."""

    reason = STALE_VIEW

    def __init__(self, message: str) -> None:
        super().__init__(Errors.REQUEST_TIMED_OUT, message)


def _boot_clock() -> Callable[[], float]:
    """The monotonic clock that also counts a suspended machine (Linux CLOCK_BOOTTIME),
    else ``time.monotonic``."""
    boottime = getattr(time, "CLOCK_BOOTTIME", None)
    if boottime is None:
        return time.monotonic
    return functools.partial(time.clock_gettime, boottime)


class FreshnessGate:
    """See the module docstring. Loop thread only."""

    def __init__(
        self,
        bound_ms: int,
        confirm: Callable[[], Awaitable[None]],
        *,
        round_timeout_s: float,
        monotonic: Callable[[], float] | None = None,
    ) -> None:
        self.enabled = bound_ms >= 0
        self.bound_s = bound_ms / 1000.0
        self._confirm = confirm
        self._round_timeout_s = round_timeout_s
        self._monotonic = monotonic or _boot_clock()
        self.confirmed_at = float("-inf")  # never confirmed
        self._round: asyncio.Task | None = None
        self._retry_at = 0.0
        self._warned_at: float | None = None
        self._unwarned = 0
        self._background: asyncio.Task | None = None
        self.rounds = 0
        self.failed_rounds = 0
        self.catch_ups = 0
        self.refusals = 0
        self.last_error: str | None = None

    # -- the request path -------------------------------------------------------------

    def fresh(self) -> bool:
        """True when the view was confirmed current within the bound (one clock read)."""
        return not self.enabled or self._monotonic() - self.confirmed_at <= self.bound_s

    def age_s(self) -> float:
        """Seconds since the view was last confirmed current (0 when disabled)."""
        return self._monotonic() - self.confirmed_at if self.enabled else 0.0

    async def catch_up(self, timeout_s: float) -> None:
        """Return once the view is fresh; :class:`StaleView` if not within ``timeout_s``."""
        if self.fresh():
            return
        self.catch_ups += 1
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s  # the request's time, on the loop's clock
        while not self.fresh():
            left = deadline - loop.time()
            if left <= 0:
                self.refusals += 1
                error = StaleView(
                    f"view of ZooKeeper not confirmed for {self.age_s():.1f}s (bound "
                    f"{self.bound_s:.1f}s) and not caught up within {timeout_s:.1f}s"
                    + (f": {self.last_error}" if self.last_error else "")
                )
                self._warn(error)
                raise error
            try:
                await asyncio.wait_for(asyncio.shield(self._start_round()), left)
            except TimeoutError:
                continue  # the loop's test raises StaleView

    def _warn(self, error: StaleView) -> None:
        """Log a refusal; at most one line per ``WARN_INTERVAL_S``, counting the others."""
        now = self._monotonic()
        if self._warned_at is not None and now - self._warned_at < WARN_INTERVAL_S:
            self._unwarned += 1
            return
        more = f" ({self._unwarned} more since the last line)" if self._unwarned else ""
        log.warning("refusing a request (%s): %s; retriable%s", STALE_VIEW, error.message, more)
        self._warned_at, self._unwarned = now, 0

    # -- rounds ---------------------------------------------------------------------

    def _start_round(self) -> asyncio.Task:
        """The round in flight, or a new one (concurrent callers share it)."""
        if self._round is None or self._round.done():
            self._round = asyncio.get_running_loop().create_task(self._run_round())
        return self._round

    async def _run_round(self) -> None:
        wait = self._retry_at - self._monotonic()
        if wait > 0:  # the last round failed: space the attempts
            await asyncio.sleep(wait)
        sent = self._monotonic()
        self.rounds += 1
        try:
            await asyncio.wait_for(self._confirm(), self._round_timeout_s)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - any failure leaves the view unconfirmed
            self.failed_rounds += 1
            self._retry_at = self._monotonic() + RETRY_S
            self.last_error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            log.debug("confirming the view of ZooKeeper failed: %s", self.last_error)
            return
        self.last_error = None
        self.confirmed_at = max(self.confirmed_at, sent)

    # -- the background confirmation ------------------------------------------------------

    def start(self) -> None:
        """Run a round every ``bound / 3`` on the running loop (nothing when disabled)."""
        if not self.enabled or self._background is not None:
            return
        self._background = asyncio.get_running_loop().create_task(self._keep_fresh())

    async def _keep_fresh(self) -> None:
        interval = max(self.bound_s / BACKGROUND_FRACTION, 0.001)
        while True:
            await asyncio.shield(self._start_round())
            await asyncio.sleep(interval)

    async def close(self) -> None:
        for task in (self._background, self._round):
            await cancel_and_wait(task)
        self._background = self._round = None
