"""KIP-590 forwarding: a non-controller sends writes to the controller in an envelope.

Owns both ends of a forwarded write:

* :class:`EnvelopeForwarder`, on the broker the client talks to. After local
  authentication and session checks (the handler's ``precheck``), the original
  request (header and body bytes) goes to the controller in an ``EnvelopeRequest``
  v0 with the serialized principal and the client address; the controller's inner
  response goes back to the client unchanged.
* :class:`CreateLedger`, on the controller: the exactly-once create.

Failover: on NOT_CONTROLLER, a lost connection or no controller at all, the
forwarder looks the controller up again (the election follows ``/controller`` in
ZooKeeper) and retries with backoff (50 ms doubling to 1 s) until
``request.timeout.ms``; then the client gets REQUEST_TIMED_OUT (retriable). If this
broker wins the election meanwhile, it applies the request itself. Any other
envelope-level error means a misconfigured cluster (e.g. the inter-broker user
lacks CLUSTER_ACTION): as Kafka does, the client gets UNKNOWN_SERVER_ERROR and the
broker logs the real error.

Exactly-once create: every attempt of one client request carries the same request
key (in the envelope's client id, ``broker-<id>|rk=<key>``, with ``|first`` appended
on the first attempt). The controller's :class:`CreateLedger` lets one attempt per
key run at a time and, before creating on any attempt but the first, looks the key
up in ZooKeeper (:meth:`zk.token_store.TokenStore.request_token_id`):
a key already recorded is answered with the token its first attempt created (from
the cache, else from ZooKeeper). A create records its key in the same ZooKeeper
transaction as the token, so an attempt whose answer was lost (the controller died
after the commit) is never applied twice. Renew, expire, ACL and credential writes
are not deduplicated; a retried one is applied again (renew and ACL/credential
upserts converge; a retried expire-now may answer DELEGATION_TOKEN_NOT_FOUND).

Must not: block the event loop (ZooKeeper reads run in worker threads), or log a
request body (it may carry an HMAC or a SCRAM credential).
"""

from __future__ import annotations

import asyncio
import ipaddress
import itertools
import logging
import time
import uuid
from typing import TYPE_CHECKING

from tokensvc.broker.channel import BrokerChannel, ChannelClosed
from tokensvc.broker.decoding import decode_client_request
from tokensvc.core.errors import Errors, KafkaError
from tokensvc.protocol import decode_response, encode_response
from tokensvc.protocol.principal_serde import serialize_principal

if TYPE_CHECKING:
    from tokensvc.broker.broker import Broker
    from tokensvc.broker.context import RequestContext
    from tokensvc.broker.handlers import ApiHandler

log = logging.getLogger("tokensvc.broker.forwarding")

ENVELOPE = 58
CREATE_DELEGATION_TOKEN = 38
REQUEST_KEY_MARK = "|rk="
FIRST_ATTEMPT_MARK = "|first"
_BACKOFF_START_S = 0.05
_BACKOFF_MAX_S = 1.0
_CONNECT_TIMEOUT_S = 5.0
# Forwarded writes in flight to the controller at once (one per channel).
CHANNELS_PER_CONTROLLER = 8


def split_request_key(client_id: str | None) -> tuple[str | None, str | None]:
    """Split an envelope client id into (broker client id, request key); the
    first-attempt mark is not part of the key."""
    if not client_id or REQUEST_KEY_MARK not in client_id:
        return client_id, None
    head, key = client_id.split(REQUEST_KEY_MARK, 1)
    key = key.removesuffix(FIRST_ATTEMPT_MARK)
    return head, key or None


def is_first_attempt(client_id: str | None) -> bool:
    """True when the envelope says no earlier attempt with its request key was sent."""
    return bool(client_id) and REQUEST_KEY_MARK in client_id and client_id.endswith(
        FIRST_ATTEMPT_MARK)


def envelope_client_id(broker_id: int, request_key: str, *, first: bool = False) -> str:
    """The client id of an envelope attempt of one client request: the same key on every
    attempt, marked on the first (whose key nothing can have recorded yet)."""
    mark = FIRST_ATTEMPT_MARK if first else ""
    return f"broker-{broker_id}{REQUEST_KEY_MARK}{request_key}{mark}"


