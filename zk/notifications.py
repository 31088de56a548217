"""ChangeNotifications: the one recipe that follows ZooKeeper change notifications.

Owns the follow/resync/purge cycle of sequential change-notification znodes (Kafka's
``ZkNodeChangeNotificationListener`` shape), for any number of *roots*. Tokens
(``/delegation_token/token_changes``), credentials (``/config/changes``) and ACLs
(``/kafka-acl-changes`` and ``/kafka-acl-extended-changes``) all use it; what a
notification *means* is the caller's ``apply`` callback, what "everything" is is its
``load`` callback.

Versions. A notification's *version* is ``(root name, sequence number)``. Within one
root ZooKeeper assigns sequence numbers in commit order, and every change is written in
the same transaction as its notification, so "this broker has applied version V" means
"its cache reflects every change of that root up to and including V". The controller
reports the versions it committed; :meth:`ChangeNotifications.wait_for` returns a future
that is set when this follower has applied them (event-driven: no polling).

Lifecycle (kazoo-recipe style): :meth:`start` (blocking) lists every root, calls
``load()``, and follows the roots with children watches; :meth:`close` stops following
and cancels pending waits. The kazoo client belongs to the caller.

Hooks of a resync, for a user that can do better than ``load()`` (the token sync):
``catch_up(listings)`` is handed each root's :class:`Listing` (names, purge mark,
cversion) and either brings its cache up to date from the notifications it can still
read (:meth:`ChangeNotifications.read_notifications`) and answers a :class:`CatchUp`, or
answers None and ``load()`` runs; ``during_resync()`` is a context manager held around
the whole resync, attempts that fail included. After each resync ``on_resync`` gets a
:class:`Resync` (the one signature of every sync's callback).

Reconnect policy:

* SUSPENDED: nothing changes (the caches keep serving what they have).
* CONNECTED again within the same session (watches kept by ZooKeeper): *catch-up* -- each
  root is listed again and the notifications above the last applied one are applied. This
  is safe because a session outlives a suspension by at most its timeout, far below the
  purge age.
* CONNECTED after LOST (a new session, every watch gone): *full resync* -- list every root
  (re-arming the watches), ``load()``, and continue from the listed sequence numbers.
* A notification gone between its listing and its read, or a purge mark beyond the last
  applied version (see below), also means a full resync. Any ZooKeeper failure in the
  worker schedules a full resync, retried with a backoff up to 1 s until it succeeds.

Purging (only with a :class:`Purge` whose ``is_purger()`` is true: the controller).
Every ``interval_s``, or as soon as a listing holds more than 1.5 x ``max_pending``
notifications, the purger deletes notifications older than ``retention_ms`` (znode
ctime against ``now_ms()``, the cluster's clock: never a host's wall clock) and the
oldest beyond ``max_pending`` that are older than ``count_min_age_ms`` (a minute: a
follower busy with a burst of writes or a bulk load is never purged past, which would
cost it a full resync). ``max_pending=None`` purges by age only, exactly when Kafka's
``ZkNodeChangeNotificationListener`` would (:meth:`Purge.kafka_only`, beside Kafka
brokers). A notification already gone (a Kafka broker purged it first) is no error.
Before deleting it writes the highest sequence it deletes into the root znode's data
(``{"purged_through": N}``): a follower whose last applied version is below that mark
may have missed a change and resyncs. Kafka ignores the data of these parents, so the
layout stays compatible.

The notifications of a listing are read with the one reader of many znodes
(:meth:`zk.reads.ZnodeReads.get_many`: ZooKeeper's multi-read, a thousand notifications a
request, falling back to pipelined reads on a server without it); its store errors count
as ZooKeeper failures. A follower of a 10,000-token revocation reads the notifications in
ten replies, not 10,000 (each reply is decoded in kazoo's I/O thread, which shares the
broker's GIL with the event loop).

Listings of one root are spaced at least ``MIN_LISTING_INTERVAL_S`` apart: under a
stream of writes the changes of one interval share a listing; an isolated change is
applied at once. A listing names every pending notification (thousands during a
10,000-token revocation, until the controller purges them): ``listings`` and
``listed_names`` count them. A listing is decoded by :func:`zk.client.list_children`
(same-length names in a few C calls) and only the names above the last applied one are
checked and sorted (:meth:`NotificationRoot.fresh`). The controller's purge by count
uses the listing it follows (no second one), and does not try again before the oldest
pending notification can be old enough for it.

Confirming the view is current (bounded staleness, issue #20).
:meth:`ChangeNotifications.confirm_current` sends, for every root, a ``sync`` and an
``exists`` (pipelined, nothing blocks) and returns a future set once this follower has
applied a listing of each root at least as new as the root's ``cversion`` that
``exists`` returned. ZooKeeper bumps a parent's ``cversion`` on every child created or
deleted and never lowers it, and every change is committed with its notification, so
"applied a listing with cversion >= C" means "the cache reflects every change committed
before the ``sync``". It covers purges (a deletion bumps the cversion, and the listing
that sees it checks the purge mark) and session loss (the resync's listing records its
cversion only after ``load()``). The caller takes the time *before* calling: the view is
then known current as of that time.

Must not: decide what a notification means, block kazoo's event thread, or read the
wall clock for anything but the purge cutoff it is handed (``now_ms``).
"""

