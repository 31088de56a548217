"""The request header (tokensvc.protocol.codec.decode_request_header) of a raw frame.

Property: the body offset lies within the payload; an unsupported key or version
carries the header read so far (the broker answers ApiVersions from it).
"""

from __future__ import annotations

from tokensvc.protocol import UnsupportedVersionError, decode_request_header
from tokensvc.protocol.errors import ProtocolError

ERRORS = (ProtocolError,)


def fuzz_one(data: bytes) -> None:
    try:
        header, offset = decode_request_header(data)
    except UnsupportedVersionError as exc:
        assert exc.header is not None, "no header on an unsupported version"
        raise
    assert 8 <= offset <= len(data)
    assert header.client_id is None or isinstance(header.client_id, str)
