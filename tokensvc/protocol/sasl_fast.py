"""SaslAuthenticate request bodies and responses without the schema walk.

A token login is two SaslAuthenticate round trips, and at thousands of logins a
second the generic codec's walk over the field list (one Python call per field and
per tag buffer) was 5-6 % of a broker's CPU. This module owns the same bytes for
that one API, written out by hand from the field list in ``messages``: v0 (error
code, nullable string, bytes), v1 (+ session lifetime), v2 (flexible: compact
types, tagged fields, response header v1). ``tests/unit/protocol/test_sasl_fast.py`` checks
it byte for byte against the generic codec, including the errors on malformed
bodies. Must not touch sockets.
"""

from __future__ import annotations

import struct

from tokensvc.protocol.errors import ProtocolError
from tokensvc.protocol.header import RequestHeader
from tokensvc.protocol.primitives import Reader, encode_uvarint

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")
_CORRELATION = struct.Struct(">i")
_EMPTY_TAGS = b"\x00"


def encode_sasl_authenticate_response(header: RequestHeader, body: dict) -> bytes:
    """The response payload (without size prefix), as ``encode_response`` builds it."""
    version = header.api_version
    if not 0 <= version <= 2:
        raise ValueError(f"SaslAuthenticate v{version} is not served")
    message = body.get("ErrorMessage")
    text = message.encode("utf-8") if message is not None else None
    auth = body.get("AuthBytes") or b""
    parts = [_CORRELATION.pack(header.correlation_id)]
    if version >= 2:
        parts.append(_EMPTY_TAGS)  # response header v1
    parts.append(_INT16.pack(body.get("ErrorCode", 0) or 0))
    if version >= 2:
        parts.append(b"\x00" if text is None else encode_uvarint(len(text) + 1) + text)
        parts.append(encode_uvarint(len(auth) + 1))
    else:
        parts.append(_INT16.pack(-1) if text is None else _INT16.pack(len(text)) + text)
        parts.append(_INT32.pack(len(auth)))
    parts.append(bytes(auth))
    if version >= 1:
        parts.append(_INT64.pack(body.get("SessionLifetimeMs", 0) or 0))
    if version >= 2:
        parts.append(_EMPTY_TAGS)
    return b"".join(parts)


def read_sasl_authenticate_request(reader: Reader, version: int) -> dict:
    """The body ``{"AuthBytes": ...}`` of a SaslAuthenticate request at ``reader``;
    ProtocolError for a body the generic codec would refuse."""
    if version >= 2:
        size = reader.uvarint() - 1
        if size < 0:
            raise ProtocolError("AuthBytes: null bytes in a non-nullable field")
        auth = reader.take(size, "AuthBytes")
        count = reader.uvarint()
        if count > reader.remaining // 2:  # each takes at least a tag and a size
            raise ProtocolError(f"{count} tagged fields cannot fit in {reader.remaining} bytes")
        for _ in range(count):  # tagged fields: none known, skipped
            reader.uvarint()
            reader.take(reader.uvarint(), "tagged field")
        return {"AuthBytes": auth}
    size = reader.int32()
    if size < 0:
        raise ProtocolError("AuthBytes: null bytes in a non-nullable field")
    return {"AuthBytes": reader.take(size, "AuthBytes")}
