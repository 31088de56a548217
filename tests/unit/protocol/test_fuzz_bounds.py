"""Hostile input is bounded: no hang, no allocation out of proportion to the bytes received.

The codec and SCRAM fuzz tests (``test_protocol_fuzz.py``, ``test_scram_exchange.py``)
check that only protocol or authentication errors escape. These add the two properties
a fuzzer alone does not show:

* memory: a length prefix, an element count or a tagged-field count that lies is
  refused before anything of that size is allocated -- the peak allocation while
  decoding (``tracemalloc``) stays within a small multiple of the input, whatever the
  prefix claims; a frame decoder never holds more than one refused size prefix, and
  never more than ``max_size`` plus a prefix between frames;
* time: work is linear in the input (a flood of 50,000 unknown tagged fields decodes;
  a SCRAM message over the size limit is refused before it is parsed) and a hostile
  SCRAM server cannot make the client run PBKDF2 beyond the largest iteration count a
  server may store. Each test is capped by ``pytest-timeout`` rather than by a timing
  assertion.
"""

from __future__ import annotations

import struct
import tracemalloc
from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tokensvc.core.clock import FakeClock
from tokensvc.protocol import FrameDecoder, ProtocolError, decode_request
from tokensvc.protocol.api import ApiKey
from tokensvc.protocol.framing import SIZE_PREFIX
from tokensvc.protocol.primitives import encode_uvarint
from tokensvc.scram.client import ScramClient
from tokensvc.scram.formatter import MAX_ITERATIONS, ScramMechanism
from tokensvc.scram.messages import ScramAuthenticationError
from tokensvc.scram.server import ScramServer

pytestmark = pytest.mark.timeout(60)

# Interpreter overhead of one decode attempt (exception objects, small dicts), plus a
# constant factor of the input for the copies a decoder legitimately makes.
BASE_BYTES = 64 * 1024
PER_INPUT_BYTE = 4
HUGE = b"\xff\xff\xff\xff\x0f"  # uvarint 2**32 - 1


def _i16(v: int) -> bytes:
    return struct.pack(">h", v)


def _i32(v: int) -> bytes:
    return struct.pack(">i", v)


def _header(api_key: int, version: int, flexible: bool) -> bytes:
    header = _i16(api_key) + _i16(version) + _i32(1) + _i16(1) + b"c"
    return header + (b"\x00" if flexible else b"")


def _peak_bytes(fn: Callable[[], object], expected: type[Exception] = ProtocolError) -> int:
    """Peak bytes allocated while ``fn`` runs (the ``expected`` exception is swallowed)."""
    tracemalloc.start()
    try:
        fn()
    except expected:
        pass
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    return peak


LYING_PAYLOADS = {
    # DescribeDelegationToken v0: Owners array claims 2**31 - 1 elements.
    "classic array count": _header(ApiKey.DESCRIBE_DELEGATION_TOKEN, 0,
                                   False) + _i32(2**31 - 1) + b"\x00" * 64,
    # DescribeDelegationToken v3: compact array count 2**32 - 2.
    "compact array count": _header(ApiKey.DESCRIBE_DELEGATION_TOKEN, 3, True) + HUGE + b"\x00" * 64,
    # SaslAuthenticate v0: bytes field claims 2 GB.
    "classic bytes length": _header(ApiKey.SASL_AUTHENTICATE, 0,
                                    False) + _i32(2**31 - 1) + b"x" * 64,
    # SaslAuthenticate v2: compact bytes claims 4 GB.
    "compact bytes length": _header(ApiKey.SASL_AUTHENTICATE, 2, True) + HUGE + b"x" * 64,
    # SaslHandshake v1: string claims 32 KB, 10 bytes follow.
    "string length": _header(ApiKey.SASL_HANDSHAKE, 1, False) + _i16(0x7FFF) + b"x" * 10,
    # ApiVersions v3: header tagged-field count 2**32 - 1.
    "header tagged-field count": _i16(18) + _i16(3) + _i32(1) + _i16(1) + b"c" + HUGE,
    # ApiVersions v3: one header tagged field claiming 4 GB.
    "tagged-field size": _i16(18) + _i16(3) + _i32(1) + _i16(1) + b"c" + b"\x01\x07" + HUGE,
    # CreateAcls v0: creations count in the billions, each element at least 11 bytes.
    "struct array count": _header(ApiKey.CREATE_ACLS, 0, False) + _i32(10**9) + b"\x00" * 200,
    # ExpireDelegationToken v2 (flexible): body tagged-field count 2**31.
    "body tagged-field count": _header(ApiKey.EXPIRE_DELEGATION_TOKEN, 2,
                                       True) + b"\x01" + b"\x00" * 8 + encode_uvarint(2**31),
}


