"""A raw OAUTHBEARER login over a real socket, step by step, for tests that judge the
exchange itself: the error challenge, the client's ``%x01`` and the final error.

:class:`OAuthWire` keeps the connection open after a login so that a test can send
further requests (a token create) on the session it proved.
"""

from __future__ import annotations

import itertools
import socket
from dataclasses import dataclass
from typing import Self

from tests.support.client import recv_exact
from tokensvc.oauth.exchange import client_first_message
from tokensvc.protocol import ApiKey, RequestHeader, decode_response, encode_request, frame
from tokensvc.protocol.framing import INT32


@dataclass(frozen=True)
class LoginOutcome:
    error_code: int
    error_message: str | None
    challenge: bytes  # the server's challenge to the first message (error JSON, or b"")
    session_lifetime_ms: int


class OAuthWire:
    """One connection to one broker (blocking)."""

    def __init__(self, address: tuple[str, int], client_id: str = "oauth-wire") -> None:
        self.sock = socket.create_connection(address, timeout=20)
        self.client_id = client_id
        self._ids = itertools.count(1)

    def request(self, api_key: ApiKey, version: int, body: dict) -> dict:
        header = RequestHeader(int(api_key), version, next(self._ids), self.client_id)
        self.sock.sendall(frame(encode_request(header, body)))
        size = INT32.unpack(recv_exact(self.sock, 4))[0]
        _, response = decode_response(int(api_key), version, recv_exact(self.sock, size))
        return response

    def login(self, token: str, *, authzid: str = "", raw_first: bytes | None = None) -> LoginOutcome:
        """Handshake, the first message, and -- when the broker answers with an error
        challenge -- the client's ``%x01``, as librdkafka and Kafka's client do."""
        handshake = self.request(ApiKey.SASL_HANDSHAKE, 1, {"Mechanism": "OAUTHBEARER"})
        if handshake["ErrorCode"]:
            return LoginOutcome(handshake["ErrorCode"], None, b"", 0)
        first = raw_first if raw_first is not None else client_first_message(token, authzid)
        answer = self.request(ApiKey.SASL_AUTHENTICATE, 2, {"AuthBytes": first})
        challenge = bytes(answer["AuthBytes"] or b"")
        if answer["ErrorCode"] or not challenge:
            return LoginOutcome(answer["ErrorCode"], answer["ErrorMessage"], challenge,
                                answer["SessionLifetimeMs"])
        final = self.request(ApiKey.SASL_AUTHENTICATE, 2, {"AuthBytes": b"\x01"})
        return LoginOutcome(final["ErrorCode"], final["ErrorMessage"], challenge,
                            final["SessionLifetimeMs"])

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
