"""Malformed input gets the right exception, and never any other exception.

Decoding: ProtocolError (CORRUPT_MESSAGE) for bytes that cannot be read,
UnsupportedVersionError (carrying the header) for APIs/versions not spoken here.
Framing: FrameTooLargeError as soon as a bad size prefix is seen.
Encoding a body that does not fit: EncodeError.
"""

from __future__ import annotations

import struct

import pytest

from tests.unit.protocol.test_protocol_roundtrip import REQUEST_SAMPLES, RESPONSE_SAMPLES
from tokensvc.core.errors import Errors, KafkaError
from tokensvc.protocol import (
    EncodeError,
    FrameDecoder,
    FrameTooLargeError,
    ProtocolError,
    RequestHeader,
    UnsupportedVersionError,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    frame,
)
from tokensvc.protocol.api import ApiKey


def i16(v: int) -> bytes:
    return struct.pack(">h", v)


def i32(v: int) -> bytes:
    return struct.pack(">i", v)


def header_v1(key: int, version: int, corr: int = 1, client: bytes = b"\x00\x01c") -> bytes:
    return i16(key) + i16(version) + i32(corr) + client


def _valid_requests() -> list[bytes]:
    out = []
    for key, entries in REQUEST_SAMPLES.items():
        for first, body in entries:
            for version in (first, max(3, first)):
                try:
                    out.append(encode_request(RequestHeader(key, version, 5, "c"), body))
                except UnsupportedVersionError:
                    continue
    return out


VALID_REQUESTS = _valid_requests()


def test_protocol_errors_are_kafka_errors() -> None:
    error = ProtocolError("bad")
    assert isinstance(error, KafkaError)
    assert error.error is Errors.CORRUPT_MESSAGE
    assert issubclass(UnsupportedVersionError, ProtocolError)
    assert issubclass(FrameTooLargeError, ProtocolError)


@pytest.mark.parametrize("payload", VALID_REQUESTS[::3])
def test_every_truncation_of_a_request_is_a_protocol_error(payload: bytes) -> None:
    for cut in range(len(payload)):
        with pytest.raises(ProtocolError) as info:
            decode_request(payload[:cut])
        assert type(info.value) is ProtocolError, cut


def test_every_truncation_of_a_response_is_a_protocol_error() -> None:
    for key, entries in RESPONSE_SAMPLES.items():
        for first, body in entries:
            for version in {first, 2, 3}:
                if version < first:
                    continue
                try:
                    payload = encode_response(RequestHeader(key, version, 5, None), body)
                except UnsupportedVersionError:
                    continue
                v0_error = None
                if key == 18 and body.get("ErrorCode"):
                    # An ApiVersions error cut right after ApiKeys is a valid v0 error
                    # response: what a broker sends for an unsupported version.
                    v0_error = len(encode_response(RequestHeader(key, 0, 5, None), body))
                for cut in range(len(payload)):
                    if cut == v0_error:
                        continue
                    with pytest.raises(ProtocolError):
                        decode_response(key, version, payload[:cut])


@pytest.mark.parametrize("payload", VALID_REQUESTS[::4])
def test_trailing_bytes_after_the_body_are_a_protocol_error(payload: bytes) -> None:
    with pytest.raises(ProtocolError, match="trailing"):
        decode_request(payload + b"\x00")


def test_trailing_bytes_after_a_response_are_a_protocol_error() -> None:
    payload = encode_response(RequestHeader(ApiKey.RENEW_DELEGATION_TOKEN, 1,
                                            1, None), {"ErrorCode": 0})
    with pytest.raises(ProtocolError, match="trailing"):
        decode_response(ApiKey.RENEW_DELEGATION_TOKEN, 1, payload + b"junk")


def test_truncated_header_is_not_mistaken_for_unsupported_version() -> None:
    for payload in (b"", b"\x00", b"\x00\x12\x00", header_v1(ApiKey.API_VERSIONS, 3)[:9]):
        with pytest.raises(ProtocolError) as info:
            decode_request(payload)
        assert not isinstance(info.value, UnsupportedVersionError)


@pytest.mark.parametrize(("key", "version"), [
    (0, 9),        # Produce: not spoken here
    (999, 0),
    (-1, 0),
    (ApiKey.API_VERSIONS, 5),       # ApiVersions beyond v4
    (ApiKey.METADATA, 13),
    (ApiKey.DESCRIBE_CLUSTER, 2),
    (ApiKey.CREATE_DELEGATION_TOKEN, -1),
])
def test_unknown_api_key_or_version_carries_the_header(key: int, version: int) -> None:
    payload = header_v1(key, version, corr=77, client=b"\x00\x03abc") + b"\x00" * 8
    with pytest.raises(UnsupportedVersionError) as info:
        decode_request(payload)
    assert info.value.error is Errors.UNSUPPORTED_VERSION
    assert info.value.header == RequestHeader(key, version, 77, "abc")


