"""TokenSync: keep a broker's TokenCache equal to ZooKeeper's token znodes.

Owns the meaning of a token change notification (payload: a token id) and the full
token load; the follow/resync/purge cycle, its reconnect policy and the versions
waited on are :class:`zk.notifications.ChangeNotifications`' (see that module).

* ``load``: every token read with pipelined reads, handed to ``cache.replace_all``.
* ``apply``: the notifications of one listing name token ids; each token is read once
  (its current state includes every change before it) and the cache gets
  ``upsert`` (token present) or ``remove`` (token gone).
* ``apply_committed``: a write this broker knows was committed at notification
  sequence N (the controller's own group commit, or the controller's answer to a
  forwarded write) goes into the cache at once, before the follower lists N, so the
  write path need not wait for the follower (read-your-writes without the follower's
  round trip). The order rules are :class:`CommittedOrder`'s.

Version name: ``"tokens"``. ``close()`` leaves the cache as it is.

Must not: decide token rules, compute HMACs (the cache does), or call the cache or
ZooKeeper from kazoo's event thread.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Protocol

from kazoo.client import KazooClient

from tokensvc.core.token import TokenInformation
from zk import layout
from zk.notifications import (
    COUNT_MIN_AGE_MS,
    MIN_LISTING_INTERVAL_S,
    ChangeNotifications,
    NotificationRoot,
)
from zk.token_store import StoreError, TokenStore

__all__ = ["MIN_LISTING_INTERVAL_S", "TOKENS_ROOT", "CommittedOrder", "SyncedCache", "TokenSync"]

TOKENS_ROOT = NotificationRoot("tokens", layout.TOKEN_CHANGES, layout.TOKEN_CHANGE_PREFIX)


class SyncedCache(Protocol):
    """What TokenSync needs from :class:`tokensvc.core.cache.TokenCache`."""

    def upsert(self, info: TokenInformation) -> object: ...

    def remove(self, token_id: str) -> object: ...

    def replace_all(self, infos: list[TokenInformation]) -> None: ...


class CommittedOrder:
    """Keeps a cache's token states in commit order when two writers feed it: the
    follower (states read from ZooKeeper after listing notifications through sequence
    M) and committed writes known directly (the state a write committed at sequence N).

    Rules (every method holds one lock while it decides and changes the cache):

    * a committed state at N is applied unless the follower already applied through
      N or later (it read the token after the write, so it holds that state or a newer
      one) or a committed state newer than N was applied for the token; it is then
      *pending* until the follower lists N;
    * the follower's state of a token is skipped while a committed state newer than
      everything it listed is pending (its read may predate that write; the follower
      reads the token again when it lists that sequence), else applied;
    * while a full load runs, committed states are refused (``apply`` returns False:
      the caller waits for the follower instead), because the load may have read the
      token before that write; when the load ends the follower's mark is the load's.

    Pure: no I/O and no clock; ``tests/unit/test_committed_order.py`` drives it.
    """

    def __init__(self, cache: SyncedCache) -> None:
        self._cache = cache
        self._lock = threading.Lock()
        self._through = -1
        self._loading = True  # until the first load has finished
        self._pending: dict[str, int] = {}
        self.applied = 0  # committed states put into the cache (or already covered)
        self.refused = 0  # committed states refused during a load

    @property
    def through(self) -> int:
        return self._through

    @property
    def pending(self) -> int:
        return len(self._pending)

    def apply(self, token_id: str, info: TokenInformation | None, sequence: int) -> bool:
        """Apply the state ``info`` (None: the token is gone) committed at ``sequence``.
        True when the cache now holds it or a newer state; False during a load."""
        with self._lock:
            if self._loading:
                self.refused += 1
                return False
            self.applied += 1
            if sequence <= self._through or self._pending.get(token_id, -1) >= sequence:
                return True
            if info is None:
                self._cache.remove(token_id)
            else:
                self._cache.upsert(info)
            self._pending[token_id] = sequence
            return True

    def follow(self, listed_through: int, current: dict[str, TokenInformation | None]) -> None:
        """Apply the states the follower read after listing through ``listed_through``."""
        with self._lock:
            for token_id, info in current.items():
                if self._pending.get(token_id, -1) > listed_through:
                    continue
                if info is None:
                    self._cache.remove(token_id)
                else:
                    self._cache.upsert(info)
            self._advance(listed_through)

    def begin_load(self) -> None:
        with self._lock:
            self._loading = True

    def end_load(self, through: int) -> None:
        """The load finished and the follower's mark is ``through`` (or it failed and
        the follower keeps its mark: pass the current one)."""
        with self._lock:
            self._loading = False
            self._advance(through)

    def _advance(self, through: int) -> None:
        self._through = max(self._through, through)
        if self._pending:
            self._pending = {t: s for t, s in self._pending.items() if s > self._through}


class TokenSync(ChangeNotifications):
    """Load every token into ``cache``, then follow ZooKeeper's token changes.

    ``on_resync(token_count, duration_ms)`` is called after every full resync.
    """

    def __init__(
        self,
        client: KazooClient,
        store: TokenStore,
        cache: SyncedCache,
        *,
        on_resync: Callable[[int, int], None] | None = None,
        is_purger: Callable[[], bool] | None = None,
        now_ms: Callable[[], int] | None = None,
        max_pending: int | None = None,
        count_min_age_ms: int | None = COUNT_MIN_AGE_MS,
    ) -> None:
        self._store = store
        self._cache = cache
        self.order = CommittedOrder(cache)
        self._loaded = 0
        self._on_token_resync = on_resync
        super().__init__(
            client,
            "token-sync",
            [TOKENS_ROOT],
            load=self._load_tokens,
            apply=self._apply_tokens,
            is_purger=is_purger,
            now_ms=now_ms,
            on_resync=self._resynced,
            recoverable=(StoreError, layout.LayoutError),
            max_pending=max_pending,
            count_min_age_ms=count_min_age_ms,
        )

    def start(self) -> None:
        self._store.ensure_paths()
        super().start()

    def apply_committed(self, token_id: str, info: TokenInformation | None,
                        sequence: int) -> bool:
        """Put a state committed at ``sequence`` into the cache now (see
        :class:`CommittedOrder`); False when the caller must wait for the follower."""
        return self.order.apply(token_id, info, sequence)

    def _resync(self) -> None:
        self.order.begin_load()
        try:
            super()._resync()
        finally:
            self.order.end_load(self.applied.get(TOKENS_ROOT.name, -1))

    def _resynced(self, duration_ms: int) -> None:
        if self._on_token_resync is not None:
            self._on_token_resync(self._loaded, duration_ms)

    def _load_tokens(self) -> None:
        tokens = self._store.load_all()
        self._cache.replace_all(tokens)
        self._loaded = len(tokens)

    def _apply_tokens(self, _root: NotificationRoot, notes: list[tuple[int, bytes]]) -> None:
        token_ids = list(dict.fromkeys(layout.decode_token_change(data) for _, data in notes))
        current = self._store.get_many(token_ids)
        self.order.follow(notes[-1][0], {t: current.get(t) for t in token_ids})
