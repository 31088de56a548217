"""One client connection on asyncio's Protocol API: framing, order, memory and time limits.

Owns, per connection: the order in which requests are answered, the
back-pressure that bounds what it holds, its idle and stalled-frame timeouts, and
how it ends. It reads into its
:class:`~tokensvc.broker.network.receive.ReceiveBuffer` and takes memory for large
frames from the broker's
:class:`~tokensvc.broker.network.memory.RequestMemoryPool`
(``queued.max.request.bytes``).

- **Framing.** The socket reads straight into a fixed 4 KB buffer per
  connection (``BufferedProtocol``: no bytes object per read) and a frame's
  payload is decoded in place from a ``memoryview``: no copy per frame. The
  buffer is reused; bytes move only when a frame straddles its end. A frame
  larger than the buffer first gets memory from the pool (its size prefix is
  checked against the limit before anything is allocated); while the pool
  cannot give it, the connection is not read (TCP pushes back on the client)
  and nothing is refused.
- **Order.** One request at a time per connection: the next frame is not
  decoded before the previous response is written, so responses go out in
  request order. Frames that arrive meanwhile wait in the buffer; when it is
  full, reading pauses. One exception, between brokers: on the inter-broker
  listener up to ``ENVELOPES_IN_FLIGHT`` EnvelopeRequests run at once and each
  is answered when it is done -- possibly out of order; the forwarding broker
  matches answers by correlation id -- so the controller can commit them
  together (group commit). Any other request waits until the envelopes in
  flight are answered, and runs alone.
- **Output.** The transport's write buffer is bounded
  (``OUTPUT_HIGH_WATER``); above it the connection stops decoding requests
  and reading until the client has read its responses.
- **Routing.** Every decoded request goes where its session's table says
  (:meth:`~tokensvc.broker.sessions.session.Session.route`): refused or expired
  (the connection closes), ApiVersions and SaslHandshake answered from
  :class:`~tokensvc.broker.network.precomputed.PrecomputedResponses`,
  SaslAuthenticate (and raw SASL frames, when the session says frames are raw) run
  on the spot, without a task: a task is made only if that coroutine has to wait
  (the failed-login delay; :mod:`tokensvc.broker.network.trampoline`). Other APIs
  run as one task each; a body longer than ``LARGE_FRAME_BYTES`` (64 KiB) is decoded in
  that task, in a worker thread (:mod:`tokensvc.broker.loop.offloop`). No lock anywhere.
- **Time.** One timer per connection, re-armed lazily: a connection is
  closed when idle for ``connections.max.idle.ms``, or when a frame begun
  has not arrived completely within ``request.timeout.ms`` (capped by the
  idle time). A connection waiting for a request to finish or for pool
  memory is neither; one whose client does not read its responses counts
  as idle from its last read or write.

Must not: decide anything about Kafka requests -- which API may be sent in
which session state, and KIP-368's expiry, are the session's answer; crash the broker
or stall other connections on client input (every error closes only its
connection); hold a frame's bytes after its request is decoded, except the
copy ``RequestContext.payload`` keeps for the APIs that may be forwarded.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from tokensvc.broker.context import RequestContext
from tokensvc.broker.gates.clockskew import ClockSkewed
from tokensvc.broker.loop.offloop import LARGE_FRAME_BYTES
from tokensvc.broker.network.decoding import decode_client_body
from tokensvc.broker.network.memory import RequestMemoryPool
from tokensvc.broker.network.precomputed import PrecomputedResponses
from tokensvc.broker.network.receive import RECEIVE_BUFFER_BYTES, ReceiveBuffer
from tokensvc.broker.network.tls import cert_principal
from tokensvc.broker.network.trampoline import continue_in_task
from tokensvc.broker.sessions.session import IllegalSaslState, Route, Session, State
from tokensvc.core.config import BrokerConfig, Listener
from tokensvc.core.errors import Errors, KafkaError
from tokensvc.core.principal import ANONYMOUS
from tokensvc.protocol import (
    FrameTooLargeError,
    RequestHeader,
    UnsupportedVersionError,
    decode_request_header,
)
from tokensvc.protocol.api import ApiKey
from tokensvc.protocol.primitives import INT32
from tokensvc.scram.server import ScramAuthenticationError

log = logging.getLogger("tokensvc.broker.server")

OUTPUT_HIGH_WATER = 256 * 1024
OUTPUT_LOW_WATER = 64 * 1024
CLOSE_FLUSH_S = 1.0
CLOSE_LINGER_S = 0.5
# EnvelopeRequests one inter-broker connection may have in flight (see "Order").
ENVELOPES_IN_FLIGHT = 64

Dispatch = Callable[[RequestContext, dict], Coroutine[Any, Any, tuple[bytes | list[bytes], int]]]
RawSasl = Callable[[Session, bytes], Awaitable[bytes]]
Handshake = Callable[[Session, str, int], Errors]


# -- the shared services a connection uses ----------------------------------------------------


@dataclass
class ServerServices:
    """What every connection of one broker shares (built once by ``BrokerServer``)."""

    config: BrokerConfig
    dispatch: Dispatch
    raw_sasl: RawSasl
    handshake: Handshake
    sessions: Any  # SessionRegistry: attach/detach
    metrics: Any  # BrokerMetrics
    clock: Any  # Clock
    on_session_expired: Callable[[Session], None]
    api_name: Callable[[int], str]
    precomputed: PrecomputedResponses
    pool: RequestMemoryPool
    per_ip: Counter[str]
    live: set[Connection]


# -- the protocol -----------------------------------------------------------------------------


class Connection(asyncio.BufferedProtocol):
    """One client connection of one listener."""

    def __init__(self, services: ServerServices, listener: Listener) -> None:
        self._svc = services
        self._listener = listener
        config = services.config
        self._idle_s = config.connections_max_idle_ms / 1000.0
        self._stalled_s = min(self._idle_s, config.request_timeout_ms / 1000.0)
        self._rx = ReceiveBuffer(RECEIVE_BUFFER_BYTES, self._max_frame_bytes_before_login())
        self._reserved = 0
        self._transport: asyncio.Transport | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.session: Session | None = None
        self.closed_reason: str | None = None
        self.host, self.port = "?", 0
        self._refused = False
        self._closing = False
        self._lost = False
        self._eof = False
        self._tls = False
        self._in_flight: asyncio.Future | None = None
        self._envelopes: set[asyncio.Task] = set()
        self._overlap_envelopes = listener.name == services.config.inter_broker_listener_name
        self._write_paused = False
        self._reading = True
        self._waiting_memory = False
        self._last_activity = 0.0
        self._frame_started: float | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._timer_when = 0.0
        self._cut_timer: asyncio.TimerHandle | None = None

    # -- limits ------------------------------------------------------------------

    def _max_frame_bytes_before_login(self) -> int:
        config = self._svc.config
        return min(config.socket_request_max_bytes, config.sasl_server_max_receive_size)

    def _max_frame_bytes(self) -> int:
        """Until its first login a connection may send ``sasl.server.max.receive.size``
        (as Kafka), after it ``socket.request.max.bytes``."""
        if self.session is not None and self.session.authenticated_once:
            return self._svc.config.socket_request_max_bytes
        return self._max_frame_bytes_before_login()

    # -- asyncio callbacks ---------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        svc = self._svc
        self._transport = transport  # type: ignore[assignment]
        self._loop = asyncio.get_running_loop()
        peer = transport.get_extra_info("peername") or ("?", 0)
        self.host, self.port = peer[0], peer[1]
        limit = svc.config.max_connections_per_ip
        if svc.per_ip[self.host] >= limit:
            log.warning("refusing connection from %s: max.connections.per.ip=%d reached",
                        self.host, limit)
            svc.metrics.connections_refused.labels("max_connections_per_ip").inc()
            self._refused = True
            self._closing = True
            transport.abort()
            return
        svc.per_ip[self.host] += 1
        svc.live.add(self)
        transport.set_write_buffer_limits(high=OUTPUT_HIGH_WATER, low=OUTPUT_LOW_WATER)
        ssl_object = transport.get_extra_info("ssl_object")
        self._tls = ssl_object is not None
        listener = self._listener
        self.session = Session.for_listener(
            listener.name, listener.security_protocol, self.host, self.port,
            ssl_principal=cert_principal(ssl_object),
        )
        svc.sessions.attach(self)
        self._last_activity = self._loop.time()
        self._arm(self._last_activity + self._idle_s)

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._rx.writable()

    def buffer_updated(self, nbytes: int) -> None:
        rx = self._rx
        rx.received(nbytes)
        if self._closing:
            rx.discard()
            return
        self._last_activity = self._loop.time()
        self._process()

    def eof_received(self) -> bool:
        self._eof = True
        if self._busy and not self._tls:
            return True  # half-closed: answer what is in flight, then close
        self._close("client closed")
        return False

    def pause_writing(self) -> None:
        self._write_paused = True
        self._update_reading()

    def resume_writing(self) -> None:
        self._write_paused = False
        if not self._closing:
            self._process()

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = True
        self._closing = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._cut_timer is not None:
            self._cut_timer.cancel()
            self._cut_timer = None
        if self._refused:
            return
        svc = self._svc
        if self._in_flight is not None and not self._in_flight.done():
            self._in_flight.cancel()
        self._in_flight = None
        for task in self._envelopes:
            task.cancel()
        self._envelopes.clear()
        if self._waiting_memory:
            svc.pool.cancel(self._memory_granted)
            self._waiting_memory = False
        if self._reserved:
            reserved, self._reserved = self._reserved, 0
            svc.pool.release(reserved)
        if self.session is not None:
            self.session.close()
        svc.sessions.detach(self)
        svc.live.discard(self)
        svc.per_ip[self.host] -= 1
        if svc.per_ip[self.host] <= 0:
            del svc.per_ip[self.host]
        if exc is not None:
            log.debug("connection %s:%d ended: %s", self.host, self.port, exc)

    # -- what the session registry calls -------------------------------------------------

    def abort(self, reason: str) -> None:
        if self.closed_reason is None:
            self.closed_reason = reason
        if self.session is not None:
            self.session.close()
        self._closing = True
        if self._transport is not None and not self._transport.is_closing():
            self._transport.abort()

    # -- requests ------------------------------------------------------------------------

    @property
    def _busy(self) -> bool:
        """A request of this connection is being handled."""
        return self._in_flight is not None or bool(self._envelopes)

    def _next_may_overlap(self) -> bool:
        """With envelopes in flight: the next frame is complete and an envelope, and
        there is room for one more (else it waits until they are answered)."""
        return (len(self._envelopes) < ENVELOPES_IN_FLIGHT
                and self._rx.next_api_key() == ApiKey.ENVELOPE)

    def _process(self) -> None:
        """Answer the complete frames in the buffer, one at a time, while nothing waits."""
        rx = self._rx
        while self._in_flight is None and not self._closing and not self._write_paused:
            try:
                rx.max_size = self._max_frame_bytes()
                if self._envelopes and not self._next_may_overlap():
                    break
                payload = rx.next_frame()
            except FrameTooLargeError as exc:
                log.info("closing %s:%d on %s: %s", self.host, self.port,
                         self._listener.name, exc.message, extra=self._log_fields())
                self._close(exc.message)
                return
            if payload is None:
                break
            self._frame_started = None
            try:
                self._handle(payload)
            except KafkaError as exc:  # ProtocolError, or a request for an API not served
                log.info("closing %s:%d on %s: %s", self.host, self.port,
                         self._listener.name, exc.message, extra=self._log_fields())
                self._close(exc.message)
                return
            except Exception:
                log.exception("unexpected error on connection %s:%d; closing it",
                              self.host, self.port, extra=self._log_fields())
                self._close("internal error")
                return
            finally:
                payload.release()
        if self._closing:
            return
        if not self._busy and self._eof:
            self._close("client closed")
            return
        if rx.buffered and not self._busy and self._frame_started is None:
            # A frame has begun: it must be complete within request.timeout.ms, however
            # slowly its bytes trickle in.
            self._frame_started = self._loop.time()
            self._arm(self._frame_started + self._stalled_s)
        self._update_reading()

    def _handle(self, payload: memoryview) -> None:
        session = self.session
        svc = self._svc
        if session.raw_sasl:
            self._run(self._raw_sasl(bytes(payload)), "SaslAuthenticate", time.perf_counter(),
                      raw=True)
            return
        try:
            header, offset = decode_request_header(payload)
        except UnsupportedVersionError as exc:
            if exc.header is not None and exc.header.api_key == ApiKey.API_VERSIONS:
                # Kafka answers an unknown ApiVersions version with a v0 response
                # listing what it supports, so the client can pick a version.
                self._write(svc.precomputed.api_versions_unsupported(exc.header.correlation_id))
                return
            raise
        api = header.api_key
        # The session's table decides what may be sent now and where it goes.
        route = session.route(api, svc.clock.now_ms)
        if route is Route.EXPIRED:
            log.info("closing %s: session lifetime over without re-authentication",
                     session.client_host)
            svc.metrics.sessions_expired.inc()
            svc.on_session_expired(session)
            session.close()
            self._close("session expired")
            return
        if route is Route.REFUSE:
            log.info("closing %s:%d: api %d not allowed in state %s",
                     session.client_host, session.client_port, api, session.state.name)
            session.close()
            self._close("api not allowed")
            return
        # Only now the body: one a client may not send yet (any API but ApiVersions and
        # SASL before a login) is refused unread, however long it is.
        if route is Route.REQUEST and len(payload) - offset > LARGE_FRAME_BYTES \
                and api != ApiKey.ENVELOPE:
            # A large body (an ACL batch near socket.request.max.bytes) is decoded in a
            # thread: 0.2-1.3 s per MB of Python on the loop would hold every login.
            data = bytes(payload)  # the receive buffer is reused once this returns
            self._run(self._decode_and_dispatch(self._context(header, session, data), offset),
                      svc.api_name(api), time.perf_counter(), inline=False)
            return
        body = decode_client_body(header, payload, offset)
        started = time.perf_counter()
        if route is Route.API_VERSIONS:
            self._write(svc.precomputed.api_versions(header.api_version, header.correlation_id))
            svc.metrics.request("ApiVersions", 0, time.perf_counter() - started)
            return
        if route is Route.HANDSHAKE:
            error = svc.handshake(session, body.get("Mechanism") or "", header.api_version)
            self._write(svc.precomputed.handshake(header.api_version, error, header.correlation_id))
            svc.metrics.request("SaslHandshake", int(error), time.perf_counter() - started)
            self._after_response(True)
            return
        login = route is Route.AUTHENTICATE
        # Only APIs that may be forwarded keep their bytes; the login path copies nothing.
        ctx = self._context(header, session, b"" if login else bytes(payload))
        if api == ApiKey.ENVELOPE and self._overlap_envelopes:
            name = svc.api_name(api)
            task = self._loop.create_task(svc.dispatch(ctx, body))
            self._envelopes.add(task)
            task.add_done_callback(lambda t: self._finished(t, name, started, False))
            return
        self._run(svc.dispatch(ctx, body), svc.api_name(api), started, inline=login)

    def _context(self, header: RequestHeader, session: Session, payload: bytes) -> RequestContext:
        return RequestContext(
            header=header,
            principal=session.principal or ANONYMOUS,
            listener=self._listener.name,
            security_protocol=self._listener.security_protocol,
            client_host=session.client_host,
            client_port=session.client_port,
            payload=payload,
            session=session,
        )

    async def _decode_and_dispatch(self, ctx: RequestContext, offset: int
                                   ) -> tuple[bytes | list[bytes], int]:
        body = await asyncio.to_thread(decode_client_body, ctx.header, ctx.payload, offset)
        return await self._svc.dispatch(ctx, body)

    async def _raw_sasl(self, payload: bytes) -> bytes | None:
        """One raw SASL token after SaslHandshake v0: the challenge, or None to close."""
        try:
            return await self._svc.raw_sasl(self.session, payload)
        except (ScramAuthenticationError, IllegalSaslState, ClockSkewed):
            self.session.close()
            return None

    def _run(self, coro: Coroutine[Any, Any, Any], api: str, started: float, *,
             inline: bool = True, raw: bool = False) -> None:
        """Run a request's coroutine. ``inline``: on the spot until it has to wait, and only
        then as a task (the login path allocates no task); otherwise as a task at once."""
        if inline:
            try:
                waiting = coro.send(None)
            except StopIteration as done:
                self._done(done.value, api, started, raw)
                return
            task = self._loop.create_task(continue_in_task(coro, waiting))
        else:
            task = self._loop.create_task(coro)
        self._in_flight = task
        self._update_reading()
        task.add_done_callback(lambda t: self._finished(t, api, started, raw))

    def _finished(self, task: asyncio.Task, api: str, started: float, raw: bool) -> None:
        if self._in_flight is task:
            self._in_flight = None
        self._envelopes.discard(task)
        if task.cancelled() or self._lost:
            return
        exc = task.exception()
        if isinstance(exc, KafkaError):
            log.info("closing %s:%d on %s: %s", self.host, self.port, self._listener.name,
                     exc.message, extra=self._log_fields())
            self._close(exc.message)
            return
        if exc is not None:
            log.error("unexpected error on connection %s:%d; closing it", self.host, self.port,
                      exc_info=exc, extra=self._log_fields())
            self._close("internal error")
            return
        self._done(task.result(), api, started, raw)
        if not self._closing:
            self._process()

    def _done(self, result: Any, api: str, started: float, raw: bool) -> None:
        if raw:
            if result is not None:
                self._write(INT32.pack(len(result)) + result)
            self._after_response(result is not None)
            return
        response, error = result
        self._svc.metrics.request(api, error, time.perf_counter() - started)
        if isinstance(response, list):
            self._write_parts(response)
        else:
            self._write(INT32.pack(len(response)) + response)
        self._after_response(True)

    def _write_parts(self, parts: list[bytes]) -> None:
        """A large response given as parts: framed and written part by part, never
        joined (joining a 137 MB describe would hold the loop for the copy)."""
        transport = self._transport
        if not transport.is_closing():
            transport.write(INT32.pack(sum(map(len, parts))))
            for part in parts:
                transport.write(part)
        self._last_activity = self._loop.time()

    def _write(self, data: bytes) -> None:
        transport = self._transport
        if not transport.is_closing():
            transport.write(data)
        self._last_activity = self._loop.time()

    def _after_response(self, answered: bool) -> None:
        """After a response: a session that ended (failed login, refused request) lets the
        client read the answer, then the connection closes."""
        if self.session.state is not State.CLOSED:
            return
        if answered:
            self._linger()
        else:
            self._close("session closed")

    # -- reading and memory -----------------------------------------------------------------

    def _update_reading(self) -> None:
        """Read while there is room for the next bytes and nothing says stop."""
        if self._closing or self._transport is None:
            return
        rx = self._rx
        if rx.empty_at_base and self._reading and not self._write_paused \
                and not self._waiting_memory:
            return  # the state after most requests: reading, with room for any prefix
        want = not self._write_paused and not self._waiting_memory
        if want:
            try:
                rx.max_size = self._max_frame_bytes()
                needed = rx.room_needed()
            except FrameTooLargeError:
                needed = 0  # refused when the frame is parsed
            if needed > rx.capacity:
                want = self._get_memory(needed)
            elif rx.shrink():
                self._release_memory()
            rx.make_room()
            if rx.free == 0:
                want = False  # full of frames waiting behind the request in flight
        if want != self._reading:
            self._reading = want
            if want:
                self._transport.resume_reading()
            else:
                self._transport.pause_reading()

    def _get_memory(self, needed: int) -> bool:
        """Grow the buffer for a frame of ``needed`` bytes, or wait in line for the pool."""
        extra = needed - self._rx.base
        if self._svc.pool.try_reserve(extra - self._reserved):
            self._reserved = extra
            self._rx.grow(needed)
            return True
        self._waiting_memory = True
        self._svc.pool.wait(self._memory_granted)
        return False

    def _memory_granted(self) -> bool:
        """Pool callback: reserve for the waiting frame; True once it has its memory."""
        if self._closing:
            return True
        needed = self._rx.room_needed()
        extra = needed - self._rx.base
        if not self._svc.pool.reserve_for_waiter(extra - self._reserved):
            return False
        self._reserved = extra
        self._rx.grow(needed)
        self._waiting_memory = False
        # The frame's clock starts again: it did not stall, the broker held it back.
        self._frame_started = self._loop.time()
        self._loop.call_soon(self._update_reading)
        return True

    def _release_memory(self) -> None:
        if self._reserved:
            reserved, self._reserved = self._reserved, 0
            self._svc.pool.release(reserved)

    # -- time ---------------------------------------------------------------------------------

    def _arm(self, when: float) -> None:
        if self._timer is not None:
            if self._timer_when <= when:
                return
            self._timer.cancel()
        self._timer_when = when
        self._timer = self._loop.call_at(when, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        if self._closing:
            return
        now = self._loop.time()
        if self._busy or self._waiting_memory:
            self._arm(now + self._idle_s)
            return
        if self._frame_started is not None and self._rx.buffered and not self._write_paused:
            deadline = self._frame_started + self._stalled_s
            if now >= deadline:
                log.info("closing %s:%d on %s: request frame not complete within "
                         "request.timeout.ms=%d", self.host, self.port, self._listener.name,
                         self._svc.config.request_timeout_ms)
                self._close("stalled frame")
                return
        else:
            deadline = self._last_activity + self._idle_s
            if now >= deadline:
                log.info("closing %s:%d on %s: idle longer than connections.max.idle.ms=%d",
                         self.host, self.port, self._listener.name,
                         self._svc.config.connections_max_idle_ms)
                self._close("idle")
                return
        self._arm(deadline)

    # -- ending --------------------------------------------------------------------------------

    def _log_fields(self) -> dict[str, object]:
        """The structured fields of this connection's log records (``log.format=json``)."""
        return {"client_host": self.host, "client_port": self.port,
                "listener": self._listener.name}

    def _close(self, reason: str) -> None:
        """Close after the responses already written reach the client (on TLS the
        close_notify too), as Kafka does; a peer that does not read for
        ``CLOSE_FLUSH_S`` is cut off."""
        if self.closed_reason is None:
            self.closed_reason = reason
        if self.session is not None:
            self.session.close()
        self._closing = True
        self._rx.discard()
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        if not self._reading:
            transport.resume_reading()  # see the client's close while flushing
        # Nothing left to send on plain TCP: close() is immediate and needs no guard (a
        # timer per connection was a tenth of the close's cost at thousands of logins/s).
        flushing = self._tls or transport.get_write_buffer_size() > 0
        transport.close()
        if flushing:
            self._cut_timer = self._loop.call_later(CLOSE_FLUSH_S, self._cut_off)

    def _cut_off(self) -> None:
        self._cut_timer = None
        if not self._lost and self._transport is not None:
            self._transport.abort()

    def _linger(self) -> None:
        """Wait up to ``CLOSE_LINGER_S`` for the client to close first, discarding what it
        sends. kafka-python 3.0.12 drops a response that arrives in the same read as the
        end of the connection, so closing right after a SaslAuthenticate failure would
        hide the failure from it (Kafka itself closes such a connection after a delay)."""
        self._closing = True
        self._rx.discard()
        if not self._reading and self._transport is not None:
            self._reading = True
            self._transport.resume_reading()
        self._loop.call_later(CLOSE_LINGER_S, self._close, "session closed")
