"""Large encodes and decodes off the event loop.

Owns one rule: a Kafka message with a long array (a revocation's ten thousand
revoked tokens, an EnvelopeResponse carrying their committed states) is encoded or
decoded in a worker thread, not on the event loop; so is a client's request body longer
than :data:`LARGE_FRAME_BYTES` (the connection decodes it in a thread, and the
controller's envelope handler the same request forwarded to it). The codec is Python: in a thread
it gives the GIL back every switch interval (0.5 ms in a broker,
:mod:`tokensvc.broker.loop.eventloop`), so logins keep being answered; on the loop, the
same work held it for hundreds of milliseconds in one piece (B13,
docs/performance.md). Small messages, nearly all of them, stay on the loop: a thread
hop costs more than they do.

Must not: change the bytes (the same codec functions run, only elsewhere), or touch
sockets.
"""

from __future__ import annotations

import asyncio

from tokensvc.protocol import (
    RequestHeader,
    decode_response,
    encode_response,
    encode_response_segments,
)

# An array longer than this makes a message large.
LARGE_ITEMS = 512
# A frame longer than this is decoded in a thread.
LARGE_FRAME_BYTES = 64 * 1024


def is_large(body: dict) -> bool:
    """Whether ``body`` holds a top-level array of more than :data:`LARGE_ITEMS`."""
    return any(isinstance(v, list) and len(v) > LARGE_ITEMS for v in body.values())


async def encode_response_segments_async(header: RequestHeader, body: dict) -> list[bytes]:
    """:func:`~tokensvc.protocol.encode_response_segments`, in a thread when large."""
    if is_large(body):
        return await asyncio.to_thread(encode_response_segments, header, body)
    return encode_response_segments(header, body)


async def encode_response_async(header: RequestHeader, body: dict) -> bytes:
    """:func:`~tokensvc.protocol.encode_response`, in a thread when large."""
    if is_large(body):
        return await asyncio.to_thread(encode_response, header, body)
    return encode_response(header, body)


async def decode_response_async(api_key: int, version: int, payload: bytes) -> tuple[int, dict]:
    """:func:`~tokensvc.protocol.decode_response`, in a thread for a large frame."""
    if len(payload) > LARGE_FRAME_BYTES:
        return await asyncio.to_thread(decode_response, api_key, version, payload)
    return decode_response(api_key, version, payload)