def test_unsupported_version_in_encode_and_decode_response() -> None:
    with pytest.raises(UnsupportedVersionError):
        encode_request(RequestHeader(ApiKey.API_VERSIONS, 9, 1, None), {})
    with pytest.raises(UnsupportedVersionError):
        encode_response(RequestHeader(0, 0, 1, None), {})
    with pytest.raises(UnsupportedVersionError) as info:
        decode_response(ApiKey.METADATA, 99, i32(1))
    assert info.value.header is None


def test_negative_string_length_is_a_protocol_error() -> None:
    with pytest.raises(ProtocolError, match="negative string length"):
        decode_request(header_v1(ApiKey.SASL_HANDSHAKE, 1) + i16(-2))


def test_null_in_non_nullable_string_is_a_protocol_error() -> None:
    with pytest.raises(ProtocolError, match="Mechanism: null"):
        decode_request(header_v1(ApiKey.SASL_HANDSHAKE, 1) + i16(-1))


def test_negative_array_length_is_a_protocol_error() -> None:
    with pytest.raises(ProtocolError, match="negative array length"):
        decode_request(header_v1(ApiKey.CREATE_DELEGATION_TOKEN, 1) + i32(-5) + b"\x00" * 8)


def test_null_in_non_nullable_array_is_a_protocol_error() -> None:
    with pytest.raises(ProtocolError, match="Renewers: null"):
        decode_request(header_v1(ApiKey.CREATE_DELEGATION_TOKEN, 1) + i32(-1) + b"\x00" * 8)


def test_huge_array_length_is_refused_before_reading_elements() -> None:
    with pytest.raises(ProtocolError, match="cannot fit"):
        decode_request(header_v1(ApiKey.CREATE_DELEGATION_TOKEN, 1) + i32(2**31 - 1) + b"\x00" * 8)


def test_array_of_larger_elements_than_the_bytes_left_is_refused() -> None:
    # Three renewers need at least 3 * 4 bytes (two empty classic strings each).
    with pytest.raises(ProtocolError, match="cannot fit"):
        decode_request(header_v1(ApiKey.CREATE_DELEGATION_TOKEN, 1) + i32(3) + b"\x00" * 10)


def test_huge_compact_lengths_are_protocol_errors() -> None:
    huge = b"\xff\xff\xff\xff\x07"  # 2**32 - 1
    flexible_header = header_v1(ApiKey.SASL_AUTHENTICATE, 2) + b"\x00"
    with pytest.raises(ProtocolError, match="truncated bytes"):
        decode_request(flexible_header + huge + b"\x00")
    with pytest.raises(ProtocolError, match="exceeds 32767"):
        decode_request(header_v1(ApiKey.CREATE_DELEGATION_TOKEN, 3) + b"\x00" + b"\x81\x80\x02" + b"x" * 40000)
    with pytest.raises(ProtocolError, match="cannot fit"):
        decode_request(header_v1(ApiKey.DESCRIBE_DELEGATION_TOKEN, 3) + b"\x00" + huge + b"\x00")


def test_bad_varints_are_protocol_errors() -> None:
    flexible_header = header_v1(ApiKey.SASL_AUTHENTICATE, 2) + b"\x00"
    with pytest.raises(ProtocolError, match="longer than 5 bytes"):
        decode_request(flexible_header + b"\x80" * 6 + b"\x01")
    with pytest.raises(ProtocolError, match="does not fit 32 bits"):
        decode_request(flexible_header + b"\xff\xff\xff\xff\x1f" + b"\x00")
    with pytest.raises(ProtocolError, match="truncated varint"):
        decode_request(flexible_header + b"\x80\x80")


def test_too_many_tagged_fields_are_refused_before_reading_them() -> None:
    payload = header_v1(ApiKey.SASL_AUTHENTICATE, 2) + b"\xff\xff\xff\xff\x07" + b"\x01" + b"\x00"
    with pytest.raises(ProtocolError, match="tagged fields cannot fit"):
        decode_request(payload)


def test_invalid_utf8_is_a_protocol_error() -> None:
    with pytest.raises(ProtocolError, match="UTF-8"):
        decode_request(header_v1(ApiKey.SASL_HANDSHAKE, 1) + i16(2) + b"\xc3\x28")
    with pytest.raises(ProtocolError, match="RequestHeader"):
        decode_request(header_v1(ApiKey.SASL_HANDSHAKE, 1, client=i16(1) + b"\xff") + i16(0))


