"""BrokerChannel's requests in flight, against a scripted peer on a loopback socket: answers
matched by correlation id in whatever order they come, and the bound on requests in
flight. PLAINTEXT (no login), no sleeps: the peer answers when the test says."""

from __future__ import annotations

import asyncio

import pytest

from tokensvc.broker.writes.channel import BrokerChannel, ChannelClosed
from tokensvc.protocol import FrameDecoder, decode_request, encode_response, frame
from tokensvc.protocol.api import ApiKey


class Peer:
    """Collects request frames; ``answer(corr)`` answers one with ErrorCode = corr % 100."""

    def __init__(self) -> None:
        self.requests: dict[int, object] = {}
        self.arrived = asyncio.Condition()
        self.writer: asyncio.StreamWriter | None = None
        self.server: asyncio.AbstractServer | None = None

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self.server.sockets[0].getsockname()[1]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.writer = writer
        decoder = FrameDecoder(1 << 20)
        while data := await reader.read(65536):
            decoder.feed(data)
            while (payload := decoder.next_frame()) is not None:
                header, _ = decode_request(bytes(payload))
                async with self.arrived:
                    self.requests[header.correlation_id] = header
                    self.arrived.notify_all()

    async def wait_for(self, count: int) -> None:
        async with self.arrived:
            await self.arrived.wait_for(lambda: len(self.requests) >= count)

    def answer(self, corr: int) -> None:
        header = self.requests[corr]
        body = {"ErrorCode": corr % 100, "ApiKeys": []}
        self.writer.write(frame(encode_response(header, body)))

    async def stop(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.server.close()
        await self.server.wait_closed()


async def _pair(max_in_flight: int = 32) -> tuple[Peer, BrokerChannel]:
    peer = Peer()
    port = await peer.start()
    channel = BrokerChannel("127.0.0.1", port, security_protocol="PLAINTEXT",
                            mechanism="SCRAM-SHA-512", username="", password="",
                            client_id="test", max_in_flight=max_in_flight)
    await channel.connect(5.0)
    return peer, channel


def test_answers_in_reverse_order_reach_their_own_requests():
    async def scenario():
        peer, channel = await _pair()
        try:
            calls = [asyncio.ensure_future(channel.request(ApiKey.API_VERSIONS, 0, {}, timeout=10))
                     for _ in range(5)]
            await peer.wait_for(5)
            assert channel.in_flight == 5
            for corr in sorted(peer.requests, reverse=True):
                peer.answer(corr)
            answers = await asyncio.gather(*calls)
            assert [a["ErrorCode"] for a in answers] == [c % 100 for c in sorted(peer.requests)]
            assert channel.in_flight == 0
        finally:
            await channel.close()
            await peer.stop()

    asyncio.run(scenario())


def test_requests_beyond_the_bound_wait_for_a_slot():
    async def scenario():
        peer, channel = await _pair(max_in_flight=2)
        try:
            calls = [asyncio.ensure_future(channel.request(ApiKey.API_VERSIONS, 0, {}, timeout=10))
                     for _ in range(5)]
            await peer.wait_for(2)
            for _ in range(20):  # let the loop run: no third request may be sent
                await asyncio.sleep(0)
            assert len(peer.requests) == 2 and channel.in_flight == 2
            first = min(peer.requests)
            peer.answer(first)
            await peer.wait_for(3)
            for corr in sorted(peer.requests)[1:]:
                peer.answer(corr)
            await peer.wait_for(5)
            for corr in sorted(peer.requests)[3:]:
                peer.answer(corr)
            answers = await asyncio.gather(*calls)
            assert len(answers) == 5
        finally:
            await channel.close()
            await peer.stop()

    asyncio.run(scenario())


def test_a_request_that_waits_too_long_times_out_and_a_closed_channel_fails_the_rest():
    async def scenario():
        peer, channel = await _pair(max_in_flight=1)
        try:
            held = asyncio.ensure_future(channel.request(ApiKey.API_VERSIONS, 0, {}, timeout=10))
            await peer.wait_for(1)
            with pytest.raises(TimeoutError):  # waited for a slot, never sent
                await channel.request(ApiKey.API_VERSIONS, 0, {}, timeout=0.05)
            assert len(peer.requests) == 1
            await channel.close()
            with pytest.raises(ChannelClosed):
                await held
        finally:
            await peer.stop()

    asyncio.run(scenario())
