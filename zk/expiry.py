"""The expiry sweep: the controller deletes tokens past their expiry or max lifetime.

Owns: :class:`ExpirySweeper`, a thread that every ``interval_ms`` -- and only while this
broker is the controller -- asks the cache for due tokens (``cache.due(now)``, an index
ordered by deadline, no scan), deletes each from ZooKeeper under the controller guard,
and purges change notifications older than 15 minutes.

Each due token is re-read from ZooKeeper before it is deleted, and the delete is
conditional on the version read: a token renewed a moment ago (and not yet seen by
this broker's cache) is left alone and its fresh state put into the cache. A guard
failure (another broker won the election) ends the sweep at once. Deleted tokens are
also dropped from the local cache right away; the other brokers drop them when the
change notification reaches them.

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

from tokensvc.core.clock import Clock
from tokensvc.core.token import TokenInformation
from zk.election import ControllerElection
from zk.token_store import NotControllerError, StoreError, TokenStore

log = logging.getLogger(__name__)

REASON_EXPIRED = "expired"
REASON_MAX_LIFETIME = "max_lifetime"

RemovedListener = Callable[[TokenInformation, str], None]


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
    sweeper deleted. Stats: ``sweeps`` (sweeps run as controller), ``removed``,
    ``last_duration_ms``, ``purged_notifications``.
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
    ) -> None:
        if interval_ms <= 0:
            raise ValueError("interval_ms must be positive")
        self._store = store
        self._cache = cache
        self._election = election
        self._clock = clock
        self._interval_s = interval_ms / 1000.0
        self._on_removed = on_removed
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._sweep_lock = threading.Lock()
        self.sweeps = 0
        self.removed = 0
        self.last_duration_ms = 0
        self.purged_notifications = 0

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

    def sweep_once(self) -> int:
        """One sweep now; returns how many tokens it deleted (0 when not the controller)."""
        with self._sweep_lock:
            if not self._election.is_controller:
                return 0
            started = time.monotonic()
            now = self._clock.now_ms()
            removed = 0
            try:
                for info in self._cache.due(now):
                    if self._remove_if_expired(info.token_id, now):
                        removed += 1
                self.purged_notifications += self._store.purge_notifications(now)
            except NotControllerError:
                log.info("lost controllership during the expiry sweep; stopping it")
            self.sweeps += 1
            self.removed += removed
            self.last_duration_ms = int((time.monotonic() - started) * 1000)
            if removed:
                log.info("expiry sweep removed %d tokens", removed)
            return removed

    def _remove_if_expired(self, token_id: str, now: int) -> bool:
        guard = self._election.guard()
        if guard is None:
            raise NotControllerError("this broker is no longer the controller")
        found = self._store.get_versioned(token_id)
        if found is None:
            self._cache.remove(token_id)  # already gone; the notification is on its way
            return False
        info, version = found
        if not info.expired_at(now):
            self._cache.upsert(info)  # renewed since the cache last heard of it
            return False
        if not self._store.delete(token_id, guard=guard, version=version):
            return False  # changed or deleted meanwhile; the next sweep looks again
        self._cache.remove(token_id)
        if self._on_removed is not None:
            self._on_removed(info, removal_reason(info, now))
        return True