def test_error_names_where_in_the_message_it_is() -> None:
    payload = header_v1(ApiKey.CREATE_DELEGATION_TOKEN, 1) + i32(2) + i16(4) + b"User" + i16(1) + b"a" + i16(4) + b"User"
    with pytest.raises(ProtocolError) as info:
        decode_request(payload + i16(5) + b"\xff\xff\xff\xff\xff" + b"\x00" * 8)
    assert info.value.message.startswith("CreateDelegationTokenRequest(v1).Renewers[1].PrincipalName")


@pytest.mark.parametrize(("body", "match"), [
    ({"Mechanism": None}, "non-nullable"),
    ({"Mechanism": 5}, "needs a str"),
    ({"Mechanism": "x" * 40000}, "exceeds 32767"),
])
def test_bodies_that_do_not_fit_are_encode_errors(body: dict, match: str) -> None:
    with pytest.raises(EncodeError, match=match):
        encode_request(RequestHeader(ApiKey.SASL_HANDSHAKE, 1, 1, None), body)


@pytest.mark.parametrize(("key", "version", "body"), [
    (ApiKey.RENEW_DELEGATION_TOKEN, 1, {"ErrorCode": 2**15}),
    (ApiKey.RENEW_DELEGATION_TOKEN, 1, {"ExpiryTimestampMs": "soon"}),
    (ApiKey.CREATE_DELEGATION_TOKEN, 2, {"Hmac": "not-bytes"}),
    (ApiKey.METADATA, 12, {"Topics": [{"TopicId": b"short"}]}),
    (ApiKey.METADATA, 12, {"Brokers": {"NodeId": 1}}),
    (ApiKey.DESCRIBE_DELEGATION_TOKEN, 3, {"Tokens": ["not a dict"]}),
])
def test_response_bodies_that_do_not_fit_are_encode_errors(key: int, version: int,
                                                           body: dict) -> None:
    with pytest.raises(EncodeError):
        encode_response(RequestHeader(key, version, 1, None), body)


def test_metadata_v0_cannot_encode_null_topics() -> None:
    with pytest.raises(EncodeError):
        encode_request(RequestHeader(ApiKey.METADATA, 0, 1, None), {"Topics": None})


# --- framing -----------------------------------------------------------------


def test_frame_prefixes_the_size() -> None:
    assert frame(b"abc") == b"\x00\x00\x00\x03abc"
    assert frame(b"") == b"\x00\x00\x00\x00"


def test_frame_decoder_reassembles_byte_by_byte() -> None:
    decoder = FrameDecoder(max_size=100)
    stream = frame(b"hello") + frame(b"") + frame(b"world!")
    frames = []
    for byte in stream:
        decoder.feed(bytes([byte]))
        while (payload := decoder.next_frame()) is not None:
            frames.append(payload)
    assert frames == [b"hello", b"", b"world!"]
    assert decoder.buffered == 0


def test_frame_decoder_splits_several_frames_in_one_chunk() -> None:
    decoder = FrameDecoder(max_size=100)
    decoder.feed(frame(b"a") + frame(b"bb") + frame(b"ccc")[:5])
    assert decoder.next_frame() == b"a"
    assert decoder.next_frame() == b"bb"
    assert decoder.next_frame() is None
    assert decoder.buffered == 5
    decoder.feed(b"cc")
    assert decoder.next_frame() == b"ccc"
    assert decoder.next_frame() is None


def test_frame_of_exactly_max_size_is_accepted() -> None:
    decoder = FrameDecoder(max_size=4)
    decoder.feed(frame(b"1234"))
    assert decoder.next_frame() == b"1234"


def test_oversized_frame_is_refused_from_its_size_prefix_alone() -> None:
    decoder = FrameDecoder(max_size=1024)
    with pytest.raises(FrameTooLargeError) as info:
        decoder.feed(i32(2**31 - 1))
    assert info.value.size == 2**31 - 1
    assert info.value.error is Errors.INVALID_REQUEST
    assert decoder.buffered == 0


def test_negative_frame_size_is_refused() -> None:
    decoder = FrameDecoder(max_size=1024)
    decoder.feed(b"\xff\xff")
    with pytest.raises(FrameTooLargeError, match="invalid frame size -1"):
        decoder.feed(b"\xff\xff")


def test_frames_before_a_bad_size_are_still_delivered() -> None:
    decoder = FrameDecoder(max_size=8)
    decoder.feed(frame(b"ok") + i32(9) + b"x")
    assert decoder.next_frame() == b"ok"
    with pytest.raises(FrameTooLargeError):
        decoder.next_frame()


def test_failed_frame_decoder_stays_failed() -> None:
    decoder = FrameDecoder(max_size=8)
    with pytest.raises(FrameTooLargeError):
        decoder.feed(i32(-5))
    with pytest.raises(FrameTooLargeError):
        decoder.feed(frame(b"ok"))
    with pytest.raises(FrameTooLargeError):
        decoder.next_frame()
