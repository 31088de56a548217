"""KIP-590 forwarding, on the broker the client talks to: writes go to the controller.

Owns :class:`EnvelopeForwarder`. After local authentication and session checks (the
handler's ``precheck``), the original request (header and body bytes) goes to the
controller in an ``EnvelopeRequest`` v0 with the serialized principal, the client address
and two tagged fields: ``RequestKey`` (one per client request, the same on every attempt)
and ``FirstAttempt``. The controller applies it exactly once (its
:class:`~tokensvc.broker.writes.ledger.WriteLedger`) and answers with the inner response and
the ``CommittedVersions`` of the change notifications it committed.

Read-your-writes: before answering the client, the forwarder puts the token states the
controller reports (``CommittedTokens``) into this broker's cache at once, and waits --
on futures the change followers set, no sleep and no polling -- until this broker has
applied the other versions (ACLs, credentials, or a token state refused because a full
load is running); from then on every request to this broker sees the write. If this broker
cannot catch up before ``request.timeout.ms`` (its ZooKeeper connection is down), the
client gets REQUEST_TIMED_OUT rather than a success this broker could not yet honour.

Failover: on NOT_CONTROLLER, a lost connection or no controller at all, the forwarder
looks the controller up again and retries with backoff (50 ms doubling to 1 s) until
``request.timeout.ms``; then the client gets REQUEST_TIMED_OUT (retriable). Every retry
carries the same request key, so a retry after a lost answer is replayed, never applied
twice. If this broker wins the election meanwhile it applies the request itself, with
the same key. Any other envelope-level error means a misconfigured cluster (e.g. the
inter-broker user lacks CLUSTER_ACTION): as Kafka does, the client gets
UNKNOWN_SERVER_ERROR and the broker logs the real error.

Must not: block the event loop, know the broker object, or log a request body (it may
carry an HMAC or a SCRAM credential).
"""

from __future__ import annotations

import asyncio
import ipaddress
import itertools
import logging
import ssl
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any

from tokensvc.broker.context import WriteTicket, client_request_key, committed_token_of
from tokensvc.broker.loop.offloop import LARGE_ITEMS
from tokensvc.broker.network.decoding import decode_client_request
from tokensvc.broker.writes.channel import BrokerChannel
from tokensvc.broker.writes.path import TOKENS_ROOT
from tokensvc.core.errors import Errors
from tokensvc.protocol import decode_response, encode_response, response_error_code
from tokensvc.protocol.api import ApiKey
from tokensvc.protocol.principal_serde import serialize_principal

if TYPE_CHECKING:
    from tokensvc.broker.context import RequestContext
    from tokensvc.broker.handlers.base import ApiHandler
    from tokensvc.core.config import BrokerConfig

log = logging.getLogger("tokensvc.broker.forwarding")

ENVELOPE = int(ApiKey.ENVELOPE)
_BACKOFF_START_S = 0.05
_BACKOFF_MAX_S = 1.0
_CONNECT_TIMEOUT_S = 5.0
# Channels to one controller; each keeps up to channel.MAX_IN_FLIGHT envelopes in flight.
CHANNELS_PER_CONTROLLER = 2

Version = tuple[str, int]
# (security protocol, host, port) of a broker's listener, or None.
EndpointLookup = Callable[[int, str], "tuple[str, str, int] | None"]


