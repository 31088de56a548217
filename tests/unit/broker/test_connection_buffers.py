"""The connection layer's pure parts: the reused receive buffer, the request memory pool,
and the precomputed ApiVersions and SaslHandshake responses. No sockets."""

from __future__ import annotations

import random

import pytest

from tokensvc.broker.handlers.cluster import api_versions_body
from tokensvc.broker.network.memory import RequestMemoryPool
from tokensvc.broker.network.precomputed import HANDSHAKE_ERRORS, PrecomputedResponses
from tokensvc.broker.network.receive import ReceiveBuffer
from tokensvc.core.errors import Errors
from tokensvc.protocol import SUPPORTED, FrameTooLargeError, RequestHeader, encode_response, frame
from tokensvc.protocol.api import ApiKey


def feed(rx: ReceiveBuffer, data: bytes) -> None:
    """What the transport does: write into ``writable()`` and report the count."""
    while data:
        room = rx.writable()
        assert len(room) > 0, "the buffer offered no room while bytes were waiting"
        n = min(len(room), len(data))
        room[:n] = data[:n]
        rx.received(n)
        data = data[n:]


def frames(rx: ReceiveBuffer) -> list[bytes]:
    out = []
    while (payload := rx.next_frame()) is not None:
        out.append(bytes(payload))
    return out


# -- ReceiveBuffer ------------------------------------------------------------------------


def test_frames_split_at_every_byte_come_out_whole_and_in_order() -> None:
    payloads = [bytes([i]) * (i * 7 % 300) for i in range(40)]
    stream = b"".join(frame(p) for p in payloads)
    rx = ReceiveBuffer(512)
    got = []
    rng = random.Random(5)
    pos = 0
    while pos < len(stream):
        rx.make_room()
        step = min(rng.randint(1, 64), rx.free)
        assert step > 0
        feed(rx, stream[pos:pos + step])
        pos += step
        got += frames(rx)
    assert got == payloads
    assert rx.buffered == 0


def test_a_frame_is_a_view_of_the_buffer_not_a_copy() -> None:
    rx = ReceiveBuffer(64)
    feed(rx, frame(b"hello"))
    payload = rx.next_frame()
    assert isinstance(payload, memoryview)
    assert payload.obj is rx.writable().obj  # same underlying buffer


def test_buffer_is_reused_from_its_start_once_every_frame_is_consumed() -> None:
    rx = ReceiveBuffer(64)
    for _ in range(100):
        feed(rx, frame(b"x" * 30))
        assert bytes(rx.next_frame()) == b"x" * 30
        assert rx.free == 64  # back at the start: no growth, no compaction needed
    assert rx.capacity == 64


def test_make_room_moves_a_straddling_frame_to_the_front() -> None:
    rx = ReceiveBuffer(64)
    feed(rx, frame(b"a" * 40) + frame(b"b" * 30)[:10])
    assert bytes(rx.next_frame()) == b"a" * 40
    assert rx.free == 64 - 54
    rx.make_room()
    assert rx.free == 64 - 10
    feed(rx, frame(b"b" * 30)[10:])
    assert frames(rx) == [b"b" * 30]


def test_size_prefix_above_max_is_refused_before_its_body_arrives() -> None:
    rx = ReceiveBuffer(64, max_size=100)
    feed(rx, (101).to_bytes(4, "big"))
    with pytest.raises(FrameTooLargeError):
        rx.next_frame()


def test_negative_size_prefix_is_refused() -> None:
    rx = ReceiveBuffer(64)
    feed(rx, (-1).to_bytes(4, "big", signed=True))
    with pytest.raises(FrameTooLargeError):
        rx.next_frame()


def test_large_frame_needs_room_then_grows_and_shrinks_back() -> None:
    rx = ReceiveBuffer(64)
    big = b"z" * 1000
    feed(rx, frame(big)[:64])
    assert rx.next_frame() is None
    assert rx.room_needed() == 1004
    assert rx.free == 0
    rx.grow(rx.room_needed())
    assert rx.capacity == 1004
    feed(rx, frame(big)[64:])
    assert frames(rx) == [big]
    assert rx.shrink()
    assert rx.capacity == 64


