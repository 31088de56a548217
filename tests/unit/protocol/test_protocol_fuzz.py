"""Bounded fuzzing: whatever bytes arrive, only ProtocolError-family exceptions escape.

Random bytes rarely get past the header, so the decoders are also fed valid
payloads with random bytes overwritten, inserted or cut off.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.unit.protocol.test_protocol_roundtrip import REQUEST_SAMPLES, RESPONSE_SAMPLES
from tokensvc.protocol import (
    SUPPORTED,
    FrameDecoder,
    ProtocolError,
    RequestHeader,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
)

# A hang is a failure: fail fast instead of waiting for the suite's global timeout.
pytestmark = pytest.mark.timeout(60)
from tokensvc.protocol.principal_serde import deserialize_principal

FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _payloads(samples: dict, encode) -> list[tuple[int, int, bytes]]:
    out = []
    for key, entries in samples.items():
        lo, hi = SUPPORTED[key]
        for first, body in entries:
            for version in {max(lo, first), hi}:
                out.append((int(key), version, encode(RequestHeader(key, version, 9, "c"), body)))
    return out


REQUESTS = _payloads(REQUEST_SAMPLES, encode_request)
RESPONSES = _payloads(RESPONSE_SAMPLES, encode_response)


@st.composite
def mutated(draw: st.DrawFn, payloads: list[tuple[int, int, bytes]]) -> tuple[int, int, bytes]:
    key, version, payload = draw(st.sampled_from(payloads))
    data = bytearray(payload)
    for _ in range(draw(st.integers(1, 4))):
        position = draw(st.integers(0, max(0, len(data) - 1)))
        action = draw(st.sampled_from(["overwrite", "insert", "cut"]))
        byte = draw(st.integers(0, 255))
        if action == "overwrite" and data:
            data[position] = byte
        elif action == "insert":
            data.insert(position, byte)
        else:
            del data[position:]
    return key, version, bytes(data)


def _only_protocol_errors(call, *args) -> None:
    try:
        call(*args)
    except ProtocolError:
        pass


@FUZZ
@given(st.binary(max_size=256))
def test_random_bytes_into_decode_request(data: bytes) -> None:
    _only_protocol_errors(decode_request, data)


@FUZZ
@given(mutated(REQUESTS))
def test_mutated_requests_into_decode_request(case: tuple[int, int, bytes]) -> None:
    _only_protocol_errors(decode_request, case[2])


@FUZZ
@given(mutated(RESPONSES))
def test_mutated_responses_into_decode_response(case: tuple[int, int, bytes]) -> None:
    key, version, payload = case
    _only_protocol_errors(decode_response, key, version, payload)


@FUZZ
@given(st.binary(max_size=64))
def test_random_bytes_into_deserialize_principal(data: bytes) -> None:
    _only_protocol_errors(deserialize_principal, data)


@FUZZ
@given(st.lists(st.binary(max_size=40), max_size=12), st.integers(0, 64))
def test_random_chunks_into_frame_decoder(chunks: list[bytes], max_size: int) -> None:
    decoder = FrameDecoder(max_size)
    try:
        for chunk in chunks:
            decoder.feed(chunk)
            while (payload := decoder.next_frame()) is not None:
                assert len(payload) <= max_size
                _only_protocol_errors(decode_request, payload)
    except ProtocolError:
        pass