from __future__ import annotations

import bisect
import heapq
import json
import logging
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future, InvalidStateError
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import KazooState

from zk.client import list_children
from zk.errors import StoreError
from zk.reads import ZnodeReads
from zk.worker import SerialWorker
from zk.writes import created_before, delete_all

log = logging.getLogger(__name__)

# The shortest gap between two listings of one root (see the module docstring).
MIN_LISTING_INTERVAL_S = 0.01
RETENTION_MS = 15 * 60 * 1000
MAX_PENDING = 1_000
# The count rule spares notifications younger than this: a follower that has not yet
# applied a notification this young is merely busy (a burst of writes, a bulk load), and
# purging past it would cost it a full resync of every token.
COUNT_MIN_AGE_MS = 60_000
PURGE_INTERVAL_S = 60.0
_MAX_BACKOFF_S = 1.0

# (root name, sequence number): what the controller reports and followers wait for.
Version = tuple[str, int]


@dataclass(frozen=True)
class NotificationRoot:
    """One parent of sequential notifications: ``<path>/<prefix><10-digit seq>``."""

    name: str
    path: str
    prefix: str

    def sequence(self, child: str) -> int | None:
        if not child.startswith(self.prefix):
            return None
        digits = child[len(self.prefix):]
        return int(digits) if len(digits) == 10 and digits.isdigit() else None

    def child(self, sequence: int) -> str:
        return f"{self.prefix}{sequence:010d}"

    def sorted_children(self, children: Iterable[str]) -> list[str]:
        """The notification names among ``children``, in sequence order. The digits are
        zero-padded, so string order is sequence order: the filter and the sort run in
        C, and no name is parsed (a listing holds tens of thousands after a bulk write,
        and the follower's thread holds the GIL the event loop needs while it works)."""
        names = list(filter(_name_pattern(self.prefix).fullmatch, children))
        names.sort()
        return names

    def after(self, names: list[str], sequence: int) -> list[tuple[int, str]]:
        """``(sequence, name)`` of the sorted ``names`` above ``sequence``."""
        start = 0 if sequence < 0 else bisect.bisect_right(names, self.child(sequence))
        return [(sequence_of_created(name), name) for name in names[start:]]

    def fresh(self, children: Iterable[str], sequence: int) -> list[tuple[int, str]]:
        """``(sequence, name)`` of the notification names among the unsorted
        ``children`` above ``sequence``, in order. Only those are checked and sorted (a
        name above the last applied one sorts above its name: the digits are
        zero-padded), so a follower that lists thousands of pending notifications on
        every change sorts only the few it has not applied."""
        if sequence >= 0:
            children = filter(self.child(sequence).__lt__, children)
        return [(sequence_of_created(name), name) for name in self.sorted_children(children)]

    def create_path(self) -> str:
        return f"{self.path}/{self.prefix}"


