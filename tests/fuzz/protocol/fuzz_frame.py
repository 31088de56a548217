"""Kafka framing (tokensvc.protocol.framing): a byte stream cut into frames.

The first byte picks the size of the chunks the stream arrives in. Property: the frames
given out, each with its size prefix, are exactly the start of the stream; nothing is
buffered beyond one frame's size limit; a refused size prefix keeps the decoder failed.
"""

from __future__ import annotations

from tokensvc.protocol import FrameDecoder, ProtocolError, frame

ERRORS = (ProtocolError,)
MAX_FRAME = 512


def fuzz_one(data: bytes) -> None:
    if not data:
        return
    step = data[0] % 16 + 1
    stream = data[1:]
    decoder = FrameDecoder(MAX_FRAME)
    out = bytearray()
    for start in range(0, len(stream), step):
        decoder.feed(stream[start:start + step])
        assert decoder.buffered <= MAX_FRAME + 4 + step
        while (payload := decoder.next_frame()) is not None:
            out += frame(payload)
    assert stream.startswith(out), "frames differ from the stream"
    assert len(out) + decoder.buffered == len(stream)
