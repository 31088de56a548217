"""The SaslAuthenticate fast path writes and reads exactly what the generic codec does."""

from __future__ import annotations

import random

import pytest

from tokensvc.protocol import ProtocolError, RequestHeader, encode_request, encode_response
from tokensvc.protocol.api import ApiKey
from tokensvc.protocol.codec import decode_request_header
from tokensvc.protocol.messages import REQUESTS
from tokensvc.protocol.primitives import Reader
from tokensvc.protocol.sasl_fast import (
    encode_sasl_authenticate_response,
    read_sasl_authenticate_request,
)

KEY = int(ApiKey.SASL_AUTHENTICATE)
VERSIONS = (0, 1, 2)

BODIES = [
    {"ErrorCode": 0, "ErrorMessage": None, "AuthBytes": b"", "SessionLifetimeMs": 0},
    {"ErrorCode": 0, "ErrorMessage": None, "AuthBytes": b"v=abc", "SessionLifetimeMs": 3_600_000},
    {"ErrorCode": 58, "ErrorMessage": "Authentication failed during authentication due to "
     "invalid credentials with SASL mechanism SCRAM-SHA-256", "AuthBytes": b"",
     "SessionLifetimeMs": 0},
    {"ErrorCode": 34, "ErrorMessage": "", "AuthBytes": bytes(range(256)) * 3,
     "SessionLifetimeMs": 2**62},
    {"ErrorCode": -1, "ErrorMessage": "é" * 200, "AuthBytes": b"\x00" * 127,
     "SessionLifetimeMs": -5},
    {"ErrorCode": 0, "ErrorMessage": None, "AuthBytes": b"x" * 16_500, "SessionLifetimeMs": 1},
]


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("body", BODIES, ids=range(len(BODIES)))
def test_responses_are_the_generic_codecs_bytes(version: int, body: dict) -> None:
    header = RequestHeader(KEY, version, 123_456_789, "client")
    assert encode_sasl_authenticate_response(header, body) == encode_response(header, body)


@pytest.mark.parametrize("version", VERSIONS)
def test_a_response_without_optional_fields_matches_too(version: int) -> None:
    header = RequestHeader(KEY, version, -7, None)
    body = {"ErrorCode": 33, "AuthBytes": b"r=nonce"}
    generic = encode_response(header, dict(body, ErrorMessage=None, SessionLifetimeMs=0))
    assert encode_sasl_authenticate_response(header, body) == generic


def _generic_read(payload: bytes) -> dict:
    header, offset = decode_request_header(payload)
    return REQUESTS[ApiKey.SASL_AUTHENTICATE].read(Reader(payload, offset), header.api_version,
                                                   header.api_version >= 2)


def _fast_read(payload: bytes) -> dict:
    header, offset = decode_request_header(payload)
    return read_sasl_authenticate_request(Reader(payload, offset), header.api_version)


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("size", [0, 1, 126, 127, 128, 300, 20_000])
def test_requests_read_as_the_generic_codec_reads_them(version: int, size: int) -> None:
    auth = bytes(random.Random(size).randrange(256) for _ in range(size))
    payload = encode_request(RequestHeader(KEY, version, 9, "c"), {"AuthBytes": auth})
    assert _fast_read(payload) == _generic_read(payload) == {"AuthBytes": auth}


@pytest.mark.parametrize("version", VERSIONS)
def test_malformed_requests_are_refused_by_both(version: int) -> None:
    """Truncations and random corruptions: both readers refuse the same payloads with
    ProtocolError, and agree on every payload they accept."""
    rng = random.Random(version)
    good = encode_request(RequestHeader(KEY, version, 9, "c"), {"AuthBytes": b"n,,n=a,r=b" * 20})
    header_end = decode_request_header(good)[1]
    candidates = [good[:cut] for cut in range(header_end, len(good))]
    for _ in range(400):
        mutated = bytearray(good)
        for _ in range(rng.randrange(1, 4)):
            mutated[rng.randrange(header_end, len(mutated))] = rng.randrange(256)
        candidates.append(bytes(mutated))
    refused = 0
    for payload in candidates:
        try:
            generic = _generic_read(payload)
        except ProtocolError:
            with pytest.raises(ProtocolError):
                _fast_read(payload)
            refused += 1
            continue
        assert _fast_read(payload) == generic
    assert refused >= len(good) - header_end  # every truncation at least