_PATTERNS: dict[str, re.Pattern[str]] = {}


def purge_mark_of(data: bytes | None) -> int:
    """The purge mark a notification root's data holds (``{"purged_through": N}``); -1
    for an empty root or data that does not hold one."""
    try:
        return int(json.loads(data.decode("utf-8"))["purged_through"]) if data else -1
    except (ValueError, KeyError, TypeError, UnicodeDecodeError, OverflowError,
            RecursionError):
        return -1


def _name_pattern(prefix: str) -> re.Pattern[str]:
    pattern = _PATTERNS.get(prefix)
    if pattern is None:
        pattern = _PATTERNS[prefix] = re.compile(re.escape(prefix) + "[0-9]{10}")
    return pattern


def sequence_of_created(path: str) -> int:
    """The sequence number ZooKeeper appended to a sequential znode's path or name."""
    return int(path[-10:])


class FollowError(Exception):
    """ZooKeeper failed inside the recipe (the worker resyncs after it)."""


@dataclass(frozen=True)
class Purge:
    """Who purges a recipe's roots and by which clock: ``is_purger()`` (the broker is
    the controller) and ``now_ms()``, the cluster's time (the broker's corrected clock,
    measured against ZooKeeper's: notification ctimes are ZooKeeper's time). The rules:
    age (``retention_ms``, Kafka's 15 minutes), and count (``max_pending``, None: none,
    as Kafka; only notifications older than ``count_min_age_ms``, None: any age)."""

    is_purger: Callable[[], bool]
    now_ms: Callable[[], int]
    retention_ms: int = RETENTION_MS
    max_pending: int | None = MAX_PENDING
    count_min_age_ms: int | None = COUNT_MIN_AGE_MS
    interval_s: float = PURGE_INTERVAL_S

    def kafka_only(self) -> Purge:
        """The same purger purging only what Kafka's brokers would: by age, past 15 minutes."""
        return Purge(self.is_purger, self.now_ms, retention_ms=RETENTION_MS, max_pending=None,
                     interval_s=self.interval_s)


# The rules of an explicit purge(now_ms) on a recipe built without a Purge (it never
# purges on its own: is_purger is never true, and the clock is the caller's now_ms).
DEFAULT_RULES = Purge(lambda: False, lambda: 0)


@dataclass(frozen=True)
class Resync:
    """What ``on_resync`` is told after a resync: the recipe's ``name``, how many
    ``entries`` its cache holds (tokens, users, ACL resources), how long it took, and
    whether it ``caught_up`` from notifications instead of loading everything."""

    name: str
    entries: int
    duration_ms: int
    caught_up: bool = False


@dataclass(frozen=True)
class Listing:
    """One root as a resync listed it: its notification ``names`` in sequence order,
    its purge ``mark`` (-1: never purged) and its ``cversion``."""

    root: NotificationRoot
    names: list[str]
    mark: int
    cversion: int

    @property
    def newest(self) -> int:
        """The newest sequence a load after this listing reflects (the mark counts)."""
        return max(sequence_of_created(self.names[-1]) if self.names else -1, self.mark)


@dataclass(frozen=True)
class CatchUp:
    """A ``catch_up`` hook's success: the ``entries`` its cache now holds and, per root
    name, a sequence its cache reflects besides the listing's (the one it caught up
    from)."""

    entries: int
    through: Mapping[str, int]


