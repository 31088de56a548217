"""ApiVersions requests, the first bytes of every connection, at every version a client
may send (0-4 served; 5-7 must be refused as UNSUPPORTED_VERSION with the header).

The first byte picks the version; the rest is the body. Property: the round trip of
``wire.check_request``; a refused version carries its header.
"""

from __future__ import annotations

from tests.fuzz.protocol.wire import ERRORS, check_request, request_payload
from tokensvc.protocol import ApiKey, UnsupportedVersionError

__all__ = ["ERRORS", "fuzz_one"]


def fuzz_one(data: bytes) -> None:
    if not data:
        return
    version = data[0] % 8
    try:
        check_request(request_payload(ApiKey.API_VERSIONS, version, data[1:]))
    except UnsupportedVersionError as exc:
        assert version > 4 and exc.header is not None
        raise
