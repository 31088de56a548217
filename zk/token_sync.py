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

Start from a snapshot (``snapshot``: :class:`SnapshotSource`, see
:mod:`tokensvc.snapshot`). The first load of a broker that has a snapshot of its cache
does not read every token: it checks the snapshot against ZooKeeper -- the identity of
the token roots (:meth:`TokenSync.identity`) and that every notification after the
snapshot's sequence can still be read (purge mark, listing, root cversion:
:func:`tokensvc.snapshot.format.catch_up_refusal`) -- reads the tokens those
notifications name, and fills the cache once with the snapshot's tokens brought up to
date. The cache never holds the snapshot's tokens before they are caught up, and the
root counts as listed (what the bounded-staleness gate waits for) only after that.
Before the fill, the token znodes are counted (between two reads of the notification
root's cversion): when nothing was written meanwhile, a count that differs from the
caught-up snapshot's means tokens created or deleted without a notification, which the
snapshot cannot know. Any refusal or failure falls back to the full load, logged and
counted by the source.

Later resyncs (a session loss, a failed read, a purge past this broker) start from
the cache itself the same way: it is a snapshot already in memory, of the sequence
the follower applied and the identity of its last load. It is caught up with the
same checks (identity, notifications still readable, the count) and falls back to
the full load on any refusal, logged; ``caught_up_resyncs`` and ``full_loads``
count which it was. Where a start fills the empty cache once, a resync applies only
the tokens the notifications name, in place (the count is checked first, from the
cache's size and what those tokens change). A session lost for less than the
notifications' retention then costs the notifications since, not every token.
:meth:`TokenSync.snapshot_view` gives the writer a consistent view: the sequence read
first, then the cache's content (which reflects at least that sequence; notifications
after it applied again at a restart change nothing), never while a load runs.

Filed as credentials and ACLs are: the token store is :mod:`zk.token_store`, this
module its sync (``<kind>_store`` and ``<kind>_sync``).

Must not: decide token rules, compute HMACs (the cache does), or call the cache or
ZooKeeper from kazoo's event thread.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Protocol

from tokensvc.core.token import TokenInformation
from tokensvc.snapshot.format import (
    Snapshot,
    catch_up_refusal,
    count_refusal,
    identity_refusal,
)
from zk import layout
from zk.errors import StoreError
from zk.notifications import (
    MIN_LISTING_INTERVAL_S,
    CatchUp,
    ChangeNotifications,
    Listing,
    NotificationRoot,
    OnResync,
    Purge,
    sequence_of_created,
)
from zk.token_store import TokenStore

__all__ = ["MIN_LISTING_INTERVAL_S", "TOKENS_ROOT", "CommittedOrder", "SnapshotSource",
           "SyncedCache", "TokenSync"]

# Named as before the module was filed as token_sync: runbooks quote "zk.sync:" lines.
log = logging.getLogger("zk.sync")

# Follower states applied per hold of the committed order's lock.
FOLLOW_CHUNK = 256

TOKENS_ROOT = NotificationRoot("tokens", layout.TOKEN_CHANGES, layout.TOKEN_CHANGE_PREFIX)


class SyncedCache(Protocol):
    """What TokenSync needs from :class:`tokensvc.core.cache.TokenCache`."""

    def upsert(self, info: TokenInformation) -> object: ...

    def remove(self, token_id: str) -> object: ...

    def replace_all(self, infos: list[TokenInformation]) -> None: ...

    def infos_in_slices(self) -> list[TokenInformation]: ...

    def info(self, token_id: str) -> TokenInformation | None: ...

    def __len__(self) -> int: ...


class SnapshotSource(Protocol):
    """Where a start's snapshot comes from (:class:`tokensvc.snapshot.files.SnapshotFile`):
    ``load`` returns it decoded, or None (it logged and counted why); ``refused`` and
    ``loaded`` log and count what the sync decided."""

    def load(self) -> Snapshot | None: ...

    def refused(self, result: str, why: str) -> None: ...

    def loaded(self, tokens: int, sequence: int, changes: int, duration_ms: int) -> None: ...


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

    The follower's states of one listing are applied :data:`FOLLOW_CHUNK` at a time,
    each chunk under the lock (ten thousand removes in one hold kept the event loop,
    which applies committed states, waiting for hundreds of milliseconds). Between two
    chunks a committed state at N <= M is skipped for a token whose follower state is
    already in (read after the listing through M, it is at least as new) and applied
    (and pending) for one still to come (whose follower state then replaces it, being
    newer); the mark advances to M after the last chunk.

    Pure: no I/O and no clock; ``tests/unit/zk/test_committed_order.py`` drives it.
    """

    def __init__(self, cache: SyncedCache) -> None:
        self._cache = cache
        self._lock = threading.Lock()
        self._through = -1
        self._loading = True  # until the first load has finished
        self._pending: dict[str, int] = {}
        # While a listing through M is being applied in chunks: M, and the tokens whose
        # follower states are in already.
        self._following = -1
        self._followed: set[str] = set()
        self.applied = 0  # committed states put into the cache (or already covered)
        self.refused = 0  # committed states refused during a load

    @property
    def through(self) -> int:
        return self._through

    @property
    def pending(self) -> int:
        return len(self._pending)

    @property
    def loading(self) -> bool:
        return self._loading

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
            if sequence <= self._following and token_id in self._followed:
                return True  # the follower's state, read after this write, is in
            if info is None:
                self._cache.remove(token_id)
            else:
                self._cache.upsert(info)
            self._pending[token_id] = sequence
            return True

    def covered(self, latest: Mapping[str, int]) -> set[str]:
        """Of the tokens a listing names (each with the last sequence that names it), those
        whose state committed at exactly that sequence is the one this cache holds: a
        write of this broker (or one it forwarded) applied directly. Reading them back
        would give that state or a newer one that a later listing names, so the follower
        need not read them (half of what a controller read back after its own writes).
        None during a load."""
        with self._lock:
            if self._loading or not self._pending:
                return set()
            pending = self._pending
            return {t for t, sequence in latest.items() if pending.get(t) == sequence}

    def follow(self, listed_through: int, current: dict[str, TokenInformation | None]) -> None:
        """Apply the states the follower read after listing through ``listed_through``
        (:data:`FOLLOW_CHUNK` per hold of the lock)."""
        items = list(current.items())
        try:
            for lo in range(0, len(items), FOLLOW_CHUNK):
                with self._lock:
                    self._following = listed_through
                    for token_id, info in items[lo:lo + FOLLOW_CHUNK]:
                        if self._pending.get(token_id, -1) > listed_through:
                            continue
                        if info is None:
                            self._cache.remove(token_id)
                        else:
                            self._cache.upsert(info)
                        self._followed.add(token_id)
            with self._lock:
                self._advance(listed_through)
        finally:
            with self._lock:
                self._following = -1
                self._followed = set()

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


class _Fill(Protocol):
    """How a catch-up brings the cache up to date: ``count`` the tokens there will be
    once ``changed`` (each token the notifications name, with its state in ZooKeeper
    now, None: gone) is applied, before anything changes; then ``fill``."""

    def count(self, changed: Mapping[str, TokenInformation | None]) -> int: ...

    def fill(self, changed: Mapping[str, TokenInformation | None]) -> None: ...


class _SnapshotFill:
    """A start from a snapshot: the cache, empty, is filled once with the snapshot's
    tokens brought up to date (it never holds them before they are caught up)."""

    def __init__(self, cache: SyncedCache, tokens: list[TokenInformation]) -> None:
        self._cache = cache
        self._tokens = tokens

    def count(self, changed: Mapping[str, TokenInformation | None]) -> int:
        if changed:
            self._tokens = [info for info in self._tokens if info.token_id not in changed]
            self._tokens.extend(info for info in changed.values() if info is not None)
        return len(self._tokens)

    def fill(self, changed: Mapping[str, TokenInformation | None]) -> None:
        self._cache.replace_all(self._tokens)


class _HeldFill:
    """A resync from the cache itself: only the changed tokens are applied, in place.
    Copying a million entries out and comparing them all back in (``replace_all``) cost
    a broker 4.5 CPU seconds and held its event loop up to 300 ms per session loss at
    1M tokens (B13's resync phase); the tokens the notifications name are all that can
    differ. Only this thread writes the cache meanwhile: committed states are refused
    during a load (:class:`CommittedOrder`)."""

    def __init__(self, cache: SyncedCache) -> None:
        self._cache = cache

    def count(self, changed: Mapping[str, TokenInformation | None]) -> int:
        count = len(self._cache)
        for token_id, info in changed.items():
            held = self._cache.info(token_id) is not None
            if info is None and held:
                count -= 1
            elif info is not None and not held:
                count += 1
        return count

    def fill(self, changed: Mapping[str, TokenInformation | None]) -> None:
        for token_id, info in changed.items():
            if info is None:
                self._cache.remove(token_id)
            else:
                self._cache.upsert(info)


class TokenSync(ChangeNotifications):
    """Load every token into ``cache``, then follow ZooKeeper's token changes.

    The shape of every sync: ``(store, cache, *, purge=None, on_resync=None)`` (the
    client is the store's); ``on_resync`` gets a :class:`zk.notifications.Resync` after
    every resync (``entries``: the tokens held; ``caught_up``: from the notifications
    since, not a full load). Its own: ``snapshot``, ``identity_extra``.
    """

    def __init__(
        self,
        store: TokenStore,
        cache: SyncedCache,
        *,
        purge: Purge | None = None,
        on_resync: OnResync | None = None,
        snapshot: SnapshotSource | None = None,
        identity_extra: Mapping[str, str | int] | None = None,
    ) -> None:
        self._store = store
        self._cache = cache
        self.order = CommittedOrder(cache)
        self._snapshot = snapshot  # used by the first load only
        self._identity_extra = dict(identity_extra or {})
        self._identity: dict[str, str | int] | None = None
        self.snapshot_result: str | None = None
        # (sequence, identity) of the snapshot the first load came from, if it did.
        self.snapshot_loaded: tuple[int, dict[str, str | int]] | None = None
        # Loads that read every token (the first included), and later resyncs that
        # caught the cache up instead.
        self.full_loads = 0
        self.caught_up_resyncs = 0
        # Token reads the follower left out: states this broker committed, already in.
        self.reads_skipped = 0
        # Why the held cache could not be caught up: identity, purged or mismatch.
        self.catch_up_refusals: Counter[str] = Counter()
        super().__init__(
            store.client,
            "token-sync",
            [TOKENS_ROOT],
            load=self._load_tokens,
            apply=self._apply_tokens,
            purge=purge,
            on_resync=on_resync,
            recoverable=(StoreError, layout.LayoutError),
            catch_up=self._catch_up_hook,
            during_resync=self._loading,
        )

    def start(self) -> None:
        self._store.ensure_paths()
        super().start()

    def apply_committed(self, token_id: str, info: TokenInformation | None,
                        sequence: int) -> bool:
        """Put a state committed at ``sequence`` into the cache now (see
        :class:`CommittedOrder`); False when the caller must wait for the follower."""
        return self.order.apply(token_id, info, sequence)

    @contextmanager
    def _loading(self) -> Iterator[None]:
        """Held around every resync (the recipe's ``during_resync``): committed states
        are refused meanwhile (:class:`CommittedOrder`), and accepted again from the
        sequence the follower reached, whether the resync succeeded or not."""
        self.order.begin_load()
        try:
            yield
        finally:
            self.order.end_load(self.applied.get(TOKENS_ROOT.name, -1))

    def _catch_up_hook(self, listings: Mapping[str, Listing]) -> CatchUp | None:
        """The recipe's ``catch_up``: the first load from the snapshot, later ones from
        the cache itself; None: load every token."""
        listing = listings[TOKENS_ROOT.name]
        source, self._snapshot = self._snapshot, None
        if source is not None:
            return self._start_from(source, listing)
        return self._catch_up_held(listing)

    def _catch_up_held(self, listing: Listing) -> CatchUp | None:
        """A later resync from the cache's own content (see the module docstring);
        None when it cannot be used (the caller then loads every token)."""
        identity = self._identity  # None until a load has finished
        if identity is None:
            return None
        started = time.monotonic()
        sequence = self.applied.get(TOKENS_ROOT.name, -1)
        # A failed read (ZooKeeper away again) propagates: the resync is retried, from
        # the cache again, as a failed full load would be.
        outcome = self._catch_up(sequence, identity, _HeldFill(self._cache), listing)
        if isinstance(outcome[0], str):
            self.catch_up_refusals[outcome[0]] += 1
            log.info("token-sync: the cache cannot be caught up from sequence %d (%s: %s); "
                     "loading every token", sequence, *outcome)
            return None
        self.caught_up_resyncs += 1
        log.info("token-sync: resynchronised from the cache caught up from sequence %d "
                 "(%d notifications) in %d ms", sequence, outcome[1],
                 int((time.monotonic() - started) * 1000))
        return outcome[0]

    def _load_tokens(self) -> int:
        self._identity = self.identity()  # what a later resync from the cache checks
        tokens = self._store.load_all()
        self._cache.replace_all(tokens)
        self.full_loads += 1
        return len(tokens)

    # --- the snapshot ------------------------------------------------------------------

    def identity(self) -> dict[str, str | int]:
        """What names the ZooKeeper data the cache comes from: creation zxid and time of
        the tokens root and of the token-change root (both change when a root is created
        again, and differ between ensembles), plus ``identity_extra`` (the cluster id)."""
        found: dict[str, str | int] = dict(self._identity_extra)
        for name, path in (("tokens", layout.TOKENS), ("token_changes", layout.TOKEN_CHANGES)):
            stat = self._client.exists(path)
            if stat is None:
                raise StoreError(f"{path} does not exist")
            found[f"{name}_czxid"] = stat.czxid
            found[f"{name}_ctime"] = stat.ctime
        return found

    def _count_refusal(self, held: int, cversion: int) -> str | None:
        """The token znodes counted against ``held`` (see
        :func:`tokensvc.snapshot.format.count_refusal`): the count is read between two
        reads of the notification root's cversion, and decides only when both equal the
        listing's ``cversion`` (nothing was written meanwhile)."""
        before = self._client.exists(layout.TOKEN_CHANGES)
        tokens = self._client.exists(layout.TOKENS)
        after = self._client.exists(layout.TOKEN_CHANGES)
        if before is None or tokens is None or after is None:
            raise StoreError("a token root disappeared during the start")
        quiet = before.cversion == after.cversion == cversion
        return count_refusal(held, tokens.numChildren, quiet)

    def snapshot_position(self) -> tuple[int, dict[str, str | int]] | None:
        """``(sequence, identity)`` that :meth:`snapshot_view` would answer now, without
        copying the cache (a writer asks it first, to skip a snapshot it already has);
        None while a load runs or before the first one finished."""
        if self.order.loading or self._identity is None:
            return None
        return self.applied.get(TOKENS_ROOT.name, -1), self._identity

    def snapshot_view(self) -> tuple[int, dict[str, str | int], list[TokenInformation]] | None:
        """``(sequence, identity, tokens)`` for a snapshot: the cache's content read after
        the sequence it reflects (so it reflects at least that one); None while a load
        runs or before the first one finished."""
        position = self.snapshot_position()
        if position is None:
            return None
        sequence, identity = position
        tokens = self._cache.infos_in_slices()
        if self.order.loading or identity is not self._identity:
            return None  # a load began meanwhile: take the next one
        return sequence, identity, tokens

    def _start_from(self, source: SnapshotSource, listing: Listing) -> CatchUp | None:
        """The first load from ``source``'s snapshot (see the module docstring); None
        when it cannot be used (the caller then loads every token)."""
        started = time.monotonic()
        snapshot = source.load()
        if snapshot is None:
            self.snapshot_result = "unused"
            return None
        try:
            outcome = self._catch_up(snapshot.sequence, snapshot.identity,
                                     _SnapshotFill(self._cache, snapshot.tokens), listing)
        except self._recoverable as exc:
            outcome = ("error", f"catching up from ZooKeeper failed ({exc})")
        if isinstance(outcome[0], str):
            self.snapshot_result = outcome[0]
            source.refused(*outcome)
            return None
        self.snapshot_result = "loaded"
        self.snapshot_loaded = (snapshot.sequence, dict(snapshot.identity))
        source.loaded(len(self._cache), snapshot.sequence, outcome[1],
                      int((time.monotonic() - started) * 1000))
        return outcome[0]

    def _catch_up(self, sequence: int, identity: Mapping[str, str | int], fill: _Fill,
                  listing: Listing) -> tuple[CatchUp, int] | tuple[str, str]:
        """Check tokens reflecting ``sequence`` of the data named ``identity`` against
        ZooKeeper (``listing``: the resync's) and bring the cache up to date from them
        (``fill``: a snapshot's tokens, or the cache's own); the recipe's
        :class:`CatchUp` and the number of notifications applied, or ``(result, why)``
        when they are refused (the cache then is as it was)."""
        root = TOKENS_ROOT
        now_identity = self.identity()
        refusal = identity_refusal(identity, now_identity)
        if refusal is not None:
            return "identity", refusal
        refusal = catch_up_refusal(sequence, listing.mark,
                                   [sequence_of_created(c) for c in listing.names],
                                   listing.cversion)
        if refusal is not None:
            return "purged", refusal
        notes = self.read_notifications(root, root.after(listing.names, sequence))
        if notes is None:
            return "purged", "a notification after its sequence was purged while being read"
        changed = self._changed(notes)
        count = fill.count(changed)
        refusal = self._count_refusal(count, listing.cversion)
        if refusal is not None:
            return "mismatch", refusal
        fill.fill(changed)
        self._identity = now_identity
        return CatchUp(count, {root.name: sequence}), len(notes)

    def _changed(self, notes: list[tuple[int, bytes]]) -> dict[str, TokenInformation | None]:
        """Each token the notifications name (in order, once), with its state in
        ZooKeeper now (None: it is gone)."""
        token_ids = list(dict.fromkeys(layout.decode_token_change(data) for _, data in notes))
        current = self._store.get_many(token_ids)
        return {t: current.get(t) for t in token_ids}

    def _apply_tokens(self, _root: NotificationRoot, notes: list[tuple[int, bytes]]) -> None:
        latest: dict[str, int] = {}
        for sequence, data in notes:
            latest[layout.decode_token_change(data)] = sequence
        covered = self.order.covered(latest)
        token_ids = [t for t in latest if t not in covered] if covered else list(latest)
        current = self._store.get_many(token_ids)
        self.reads_skipped += len(covered)
        self.order.follow(notes[-1][0], {t: current.get(t) for t in token_ids})