# apply(root, [(sequence, data), ...]) with sequences ascending; load() reloads all and
# answers how many entries the cache then holds.
ApplyChanges = Callable[[NotificationRoot, list[tuple[int, bytes]]], None]
OnResync = Callable[[Resync], None]
CatchUpHook = Callable[[Mapping[str, Listing]], CatchUp | None]


class ChangeNotifications:
    """Follow ``roots``; see the module docstring for the contract (``purge`` None:
    this recipe never purges).

    Stats: ``resync_count``, ``last_resync_ms``, ``applied_changes``, ``listings``,
    ``listed_names`` (names in those listings), ``purged``.
    """

    def __init__(
        self,
        client: KazooClient,
        name: str,
        roots: Sequence[NotificationRoot],
        *,
        load: Callable[[], int],
        apply: ApplyChanges,
        purge: Purge | None = None,
        on_resync: OnResync | None = None,
        recoverable: tuple[type[BaseException], ...] = (),
        catch_up: CatchUpHook | None = None,
        during_resync: Callable[[], AbstractContextManager[object]] | None = None,
    ) -> None:
        self._client = client
        self._reads = ZnodeReads(client, timeout_s=None, multi_read=True)
        self.name = name
        self.roots = {r.name: r for r in roots}
        self._load = load
        self._apply = apply
        self._purge = purge
        self._on_resync = on_resync
        self._try_catch_up = catch_up
        self._during_resync = during_resync or nullcontext
        self._recoverable = (KazooException, KazooTimeoutError, FollowError, StoreError,
                             *recoverable)
        self._worker = SerialWorker(f"{name}-notifications")
        self._lock = threading.Lock()
        self._last: dict[str, int] = {r.name: -1 for r in roots}
        self._mark_version: dict[str, int] = {r.name: -1 for r in roots}
        self._mark_value: dict[str, int] = {r.name: -1 for r in roots}
        self._waiters: dict[str, list[tuple[int, int, Future]]] = {r.name: [] for r in roots}
        # cversion of each root's last listing whose changes are applied, and who waits for it.
        self._listed: dict[str, int] = {r.name: -1 for r in roots}
        self._listed_waiters: dict[str, list[tuple[int, int, Future]]] = {r.name: [] for r in roots}
        self._waiter_ids = 0
        self._last_listing: dict[str, float] = {r.name: 0.0 for r in roots}
        # Monotonic time before which a purge by count cannot find a notification old
        # enough (the oldest pending one is younger than count_min_age_ms until then).
        self._count_purge_after: dict[str, float] = {r.name: 0.0 for r in roots}
        self._last_purge = time.monotonic()
        self._dirty = False
        self._suspended = False
        self._lost = False
        self._started = False
        self._closed = False
        self.resync_count = 0
        self.last_resync_ms = 0
        self.applied_changes = 0
        self.listings = 0
        self.listed_names = 0
        self.purged = 0

    # --- lifecycle ---------------------------------------------------------------------

    def start(self) -> None:
        """Create the roots, load everything (on this thread), then follow changes.
        Raises what ``load`` or kazoo raise if the first load fails."""
        if self._started:
            return
        self._started = True
        for root in self.roots.values():
            self._client.ensure_path(root.path)
        self._client.add_listener(self._on_state)
        try:
            self._resync()
        except Exception:
            self._client.remove_listener(self._on_state)
            self._started = False
            raise
        self._worker.start()

    @property
    def started(self) -> bool:
        """True once :meth:`start` has begun (its first load may still be running)."""
        return self._started

    def close(self) -> None:
        """Stop following; pending waits are cancelled. Safe to call more than once."""
        self._closed = True
        self._client.remove_listener(self._on_state)
        self._worker.close()
        with self._lock:
            heaps = [*self._waiters.values(), *self._listed_waiters.values()]
            pending = [fut for waiters in heaps for _, _, fut in waiters]
            for waiters in heaps:
                waiters.clear()
        for fut in pending:
            fut.cancel()

    # --- versions ----------------------------------------------------------------------

    @property
    def applied(self) -> dict[str, int]:
        """The last applied sequence number of each root (-1: none seen yet)."""
        with self._lock:
            return dict(self._last)

    def wait_for(self, versions: Iterable[Version]) -> Future:
        """A future set (to None) once every version of ``versions`` that names one of
        this recipe's roots has been applied; versions of other roots are ignored."""
        pending: list[Future] = []
        with self._lock:
            for root, sequence in versions:
                if root not in self._last or self._last[root] >= sequence:
                    continue
                pending.append(self._push_waiter(self._waiters[root], sequence))
        return all_of(pending)

    def confirm_current(self) -> Future:
        """``sync`` + ``exists`` of every root, then wait until a listing at least as new
        as each root's cversion has been applied (see the module docstring). Never blocks:
        the future fails with kazoo's error if a call fails (connection lost, session
        expired, client closed); the caller bounds the wait."""
        parts: list[Future] = []
        for root in self.roots.values():
            synced: Future = Future()
            listed: Future = Future()
            self._client.sync_async(root.path).rawlink(
                lambda result, fut=synced: _settle(fut, result))
            self._client.exists_async(root.path).rawlink(
                lambda result, name=root.name, fut=listed: self._on_root_stat(name, result, fut))
            parts += [synced, listed]
        return all_of(parts)

    def _on_root_stat(self, root: str, result: object, out: Future) -> None:
        """kazoo's callback thread: chain ``out`` to the wait for the root's cversion."""
        try:
            stat = result.get_nowait()  # type: ignore[attr-defined]
        except Exception as exc:  # noqa: BLE001 - handed to the waiting caller
            out.set_exception(exc)
            return
        if stat is None:
            out.set_exception(FollowError(f"{self.roots[root].path} does not exist"))
            return
        with self._lock:
            if self._listed[root] >= stat.cversion:
                out.set_result(None)
                return
            waiter = self._push_waiter(self._listed_waiters[root], stat.cversion)
        waiter.add_done_callback(lambda fut: _chain(fut, out))

    def _push_waiter(self, heap: list[tuple[int, int, Future]], mark: int) -> Future:
        """A future in ``heap`` set once its mark is reached (caller holds the lock)."""
        fut: Future = Future()
        self._waiter_ids += 1
        heapq.heappush(heap, (mark, self._waiter_ids, fut))
        return fut

    def latest(self, timeout_s: float = 10.0) -> list[Version]:
        """The newest version of every root in ZooKeeper now, after a ``sync`` so the
        answer is at least as new as any write committed before this call (blocking; each
        call bounded by ``timeout_s``: kazoo's timeout error past it)."""
        versions = []
        for root in self.roots.values():
            self._client.sync_async(root.path).get(timeout=timeout_s)
            children = self._client.get_children_async(root.path).get(timeout=timeout_s)
            sequences = [s for s in map(root.sequence, children) if s is not None]
            versions.append((root.name, max(sequences, default=-1)))
        return versions

    def wait_caught_up(self, timeout: float = 5.0) -> bool:
        """Block until every notification present in ZooKeeper now has been applied."""
        try:
            self.wait_for(self.latest()).result(timeout)
        except TimeoutError:
            return False
        return True

    def _advance(self, root: str, sequence: int) -> None:
        with self._lock:
            self._last[root] = max(self._last[root], sequence)
            ready = _pop_reached(self._waiters[root], self._last[root])
        _release(ready)

    def _listed_through(self, root: str, cversion: int) -> None:
        """A listing of ``root`` with this cversion has been applied."""
        with self._lock:
            self._listed[root] = max(self._listed[root], cversion)
            ready = _pop_reached(self._listed_waiters[root], self._listed[root])
        _release(ready)

    # --- kazoo callbacks (kazoo's thread: never block) ----------------------------------

    def _on_state(self, state: str) -> None:
        if state == KazooState.LOST:
            self._lost = True
        elif state == KazooState.SUSPENDED:
            self._suspended = True
        elif state == KazooState.CONNECTED:
            if self._lost:
                self._lost = self._suspended = False
                self._request_resync()
            elif self._suspended:
                self._suspended = False
                for root in self.roots.values():
                    self._submit_changes(root)

    def _watch_for(self, root: NotificationRoot) -> Callable[[object], None]:
        def on_event(_event: object) -> None:
            self._submit_changes(root)

        return on_event

    def _submit_changes(self, root: NotificationRoot) -> None:
        self._worker.submit(f"changes:{root.name}", lambda: self._changes_task(root))

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
            except self._recoverable as exc:
                log.warning("%s resync failed (%s); retrying", self.name, exc)
                with self._lock:
                    self._dirty = True
            if self._worker.sleep(backoff):
                return
            backoff = min(backoff * 2, _MAX_BACKOFF_S)

    def _changes_task(self, root: NotificationRoot) -> None:
        with self._lock:
            dirty = self._dirty
        if dirty:
            return  # a resync is pending or retrying; it covers these changes
        wait = self._last_listing[root.name] + MIN_LISTING_INTERVAL_S - time.monotonic()
        if wait > 0 and self._worker.sleep(wait):
            return
        try:
            self._apply_changes(root)
        except self._recoverable as exc:
            log.warning("%s: applying %s failed (%s); resynchronising", self.name, root.path, exc)
            self._request_resync()

    def _list(self, root: NotificationRoot) -> tuple[list[str], object]:
        """The root's notification names in sequence order, and its stat."""
        children, stat = self._list_unsorted(root)
        return root.sorted_children(children), stat

    def _list_unsorted(self, root: NotificationRoot) -> tuple[list[str], object]:
        """The root's children as ZooKeeper lists them (any order; the notification
        names are the ones :meth:`NotificationRoot.sorted_children` keeps), and its
        stat; the child watch set again."""
        return list_children(self._client, root.path, watch=self._watch_for(root)).get()

    def _purge_mark(self, root: NotificationRoot, stat: object) -> int | None:
        """The root's purge mark if its data changed since last read, else None."""
        version = stat.version  # type: ignore[attr-defined]
        if version == self._mark_version[root.name]:
            return None
        data, stat = self._client.get(root.path)
        self._mark_version[root.name] = stat.version
        mark = purge_mark_of(data)
        self._mark_value[root.name] = mark
        return mark

    def purge_mark(self, root: NotificationRoot, stat: object) -> int:
        """The root's purge mark (-1: never purged), read again only when the root's
        data version in ``stat`` (its listing's) moved since the last read."""
        self._purge_mark(root, stat)
        return self._mark_value[root.name]

    def _resync(self) -> None:
        started = time.monotonic()
        with self._lock:
            self._dirty = False
        with self._during_resync():
            # List each root BEFORE loading: the load reflects at least its newest
            # notification; anything newer is applied after it (again, harmlessly). The
            # purge mark counts too: the notifications it covers were committed before it
            # was read, so the load reflects them (after a quiet spell the listing may be
            # empty, and a snapshot of this cache would otherwise name no sequence at all).
            listings = {}
            for root in self.roots.values():
                names, stat = self._list(root)
                listings[root.name] = Listing(root, names, self.purge_mark(root, stat),
                                              stat.cversion)  # type: ignore[attr-defined]
            caught = self._try_catch_up(listings) if self._try_catch_up is not None else None
            entries = self._load() if caught is None else caught.entries
            for name, listing in listings.items():
                through = listing.newest
                if caught is not None:
                    through = max(through, caught.through.get(name, -1))
                with self._lock:
                    self._last[name] = -1
                self._advance(name, through)
                self._listed_through(name, listing.cversion)
        self.resync_count += 1
        self.last_resync_ms = int((time.monotonic() - started) * 1000)
        if caught is None:
            log.info("%s resynchronised in %d ms", self.name, self.last_resync_ms)
        if self._on_resync is not None:
            self._on_resync(Resync(self.name, entries, self.last_resync_ms, caught is not None))

    def _apply_changes(self, root: NotificationRoot) -> None:
        self._last_listing[root.name] = time.monotonic()
        listed, stat = self._list_unsorted(root)
        self.listings += 1
        self.listed_names += len(listed)
        with self._lock:
            last = self._last[root.name]
        mark = self._purge_mark(root, stat)
        if mark is not None and mark > last:
            log.info("%s: notifications of %s purged past version %d; resynchronising",
                     self.name, root.path, last)
            self._request_resync()
            return
        fresh = root.fresh(listed, last)
        if fresh:
            notes = self.read_notifications(root, fresh)
            if notes is None:
                log.info("%s: a notification was purged before it was read; resynchronising",
                         self.name)
                self._request_resync()
                return
            self._apply(root, notes)
            self.applied_changes += len(notes)
            self._advance(root.name, fresh[-1][0])
        self._listed_through(root.name, stat.cversion)  # type: ignore[attr-defined]
        # Purge in batches (above 1.5x the bound), not one znode per listing; the age
        # rule (stats) only on the periodic purge.
        purge = self._purge
        if purge is not None and purge.is_purger():
            if time.monotonic() - self._last_purge >= purge.interval_s:
                self.purge(purge.now_ms())
            elif (purge.max_pending is not None
                  and len(listed) > purge.max_pending + purge.max_pending // 2
                  and time.monotonic() >= self._count_purge_after[root.name]):
                self.purged += self._purge_root(root, purge, purge.now_ms(), by_age=False,
                                                listed=root.sorted_children(listed))

    def _older_than(self, root: NotificationRoot, children: list[str], cutoff_ms: int
                    ) -> tuple[list[str], int | None]:
        """The leading children created before ``cutoff_ms`` (ctimes grow with the
        sequence, so the first young one ends the scan), and the creation time of that
        first young one (None: none was young)."""
        old, young = created_before(self._client, [f"{root.path}/{c}" for c in children],
                                    cutoff_ms, f"stat {root.path}", ordered=True)
        return [path.rsplit("/", 1)[1] for path in old], young

    def read_notifications(
        self, root: NotificationRoot, names: list[tuple[int, str]]
    ) -> list[tuple[int, bytes]] | None:
        """``(sequence, data)`` of each ``(sequence, name)`` notification of ``root``,
        read in multi-read batches; None when one is gone (purged meanwhile)."""
        values = self._reads.get_many([f"{root.path}/{c}" for _, c in names],
                                      f"read {root.path}", with_stat=False)
        if any(value is None for value in values):
            return None
        return [(sequence, value or b"") for (sequence, _), value in zip(names, values)]

    # --- purging (the controller) ------------------------------------------------------

    def purge(self, now_ms: int) -> int:
        """Delete, in every root, notifications older than the retention (by ``now_ms``,
        the cluster's time) and, with a count rule, the oldest beyond ``max_pending``,
        after recording the purge mark. Returns how many. The rules are the recipe's
        :class:`Purge`'s, or the default ones (:data:`DEFAULT_RULES`) for a recipe that
        does not purge on its own."""
        self._last_purge = time.monotonic()
        rules = self._purge if self._purge is not None else DEFAULT_RULES
        total = 0
        for root in self.roots.values():
            total += self._purge_root(root, rules, now_ms)
        self.purged += total
        return total

    def _purge_root(self, root: NotificationRoot, purge: Purge, now_ms: int, *,
                    by_age: bool = True, listed: list[str] | None = None) -> int:
        """Purge one root; ``listed``: its sorted names if the caller just listed them."""
        if listed is None:
            listed = root.sorted_children(self._client.get_children(root.path))
        if not listed:
            return 0
        excess = 0 if purge.max_pending is None else max(0, len(listed) - purge.max_pending)
        doomed = listed[:excess]
        if doomed and purge.count_min_age_ms is not None:
            cutoff_ms = now_ms - purge.count_min_age_ms
            doomed, young_ctime = self._older_than(root, doomed, cutoff_ms)
            if young_ctime is not None:
                # Nothing from young_ctime on is old enough before then (capped: the
                # server's clock may be ahead of ours; the periodic purge runs anyway).
                wait_s = min((young_ctime - cutoff_ms) / 1000.0, purge.interval_s)
                self._count_purge_after[root.name] = time.monotonic() + wait_s
        if by_age:
            # Kafka's rule: now - ctime > retention, so a ctime of exactly now -
            # retention stays.
            doomed += self._older_than(root, listed[excess:], now_ms - purge.retention_ms)[0]
        if not doomed:
            return 0
        through = root.sequence(doomed[-1])
        self._client.set(root.path, json.dumps({"purged_through": through}).encode("utf-8"))
        return delete_all(self._client, [f"{root.path}/{c}" for c in doomed],
                          f"purge {root.path}")


