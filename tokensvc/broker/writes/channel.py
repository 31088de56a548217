"""An authenticated, pipelined client connection from one broker to another.

Owns: connecting to a peer's inter-broker listener (TLS when it is SASL_SSL),
the SCRAM login as the broker principal, and several requests in flight on one
connection: at most ``max_in_flight`` (a request beyond waits for a slot,
within its timeout), each answer matched to its request by correlation id,
in whatever order the peer sends them (the controller answers envelopes as
they complete). Used by the forwarder to send EnvelopeRequests to the
controller. Any transport or protocol error fails every pending request with
``ChannelClosed`` and closes the channel; the caller opens a new one.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import ssl

from tokensvc.broker.loop.offloop import decode_response_async
from tokensvc.core.errors import Errors
from tokensvc.protocol import FrameDecoder, RequestHeader, encode_request, frame
from tokensvc.protocol.api import ApiKey
from tokensvc.scram.client import ScramClient
from tokensvc.scram.formatter import ScramMechanism

# Requests one channel keeps in flight (the controller reads up to 64 envelopes of one
# connection at once: tokensvc.broker.network.connection.ENVELOPES_IN_FLIGHT).
MAX_IN_FLIGHT = 32


class ChannelClosed(ConnectionError):
    """The channel failed; the request's outcome is unknown."""


class ChannelAuthError(ConnectionError):
    """The peer refused this broker's credentials."""


class BrokerChannel:
    def __init__(
        self,
        host: str,
        port: int,
        *,
        security_protocol: str,
        mechanism: str,
        username: str,
        password: str,
        client_id: str,
        ssl_context: ssl.SSLContext | None = None,
        max_frame: int = 100 * 1024 * 1024,
        extensions: dict[str, str] | None = None,
        max_in_flight: int = MAX_IN_FLIGHT,
    ) -> None:
        self.host = host
        self.port = port
        self._protocol = security_protocol
        self._mechanism = ScramMechanism.from_name(mechanism)
        self._username = username
        self._password = password
        self.client_id = client_id
        self._ssl = ssl_context
        self._max_frame = max_frame
        self._corr = itertools.count(1)
        self._pending: dict[int, tuple[asyncio.Future, int, int]] = {}
        self._slots = asyncio.Semaphore(max_in_flight)
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._task: asyncio.Task | None = None
        self._decoder = FrameDecoder(max_frame)
        self._extensions = extensions or {}
        self.closed = False
        self.session_lifetime_ms = 0
        # Responses read so far: a request that timed out while others were answered
        # met a slow peer, not a dead connection.
        self.received = 0

    async def connect(self, timeout: float) -> None:
        use_tls = self._protocol in ("SSL", "SASL_SSL")
        ctx = self._ssl
        if use_tls and ctx is None:
            ctx = ssl.create_default_context()
        self._reader, self._writer = await asyncio.wait_for(
            asyncio.open_connection(self.host, self.port, ssl=ctx if use_tls else None), timeout
        )
        self._task = asyncio.create_task(self._read_loop())
        if self._protocol.startswith("SASL_"):
            await asyncio.wait_for(self._login(), timeout)

    async def _login(self) -> None:
        hs = await self.request(ApiKey.SASL_HANDSHAKE, 1,
                                {"Mechanism": self._mechanism.mechanism_name})
        if hs.get("ErrorCode"):
            raise ChannelAuthError(f"SaslHandshake refused: {Errors(hs['ErrorCode']).name}")
        client = ScramClient(
            self._mechanism, self._username, self._password, extensions=self._extensions
        )
        first = await self.request(ApiKey.SASL_AUTHENTICATE, 2,
                                   {"AuthBytes": client.first_message()})
        if first.get("ErrorCode"):
            raise ChannelAuthError(first.get("ErrorMessage") or "authentication failed")
        final = await self.request(ApiKey.SASL_AUTHENTICATE, 2,
                                   {"AuthBytes": client.final_message(first["AuthBytes"])})
        if final.get("ErrorCode"):
            raise ChannelAuthError(final.get("ErrorMessage") or "authentication failed")
        client.verify_server_final(final["AuthBytes"])
        self.session_lifetime_ms = int(final.get("SessionLifetimeMs") or 0)

    async def request(
        self, api_key: int, api_version: int, body: dict, *, client_id: str | None = None,
        timeout: float | None = None,
    ) -> dict:
        """Send one request and wait for its answer (TimeoutError after ``timeout``
        seconds, counting the wait for a free slot)."""
        if self.closed or self._writer is None:
            raise ChannelClosed("channel is closed")
        async with asyncio.timeout(timeout), self._slots:
            if self.closed:
                raise ChannelClosed("channel is closed")
            corr = next(self._corr)
            header = RequestHeader(api_key, api_version, corr, client_id or self.client_id)
            fut: asyncio.Future = asyncio.get_running_loop().create_future()
            self._pending[corr] = (fut, api_key, api_version)
            try:
                self._writer.write(frame(encode_request(header, body)))
                await self._writer.drain()
            except (ConnectionError, RuntimeError) as exc:
                self._fail(exc)
            try:
                return await fut
            finally:
                self._pending.pop(corr, None)

    @property
    def in_flight(self) -> int:
        """Requests sent and not yet answered."""
        return len(self._pending)

    async def _read_loop(self) -> None:
        assert self._reader is not None
        try:
            while True:
                data = await self._reader.read(65536)
                if not data:
                    raise ChannelClosed(f"{self.host}:{self.port} closed the connection")
                self._decoder.feed(data)
                while (payload := self._decoder.next_frame()) is not None:
                    self.received += 1
                    corr = int.from_bytes(payload[:4], "big", signed=True)
                    entry = self._pending.get(corr)
                    if entry is None:
                        continue
                    fut, api_key, version = entry
                    if not fut.done():
                        try:
                            _, body = await decode_response_async(api_key, version, payload)
                        except Exception as exc:  # noqa: BLE001 - handed to the waiter
                            fut.set_exception(ChannelClosed(f"bad response: {exc}"))
                        else:
                            fut.set_result(body)
        except asyncio.CancelledError:
            self._fail(ChannelClosed("channel closed"))
        except Exception as exc:  # noqa: BLE001 - every failure closes the channel
            self._fail(exc)

    def _fail(self, exc: BaseException) -> None:
        self.closed = True
        err = exc if isinstance(exc, ChannelClosed) else ChannelClosed(str(exc))
        for fut, _, _ in list(self._pending.values()):
            if not fut.done():
                fut.set_exception(err)
        self._pending.clear()
        if self._writer is not None and not self._writer.transport.is_closing():
            self._writer.transport.abort()

    async def close(self) -> None:
        self.closed = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        self._fail(ChannelClosed("channel closed"))
