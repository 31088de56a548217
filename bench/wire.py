"""A lean asyncio Kafka-protocol client for load generation (real sockets).

Owns one pipelined connection (:class:`WireConnection`: responses matched by
correlation id) and the SCRAM login over it (:func:`login`), which can reuse a
salted-password cache across logins so the load generator spends its time on
the wire, not in PBKDF2. It is deliberately smaller than the broker's
``BrokerChannel`` (an ``asyncio.Protocol``, no reader task): in B1 it opens and
closes thousands of connections a second.

It must not log or keep passwords, HMACs or salted passwords beyond the cache
its caller hands in.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Mapping

from tokensvc.core.errors import Errors
from tokensvc.protocol import FrameDecoder, RequestHeader, decode_response, encode_request, frame
from tokensvc.protocol.api import ApiKey
from tokensvc.scram.client import SaltedPasswordCache, ScramClient
from tokensvc.scram.formatter import ScramMechanism

MAX_FRAME = 16 * 1024 * 1024


class WireError(ConnectionError):
    """The connection failed or the broker refused a login; the message says which."""


class _Protocol(asyncio.Protocol):
    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.pending: dict[int, tuple[asyncio.Future, int, int]] = {}
        self.decoder = FrameDecoder(MAX_FRAME)
        self.lost: Exception | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.decoder.feed(data)
        while (payload := self.decoder.next_frame()) is not None:
            corr = int.from_bytes(payload[:4], "big", signed=True)
            entry = self.pending.pop(corr, None)
            if entry is None:
                continue
            future, api_key, version = entry
            if future.done():
                continue
            try:
                future.set_result(decode_response(api_key, version, payload)[1])
            except Exception as exc:  # noqa: BLE001 - handed to the waiter
                future.set_exception(WireError(f"undecodable response: {exc}"))

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = WireError(f"connection lost: {exc or 'closed by the broker'}")
        for future, _, _ in self.pending.values():
            if not future.done():
                future.set_exception(self.lost)
        self.pending.clear()


class WireConnection:
    """One client connection; ``request`` may be called concurrently (pipelined)."""

    def __init__(self, protocol: _Protocol, client_id: str) -> None:
        self._protocol = protocol
        self._client_id = client_id
        self._corr = itertools.count(1)

    @classmethod
    async def open(cls, host: str, port: int, client_id: str = "bench") -> WireConnection:
        loop = asyncio.get_running_loop()
        _, protocol = await loop.create_connection(_Protocol, host, port)
        return cls(protocol, client_id)

    def request(self, api_key: int, version: int, body: Mapping) -> asyncio.Future:
        """Send one request now; the future resolves to the decoded response body."""
        protocol = self._protocol
        if protocol.lost is not None or protocol.transport is None:
            raise WireError("connection is closed")
        corr = next(self._corr)
        future = asyncio.get_running_loop().create_future()
        protocol.pending[corr] = (future, api_key, version)
        header = RequestHeader(api_key, version, corr, self._client_id)
        protocol.transport.write(frame(encode_request(header, dict(body))))
        return future

    def close(self) -> None:
        transport = self._protocol.transport
        if transport is not None and not transport.is_closing():
            transport.close()


async def login(
    conn: WireConnection,
    mechanism: ScramMechanism,
    username: str,
    password: str,
    *,
    token: bool = False,
    salted_cache: SaltedPasswordCache | None = None,
) -> None:
    """SaslHandshake v1 then two SaslAuthenticate v2 round trips; raises WireError if refused."""
    handshake = await conn.request(ApiKey.SASL_HANDSHAKE, 1,
                                   {"Mechanism": mechanism.mechanism_name})
    if handshake["ErrorCode"]:
        raise WireError(f"SaslHandshake refused: {Errors(handshake['ErrorCode']).name}")
    client = ScramClient(
        mechanism,
        username,
        password,
        extensions={"tokenauth": "true"} if token else None,
        salted_password_cache=salted_cache,
    )
    first = await conn.request(ApiKey.SASL_AUTHENTICATE, 2, {"AuthBytes": client.first_message()})
    if first["ErrorCode"]:
        raise WireError(f"SaslAuthenticate refused: {Errors(first['ErrorCode']).name}")
    final = await conn.request(
        ApiKey.SASL_AUTHENTICATE, 2, {"AuthBytes": client.final_message(first["AuthBytes"])}
    )
    if final["ErrorCode"]:
        raise WireError(f"SaslAuthenticate refused: {Errors(final['ErrorCode']).name}")
    client.verify_server_final(final["AuthBytes"])


async def open_logged_in(
    address: str,
    username: str,
    password: str,
    *,
    mechanism: ScramMechanism = ScramMechanism.SCRAM_SHA_512,
    token: bool = False,
    salted_cache: SaltedPasswordCache | None = None,
    client_id: str = "bench",
) -> WireConnection:
    """A connection to ``host:port`` that has logged in; closed again if the login fails."""
    host, _, port = address.rpartition(":")
    conn = await WireConnection.open(host, int(port), client_id)
    try:
        await login(conn, mechanism, username, password, token=token, salted_cache=salted_cache)
    except BaseException:
        conn.close()
        raise
    return conn


# ``--label-tokens``: the labels every token B1 and B2 create carries (4 labels, values
# of 32 bytes: the case docs/performance.md measures).
BENCH_LABELS = {f"bench/k{i}": f"{i}" * 32 for i in range(4)}


def create_token_body(max_lifetime_ms: int = -1, labels: dict[str, str] | None = None) -> dict:
    """A CreateDelegationToken v3 body for a token owned by the caller, no renewers;
    ``labels`` go in tokensvc's tagged field."""
    body = {
        "OwnerPrincipalType": None,
        "OwnerPrincipalName": None,
        "Renewers": [],
        "MaxLifetimeMs": max_lifetime_ms,
    }
    if labels:
        body["Labels"] = [{"Key": k, "Value": v} for k, v in sorted(labels.items())]
    return body