class EnvelopeForwarder:
    """Forwards writes to the controller over a few channels per controller broker.

    The controller answers the requests of one connection strictly in order, so a
    single channel would let only one forwarded write reach ZooKeeper at a time;
    requests are spread round-robin over ``CHANNELS_PER_CONTROLLER`` channels.
    """

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.config = broker.config
        self.ledger = CreateLedger(broker)
        self._channels: dict[tuple[int, int], BrokerChannel] = {}
        self._next_slot = itertools.count()
        self._lock = asyncio.Lock()

    async def close(self) -> None:
        for channel in list(self._channels.values()):
            await channel.close()
        self._channels.clear()

    async def _channel(self, controller: int, slot: int, timeout: float) -> BrokerChannel:
        async with self._lock:
            channel = self._channels.get((controller, slot))
            if channel is not None and not channel.closed:
                return channel
            name = self.config.inter_broker_listener_name
            info = self.broker.registry.brokers().get(controller)
            if not info or name not in info.get("endpoints", {}):
                raise ChannelClosed(f"no {name} endpoint registered for broker {controller}")
            protocol, host, port = info["endpoints"][name]
            ctx = None
            if protocol in ("SSL", "SASL_SSL") and self.config.ssl_truststore_location:
                import ssl

                ctx = ssl.create_default_context(cafile=self.config.ssl_truststore_location)
            channel = BrokerChannel(
                host,
                port,
                security_protocol=protocol,
                mechanism=self.config.inter_broker_sasl_mechanism,
                username=self.config.inter_broker_sasl_username or "",
                password=self.config.inter_broker_sasl_password or "",
                client_id=f"broker-{self.broker.broker_id}",
                ssl_context=ctx,
            )
            try:
                await channel.connect(timeout)
            except BaseException:
                await channel.close()
                raise
            self._channels[(controller, slot)] = channel
            return channel

    async def _drop(self, controller: int, slot: int, channel: BrokerChannel | None) -> None:
        """Close ``channel`` and forget it, unless another request already replaced it."""
        if channel is None:
            return
        if self._channels.get((controller, slot)) is channel:
            del self._channels[(controller, slot)]
        await channel.close()

    async def forward(self, ctx: RequestContext, handler: ApiHandler) -> tuple[bytes, int]:
        """Send ``ctx``'s request to the controller until it answers or the request times
        out; returns the encoded response for the client and its top-level error code."""
        broker = self.broker
        started = time.monotonic()
        deadline = started + self.config.request_timeout_ms / 1000.0
        key = uuid.uuid4().hex
        broker.metrics.forwarded.labels(ctx.client_id).inc()
        body = {
            "RequestData": ctx.payload,
            "RequestPrincipal": serialize_principal(ctx.principal),
            "ClientHostAddress": _address_bytes(ctx.client_host),
        }
        attempts = 0
        backoff = _BACKOFF_START_S
        last_error = Errors.REQUEST_TIMED_OUT
        while (remaining := deadline - time.monotonic()) > 0:
            controller = broker.controller_id()
            if controller == broker.broker_id and broker.is_controller:
                # This broker won the election meanwhile: apply the request here, with
                # the same request key as the attempts sent to the old controller.
                attempts += 1
                ctx.forwarded = True
                ctx.request_key = key
                ctx.first_attempt = attempts == 1
                response, error = await self.ledger.apply(ctx, decode_client_request(ctx.payload)[1])
                if error != Errors.NOT_CONTROLLER:
                    self._audit(ctx, handler, controller, error, attempts, started)
                    return response, error
                last_error = Errors.NOT_CONTROLLER  # lost it again at once: look again
            elif controller is not None and controller != broker.broker_id:
                attempts += 1
                channel = None
                slot = next(self._next_slot) % CHANNELS_PER_CONTROLLER
                try:
                    channel = await self._channel(
                        controller, slot, min(remaining, _CONNECT_TIMEOUT_S)
                    )
                    client_id = envelope_client_id(broker.broker_id, key, first=attempts == 1)
                    response = await channel.request(
                        ENVELOPE, 0, body, client_id=client_id, timeout=remaining
                    )
                except OSError as exc:  # refused, ChannelClosed, ChannelAuthError, TimeoutError
                    log.info("forwarding to controller %s failed (%s); retrying", controller, exc)
                    await self._drop(controller, slot, channel)
                    last_error = Errors.REQUEST_TIMED_OUT
                else:
                    error = _error_of(response.get("ErrorCode", 0))
                    if error == Errors.NONE and response.get("ResponseData") is not None:
                        data = bytes(response["ResponseData"])
                        inner_error = _top_level_error(ctx, data)
                        self._audit(ctx, handler, controller, inner_error, attempts, started)
                        return data, inner_error
                    if error != Errors.NOT_CONTROLLER:
                        log.error(
                            "controller %s refused an envelope with %s; check the inter-broker "
                            "user's CLUSTER_ACTION permission and listener", controller, error.name,
                        )
                        self._audit(ctx, handler, controller, error, attempts, started)
                        failed = handler.error_body(ctx.api_version, Errors.UNKNOWN_SERVER_ERROR)
                        return encode_response(ctx.header, failed), int(Errors.UNKNOWN_SERVER_ERROR)
                    last_error = error
            # No controller known, it refused (NOT_CONTROLLER), or it is unreachable.
            await asyncio.sleep(min(backoff, max(0.0, deadline - time.monotonic())))
            backoff = min(backoff * 2, _BACKOFF_MAX_S)
        log.warning(
            "%s from %s timed out after %d attempts (last: %s)",
            handler.name, ctx.client_host, attempts, last_error.name,
        )
        self._audit(ctx, handler, broker.controller_id(), Errors.REQUEST_TIMED_OUT, attempts, started)
        failed = handler.error_body(ctx.api_version, Errors.REQUEST_TIMED_OUT)
        return encode_response(ctx.header, failed), int(Errors.REQUEST_TIMED_OUT)

    def _audit(
        self,
        ctx: RequestContext,
        handler: ApiHandler,
        controller: int | None,
        error: int,
        attempts: int,
        started: float,
    ) -> None:
        self.broker.audit.emit(
            "forward",
            api=handler.name,
            client_id=ctx.client_id,
            principal=str(ctx.principal.without_token_flag()),
            client_host=ctx.client_host,
            controller_id=controller,
            outcome="success" if int(error) == 0 else "failure",
            error_code=int(error),
            attempts=attempts,
            latency_ms=int((time.monotonic() - started) * 1000),
        )


