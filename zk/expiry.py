"""The expiry sweep: the controller deletes tokens past their expiry or max lifetime.

Owns: :class:`ExpirySweeper`, a thread that every ``interval_ms`` -- and only while this
broker is the controller -- asks the cache for due tokens (``cache.due(now)``, an index
ordered by deadline, no scan), deletes each from ZooKeeper under the controller guard,
and then, at most once per ``purge_interval_ms`` of the injected clock, runs the
``purge(now_ms)`` it was given (the broker passes the purge of every change-notification
root and of old request records). The purge has its own cadence because it lists roots
and stats their oldest children: at a short sweep interval (B9 sweeps every 500 ms) a
purge per sweep kept the ZooKeeper connection busy with reads that found nothing to
delete, and the freshness gate's confirmation rounds queued behind them.

Each due token is re-read from ZooKeeper before it is deleted (due tokens are read in
batches of ``SWEEP_BATCH`` with multi-reads, and a batch's deletes are pipelined, so a
sweep costs a few round trips per batch, not two per token), and the delete is
conditional on the version read: a token renewed a moment ago (and not yet seen by
this broker's cache) is left alone and its fresh state put into the cache. A guard
failure (another broker won the election) ends the sweep at once. Deleted tokens are
also dropped from the local cache right away; the other brokers drop them when the
change notification reaches them.

The clock is the broker's corrected clock (the cluster's time, issue #36); while the
broker does not trust it (``trusted()`` is False: beyond ``max.clock.skew.ms`` or not
measured) a sweep does nothing but count itself in ``skipped``, so a controller whose
host clock is far off never expires a token early.

Must not: run on a broker that is not the controller, decide token rules beyond
"expired at now" (``TokenInformation.expired_at``), or read the wall clock directly
(the clock is injected; tests call :meth:`ExpirySweeper.sweep_once` with a FakeClock).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Protocol

from kazoo.exceptions import KazooException

from tokensvc.core.clock import Clock
from tokensvc.core.token import TokenInformation
from zk.election import ControllerElection
from zk.errors import NotControllerError, StoreError
from zk.notifications import PURGE_INTERVAL_S
from zk.token_store import TokenStore

log = logging.getLogger(__name__)

# Due tokens re-read (one multi-read) and deleted (pipelined) per step of a sweep.
SWEEP_BATCH = 1_000

# The controller's purge of old notifications and request records runs at most this
# often: the same interval as the notification followers' own purge.
PURGE_INTERVAL_MS = int(PURGE_INTERVAL_S * 1000)

REASON_EXPIRED = "expired"
REASON_MAX_LIFETIME = "max_lifetime"

RemovedListener = Callable[[TokenInformation, str], None]
# ``apply_committed(token_id, None, sequence)`` of the token sync: True once the cache
# holds the deletion committed at ``sequence`` (False during a load).
CommittedDelete = Callable[[str, None, int], bool]


class SweptCache(Protocol):
    """What the sweeper needs from :class:`tokensvc.core.cache.TokenCache`."""

    def due(self, now_ms: int) -> list[TokenInformation]: ...

    def upsert(self, info: TokenInformation) -> object: ...

    def remove(self, token_id: str) -> object: ...


def removal_reason(info: TokenInformation, now_ms: int) -> str:
    """``"max_lifetime"`` once the max timestamp has passed, else ``"expired"``."""
    return REASON_MAX_LIFETIME if now_ms > info.max_timestamp else REASON_EXPIRED


class ExpirySweeper:
    """Delete expired tokens every ``interval_ms`` while ``election.is_controller``.

    ``on_removed(info, reason)`` is called (on the sweeping thread) for each token this
    sweeper deleted. With ``apply_committed`` (the token sync's), each deletion goes into
    the cache as the committed state it is, at its notification's sequence, so that the
    controller's follower does not read the token back when it lists that notification (ten
    thousand reads in the sweep of ten thousand due tokens); without it, or while a load
    runs, the token is removed from the cache directly. Stats: ``sweeps`` (sweeps run as
    controller), ``removed``, ``last_duration_ms``, ``purged_notifications`` (what
    ``purge(now_ms)`` -- the controller's purge of old notifications and request records --
    returned), ``skipped`` (sweeps not run because ``trusted()`` said the clock is not to
    be trusted).
    """

    def __init__(
        self,
        store: TokenStore,
        cache: SweptCache,
        election: ControllerElection,
        clock: Clock,
        *,
        interval_ms: int,
        on_removed: RemovedListener | None = None,
        purge: Callable[[int], int] | None = None,
        purge_interval_ms: int = PURGE_INTERVAL_MS,
        trusted: Callable[[], bool] | None = None,
        apply_committed: CommittedDelete | None = None,
    ) -> None:
        if interval_ms <= 0:
            raise ValueError("interval_ms must be positive")
        self._store = store
        self._cache = cache
        self._election = election
        self._clock = clock
        self._interval_s = interval_ms / 1000.0
        self._on_removed = on_removed
        self._purge = purge
        self._purge_interval_ms = purge_interval_ms
        self._purged_at_ms: int | None = None
        self._trusted = trusted
        self._apply_committed = apply_committed
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._sweep_lock = threading.Lock()
        self.sweeps = 0
        self.removed = 0
        self.last_duration_ms = 0
        self.purged_notifications = 0
        self.skipped = 0

    def start(self) -> None:
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name="expiry-sweeper", daemon=True)
        self._thread.start()

    @property
    def running(self) -> bool:
        """True while the sweeping thread is alive."""
        return self._thread is not None and self._thread.is_alive()

    def close(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            try:
                self.sweep_once()
            except StoreError as exc:
                log.warning("expiry sweep failed: %s", exc)
            except KazooException as exc:
                # The purge reads and deletes with kazoo directly: a connection loss there
                # must not end the sweeper's thread; the next sweep tries again.
                log.warning("expiry sweep failed: ZooKeeper %s", type(exc).__name__)

    def _purge_due(self, now_ms: int) -> bool:
        """True on the first sweep and once ``purge_interval_ms`` has passed since the
        last purge (either way the clock moved: a clock set back purges too)."""
        last = self._purged_at_ms
        return last is None or abs(now_ms - last) >= self._purge_interval_ms

    def sweep_once(self) -> int:
        """One sweep now; returns how many tokens it deleted (0 when not the controller)."""
        with self._sweep_lock:
            if not self._election.is_controller:
                return 0
            if self._trusted is not None and not self._trusted():
                self.skipped += 1
                return 0
            started = time.monotonic()
            now = self._clock.now_ms()
            removed = 0
            try:
                due = [info.token_id for info in self._cache.due(now)]
                for lo in range(0, len(due), SWEEP_BATCH):
                    removed += self._remove_expired(due[lo : lo + SWEEP_BATCH], now)
                if self._purge is not None and self._purge_due(now):
                    self._purged_at_ms = now
                    self.purged_notifications += self._purge(now)
            except NotControllerError:
                log.info("lost controllership during the expiry sweep; stopping it")
            self.sweeps += 1
            self.removed += removed
            self.last_duration_ms = int((time.monotonic() - started) * 1000)
            if removed:
                log.info("expiry sweep removed %d tokens", removed)
            return removed

    def _remove_expired(self, token_ids: list[str], now: int) -> int:
        """Re-read ``token_ids``, delete those still expired (each conditional on the
        version read), and update the cache; returns how many were deleted."""
        guard = self._election.guard()
        if guard is None:
            raise NotControllerError("this broker is no longer the controller")
        current = self._store.get_many_versioned(token_ids)
        expired: dict[str, tuple[TokenInformation, int]] = {}
        for token_id in token_ids:
            found = current.get(token_id)
            if found is None:
                self._cache.remove(token_id)  # already gone; the notification is on its way
            elif not found[0].expired_at(now):
                self._cache.upsert(found[0])  # renewed since the cache last heard of it
            else:
                expired[token_id] = found
        # Tokens changed or deleted meanwhile are skipped; the next sweep looks again.
        deleted = self._store.delete_many(
            [(token_id, version) for token_id, (_, version) in expired.items()], guard=guard
        )
        apply = self._apply_committed
        for token_id, sequence in deleted:
            info = expired[token_id][0]
            if apply is None or not apply(token_id, None, sequence):
                self._cache.remove(token_id)
            if self._on_removed is not None:
                self._on_removed(info, removal_reason(info, now))
        return len(deleted)
