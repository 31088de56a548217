"""KIP-590 forwarding: a non-controller sends writes to the controller in an envelope.

Owns the path of a write that arrives on a broker that is not the controller:
after local authentication and session checks (``precheck``), the original
request (header and body bytes) goes to the controller in an
``EnvelopeRequest`` v0 with the serialized principal and the client address.
The controller's inner response is returned to the client unchanged.

Failover: on NOT_CONTROLLER, a lost connection or no controller at all, the
forwarder looks the controller up again (the election follows ``/controller``
in ZooKeeper) and retries with backoff until ``request.timeout.ms``; then the
client gets REQUEST_TIMED_OUT. Every attempt of one client request carries the
same request key (in the envelope's client id, ``<broker client id>|rk=<key>``)
and the controller records the key in the same ZooKeeper transaction as a
token create, so a retried create returns the token created by the first
attempt instead of issuing a second one.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import time
import uuid
from typing import TYPE_CHECKING

from tokensvc.broker.channel import BrokerChannel, ChannelAuthError, ChannelClosed
from tokensvc.core.errors import Errors
from tokensvc.protocol import encode_response
from tokensvc.protocol.principal_serde import serialize_principal

if TYPE_CHECKING:
    from tokensvc.broker.broker import Broker
    from tokensvc.broker.context import RequestContext
    from tokensvc.broker.handlers import ApiHandler

log = logging.getLogger("tokensvc.broker.forwarding")

ENVELOPE = 58
REQUEST_KEY_MARK = "|rk="


def split_request_key(client_id: str | None) -> tuple[str | None, str | None]:
    """Split an envelope client id into (broker client id, request key)."""
    if not client_id or REQUEST_KEY_MARK not in client_id:
        return client_id, None
    head, key = client_id.split(REQUEST_KEY_MARK, 1)
    return head, key or None


class EnvelopeForwarder:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.config = broker.config
        self._channels: dict[int, BrokerChannel] = {}
        self._lock = asyncio.Lock()

    async def close(self) -> None:
        for channel in list(self._channels.values()):
            await channel.close()
        self._channels.clear()

    async def _channel(self, controller: int, timeout: float) -> BrokerChannel:
        async with self._lock:
            channel = self._channels.get(controller)
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
            await channel.connect(timeout)
            self._channels[controller] = channel
            return channel

    async def _drop(self, controller: int) -> None:
        channel = self._channels.pop(controller, None)
        if channel is not None:
            await channel.close()

    async def forward(self, ctx: RequestContext, handler: ApiHandler) -> tuple[bytes, int]:
        broker = self.broker
        started = time.monotonic()
        deadline = started + self.config.request_timeout_ms / 1000.0
        key = uuid.uuid4().hex
        client_id = f"broker-{broker.broker_id}{REQUEST_KEY_MARK}{key}"
        broker.metrics.forwarded.labels(ctx.client_id).inc()
        body = {
            "RequestData": ctx.payload,
            "RequestPrincipal": serialize_principal(ctx.principal),
            "ClientHostAddress": _address_bytes(ctx.client_host),
        }
        attempts = 0
        backoff = 0.05
        last_error = Errors.REQUEST_TIMED_OUT
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            attempts += 1
            controller = broker.controller_id()
            if controller == broker.broker_id and broker.is_controller:
                # We became the controller meanwhile: handle it here.
                ctx.forwarded = True
                ctx.request_key = key
                response, error = await broker.dispatch(ctx, _decoded_body(ctx))
                self._audit(ctx, handler, controller, "success", error, attempts, started)
                return response, error
            if controller is None:
                await asyncio.sleep(min(backoff, remaining))
                backoff = min(backoff * 2, 1.0)
                continue
            try:
                channel = await self._channel(controller, min(remaining, 5.0))
                response = await channel.request(
                    ENVELOPE, 0, body, client_id=client_id, timeout=remaining
                )
            except (ChannelClosed, ChannelAuthError, OSError, asyncio.TimeoutError) as exc:
                log.info("forwarding to controller %s failed (%s); retrying", controller, exc)
                await self._drop(controller)
                last_error = Errors.REQUEST_TIMED_OUT
                await asyncio.sleep(min(backoff, max(0.0, deadline - time.monotonic())))
                backoff = min(backoff * 2, 1.0)
                continue
            error = Errors(response.get("ErrorCode", 0))
            if error == Errors.NOT_CONTROLLER:
                last_error = error
                await asyncio.sleep(min(backoff, max(0.0, deadline - time.monotonic())))
                backoff = min(backoff * 2, 1.0)
                continue
            if error != Errors.NONE or response.get("ResponseData") is None:
                self._audit(ctx, handler, controller, "failure", error, attempts, started)
                log.warning("controller %s refused an envelope: %s", controller, error.name)
                failed = handler.error_body(ctx.api_version, Errors.UNKNOWN_SERVER_ERROR
                                            if error == Errors.NONE else error)
                return encode_response(ctx.header, failed), int(error)
            data = bytes(response["ResponseData"])
            inner_error = _top_level_error(ctx, data)
            self._audit(ctx, handler, controller, "success", inner_error, attempts, started)
            return data, inner_error
        self._audit(ctx, handler, broker.controller_id(), "failure", last_error, attempts, started)
        failed = handler.error_body(ctx.api_version, Errors.REQUEST_TIMED_OUT)
        return encode_response(ctx.header, failed), int(Errors.REQUEST_TIMED_OUT)

    def _audit(self, ctx, handler, controller, outcome, error, attempts, started) -> None:
        self.broker.audit.emit(
            "forward",
            api=handler.name,
            client_id=ctx.client_id,
            principal=str(ctx.principal.without_token_flag()),
            client_host=ctx.client_host,
            controller_id=controller,
            outcome=outcome,
            error_code=int(error),
            attempts=attempts,
            latency_ms=int((time.monotonic() - started) * 1000),
        )


def _address_bytes(host: str) -> bytes:
    try:
        return ipaddress.ip_address(host).packed
    except ValueError:
        return b""


def _decoded_body(ctx: RequestContext) -> dict:
    from tokensvc.protocol import decode_request

    return decode_request(ctx.payload)[1]


def _top_level_error(ctx: RequestContext, response_payload: bytes) -> int:
    from tokensvc.protocol import decode_response

    try:
        _, body = decode_response(ctx.api_key, ctx.api_version, response_payload)
    except Exception:  # noqa: BLE001 - the client gets the bytes regardless
        return int(Errors.UNKNOWN_SERVER_ERROR)
    return int(body.get("ErrorCode", 0) or 0)