@pytest.mark.parametrize("payload", list(LYING_PAYLOADS.values()), ids=list(LYING_PAYLOADS))
def test_a_lying_length_is_refused_without_allocating_what_it_claims(payload: bytes) -> None:
    with pytest.raises(ProtocolError):
        decode_request(payload)
    peak = _peak_bytes(lambda: decode_request(payload))
    assert peak < BASE_BYTES + PER_INPUT_BYTE * len(payload)


def test_fifty_thousand_unknown_tagged_fields_decode_in_memory_linear_in_the_input() -> None:
    # Unknown tags only: from 10,000 up (tokensvc's own header tag is 7,500).
    fields = b"".join(encode_uvarint(10_000 + i) + b"\x00" for i in range(50_000))
    payload = (_i16(18) + _i16(3) + _i32(1) + _i16(1) + b"c" + encode_uvarint(50_000) + fields
               + b"\x01\x01\x00")
    header, body = decode_request(payload)
    assert header.api_key == ApiKey.API_VERSIONS and body["ClientSoftwareName"] == ""
    peak = _peak_bytes(lambda: decode_request(payload))
    assert peak < BASE_BYTES + PER_INPUT_BYTE * len(payload)


@pytest.mark.parametrize("size", [-1, -(2**31), 2**31 - 1, 1025])
def test_a_refused_size_prefix_is_dropped_with_the_bytes_behind_it(size: int) -> None:
    decoder = FrameDecoder(1024)
    with pytest.raises(ProtocolError):
        decoder.feed(_i32(size) + b"x" * 4096)
    assert decoder.buffered == 0
    with pytest.raises(ProtocolError):
        decoder.feed(b"x" * 4096)
    assert decoder.buffered == 0


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(st.binary(max_size=300),
                          st.integers(0, 600).map(lambda n: _i32(n) + b"y" * min(n, 120))),
                max_size=30),
       st.integers(0, 512))
def test_between_frames_a_decoder_holds_at_most_one_frame_and_a_prefix(
    chunks: list[bytes], max_size: int
) -> None:
    decoder = FrameDecoder(max_size)
    try:
        for chunk in chunks:
            decoder.feed(chunk)
            while (payload := decoder.next_frame()) is not None:
                assert len(payload) <= max_size
            assert decoder.buffered < max_size + SIZE_PREFIX + SIZE_PREFIX
    except ProtocolError:
        assert decoder.buffered == 0


class _NoCredentials:
    def user_credential(self, username, mechanism):
        return None

    def token_salt(self, token_id, mechanism):
        return None

    def token_credential(self, token_id, mechanism):
        return None

    def derived_count(self):
        return 0


@pytest.mark.parametrize("size", [8193, 1_000_000])
def test_scram_message_over_the_limit_is_refused_before_it_is_parsed(size: int) -> None:
    server = ScramServer(ScramMechanism.SCRAM_SHA_256, _NoCredentials(), FakeClock(0),
                         max_message_bytes=8192)
    message = (b"n,,n=user,r=nonce," + b"a=" * (size // 2))[:size]
    peak = _peak_bytes(lambda: server.evaluate(message), ScramAuthenticationError)
    assert server.failure_reason == "malformed"
    assert peak < BASE_BYTES  # not even one copy of the message


@pytest.mark.parametrize("iterations", [MAX_ITERATIONS + 1, 2**31 - 1, 10**40])
def test_client_refuses_a_server_iteration_count_it_would_spin_on(iterations: int) -> None:
    client = ScramClient(ScramMechanism.SCRAM_SHA_512, "user", "password")
    nonce = client.first_message().decode().rsplit("r=", 1)[1]
    server_first = f"r={nonce}server,s=c2FsdHNhbHQ=,i={iterations}".encode()
    with pytest.raises(ScramAuthenticationError):
        client.final_message(server_first)