def test_shrink_keeps_the_large_buffer_while_the_next_frame_needs_it() -> None:
    rx = ReceiveBuffer(64)
    rx.grow(2004)
    feed(rx, frame(b"a" * 1000) + frame(b"b" * 1000)[:100])
    assert frames(rx) == [b"a" * 1000]
    assert not rx.shrink()
    rx.make_room()
    feed(rx, frame(b"b" * 1000)[100:])
    assert frames(rx) == [b"b" * 1000]
    assert rx.shrink()


# -- RequestMemoryPool ------------------------------------------------------------------------


def test_pool_refuses_past_its_capacity_and_serves_waiters_in_order_on_release() -> None:
    pool = RequestMemoryPool(100)
    assert pool.try_reserve(60)
    assert not pool.try_reserve(50)
    granted: list[str] = []

    def waiter(name: str, size: int):
        def callback() -> bool:
            if pool.reserve_for_waiter(size):
                granted.append(name)
                return True
            return False
        return callback

    first, second = waiter("first", 50), waiter("second", 10)
    pool.wait(first)
    pool.wait(second)
    # A newcomer does not overtake the line, even when it would fit.
    assert not pool.try_reserve(10)
    pool.release(60)
    assert granted == ["first", "second"]
    assert pool.used == 60
    assert pool.waiting == 0


def test_pool_waiter_that_still_does_not_fit_keeps_its_place() -> None:
    pool = RequestMemoryPool(100)
    assert pool.try_reserve(90)
    calls = []

    def big() -> bool:
        calls.append("big")
        return pool.reserve_for_waiter(80)

    pool.wait(big)
    assert pool.try_reserve(0) is False
    pool.release(5)  # 85 used: 80 more does not fit
    assert pool.waiting == 1
    pool.release(85)
    assert pool.waiting == 0 and pool.used == 80
    assert calls == ["big", "big"]


def test_cancelled_waiter_is_never_called() -> None:
    pool = RequestMemoryPool(10)
    assert pool.try_reserve(10)

    def never() -> bool:
        raise AssertionError("called after cancel")

    pool.wait(never)
    pool.cancel(never)
    pool.release(10)
    assert pool.used == 0


def test_pool_without_cap_always_reserves() -> None:
    pool = RequestMemoryPool(-1)
    assert pool.try_reserve(2**40)


# -- precomputed responses ---------------------------------------------------------------------


@pytest.mark.parametrize("version", range(SUPPORTED[18][0], SUPPORTED[18][1] + 1))
def test_precomputed_api_versions_equal_the_codec_encoding(version: int) -> None:
    responses = PrecomputedResponses(["SCRAM-SHA-256", "SCRAM-SHA-512"])
    corr = 0x12345678
    expected = frame(encode_response(RequestHeader(ApiKey.API_VERSIONS, version,
                                                   corr, "c"), api_versions_body()))
    assert responses.api_versions(version, corr) == expected


def test_precomputed_unsupported_api_versions_is_the_v0_error_answer() -> None:
    responses = PrecomputedResponses(["SCRAM-SHA-512"])
    expected = frame(encode_response(RequestHeader(ApiKey.API_VERSIONS, 0, -5, None),
                                     api_versions_body(Errors.UNSUPPORTED_VERSION)))
    assert responses.api_versions_unsupported(-5) == expected


@pytest.mark.parametrize("error", HANDSHAKE_ERRORS)
@pytest.mark.parametrize("version", range(SUPPORTED[17][0], SUPPORTED[17][1] + 1))
def test_precomputed_handshake_equals_the_codec_encoding(version: int, error: Errors) -> None:
    mechanisms = ["SCRAM-SHA-256", "SCRAM-SHA-512"]
    responses = PrecomputedResponses(mechanisms)
    body = {"ErrorCode": int(error), "Mechanisms": mechanisms}
    expected = frame(encode_response(RequestHeader(ApiKey.SASL_HANDSHAKE, version, 77, "c"), body))
    assert responses.handshake(version, error, 77) == expected
