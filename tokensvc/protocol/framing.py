"""Kafka's framing: every request and response is an int32 size, then that many bytes.

:class:`FrameDecoder` is sans-IO, in the manner of h11: the caller feeds it
whatever bytes arrived and asks for complete frames. A size prefix that is
negative or above ``max_size`` is refused as soon as its four bytes are seen,
before any of the body is waited for or allocated; after that the decoder
stays failed. This module must not touch sockets or know what a frame holds.
"""

from __future__ import annotations

from tokensvc.protocol.errors import FrameTooLargeError, ProtocolError
from tokensvc.protocol.primitives import INT32

SIZE_PREFIX = INT32.size


def frame(payload: bytes) -> bytes:
    """``payload`` with its int32 size prefix."""
    return INT32.pack(len(payload)) + payload


class FrameDecoder:
    """Splits a byte stream into frame payloads (size prefix removed)."""

    def __init__(self, max_size: int) -> None:
        self.max_size = max_size
        self._buf = bytearray()
        self._start = 0
        self._size: int | None = None
        self._failure: ProtocolError | None = None

    @property
    def buffered(self) -> int:
        """Bytes received but not yet returned as a frame (0 between frames)."""
        return len(self._buf) - self._start

    def feed(self, data: bytes) -> None:
        """Add received bytes. Raises FrameTooLargeError if the next frame's size is refused."""
        if self._failure is not None:
            raise self._failure
        self._buf += data
        self._read_size()

    def next_frame(self) -> bytes | None:
        """The next complete frame's payload, or None until more bytes are fed."""
        if self._failure is not None:
            raise self._failure
        self._read_size()
        size = self._size
        if size is None or self.buffered - SIZE_PREFIX < size:
            return None
        begin = self._start + SIZE_PREFIX
        payload = bytes(self._buf[begin:begin + size])
        self._start = begin + size
        self._size = None
        if self._start == len(self._buf):
            self._buf.clear()
            self._start = 0
        elif self._start > len(self._buf) // 2:
            del self._buf[:self._start]
            self._start = 0
        return payload

    def _read_size(self) -> None:
        if self._size is not None or self.buffered < SIZE_PREFIX:
            return
        size = INT32.unpack_from(self._buf, self._start)[0]
        if size < 0 or size > self.max_size:
            self._failure = FrameTooLargeError(size, self.max_size)
            self._buf.clear()
            self._start = 0
            raise self._failure
        self._size = size
