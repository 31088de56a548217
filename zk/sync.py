"""TokenSync: keep a broker's TokenCache equal to ZooKeeper's token znodes.

Owns the meaning of a token change notification (payload: a token id) and the full
token load; the follow/resync/purge cycle, its reconnect policy and the versions
waited on are :class:`zk.notifications.ChangeNotifications`' (see that module).

* ``load``: every token read with pipelined reads, handed to ``cache.replace_all``.
* ``apply``: the notifications of one listing name token ids; each token is read once
  (its current state includes every change before it) and the cache gets
  ``upsert`` (token present) or ``remove`` (token gone).

Version name: ``"tokens"``. ``close()`` leaves the cache as it is.

Must not: decide token rules, compute HMACs (the cache does), or call the cache or
ZooKeeper from kazoo's event thread.
"""

from __future__ import annotations

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

__all__ = ["MIN_LISTING_INTERVAL_S", "TOKENS_ROOT", "SyncedCache", "TokenSync"]

TOKENS_ROOT = NotificationRoot("tokens", layout.TOKEN_CHANGES, layout.TOKEN_CHANGE_PREFIX)


class SyncedCache(Protocol):
    """What TokenSync needs from :class:`tokensvc.core.cache.TokenCache`."""

    def upsert(self, info: TokenInformation) -> object: ...

    def remove(self, token_id: str) -> object: ...

    def replace_all(self, infos: list[TokenInformation]) -> None: ...


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
        self._loaded = 0
        self._on_token_resync = on_resync
        extra: dict = {"count_min_age_ms": count_min_age_ms}
        if max_pending is not None:
            extra["max_pending"] = max_pending
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
            **extra,
        )

    def start(self) -> None:
        self._store.ensure_paths()
        super().start()

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
        for token_id in token_ids:
            info = current.get(token_id)
            if info is None:
                self._cache.remove(token_id)
            else:
                self._cache.upsert(info)