def all_of(futures: Sequence[Future]) -> Future:
    """A future set (to None) when every one of ``futures`` is; it fails with the first
    failure and is cancelled when one of them is."""
    result: Future = Future()
    if not futures:
        result.set_result(None)
        return result
    remaining = [len(futures)]
    count_lock = threading.Lock()

    def one_done(fut: Future) -> None:
        if result.done():
            return
        if fut.cancelled():
            result.cancel()
            return
        exc = fut.exception()
        with count_lock:
            remaining[0] -= 1
            done = remaining[0] == 0
        if result.done():
            return
        try:
            if exc is not None:
                result.set_exception(exc)
            elif done:
                result.set_result(None)
        except InvalidStateError:
            return  # another part settled it first

    for fut in futures:
        fut.add_done_callback(one_done)
    return result


def _settle(out: Future, result: object) -> None:
    """Copy a kazoo async result's outcome into ``out`` (kazoo's callback thread)."""
    try:
        result.get_nowait()  # type: ignore[attr-defined]
    except Exception as exc:  # noqa: BLE001 - handed to the waiting caller
        out.set_exception(exc)
        return
    out.set_result(None)


def _chain(source: Future, out: Future) -> None:
    if source.cancelled():
        out.cancel()
    elif source.exception() is not None:
        out.set_exception(source.exception())
    else:
        out.set_result(None)


