"""Sockets, TLS and framing for a broker: the only room of the broker that does I/O.

Owns: one asyncio server per listener, TLS contexts from PEM files, the frame
loop of each connection (size prefix checked before anything is allocated,
requests answered strictly in order), idle and stalled-frame timeouts,
``max.connections.per.ip``, closing connections that break the protocol, and
KIP-368 enforcement: a request other than SaslHandshake after the session's
lifetime (``Session.expires_at_ms``) closes the connection.
A client can make its own connection fail; it can never make the broker
crash or stall other connections: every per-connection error ends in a close.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from collections import Counter
from typing import TYPE_CHECKING

from tokensvc.broker.context import RequestContext
from tokensvc.broker.decoding import decode_client_request
from tokensvc.broker.handlers import sasl
from tokensvc.broker.handlers.cluster import api_versions_body
from tokensvc.broker.session import IllegalSaslState, Session, State
from tokensvc.core.config import Listener
from tokensvc.core.errors import Errors, KafkaError
from tokensvc.core.principal import KafkaPrincipal
from tokensvc.protocol import (
    FrameDecoder,
    RequestHeader,
    UnsupportedVersionError,
    encode_response,
    frame,
)
from tokensvc.scram.server import ScramAuthenticationError

if TYPE_CHECKING:
    from tokensvc.broker.broker import Broker

log = logging.getLogger("tokensvc.broker.server")

READ_CHUNK = 64 * 1024
CLOSE_FLUSH_S = 1.0
CLOSE_LINGER_S = 0.5


def server_ssl_context(config) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(config.ssl_keystore_location, password=config.ssl_key_password or None)
    mode = config.ssl_client_auth
    if mode in ("required", "requested"):
        if config.ssl_truststore_location:
            ctx.load_verify_locations(config.ssl_truststore_location)
        ctx.verify_mode = ssl.CERT_REQUIRED if mode == "required" else ssl.CERT_OPTIONAL
    return ctx


def _cert_principal(writer: asyncio.StreamWriter) -> KafkaPrincipal | None:
    obj = writer.get_extra_info("ssl_object")
    if obj is None:
        return None
    cert = obj.getpeercert()
    if not cert:
        return None
    rdns = []
    for rdn in reversed(cert.get("subject", ())):
        for key, value in rdn:
            short = {"commonName": "CN", "organizationName": "O", "organizationalUnitName": "OU",
                     "countryName": "C", "localityName": "L", "stateOrProvinceName": "ST"}.get(key, key)
            rdns.append(f"{short}={value}")
    return KafkaPrincipal("User", ",".join(rdns)) if rdns else None


async def _linger(reader: asyncio.StreamReader) -> None:
    """Wait up to ``CLOSE_LINGER_S`` for the client to close first, discarding what it sends.

    kafka-python 3.0.12 drops a response that arrives in the same read as the end of the
    connection, so closing right after a SaslAuthenticate failure would hide the failure
    from it (Kafka itself closes such a connection only after a delay)."""
    try:
        async with asyncio.timeout(CLOSE_LINGER_S):
            while await reader.read(READ_CHUNK):
                pass
    except (TimeoutError, ConnectionError, ssl.SSLError):
        pass


async def _close_gracefully(writer: asyncio.StreamWriter) -> None:
    """Close after the responses already written reach the client (on TLS the close_notify
    too), as Kafka does: a SaslAuthenticate failure must arrive before the connection ends.
    A peer that does not read for ``CLOSE_FLUSH_S`` is cut off."""
    transport = writer.transport
    if transport.is_closing():
        return
    writer.close()
    try:
        async with asyncio.timeout(CLOSE_FLUSH_S):
            await writer.wait_closed()
    except (TimeoutError, ConnectionError, ssl.SSLError, asyncio.CancelledError):
        transport.abort()


class Connection:
    """One client connection: its session plus the transport to close it."""

    def __init__(self, session: Session, writer: asyncio.StreamWriter) -> None:
        self.session = session
        self.writer = writer
        self.closed_reason: str | None = None

    def abort(self, reason: str) -> None:
        if self.closed_reason is None:
            self.closed_reason = reason
        self.session.close()
        transport = self.writer.transport
        if not transport.is_closing():
            transport.abort()


class BrokerServer:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.config = broker.config
        self._servers: dict[str, asyncio.AbstractServer] = {}
        self.addresses: dict[str, tuple[str, int]] = {}
        self._per_ip: Counter[str] = Counter()
        self._tasks: set[asyncio.Task] = set()

    async def open(self, listeners: list[Listener]) -> None:
        for listener in listeners:
            if listener.name in self._servers:
                continue
            ctx = None
            if listener.security_protocol in ("SSL", "SASL_SSL"):
                ctx = server_ssl_context(self.config)

            async def on_client(reader, writer, _listener=listener):
                task = asyncio.current_task()
                self._tasks.add(task)
                try:
                    await self._serve(reader, writer, _listener)
                finally:
                    self._tasks.discard(task)

            server = await asyncio.start_server(
                on_client, listener.host, listener.port, ssl=ctx, reuse_address=True,
                limit=READ_CHUNK,
            )
            self._servers[listener.name] = server
            sock = server.sockets[0].getsockname()
            self.addresses[listener.name] = (sock[0], sock[1])
            log.info("listening on %s://%s:%d", listener.name, sock[0], sock[1])

    async def close(self) -> None:
        for server in self._servers.values():
            server.close()
        for task in list(self._tasks):
            task.cancel()
        for server in self._servers.values():
            try:
                await asyncio.wait_for(server.wait_closed(), 5)
            except Exception as exc:  # noqa: BLE001 - best effort on shutdown
                log.debug("listener did not close cleanly: %s", exc)
        self._servers.clear()

    # -- one connection ---------------------------------------------------

    async def _serve(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, listener: Listener
    ) -> None:
        peer = writer.get_extra_info("peername") or ("?", 0)
        host, port = peer[0], peer[1]
        metrics = self.broker.metrics
        if self._per_ip[host] >= self.config.max_connections_per_ip:
            log.warning(
                "refusing connection from %s: max.connections.per.ip=%d reached",
                host, self.config.max_connections_per_ip,
            )
            metrics.connections_refused.labels("max_connections_per_ip").inc()
            writer.transport.abort()
            return
        self._per_ip[host] += 1
        metrics.connections.inc()
        session = Session.for_listener(
            listener.name, listener.security_protocol, host, port,
            ssl_principal=_cert_principal(writer),
        )
        conn = Connection(session, writer)
        self.broker.sessions.attach(conn)
        decoder = FrameDecoder(self.config.socket_request_max_bytes)
        idle = self.config.connections_max_idle_ms / 1000.0
        stalled = min(idle, self.config.request_timeout_ms / 1000.0)
        clock = asyncio.get_running_loop().time
        # When the first byte of the frame being received arrived: a frame must be complete
        # within request.timeout.ms of it, however slowly its bytes trickle in.
        frame_started: float | None = None
        response: bytes | None = None
        try:
            while session.state is not State.CLOSED:
                if decoder.buffered:
                    if frame_started is None:
                        frame_started = clock()
                    timeout = max(0.0, frame_started + stalled - clock())
                else:
                    timeout = idle
                try:
                    # asyncio.timeout, not wait_for: wait_for wraps every read in a task
                    # of its own, a tenth of a login's CPU in the B1 profile.
                    async with asyncio.timeout(timeout):
                        data = await reader.read(READ_CHUNK)
                except TimeoutError:
                    if decoder.buffered:
                        conn.closed_reason = "stalled frame"
                        log.info("closing %s:%d on %s: request frame not complete within "
                                 "request.timeout.ms=%d", host, port, listener.name,
                                 self.config.request_timeout_ms)
                    else:
                        conn.closed_reason = "idle"
                        log.info("closing %s:%d on %s: idle longer than connections.max.idle.ms=%d",
                                 host, port, listener.name, self.config.connections_max_idle_ms)
                    break
                if not data:
                    break
                decoder.max_size = self._max_frame_bytes(session)
                decoder.feed(data)
                while session.state is not State.CLOSED:
                    decoder.max_size = self._max_frame_bytes(session)
                    payload = decoder.next_frame()
                    if payload is None:
                        break
                    frame_started = None
                    response = await self._handle(conn, listener, payload)
                    if response is not None:
                        writer.write(frame(response))
                        await writer.drain()
            else:
                # The session ended after a response (a failed authentication, a refused
                # request): let the client read that response before the connection ends.
                if response is not None:
                    await _linger(reader)
        except KafkaError as exc:  # ProtocolError, or a request for an API not served
            log.info("closing %s:%d on %s: %s", host, port, listener.name, exc.message)
        except (ConnectionError, ssl.SSLError, asyncio.IncompleteReadError) as exc:
            log.debug("connection %s:%d ended: %s", host, port, exc)
        except asyncio.CancelledError:
            pass
        except Exception:
            log.exception("unexpected error on connection %s:%d; closing it", host, port)
        finally:
            self.broker.sessions.detach(conn)
            self._per_ip[host] -= 1
            if self._per_ip[host] <= 0:
                del self._per_ip[host]
            metrics.connections.dec()
            await _close_gracefully(writer)

    def _max_frame_bytes(self, session: Session) -> int:
        """The largest frame this connection may send next. Until its first login it is
        ``sasl.server.max.receive.size`` (as in Kafka), so an unauthenticated client cannot
        make the broker buffer ``socket.request.max.bytes`` (100 MB by default)."""
        limit = self.config.socket_request_max_bytes
        if session.authenticated_once:
            return limit
        return min(limit, self.config.sasl_server_max_receive_size)

    async def _handle(self, conn: Connection, listener: Listener, payload: bytes) -> bytes | None:
        session = conn.session
        broker = self.broker
        if session.raw_sasl:
            try:
                challenge, _ = await sasl.evaluate(broker, session, payload)
            except (ScramAuthenticationError, IllegalSaslState):
                session.close()
                return None
            return challenge
        try:
            header, body = decode_client_request(payload)
        except UnsupportedVersionError as exc:
            if exc.header is not None and exc.header.api_key == 18:
                # Kafka answers an unknown ApiVersions version with a v0 response
                # listing what it supports, so the client can pick a version.
                h = RequestHeader(18, 0, exc.header.correlation_id, exc.header.client_id)
                return encode_response(h, api_versions_body(Errors.UNSUPPORTED_VERSION))
            raise
        if (
            session.state is State.AUTHENTICATED
            and header.api_key != 17
            and session.expired(broker.clock.now_ms())
        ):
            log.info("closing %s: session lifetime over without re-authentication",
                     session.client_host)
            broker.metrics.sessions_expired.inc()
            broker.on_session_expired(session)
            session.close()
            return None
        if not session.allowed(header.api_key):
            log.info(
                "closing %s:%d: api %d not allowed in state %s",
                session.client_host, session.client_port, header.api_key, session.state.name,
            )
            session.close()
            return None
        ctx = RequestContext(
            header=header,
            principal=session.principal or KafkaPrincipal("User", "ANONYMOUS"),
            listener=listener.name,
            security_protocol=listener.security_protocol,
            client_host=session.client_host,
            client_port=session.client_port,
            payload=payload,
            session=session,
        )
        start = time.perf_counter()
        response, error = await broker.dispatch(ctx, body)
        broker.metrics.request(broker.api_name(header.api_key), error, time.perf_counter() - start)
        return response