class EnvelopeForwarder:
    """Forwards writes to the controller over a few channels per controller broker.

    Each channel keeps several envelopes in flight (answers matched by correlation id,
    in the order the controller completes them), and the controller runs the envelopes
    of one inter-broker connection concurrently, so concurrent forwarded writes reach
    its group commit together; requests are spread round-robin over
    ``CHANNELS_PER_CONTROLLER`` channels (a lost connection fails only its share).

    Dependencies are functions, so tests drive it with fakes and a fake clock:
    ``controller_id()``, ``is_controller()``, ``endpoint(broker_id, listener)``,
    ``apply_locally(ctx, body)`` (the local ledger, when this broker is the controller),
    ``reach(versions, timeout_s)`` (wait until this broker applied versions),
    ``audit(event_type, **fields)``, ``count(client_id)`` (metrics).
    """

    def __init__(
        self,
        config: BrokerConfig,
        *,
        controller_id: Callable[[], int | None],
        is_controller: Callable[[], bool],
        endpoint: EndpointLookup,
        apply_locally: Callable[[RequestContext, dict], Awaitable[tuple[bytes, int]]],
        reach: Callable[[Iterable[Version], float], Awaitable[bool]],
        audit: Callable[..., Any],
        apply_token: Callable[[str, Any, int], bool] | None = None,
        count: Callable[[str], None],
        channel_factory: Callable[..., Any] = BrokerChannel,
        monotonic: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
    ) -> None:
        self.config = config
        self.broker_id = config.broker_id
        self._controller_id = controller_id
        self._is_controller = is_controller
        self._endpoint = endpoint
        self._apply_locally = apply_locally
        self._reach = reach
        self._apply_token = apply_token
        self._audit_emit = audit
        self._count = count
        self._channel_factory = channel_factory
        self._monotonic = monotonic
        self._sleep = sleep
        self._channels: dict[tuple[int, int], Any] = {}
        self._next_slot = itertools.count()
        self._lock = asyncio.Lock()
        self.waited_for_cache = 0

    async def close(self) -> None:
        for channel in list(self._channels.values()):
            await channel.close()
        self._channels.clear()

    async def _channel(self, controller: int, slot: int, timeout: float) -> Any:
        async with self._lock:
            channel = self._channels.get((controller, slot))
            if channel is not None and not channel.closed:
                return channel
            name = self.config.inter_broker_listener_name
            found = self._endpoint(controller, name)
            if found is None:
                raise ConnectionError(f"no {name} endpoint registered for broker {controller}")
            protocol, host, port = found
            ctx = None
            if protocol in ("SSL", "SASL_SSL") and self.config.ssl_truststore_location:
                ctx = ssl.create_default_context(cafile=self.config.ssl_truststore_location)
            channel = self._channel_factory(
                host,
                port,
                security_protocol=protocol,
                mechanism=self.config.inter_broker_sasl_mechanism,
                username=self.config.inter_broker_sasl_username or "",
                password=self.config.inter_broker_sasl_password or "",
                client_id=f"broker-{self.broker_id}",
                ssl_context=ctx,
            )
            try:
                await channel.connect(timeout)
            except BaseException:
                await channel.close()
                raise
            self._channels[(controller, slot)] = channel
            return channel

    async def _drop(self, controller: int, slot: int, channel: Any) -> None:
        """Close ``channel`` and forget it, unless another request already replaced it."""
        if channel is None:
            return
        if self._channels.get((controller, slot)) is channel:
            del self._channels[(controller, slot)]
        await channel.close()

    async def forward(self, ctx: RequestContext, handler: ApiHandler) -> tuple[bytes, int]:
        """Send ``ctx``'s request to the controller until it answers or the request times
        out, then wait until this broker serves the write; returns the encoded response
        for the client and its top-level error code."""
        started = self._monotonic()
        deadline = started + self.config.request_timeout_ms / 1000.0
        # The client's own key (tokensvc's clients: the same on its retries), else one
        # per client request. A client's key may have been sent before: never "first".
        own = client_request_key(ctx)
        key = own or uuid.uuid4().hex
        fresh = own is None
        self._count(ctx.client_id)
        body = {
            "RequestData": ctx.payload,
            "RequestPrincipal": serialize_principal(ctx.principal),
            "ClientHostAddress": _address_bytes(ctx.client_host),
            "RequestKey": key,
            "FirstAttempt": fresh,
        }
        attempts = 0
        backoff = _BACKOFF_START_S
        last_error = Errors.REQUEST_TIMED_OUT
        while (remaining := deadline - self._monotonic()) > 0:
            controller = self._controller_id()
            if controller == self.broker_id and self._is_controller():
                # This broker won the election meanwhile: apply the request here, with
                # the same request key as the attempts sent to the old controller.
                attempts += 1
                ctx.forwarded = True
                ctx.write = WriteTicket(key, first_attempt=fresh and attempts == 1)
                response, error = await self._apply_locally(
                    ctx, decode_client_request(ctx.payload)[1]
                )
                if error != Errors.NOT_CONTROLLER:
                    self._audit(ctx, handler, controller, error, attempts, started)
                    return response, error
                last_error = Errors.NOT_CONTROLLER  # lost it again at once: look again
            elif controller is not None and controller != self.broker_id:
                attempts += 1
                body["FirstAttempt"] = fresh and attempts == 1
                channel = None
                received = 0
                slot = next(self._next_slot) % CHANNELS_PER_CONTROLLER
                try:
                    channel = await self._channel(
                        controller, slot, min(remaining, _CONNECT_TIMEOUT_S)
                    )
                    received = channel.received
                    response = await channel.request(
                        ENVELOPE, 0, body, client_id=f"broker-{self.broker_id}", timeout=remaining
                    )
                except TimeoutError as exc:
                    # Other envelopes share the channel: close it only if the controller
                    # answered nothing at all meanwhile (a dead connection, not a slow write).
                    log.info("forwarding to controller %s timed out (%s)", controller, exc)
                    if channel is None or channel.received == received:
                        await self._drop(controller, slot, channel)
                    last_error = Errors.REQUEST_TIMED_OUT
                except OSError as exc:  # refused, ChannelClosed, ChannelAuthError
                    log.info("forwarding to controller %s failed (%s); retrying", controller, exc)
                    await self._drop(controller, slot, channel)
                    last_error = Errors.REQUEST_TIMED_OUT
                else:
                    error = _error_of(response.get("ErrorCode", 0))
                    if error == Errors.NONE and response.get("ResponseData") is not None:
                        return await self._answer(ctx, handler, controller, response, attempts,
                                                  started, deadline)
                    if error != Errors.NOT_CONTROLLER:
                        log.error(
                            "controller %s refused an envelope with %s; check the inter-broker "
                            "user's CLUSTER_ACTION permission and listener", controller, error.name,
                        )
                        self._audit(ctx, handler, controller, error, attempts, started)
                        failed = _failed(ctx, handler, Errors.UNKNOWN_SERVER_ERROR)
                        return encode_response(ctx.header, failed), int(Errors.UNKNOWN_SERVER_ERROR)
                    last_error = error
            # No controller known, it refused (NOT_CONTROLLER), or it is unreachable.
            await self._sleep(min(backoff, max(0.0, deadline - self._monotonic())))
            backoff = min(backoff * 2, _BACKOFF_MAX_S)
        log.warning(
            "%s from %s timed out after %d attempts (last: %s)",
            handler.name, ctx.client_host, attempts, last_error.name,
        )
        self._audit(ctx, handler, self._controller_id(), Errors.REQUEST_TIMED_OUT, attempts,
                    started)
        failed = _failed(ctx, handler, Errors.REQUEST_TIMED_OUT)
        return encode_response(ctx.header, failed), int(Errors.REQUEST_TIMED_OUT)

    async def _answer(
        self,
        ctx: RequestContext,
        handler: ApiHandler,
        controller: int,
        response: dict,
        attempts: int,
        started: float,
        deadline: float,
    ) -> tuple[bytes, int]:
        """The controller answered: wait until this broker serves what it committed."""
        data = bytes(response["ResponseData"])
        inner_error = _top_level_error(ctx, data)
        versions = [(v["Root"], int(v["Sequence"])) for v in response.get("CommittedVersions") or []]
        committed = response.get("CommittedTokens") or []
        if len(committed) > LARGE_ITEMS:
            # A revocation's ten thousand states: in a thread, so the loop keeps serving
            # (the cache and the committed order are thread-safe; the answer waits).
            applied = await asyncio.to_thread(self._apply_committed, committed)
        else:
            applied = self._apply_committed(committed)
        versions = [v for v in versions if v not in applied]
        if versions:
            self.waited_for_cache += 1
            remaining = max(0.0, deadline - self._monotonic())
            if not await self._reach(versions, remaining):
                log.warning("%s committed by controller %s, but this broker did not catch up "
                            "before the request timeout", handler.name, controller)
                self._audit(ctx, handler, controller, Errors.REQUEST_TIMED_OUT, attempts, started)
                failed = _failed(ctx, handler, Errors.REQUEST_TIMED_OUT)
                return encode_response(ctx.header, failed), int(Errors.REQUEST_TIMED_OUT)
        self._audit(ctx, handler, controller, inner_error, attempts, started)
        return data, inner_error

    def _apply_committed(self, tokens: list[dict]) -> set[Version]:
        """Put the token states the controller committed into this broker's cache now;
        the versions so served need no wait for the follower."""
        applied: set[Version] = set()
        if self._apply_token is None:
            return applied
        for fields in tokens:
            try:
                token = committed_token_of(fields)
            except (KeyError, TypeError, ValueError):
                log.warning("controller sent a malformed committed token; waiting for the "
                            "follower instead")
                continue
            if self._apply_token(token.token_id, token.info, token.sequence):
                applied.add((TOKENS_ROOT, token.sequence))
        return applied

    def _audit(
        self,
        ctx: RequestContext,
        handler: ApiHandler,
        controller: int | None,
        error: int,
        attempts: int,
        started: float,
    ) -> None:
        self._audit_emit(
            "forward",
            api=handler.name,
            client_id=ctx.client_id,
            principal=str(ctx.principal.without_token_flag()),
            client_host=ctx.client_host,
            controller_id=controller,
            outcome="success" if int(error) == 0 else "failure",
            error_code=int(error),
            attempts=attempts,
            latency_ms=int((self._monotonic() - started) * 1000),
        )


def _error_of(code: int) -> Errors:
    try:
        return Errors(code)
    except ValueError:
        return Errors.UNKNOWN_SERVER_ERROR


def _address_bytes(host: str) -> bytes:
    try:
        return ipaddress.ip_address(host).packed
    except ValueError:
        return b""


def _top_level_error(ctx: RequestContext, response_payload: bytes) -> int:
    try:
        code = response_error_code(ctx.api_key, ctx.api_version, response_payload)
        if code is not None:
            return code
        _, body = decode_response(ctx.api_key, ctx.api_version, response_payload)
    except Exception:  # noqa: BLE001 - the client gets the bytes regardless
        return int(Errors.UNKNOWN_SERVER_ERROR)
    return int(body.get("ErrorCode", 0) or 0)


def _failed(ctx: RequestContext, handler: ApiHandler, error: Errors) -> dict:
    """The client's answer when forwarding failed as a whole: with per-item results for
    the APIs that have no top-level error code (the request was decoded before)."""
    try:
        body = decode_client_request(ctx.payload)[1]
    except Exception:  # noqa: BLE001 - it decoded once; the plain error body then
        body = None
    return handler.error_for(ctx.api_version, error, body)
