"""Keep a broker's TokenCache equal to ZooKeeper: load, follow notifications, resync.

Owns: :class:`TokenSync`, the recipe that turns token change notifications into cache
updates, and :class:`SerialWorker`, the single thread the ``zk`` recipes use so that
kazoo's event thread never waits on ZooKeeper or on a cache.

How :class:`TokenSync` follows ZooKeeper (kazoo-recipe style, lifecycle start()/close()):

* ``start()`` lists the notifications, remembers the highest sequence number present
  (``base``), loads every token with pipelined reads and hands them to
  ``cache.replace_all`` -- all on the caller's thread, so the cache is complete when
  ``start()`` returns. Notifications up to ``base`` were written, with their token
  change, before the load began, so the load already reflects them.
* It then follows ``/delegation_token/token_changes`` with a children watch. Each watch
  event only wakes the worker thread; the worker lists the children again (re-arming the
  watch), takes those with a sequence number above the last one applied, in order, reads
  their token ids and the tokens (both pipelined) and applies ``cache.upsert`` (token
  present) or ``cache.remove`` (token gone). Each token is read once per batch: its
  current state already includes every change before it.
* Listings are spaced at least ``MIN_LISTING_INTERVAL_S`` apart. The listing returns
  every notification younger than the purge age, so under a stream of writes one
  listing per notification would make ZooKeeper serialise (and this broker parse) a
  list that grows with the write rate, on every broker, for every write. An isolated
  change is applied at once; within a stream, the changes of one interval share a
  listing (the one-shot children watch is only re-armed by the next listing, so no
  event is lost while the worker waits).
* Connection SUSPENDED: nothing changes in the cache (it keeps serving what it has);
  the sync notes the suspension. On CONNECTED after SUSPENDED -- same session, watches
  kept by ZooKeeper -- and on CONNECTED after LOST -- a new session, every watch gone --
  it schedules a full resync: list notifications (re-arming the watch), load all,
  ``replace_all``. Changes made while it was away, including deletions whose
  notifications may since have been purged, are therefore never missed.
* A notification that disappears between its listing and its read (purged while this
  broker was far behind) also triggers a full resync instead of being skipped.
* Any failure of ZooKeeper inside the worker marks the sync dirty and retries the full
  resync with a backoff (up to 1 s) until it succeeds or ``close()`` is called.

``close()`` stops the worker; the cache is left as it is. The kazoo client belongs to
the caller and stays open.

Must not: decide token rules, compute HMACs (the cache does), or call the cache or
ZooKeeper from kazoo's event thread.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Protocol

from kazoo.client import KazooClient, KazooState

from tokensvc.core.token import TokenInformation
from zk import layout
from zk.token_store import StoreError, TokenStore

log = logging.getLogger(__name__)

_MAX_BACKOFF_S = 1.0
# The shortest gap between two listings of the notifications (see the module docstring).
# It bounds each broker to 100 listings/s and adds at most this to propagation.
MIN_LISTING_INTERVAL_S = 0.01
# ZooKeeper failures and undecodable znodes: a resync (with backoff) recovers from both.
_RECOVERABLE = (StoreError, layout.LayoutError)


class SyncedCache(Protocol):
    """What TokenSync needs from :class:`tokensvc.core.cache.TokenCache`."""

    def upsert(self, info: TokenInformation) -> object: ...

    def remove(self, token_id: str) -> object: ...

    def replace_all(self, infos: list[TokenInformation]) -> None: ...


class SerialWorker:
    """One daemon thread running submitted tasks in order.

    A task is named by a key; submitting a key that is already pending does not queue
    it twice (a pending "resync" absorbs every later request for one). Exceptions from
    a task are logged; retrying is the task's own business.
    """

    def __init__(self, name: str) -> None:
        self._name = name
        self._cond = threading.Condition()
        self._pending: dict[str, Callable[[], None]] = {}
        self._running = False
        self._closed = False
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        with self._cond:
            if self._thread is not None:
                return
            self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
        self._thread.start()

    def submit(self, key: str, task: Callable[[], None]) -> None:
        with self._cond:
            if self._closed:
                return
            self._pending.setdefault(key, task)
            self._cond.notify_all()

    def idle(self) -> bool:
        """True when no task is pending or running."""
        with self._cond:
            return not self._pending and not self._running

    @property
    def closed(self) -> bool:
        return self._closed

    def sleep(self, seconds: float) -> bool:
        """Wait up to ``seconds`` unless closed meanwhile; True when closed."""
        with self._cond:
            self._cond.wait_for(lambda: self._closed, timeout=seconds)
            return self._closed

    def close(self, timeout: float = 5.0) -> None:
        with self._cond:
            self._closed = True
            self._pending.clear()
            self._cond.notify_all()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    def _run(self) -> None:
        while True:
            with self._cond:
                self._running = False
                self._cond.notify_all()
                self._cond.wait_for(lambda: self._closed or self._pending)
                if self._closed:
                    return
                key = next(iter(self._pending))
                task = self._pending.pop(key)
                self._running = True
            try:
                task()
            except Exception:
                log.exception("%s: task %s failed", self._name, key)


class TokenSync:
    """Load every token into ``cache``, then follow ZooKeeper's token changes.

    ``on_resync(token_count, duration_ms)`` is called after every full resync: on the
    caller's thread for the one ``start()`` runs, on the worker thread for later ones.

    Stats: ``resync_count``, ``last_resync_ms`` (duration of the last full resync),
    ``applied_changes`` (notifications applied one by one), ``listings`` (listings of
    the notifications made to follow them).
    """

    def __init__(
        self,
        client: KazooClient,
        store: TokenStore,
        cache: SyncedCache,
        *,
        on_resync: Callable[[int, int], None] | None = None,
    ) -> None:
        self._client = client
        self._store = store
        self._cache = cache
        self._on_resync = on_resync
        self._worker = SerialWorker("token-sync")
        self._lock = threading.Lock()
        self._last_seq = -1
        self._last_listing = 0.0
        self._dirty = False
        self._suspended = False
        self._started = False
        self.resync_count = 0
        self.last_resync_ms = 0
        self.applied_changes = 0
        self.listings = 0

    # --- lifecycle ---------------------------------------------------------------------

    def start(self) -> None:
        """Load everything (on this thread), then follow changes. Raises StoreError
        (StoreUnavailable when ZooKeeper cannot be reached) if the first load fails."""
        if self._started:
            return
        self._started = True
        self._store.ensure_paths()
        self._client.add_listener(self._on_state)
        try:
            self._resync()
        except Exception:
            self._client.remove_listener(self._on_state)
            self._started = False
            raise
        self._worker.start()

    def close(self) -> None:
        """Stop following ZooKeeper. Safe to call more than once."""
        self._client.remove_listener(self._on_state)
        self._worker.close()

    # --- waiting (tests, start-up probes) ----------------------------------------------

    def wait_caught_up(self, timeout: float = 5.0) -> bool:
        """Wait until every notification present in ZooKeeper now has been applied."""
        deadline = time.monotonic() + timeout
        names = self._store.notifications()
        target = layout.token_change_sequence(names[-1]) if names else -1
        while time.monotonic() < deadline:
            with self._lock:
                applied = self._last_seq >= target and not self._dirty
            if applied and self._worker.idle():
                return True
            time.sleep(0.01)
        return False

    # --- kazoo callbacks (kazoo's thread: never block) ----------------------------------

    def _on_state(self, state: str) -> None:
        if state in (KazooState.SUSPENDED, KazooState.LOST):
            self._suspended = True
        elif state == KazooState.CONNECTED and self._suspended:
            self._suspended = False
            self._request_resync()

    def _on_children_event(self, _event: object) -> None:
        self._worker.submit("changes", self._apply_changes_task)

    # --- worker tasks ------------------------------------------------------------------

    def _request_resync(self) -> None:
        with self._lock:
            self._dirty = True
        self._worker.submit("resync", self._resync_task)

    def _resync_task(self) -> None:
        backoff = 0.05
        while not self._worker.closed:
            try:
                self._resync()
                return
            except _RECOVERABLE as exc:
                log.warning("token resync failed (%s); retrying", exc)
                with self._lock:
                    self._dirty = True
            if self._worker.sleep(backoff):
                return
            backoff = min(backoff * 2, _MAX_BACKOFF_S)

    def _apply_changes_task(self) -> None:
        with self._lock:
            dirty = self._dirty
        if dirty:
            return  # a resync is pending or retrying; it covers these changes
        wait = self._last_listing + MIN_LISTING_INTERVAL_S - time.monotonic()
        if wait > 0 and self._worker.sleep(wait):
            return  # closed meanwhile
        try:
            self._apply_changes()
        except _RECOVERABLE as exc:
            log.warning("applying token changes failed (%s); scheduling a resync", exc)
            self._request_resync()

    def _resync(self) -> None:
        started = time.monotonic()
        with self._lock:
            self._dirty = False
        names = self._store.notifications(watch=self._on_children_event)
        base = layout.token_change_sequence(names[-1]) if names else -1
        tokens = self._store.load_all()
        self._cache.replace_all(tokens)
        duration_ms = int((time.monotonic() - started) * 1000)
        with self._lock:
            self._last_seq = base
            self.resync_count += 1
            self.last_resync_ms = duration_ms
        log.info("token cache resynchronised: %d tokens in %d ms", len(tokens), duration_ms)
        if self._on_resync is not None:
            self._on_resync(len(tokens), duration_ms)

    def _apply_changes(self) -> None:
        with self._lock:
            last = self._last_seq
        self._last_listing = time.monotonic()
        self.listings += 1
        fresh = self._store.notifications_after(last, watch=self._on_children_event)
        if not fresh:
            return
        notes = self._store.read_notifications(fresh)
        if any(token_id is None for _, token_id in notes):
            log.info("a token change was purged before it was read; resynchronising")
            self._request_resync()
            return
        token_ids = list(dict.fromkeys(token_id for _, token_id in notes))
        current = self._store.get_many(token_ids)
        for token_id in token_ids:
            info = current.get(token_id)
            if info is None:
                self._cache.remove(token_id)
            else:
                self._cache.upsert(info)
        with self._lock:
            self._last_seq = layout.token_change_sequence(fresh[-1])
            self.applied_changes += len(fresh)
