"""tokensvc's Kafka wire codec: sans-IO, bytes in, dicts out (see docs/protocol.md).

``api`` knows which APIs and versions exist, ``messages`` their field lists,
``schema``/``primitives`` how fields become bytes, ``codec`` the headers and the
public encode/decode functions, ``framing`` the size prefix, ``principal_serde``
the principal carried by EnvelopeRequest. Nothing in this package touches a socket.
"""

from tokensvc.protocol.api import (
    SUPPORTED,
    ApiKey,
    flexible,
    request_header_version,
    response_header_version,
    supports,
)
from tokensvc.protocol.codec import (
    EncodeError,
    FrameDecoder,
    FrameTooLargeError,
    ProtocolError,
    RequestHeader,
    UnsupportedVersionError,
    decode_request,
    decode_request_header,
    decode_response,
    encode_request,
    encode_response,
    encode_response_elements,
    encode_response_segments,
    frame,
    response_error_code,
)

__all__ = [
    "SUPPORTED",
    "ApiKey",
    "EncodeError",
    "FrameDecoder",
    "FrameTooLargeError",
    "ProtocolError",
    "RequestHeader",
    "UnsupportedVersionError",
    "decode_request",
    "decode_request_header",
    "decode_response",
    "encode_request",
    "encode_response",
    "encode_response_elements",
    "encode_response_segments",
    "flexible",
    "frame",
    "request_header_version",
    "response_error_code",
    "response_header_version",
    "supports",
]