def _pop_reached(heap: list[tuple[int, int, Future]], reached: int) -> list[Future]:
    ready = []
    while heap and heap[0][0] <= reached:
        ready.append(heapq.heappop(heap)[2])
    return ready


def _release(ready: list[Future]) -> None:
    for fut in ready:
        if not fut.done():
            fut.set_result(None)


class VersionWaiter:
    """Several recipes seen as one: ``wait_for`` across all their roots."""

    def __init__(self, recipes: Iterable[ChangeNotifications]) -> None:
        self._recipes = list(recipes)

    def wait_for(self, versions: Iterable[Version]) -> list[Future]:
        wanted = list(versions)
        return [r.wait_for(wanted) for r in self._recipes]

    def confirm_current(self) -> Future:
        """Every started recipe's :meth:`ChangeNotifications.confirm_current`, as one future.

        A recipe not yet started serves nothing to confirm (its cache is still loading,
        e.g. ACLs while an ``early.start.listeners`` listener already takes logins); waiting
        on it would hold every login until it starts."""
        return all_of([r.confirm_current() for r in self._recipes if r.started])

    def latest(self) -> list[Version]:
        return [v for r in self._recipes for v in r.latest()]

    def applied(self) -> Mapping[str, int]:
        out: dict[str, int] = {}
        for r in self._recipes:
            out.update(r.applied)
        return out
