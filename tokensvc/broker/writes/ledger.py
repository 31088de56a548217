"""WriteLedger: exactly-once application of every write on the controller.

Owns the controller's side of create, renew, expire, CreateAcls, DeleteAcls and
AlterUserScramCredentials, forwarded or direct. Every such request carries a
:class:`~tokensvc.broker.context.WriteTicket`: its request key (from the Envelope's
tagged field, the same on every forwarding attempt; a fresh one for a direct request)
and whether this is the key's first attempt.

``apply(services, ctx, body)`` (``services``: what the handlers it runs get, as a handler
is given them):

1. Attempts with one key run one at a time (a per-key lock).
2. Unless this is the key's first attempt, the key's record is looked up in ZooKeeper;
   a recorded key is answered with the recorded outcome (the handler's ``replay``)
   without running the handler again -- audited as a replay (``forward`` event, api
   ``<Name>.replay``), never as a failed write.
3. Otherwise the handler runs; its write commits the change and the record in one
   transaction (:class:`tokensvc.broker.writes.path.WritePath`).
4. :class:`~tokensvc.broker.writes.path.AlreadyApplied` (the key got recorded meanwhile)
   goes to step 2. :class:`~tokensvc.broker.writes.path.OutcomeUnknown` (ZooKeeper failed
   during the commit, e.g. ConnectionLoss, or the cache lagged) waits with a backoff
   (50 ms doubling to 1 s) and goes to step 2, until ``request.timeout.ms``: then the
   answer is REQUEST_TIMED_OUT (retriable) -- also when one attempt or one look-up hangs
   in ZooKeeper past that time. The record decides, so a write whose
   outcome was unknown is never applied twice.

A write may be refused before any of this by the ``refuse`` function the assembly hands
in (a token write while this controller's clock is not trusted: issue #36); its answer is
then the refusal, and nothing is looked up or written.

A replay reports the newest notification versions ZooKeeper holds (after a ``sync``),
which include the ones the first attempt committed, and waits for them locally too.

Must not: know what a handler does, or import ``zk`` (records are read through the
function it is given).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from tokensvc.audit.writer import AuditUnavailable
from tokensvc.broker.context import WriteTicket
from tokensvc.broker.loop.offloop import encode_response_async
from tokensvc.broker.writes.path import AlreadyApplied, OutcomeUnknown
from tokensvc.core.errors import Errors, KafkaError
from tokensvc.protocol import encode_response

if TYPE_CHECKING:
    from tokensvc.broker.context import RequestContext
    from tokensvc.broker.handlers.base import ApiHandler
    from tokensvc.broker.services import Services
    from tokensvc.broker.writes.path import WritePath

log = logging.getLogger("tokensvc.broker.ledger")

_BACKOFF_START_S = 0.05
_BACKOFF_MAX_S = 1.0


def new_request_key() -> str:
    return uuid.uuid4().hex


class WriteLedger:
    """See the module docstring. ``read_record(key)`` (blocking) returns an object with
    ``api`` and ``outcome``, or None; ``valid_key(key)`` says whether a request key
    received in an envelope may be used; ``replayed`` counts the answers replayed."""

    def __init__(
        self,
        handlers: Mapping[int, ApiHandler],
        writes: WritePath,
        read_record: Callable[[str], Any],
        valid_key: Callable[[str], bool],
        *,
        request_timeout_ms: int,
        monotonic: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Any] = asyncio.sleep,
        refuse: Callable[[Services, RequestContext, ApiHandler, dict], dict | None] | None = None,
    ) -> None:
        self._handlers = handlers
        self._writes = writes
        self._read_record = read_record
        self.valid_key = valid_key
        self._timeout_s = request_timeout_ms / 1000.0
        self._monotonic = monotonic
        self._sleep = sleep
        self._refuse = refuse
        self._inflight: dict[str, tuple[asyncio.Lock, int]] = {}
        self.replayed = 0
        self.retried_unknown = 0

    def writes_api(self, api_key: int) -> bool:
        handler = self._handlers.get(api_key)
        return bool(handler and handler.write)

    async def apply(self, services: Services, ctx: RequestContext,
                    body: dict) -> tuple[bytes, int]:
        """Apply one write exactly once; returns the encoded response and its error.

        With ``audit.required`` the write is refused (REQUEST_TIMED_OUT, nothing applied)
        while the audit log cannot be written, and answered only once its events are
        written and fsynced (:meth:`tokensvc.audit.writer.AuditLog.durable`)."""
        handler = self._handlers[ctx.api_key]
        refused = self._refuse(services, ctx, handler, body) if self._refuse is not None else None
        if refused is not None:
            return _answer(ctx, refused)
        audit = services.audit
        if not audit.required:
            return await self._apply_once(services, ctx, handler, body)
        refused = audit.refusal()
        if refused is not None:
            return _answer(ctx, handler.error_for(ctx.api_version, refused.error, body))
        answer = await self._apply_once(services, ctx, handler, body)
        try:
            await audit.durable(self._timeout_s)
        except AuditUnavailable as exc:
            log.error("%s applied but its audit event is not on disk: answered %s (%s)",
                      handler.name, exc.error.name, exc.message)
            return _answer(ctx, handler.error_for(ctx.api_version, exc.error, body))
        return answer

    async def _apply_once(
        self, services: Services, ctx: RequestContext, handler: ApiHandler, body: dict
    ) -> tuple[bytes, int]:
        if ctx.write is None:
            ctx.write = WriteTicket(new_request_key())
        key = ctx.write.key
        lock, users = self._inflight.get(key, (asyncio.Lock(), 0))
        self._inflight[key] = (lock, users + 1)
        try:
            async with lock:
                return await self._apply_locked(services, ctx, handler, body)
        finally:
            lock, users = self._inflight[key]
            if users == 1:
                del self._inflight[key]
            else:
                self._inflight[key] = (lock, users - 1)

    async def _apply_locked(
        self, services: Services, ctx: RequestContext, handler: ApiHandler, body: dict
    ) -> tuple[bytes, int]:
        ticket = ctx.write
        assert ticket is not None
        deadline = self._monotonic() + self._timeout_s
        backoff = _BACKOFF_START_S
        look_up = not ticket.first_attempt
        while True:
            try:
                # The answer is due by the request timeout even if ZooKeeper hangs the
                # look-up or the attempt (its thread may still commit: the record then
                # tells a retry), or the attempt waits behind a group commit in flight.
                async with asyncio.timeout(max(0.001, deadline - self._monotonic())):
                    if look_up:
                        record = await asyncio.to_thread(self._read_record, ticket.key)
                        if record is not None:
                            return await self._replay(services, ctx, handler, record, deadline,
                                                      body)
                    response = await handler.handle(services, ctx, body)
            except TimeoutError:
                log.warning("%s: no outcome by the request timeout", handler.name)
                return _answer(ctx, handler.error_for(ctx.api_version, Errors.REQUEST_TIMED_OUT,
                                                           body))
            except AlreadyApplied:
                look_up = True
                continue
            except (OutcomeUnknown, KafkaError) as exc:
                if isinstance(exc, KafkaError) and exc.error != Errors.REQUEST_TIMED_OUT:
                    response = handler.error_for(ctx.api_version, exc.error, body)
                    return _answer(ctx, response)
                remaining = deadline - self._monotonic()
                if remaining <= 0:
                    log.warning("%s: outcome still unknown at the request timeout (%s)",
                                handler.name, exc)
                    return _answer(ctx, handler.error_for(ctx.api_version,
                                                           Errors.REQUEST_TIMED_OUT, body))
                self.retried_unknown += 1
                log.info("%s: %s; looking the request key up and retrying", handler.name, exc)
                await self._sleep(min(backoff, remaining))
                backoff = min(backoff * 2, _BACKOFF_MAX_S)
                look_up = True
                continue
            except Exception:
                log.exception("%s failed", handler.name)
                return _answer(ctx, handler.error_for(ctx.api_version,
                                                       Errors.UNKNOWN_SERVER_ERROR, body))
            # A revocation's answer lists every token: encoded off the loop when large.
            return (await encode_response_async(ctx.header, response),
                    int(response.get("ErrorCode", 0) or 0))

    async def _replay(
        self, services: Services, ctx: RequestContext, handler: ApiHandler, record: Any, deadline: float,
        body: dict,
    ) -> tuple[bytes, int]:
        if int(record.api) != ctx.api_key or handler.replay is None:
            log.warning("request key of %s reused for another API", handler.name)
            return _answer(ctx, handler.error_for(ctx.api_version, Errors.INVALID_REQUEST, body))
        response = await handler.replay(services, ctx, record.outcome)
        versions = await self._writes.latest()
        assert ctx.write is not None
        ctx.write.committed.extend(versions)
        await self._writes.reach(versions, max(0.0, deadline - self._monotonic()))
        self.replayed += 1
        error = int(response.get("ErrorCode", 0) or 0)
        log.info("%s retried by %s: answered with the first outcome", handler.name,
                 ctx.principal.without_token_flag())
        services.audit.emit(
            "forward",
            api=f"{handler.name}.replay",
            client_id=ctx.client_id,
            principal=str(ctx.principal.without_token_flag()),
            client_host=ctx.client_host,
            controller_id=None,
            outcome="success" if error == 0 else "failure",
            error_code=error,
            attempts=1,
            latency_ms=0,
        )
        return _answer(ctx, response)


def _answer(ctx: RequestContext, response: dict) -> tuple[bytes, int]:
    return encode_response(ctx.header, response), int(response.get("ErrorCode", 0) or 0)
