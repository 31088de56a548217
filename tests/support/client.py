"""Kafka-protocol clients for broker tests (real sockets), built on the broker's own
inter-broker channel.

``WireClient`` wraps a channel in a private event loop so blocking tests can log in
(users or tokens) and send any request body; ``open_channel`` and ``token_logs_in``
are for asyncio tests that run many requests without a thread per connection;
``recv_exact`` is for tests that write raw bytes to a broker's socket.
"""

from __future__ import annotations

import asyncio
import base64
import socket
import threading
from typing import Self

from tokensvc.broker.writes.channel import BrokerChannel, ChannelAuthError


def recv_exact(sock: socket.socket, size: int) -> bytes:
    """Exactly ``size`` bytes from ``sock``; ConnectionError if the broker closes first."""
    chunks = []
    while size:
        chunk = sock.recv(size)
        if not chunk:
            raise ConnectionError("closed by the broker")
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


async def open_channel(address: tuple[str, int], username: str, password: str, *,
                       mechanism: str = "SCRAM-SHA-256", token: bool = False,
                       client_id: str = "wire-test",
                       security_protocol: str = "SASL_PLAINTEXT") -> BrokerChannel:
    """A channel logged in on the running event loop (closed again if the login fails)."""
    channel = BrokerChannel(
        address[0], address[1], security_protocol=security_protocol, mechanism=mechanism,
        username=username, password=password, client_id=client_id,
        extensions={"tokenauth": "true"} if token else None,
    )
    try:
        await channel.connect(10.0)
    except BaseException:
        await channel.close()
        raise
    return channel


async def token_logs_in(address: tuple[str, int], token_id: str, hmac: bytes, *,
                        client_id: str = "wire-test") -> bool:
    """Whether a SCRAM-SHA-256 token login with ``token_id`` and ``hmac`` succeeds on a
    fresh connection."""
    try:
        channel = await open_channel(address, token_id, base64.b64encode(hmac).decode(),
                                     token=True, client_id=client_id)
    except ChannelAuthError:
        return False
    await channel.close()
    return True


class WireClient:
    def __init__(
        self,
        address: tuple[str, int],
        username: str | None = None,
        password: str | None = None,
        *,
        mechanism: str = "SCRAM-SHA-256",
        token: bool = False,
        security_protocol: str = "SASL_PLAINTEXT",
        client_id: str = "wire-test",
        timeout: float = 10.0,
        ssl_context=None,
    ) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self.channel = BrokerChannel(
            address[0],
            address[1],
            security_protocol=security_protocol,
            mechanism=mechanism,
            username=username or "",
            password=password or "",
            client_id=client_id,
            extensions={"tokenauth": "true"} if token else None,
            ssl_context=ssl_context,
        )
        self.timeout = timeout
        try:
            self._run(self.channel.connect(timeout))
        except BaseException:
            self.close()
            raise

    def _run(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(self.timeout + 5)

    def request(self, api_key: int, version: int, body: dict) -> dict:
        return self._run(self.channel.request(api_key, version, body, timeout=self.timeout))

    @property
    def session_lifetime_ms(self) -> int:
        return self.channel.session_lifetime_ms

    def close(self) -> None:
        try:
            self._run(self.channel.close())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(5)
            self._loop.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
