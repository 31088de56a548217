"""SaslHandshake requests (v0, v1), read before any login.

The first byte picks the version; the rest is the body. Property: the round trip of
``wire.check_request``; the mechanism read is a string.
"""

from __future__ import annotations

from tests.fuzz.protocol.wire import ERRORS, check_request, request_payload
from tokensvc.protocol import ApiKey

__all__ = ["ERRORS", "fuzz_one"]


def fuzz_one(data: bytes) -> None:
    if not data:
        return
    _, body = check_request(request_payload(ApiKey.SASL_HANDSHAKE, data[0] % 2, data[1:]))
    assert isinstance(body["Mechanism"], str)
