"""Group commit: the controller's concurrent token writes committed together.

Owns :class:`GroupCommit`, the queue between the write path and the store's batch
write (``commit_many(writes, guard=) -> [outcome per write]``, e.g.
:meth:`zk.token_store.TokenStore.commit_many`: one ZooKeeper multi-transaction for the
whole batch, a failed write taken out and the rest committed again).

When a batch goes. A write submitted while no batch is in flight goes at once, alone:
there is no timer and no linger, so a lone write pays nothing for the grouping. Writes
submitted while ``max_batches`` batches are in flight queue up, and the next batch takes
*whatever queued while the previous batch was in flight*, oldest first, up to
``max_writes`` writes and ``max_bytes`` bytes (at least one write, whatever its size).
So the wait of a write is bounded by the batch in flight (itself bounded by the store's
request timeout), and a batch grows with the load: under N concurrent writers it holds
about the writes that arrived during one ZooKeeper round trip. A fixed wait of a few
milliseconds would add that wait to every lone write and gather no more under load than
the round trip already does.

Each write keeps its own outcome: the future of :meth:`GroupCommit.submit` gets the
write's own result or exception from ``commit_many``. A committed batch's outcomes are
handed out :data:`DELIVER_SLICE` per turn of the event loop, and the next batch starts
before the first slice: each outcome wakes its writer, and the 128 writers of a full
batch woken in one turn (a revocation's deletes, each applying its state to the cache
and submitting the next) held the controller's loop for about 20 ms in one turn. Order
between batches needs nothing more: a writer applies the state committed at its own
sequence, and the cache keeps the newer of two states of one token. Writes with different
guards never share a batch. A write whose waiter was cancelled before its batch formed is dropped
(it was never sent); once sent, it is committed or not, as a single write would be.

:func:`take_batch` is the pure rule (no I/O, no clock), unit-tested alone.

Must not: interpret an outcome, block the event loop (``commit_many`` runs through
``run_blocking``, a worker thread by default), or import ``zk``.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

W = TypeVar("W")
Guard = tuple[str, int]

# The default bounds: ZooKeeper refuses a request over jute.maxbuffer (1 MB by default),
# and a token write is about 0.5 KB.
MAX_WRITES = 128
MAX_BYTES = 256 * 1024
MAX_BATCHES = 1
# Outcomes handed to their writers per turn of the event loop.
DELIVER_SLICE = 32


@dataclass
class Pending(Generic[W]):
    """A submitted write, its guard, its size and its waiter's future."""

    write: W
    guard: Guard | None
    size: int
    future: asyncio.Future


def take_batch(queue: deque[Pending[W]], max_writes: int, max_bytes: int) -> list[Pending[W]]:
    """Take the next batch from the front of ``queue``: writes whose waiter still waits,
    all with the guard of the first, at most ``max_writes`` of them and ``max_bytes`` in
    all (the first is taken whatever its size). Cancelled waiters are dropped."""
    batch: list[Pending[W]] = []
    used = 0
    while queue:
        item = queue[0]
        if item.future.done():
            queue.popleft()
            continue
        if batch and (
            len(batch) >= max_writes
            or used + item.size > max_bytes
            or item.guard != batch[0].guard
        ):
            break
        queue.popleft()
        batch.append(item)
        used += item.size
    return batch


class GroupCommit(Generic[W]):
    """See the module docstring. ``commit_many(writes, guard=...)`` is blocking and
    returns one outcome per write (an exception instance is raised to that write's
    waiter); ``size_of(write)`` is its size in bytes. Stats: ``batches``, ``committed``
    (writes sent), ``largest``."""

    def __init__(
        self,
        commit_many: Callable[..., Sequence[Any]],
        *,
        size_of: Callable[[W], int],
        max_writes: int = MAX_WRITES,
        max_bytes: int = MAX_BYTES,
        max_batches: int = MAX_BATCHES,
        run_blocking: Callable[..., Awaitable[Any]] = asyncio.to_thread,
    ) -> None:
        if max_writes < 1 or max_bytes < 1 or max_batches < 1:
            raise ValueError("group commit bounds must be positive")
        self._commit_many = commit_many
        self._size_of = size_of
        self.max_writes = max_writes
        self.max_bytes = max_bytes
        self.max_batches = max_batches
        self._run_blocking = run_blocking
        self._queue: deque[Pending[W]] = deque()
        self._in_flight = 0
        self.batches = 0
        self.committed = 0
        self.largest = 0

    @property
    def queued(self) -> int:
        return len(self._queue)

    @property
    def in_flight(self) -> int:
        return self._in_flight

    async def submit(self, write: W, guard: Guard | None) -> Any:
        """Commit ``write`` (with others) and return its own outcome, or raise it."""
        future = asyncio.get_running_loop().create_future()
        self._queue.append(Pending(write, guard, self._size_of(write), future))
        self._start_batches()
        return await future

    def _start_batches(self) -> None:
        while self._in_flight < self.max_batches:
            batch = take_batch(self._queue, self.max_writes, self.max_bytes)
            if not batch:
                return
            self._in_flight += 1
            self.batches += 1
            self.committed += len(batch)
            self.largest = max(self.largest, len(batch))
            slot = _Slot()
            task = asyncio.get_running_loop().create_task(self._run(batch, slot))
            task.add_done_callback(lambda _task, slot=slot: self._release(slot))

    def _release(self, slot: _Slot) -> None:
        """The batch holding ``slot`` no longer counts as in flight (once)."""
        if slot.released:
            return
        slot.released = True
        self._in_flight -= 1
        self._start_batches()

    async def _run(self, batch: list[Pending[W]], slot: _Slot) -> None:
        writes = [item.write for item in batch]
        try:
            outcomes = await self._run_blocking(self._commit_many, writes, guard=batch[0].guard)
            if len(outcomes) != len(batch):
                raise RuntimeError(f"{len(outcomes)} outcomes for {len(batch)} writes")
        except asyncio.CancelledError:
            for item in batch:
                item.future.cancel()
            raise
        except Exception as exc:  # noqa: BLE001 - every waiter gets the failure
            for item in batch:
                if not item.future.done():
                    item.future.set_exception(exc)
            return
        self._release(slot)  # committed: the next batch may go while these are handed out
        delivered = 0
        try:
            for delivered in range(0, len(batch), DELIVER_SLICE):
                if delivered:
                    await asyncio.sleep(0)
                _deliver(batch[delivered:delivered + DELIVER_SLICE],
                         outcomes[delivered:delivered + DELIVER_SLICE])
        except asyncio.CancelledError:  # committed: every waiter still learns its outcome
            _deliver(batch[delivered:], outcomes[delivered:])
            raise


@dataclass
class _Slot:
    """One batch's place among the ``max_batches`` in flight, given back once."""

    released: bool = False


def _deliver(batch: Sequence[Pending[Any]], outcomes: Sequence[Any]) -> None:
    for item, outcome in zip(batch, outcomes):
        if item.future.done():
            continue
        if isinstance(outcome, BaseException):
            item.future.set_exception(outcome)
        else:
            item.future.set_result(outcome)
