"""SaslAuthenticate requests (v0-v2), read before any login by the hand-written reader
(tokensvc.protocol.sasl_fast), not by the schema walk.

The first byte picks the version; the rest is the body. Properties: the round trip of
``wire.check_request``; the hand-written reader and the generic schema agree on every
body (the same value, or both refuse it).
"""

from __future__ import annotations

from tests.fuzz.protocol.wire import ERRORS, check_request, request_payload
from tokensvc.protocol import ApiKey, ProtocolError, decode_request_header, flexible
from tokensvc.protocol.messages import REQUESTS
from tokensvc.protocol.primitives import Reader
from tokensvc.protocol.sasl_fast import read_sasl_authenticate_request

__all__ = ["ERRORS", "fuzz_one"]

_SCHEMA = REQUESTS[ApiKey.SASL_AUTHENTICATE]


def _outcome(read, payload: bytes, offset: int, version: int) -> object:
    try:
        return read(Reader(payload, offset), version)
    except ProtocolError:
        return ProtocolError


def fuzz_one(data: bytes) -> None:
    if not data:
        return
    version = data[0] % 3
    payload = request_payload(ApiKey.SASL_AUTHENTICATE, version, data[1:])
    _, offset = decode_request_header(payload)
    fast = _outcome(read_sasl_authenticate_request, payload, offset, version)
    generic = _outcome(
        lambda r, v: _SCHEMA.read(r, v, flexible(ApiKey.SASL_AUTHENTICATE, v)),
        payload, offset, version)
    assert fast == generic, "sasl_fast and the schema disagree"
    check_request(payload)
