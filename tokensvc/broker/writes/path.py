"""The controller's write path: one store write, then this broker's caches caught up.

Owns :class:`WritePath`. Every write runs its store call in a worker thread under the
controller guard (token writes through the group commit,
:mod:`tokensvc.broker.writes.groupcommit`: concurrent ones share one transaction, each
with its own outcome), with the request record of its
:class:`~tokensvc.broker.context.WriteTicket` in the same ZooKeeper transaction, then
*waits until this broker's own caches have applied the notification versions it
committed* (futures set by the followers: no sleep, no polling) and adds them to the
ticket, so the answering broker -- this one, or the forwarding broker that waits for the
same versions -- serves the write before it answers. Two outcomes are not answers and
leave the handler as exceptions, for :class:`tokensvc.broker.writes.ledger.WriteLedger`:
:class:`AlreadyApplied` (the request key was recorded: a retry) and
:class:`OutcomeUnknown` (ZooKeeper failed during the commit, or the cache did not catch
up in time: the ledger looks the key up and retries).

ZooKeeper is reached through the small protocols below (implemented in ``zk``, faked in
tests). Must not: import ``zk``, or know what a write means (the handlers and their
services build the store calls).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Protocol

from tokensvc.broker.context import CommittedToken
from tokensvc.core.errors import Errors, KafkaError

if TYPE_CHECKING:
    from tokensvc.broker.context import RequestContext
    from tokensvc.core.token import TokenInformation

Version = tuple[str, int]
Guard = tuple[str, int]
TOKENS_ROOT = "tokens"
# apply_token(token_id, info or None, sequence) -> True when the cache now holds it.
ApplyToken = Callable[[str, "TokenInformation | None", int], bool]


class AlreadyApplied(Exception):
    """The write's request key is already recorded: an earlier attempt was applied."""


class OutcomeUnknown(Exception):
    """The write may or may not have been committed (ZooKeeper failed during the
    commit), or was committed but this broker's cache did not catch up in time."""


# --- what the write path needs from ZooKeeper (implemented in zk/, faked in tests) ----


class VersionFollower(Protocol):
    """The change-notification followers (:class:`zk.notifications.VersionWaiter`)."""

    def wait_for(self, versions: Iterable[Version]) -> list[concurrent.futures.Future]: ...

    def latest(self) -> list[Version]: ...


class Records(Protocol):
    """Request records (:mod:`zk.requests`): ``op(key, api, outcome)`` builds the record
    a store adds to its transaction; ``put`` records a request that changed nothing."""

    def op(self, key: str, api: int, outcome: Any) -> Any: ...

    def put(self, op: Any) -> None: ...


class Grouped(Protocol):
    """The group commit of token writes (:class:`tokensvc.broker.writes.groupcommit.GroupCommit`):
    ``submit`` returns the write's notification sequence (None: nothing changed) or
    raises its own store error."""

    async def submit(self, write: Any, guard: Guard | None) -> int | None: ...


