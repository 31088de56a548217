"""Responses that depend only on the configuration, encoded once per broker.

Owns the bytes of every ApiVersions response (each version, plus the v0
UNSUPPORTED_VERSION answer Kafka gives to an unknown version) and of every
SaslHandshake response (each version and error code, listing the enabled
mechanisms). They are encoded at start-up with the codec itself, so they are
byte-for-byte what ``encode_response`` would build; per request only the
4-byte size prefix and correlation id are put in front.

Both APIs answer with response header v0 (correlation id only): ApiVersions
always does, and SaslHandshake has no flexible version. Must not hold
anything that depends on a request or a session.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

from tokensvc.broker.handlers.cluster import api_versions_body
from tokensvc.core.errors import Errors
from tokensvc.protocol import SUPPORTED, RequestHeader, encode_response
from tokensvc.protocol.api import ApiKey

API_VERSIONS = int(ApiKey.API_VERSIONS)
SASL_HANDSHAKE = int(ApiKey.SASL_HANDSHAKE)

_PREFIX = struct.Struct(">ii")  # frame size, correlation id

# The SaslHandshake outcomes the handshake step can produce.
HANDSHAKE_ERRORS = (
    Errors.NONE,
    Errors.ILLEGAL_SASL_STATE,
    Errors.UNSUPPORTED_SASL_MECHANISM,
)


def _body_bytes(api_key: int, version: int, body: dict) -> bytes:
    # encode_response writes the header v0 (int32 correlation id) first: drop it.
    return encode_response(RequestHeader(api_key, version, 0, None), body)[4:]


class PrecomputedResponses:
    """Framed ApiVersions and SaslHandshake responses for one broker's configuration."""

    def __init__(self, enabled_mechanisms: Iterable[str]) -> None:
        lo, hi = SUPPORTED[API_VERSIONS]
        self._api_versions = {
            v: _body_bytes(API_VERSIONS, v, api_versions_body()) for v in range(lo, hi + 1)
        }
        self._api_versions_unsupported = _body_bytes(
            API_VERSIONS, 0, api_versions_body(Errors.UNSUPPORTED_VERSION)
        )
        mechanisms = list(enabled_mechanisms)
        lo, hi = SUPPORTED[SASL_HANDSHAKE]
        self._handshake = {
            (v, int(error)): _body_bytes(
                SASL_HANDSHAKE, v, {"ErrorCode": int(error), "Mechanisms": mechanisms}
            )
            for v in range(lo, hi + 1)
            for error in HANDSHAKE_ERRORS
        }

    @staticmethod
    def _framed(correlation_id: int, body: bytes) -> bytes:
        return _PREFIX.pack(len(body) + 4, correlation_id) + body

    def api_versions(self, version: int, correlation_id: int) -> bytes:
        """The framed ApiVersions response to a request of a supported ``version``."""
        return self._framed(correlation_id, self._api_versions[version])

    def api_versions_unsupported(self, correlation_id: int) -> bytes:
        """The framed v0 UNSUPPORTED_VERSION answer to an ApiVersions version not served."""
        return self._framed(correlation_id, self._api_versions_unsupported)

    def handshake(self, version: int, error: Errors, correlation_id: int) -> bytes:
        """The framed SaslHandshake response with ``error`` and the enabled mechanisms."""
        return self._framed(correlation_id, self._handshake[(version, int(error))])
