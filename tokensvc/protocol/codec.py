"""Requests and responses to and from bytes: headers plus message bodies.

Payloads here are frames *without* their int32 size prefix (see ``framing``).
A request is a request header (v1, or v2 with tagged fields for flexible
versions) then the body; a response is a response header (v0, or v1 for
flexible versions, except ApiVersions which is always v0) then the body.

Decoding is strict: the header must name an API and version this codec knows
(else :class:`UnsupportedVersionError`, carrying the header read so far), the
body must parse completely, and nothing may follow it. Every decoding failure
is a :class:`ProtocolError`; nothing else escapes. Encoding a body that does
not fit its schema raises :class:`EncodeError`.

This module must not touch sockets, and holds no state between calls.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from tokensvc.protocol.api import (
    ApiKey,
    api_key_of,
    flexible,
    request_header_version,
    response_header_version,
    supports,
)
from tokensvc.protocol.errors import (
    EncodeError,
    FrameTooLargeError,
    ProtocolError,
    UnsupportedVersionError,
)
from tokensvc.protocol.framing import FrameDecoder, frame
from tokensvc.protocol.header import RequestHeader
from tokensvc.protocol.messages import REQUESTS, RESPONSES
from tokensvc.protocol.primitives import Reader, Writer
from tokensvc.protocol.sasl_fast import encode_sasl_authenticate_response
from tokensvc.protocol.schema import INT16_T, STRING, Array, EncodedElements, Struct, f

__all__ = [
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
    "frame",
    "response_error_code",
]

# Kafka's request header v2 defines no tagged field. tokensvc's clients send one, far from
# any number Kafka may use: the client's request key (Kafka brokers skip unknown tags).
CLIENT_REQUEST_KEY_TAG = 7_500
_HEADER_TAGS = Struct(
    "HeaderTaggedFields",
    f("ClientRequestKey", STRING, nullable=0, default=None, tag=CLIENT_REQUEST_KEY_TAG),
)


_SASL_AUTHENTICATE = int(ApiKey.SASL_AUTHENTICATE)

#: api_key, api_version and correlation_id: the fixed start of every request header.
_HEADER_FIXED = struct.Struct(">hhi")


def decode_request_header(payload: bytes) -> tuple[RequestHeader, int]:
    """The request header and the offset where the body starts.

    Raises UnsupportedVersionError (with the header) for an unknown api key or
    version, ProtocolError for a malformed header.
    """
    r = Reader(payload)
    try:
        api_key, api_version, correlation_id = r.unpack(_HEADER_FIXED, "int16, int16, int32")
        client_id = STRING.read(r, 0, False, True)
    except ProtocolError as exc:
        raise exc.within("RequestHeader") from None
    header = RequestHeader(api_key, api_version, correlation_id, client_id)
    if not supports(api_key, api_version):
        raise UnsupportedVersionError(header)
    if request_header_version(api_key, api_version) >= 2:
        try:
            tags = _HEADER_TAGS.read(r, api_version, True)
        except ProtocolError as exc:
            raise exc.within("RequestHeader") from None
        header.request_key = tags.get("ClientRequestKey")
    return header, r.pos


def decode_request(payload: bytes) -> tuple[RequestHeader, dict]:
    """Header and body of one request payload (size prefix already removed)."""
    header, offset = decode_request_header(payload)
    schema = REQUESTS[api_key_of(header.api_key)]  # type: ignore[index]
    r = Reader(payload, offset)
    body = _read_body(r, schema, header.api_key, header.api_version)
    return header, body


def encode_request(header: RequestHeader, body: dict) -> bytes:
    """A request payload (without size prefix) for ``header``'s api key and version."""
    schema = _schema(REQUESTS, header.api_key, header.api_version, header)
    w = Writer()
    w.int16(header.api_key)
    w.int16(header.api_version)
    w.int32(header.correlation_id)
    STRING.write(w, header.client_id, 0, False, True)
    is_flexible = flexible(header.api_key, header.api_version)
    if is_flexible:
        _HEADER_TAGS.write(w, {"ClientRequestKey": header.request_key}, header.api_version,
                           True, False)
    schema.write(w, body, header.api_version, is_flexible)
    return w.value()


def encode_response(header: RequestHeader, body: dict) -> bytes:
    """The response payload (without size prefix) answering the request ``header``."""
    return _response_writer(header, body).value()