class CreateLedger:
    """The controller's side of the exactly-once create (see the module docstring).

    ``apply(ctx, body)`` dispatches a forwarded request; for a CreateDelegationToken
    with a request key it first serialises attempts with that key and answers a key
    already recorded in ZooKeeper with the token recorded for it. ``replayed`` counts
    the creates answered that way.
    """

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.replayed = 0
        # request key -> (lock, attempts holding or waiting for it)
        self._inflight: dict[str, tuple[asyncio.Lock, int]] = {}

    async def apply(self, ctx: RequestContext, body: dict) -> tuple[bytes, int]:
        key = ctx.request_key
        if key is None or ctx.api_key != CREATE_DELEGATION_TOKEN:
            return await self.broker.dispatch(ctx, body)
        lock, users = self._inflight.get(key, (asyncio.Lock(), 0))
        self._inflight[key] = (lock, users + 1)
        try:
            async with lock:
                # A first attempt cannot find its key recorded: skip the ZooKeeper read
                # (if it was recorded after all, the create's transaction fails on the
                # key's znode and the answer below is the replay).
                if not ctx.first_attempt:
                    replay = await self._replay(ctx, key)
                    if replay is not None:
                        return replay
                response, error = await self.broker.dispatch(ctx, body)
                if error == Errors.UNKNOWN_SERVER_ERROR:
                    # The store refuses a create whose key got recorded meanwhile
                    # (zk.token_store.RequestKeyExistsError): answer with that token.
                    replay = await self._replay(ctx, key)
                    if replay is not None:
                        return replay
                return response, error
        finally:
            lock, users = self._inflight[key]
            if users == 1:
                del self._inflight[key]
            else:
                self._inflight[key] = (lock, users - 1)

    async def _replay(self, ctx: RequestContext, key: str) -> tuple[bytes, int] | None:
        """The create response for a key already recorded, or None if it is not."""
        from tokensvc.broker.handlers.tokens import create_error, create_response

        broker = self.broker
        try:
            token_id = await asyncio.to_thread(broker.token_store.request_token_id, key)
            if token_id is None:
                return None
            token = broker.cache.by_id(token_id)
            if token is None:
                info = await asyncio.to_thread(broker.token_store.get, token_id)
                token = broker.cache.upsert(info) if info is not None else None
        except KafkaError as exc:  # ZooKeeper unavailable: retriable, nothing was written
            return self._answer(ctx, create_error(ctx.api_version, exc.error))
        requester = ctx.principal.without_token_flag()
        if token is None:
            # Created by the first attempt, then expired and swept before this retry.
            log.info("request key of %s names token %s, which is gone", requester, token_id)
            return self._answer(ctx, create_error(ctx.api_version, Errors.DELEGATION_TOKEN_NOT_FOUND))
        if token.info.token_requester != requester:
            log.warning("request key reused by %s for a token of another requester", requester)
            return self._answer(ctx, create_error(ctx.api_version, Errors.INVALID_REQUEST))
        self.replayed += 1
        log.info("create retried by %s: answering with token %s", requester, token_id)
        return self._answer(ctx, create_response(token))

    @staticmethod
    def _answer(ctx: RequestContext, body: dict) -> tuple[bytes, int]:
        return encode_response(ctx.header, body), int(body["ErrorCode"])


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
        _, body = decode_response(ctx.api_key, ctx.api_version, response_payload)
    except Exception:  # noqa: BLE001 - the client gets the bytes regardless
        return int(Errors.UNKNOWN_SERVER_ERROR)
    return int(body.get("ErrorCode", 0) or 0)