class WritePath:
    """Runs one store write as the controller and waits for this broker's caches.

    ``guard()`` is the controller guard (None when this broker is not the controller);
    ``unknown`` are the store errors after which a write's outcome is unknown;
    ``exists`` the store error of an already recorded request key.
    """

    def __init__(
        self,
        *,
        guard: Callable[[], Guard | None],
        followers: VersionFollower,
        records: Records,
        cache_timeout_s: float,
        unknown: tuple[type[BaseException], ...],
        exists: type[BaseException],
        tokens: Grouped | None = None,
        apply_token: ApplyToken | None = None,
    ) -> None:
        self._guard = guard
        self._followers = followers
        self.records = records
        self._cache_timeout_s = cache_timeout_s
        self._unknown = unknown
        self._exists = exists
        self._tokens = tokens
        self._apply_token = apply_token

    def record(self, ctx: RequestContext, api: int, outcome: Any) -> Any:
        """The record op of ``ctx``'s write (None for a write without a ticket)."""
        if ctx.write is None:
            return None
        return self.records.op(ctx.write.key, api, outcome)

    async def commit(self, ctx: RequestContext, fn: Callable[..., Any], *args: Any,
                     **kwargs: Any) -> Any:
        """``fn(*args, guard=..., **kwargs)`` in a thread; returns ``(result, versions)``
        as the store does, after waiting until this broker has applied ``versions``."""
        guard = self._controller_guard()
        try:
            result, versions = await asyncio.to_thread(fn, *args, guard=guard, **kwargs)
        except Exception as exc:  # noqa: BLE001 - mapped, or raised as it is
            raise self._mapped(exc) from None
        await self._committed(ctx, versions)
        return result

    async def commit_token(self, ctx: RequestContext, write: Any, token_id: str,
                           info: TokenInformation | None) -> None:
        """Commit one token write through the group commit (together with the token
        writes queued meanwhile, each with its own outcome). The state it committed
        (``info``; None for a delete) goes into this broker's cache at once
        (``apply_token``) and into the ticket, for the forwarding broker to do the same;
        only if that is refused (a full load is running) does the write wait for the
        follower as ``commit`` does."""
        assert self._tokens is not None, "the write path has no group commit for tokens"
        guard = self._controller_guard()
        try:
            sequence = await self._tokens.submit(write, guard)
        except Exception as exc:  # noqa: BLE001 - mapped, or raised as it is
            raise self._mapped(exc) from None
        if sequence is None:
            return
        if ctx.write is not None:
            ctx.write.tokens.append(CommittedToken(token_id, sequence, info))
        if self._apply_token is not None and self._apply_token(token_id, info, sequence):
            if ctx.write is not None:
                ctx.write.committed.append((TOKENS_ROOT, sequence))
            return
        await self._committed(ctx, [(TOKENS_ROOT, sequence)])

    def _controller_guard(self) -> Guard:
        guard = self._guard()
        if guard is None:
            raise KafkaError(Errors.NOT_CONTROLLER, "this broker is not the controller")
        return guard

    def _mapped(self, exc: Exception) -> Exception:
        """A store failure as the ledger understands it."""
        if isinstance(exc, self._exists):
            return AlreadyApplied(str(exc))
        if isinstance(exc, self._unknown) or (
            isinstance(exc, KafkaError) and exc.error == Errors.REQUEST_TIMED_OUT
        ):
            return OutcomeUnknown(f"ZooKeeper failed during the write: {exc}")
        return exc

    async def _committed(self, ctx: RequestContext, versions: list[Version]) -> None:
        if ctx.write is not None:
            ctx.write.committed.extend(versions)
        if not await self.reach(versions, self._cache_timeout_s):
            raise OutcomeUnknown("committed, but this broker's cache did not catch up in time")

    async def reach(self, versions: Iterable[Version], timeout_s: float) -> bool:
        """Wait (event-driven) until this broker has applied ``versions``; False on timeout."""
        versions = list(versions)
        if not versions:
            return True
        # Futures already set (the roots this write did not touch, a version applied
        # already) are not wrapped: each wrap costs a wake-up of the loop.
        found = self._followers.wait_for(versions)
        if any(f.cancelled() for f in found):  # the follower closed
            return False
        waiting = [f for f in found if not f.done()]
        if not waiting:
            return True
        futures = [asyncio.wrap_future(f) for f in waiting]
        try:
            async with asyncio.timeout(timeout_s):
                await asyncio.gather(*futures)
        except TimeoutError:
            for fut in futures:
                fut.cancel()
            return False
        except asyncio.CancelledError:
            if asyncio.current_task() is not None and asyncio.current_task().cancelling():
                raise
            return False
        return True

    async def latest(self) -> list[Version]:
        """Every root's newest version in ZooKeeper now (sync + listing; blocking I/O in
        a thread). What a replay reports, and what a catch-up waits for."""
        return await asyncio.to_thread(self._followers.latest)

    async def catch_up(self, timeout_s: float) -> bool:
        """Wait until this broker has applied every change ZooKeeper holds now; False
        when ZooKeeper cannot be read or the wait times out."""
        try:
            versions = await self.latest()
        except Exception:  # noqa: BLE001 - ZooKeeper unreachable: answer from the cache
            return False
        return await self.reach(versions, timeout_s)

    async def record_alone(self, ctx: RequestContext, api: int, outcome: Any) -> None:
        """Record a request that changed nothing (so a retry is answered the same)."""
        if ctx.write is None:
            return

        def put() -> None:
            # The record's JSON is made in the thread too: a revocation's lists ten
            # thousand tokens (one piece of C holding the GIL on the loop otherwise).
            self.records.put(self.record(ctx, api, outcome))

        try:
            await asyncio.to_thread(put)
        except self._exists as exc:
            raise AlreadyApplied(str(exc)) from None
        except self._unknown as exc:
            raise OutcomeUnknown(str(exc)) from None