def encode_response_segments(header: RequestHeader, body: dict) -> list[bytes]:
    """:func:`encode_response` as bytes objects to send in order, pre-encoded parts
    (:class:`~tokensvc.protocol.schema.EncodedElements`) left unjoined. The broker's
    per-request path: SaslAuthenticate, half of a token login's responses, is written
    by hand (:mod:`tokensvc.protocol.sasl_fast`, the same bytes) instead of by the
    schema walk."""
    if header.api_key == _SASL_AUTHENTICATE and supports(header.api_key, header.api_version):
        return [encode_sasl_authenticate_response(header, body)]
    return _response_writer(header, body).segments()


def encode_response_elements(
    api_key: int, api_version: int, field: str, items: Sequence[dict]
) -> EncodedElements:
    """The elements of the top-level array ``field`` of a response, encoded apart from
    the rest (in a worker thread, say) for :func:`encode_response` to put in by
    reference: a large answer then costs the event loop no encoding."""
    schema = RESPONSES[ApiKey(api_key)]
    found = [f for f in schema.fields if f.name == field and f.present_in(api_version)]
    if not found or not isinstance(found[0].type, Array):
        raise ValueError(f"{schema.name} v{api_version} has no array field {field}")
    element = found[0].type.element
    is_flexible = flexible(api_key, api_version)
    w = Writer()
    for item in items:
        element.write(w, item, api_version, is_flexible, False)
    return EncodedElements(len(items), (w.value(),))


def _response_writer(header: RequestHeader, body: dict) -> Writer:
    schema = _schema(RESPONSES, header.api_key, header.api_version, header)
    w = Writer()
    w.int32(header.correlation_id)
    if response_header_version(header.api_key, header.api_version) >= 1:
        w.uvarint(0)
    schema.write(w, body, header.api_version, flexible(header.api_key, header.api_version))
    return w


def decode_response(api_key: int, api_version: int, payload: bytes) -> tuple[int, dict]:
    """Correlation id and body of a response to a request of ``api_key`` v``api_version``.

    As Kafka's clients do, an ApiVersions response that does not parse in the
    requested version is read again as v0, and accepted if it carries an error:
    a broker that does not support the version answers UNSUPPORTED_VERSION in v0.
    """
    try:
        return _decode_response(api_key, api_version, payload)
    except UnsupportedVersionError:
        raise
    except ProtocolError as exc:
        if api_key != ApiKey.API_VERSIONS or api_version == 0:
            raise
        try:
            correlation_id, body = _decode_response(api_key, 0, payload)
        except ProtocolError:
            raise exc from None
        if body["ErrorCode"] == 0:
            raise
        return correlation_id, body


def response_error_code(api_key: int, api_version: int, payload: bytes) -> int | None:
    """The response's top-level ``ErrorCode`` read without decoding the rest of it, when
    that is the first field of the body in this version (the delegation-token APIs);
    None for any other response (decode it). Raises ProtocolError if it is cut short."""
    schema = RESPONSES.get(ApiKey(api_key))
    if schema is None or not supports(api_key, api_version):
        return None
    first = next((fl for fl in schema.fields if fl.present_in(api_version) and fl.tag is None),
                 None)
    if first is None or first.name != "ErrorCode" or first.type is not INT16_T:
        return None
    r = Reader(payload)
    r.int32()
    if response_header_version(api_key, api_version) >= 1:
        _HEADER_TAGS.read(r, api_version, True)
    return r.int16()


def _decode_response(api_key: int, api_version: int, payload: bytes) -> tuple[int, dict]:
    if not supports(api_key, api_version):
        raise UnsupportedVersionError(
            None, f"api key {api_key} version {api_version} is not supported"
        )
    schema = RESPONSES[ApiKey(api_key)]
    r = Reader(payload)
    try:
        correlation_id = r.int32()
        if response_header_version(api_key, api_version) >= 1:
            _HEADER_TAGS.read(r, api_version, True)
    except ProtocolError as exc:
        raise exc.within("ResponseHeader") from None
    return correlation_id, _read_body(r, schema, api_key, api_version)


def _read_body(r: Reader, schema: Struct, api_key: int, api_version: int) -> dict:
    try:
        body = schema.read(r, api_version, flexible(api_key, api_version))
        r.expect_end()
    except ProtocolError as exc:
        raise exc.within(f"{schema.name}(v{api_version})") from None
    return body


def _schema(
    table: dict[ApiKey, Struct], api_key: int, api_version: int, header: RequestHeader
) -> Struct:
    if not supports(api_key, api_version):
        raise UnsupportedVersionError(header)
    return table[api_key_of(api_key)]  # type: ignore[index]  # supported: known
