"""The receive buffer of one connection: frames parsed in place, without I/O.

Owns the bytes a connection has read and not yet handed on as a frame: a fixed
buffer of ``RECEIVE_BUFFER_BYTES`` the socket reads straight into (no bytes object
per read), the 4-byte size prefix of each frame and its check against the frame
limit, and growing for (and shrinking back after) a frame larger than the buffer.
A frame's payload is returned as a ``memoryview`` of the buffer: no copy per frame.

Must not: touch sockets, reserve memory (the connection asks the
:class:`~tokensvc.broker.network.memory.RequestMemoryPool` before it grows the buffer),
or read a request beyond its API key.
"""

from __future__ import annotations

from tokensvc.protocol import FrameTooLargeError
from tokensvc.protocol.primitives import INT16, INT32

RECEIVE_BUFFER_BYTES = 4096
SIZE_PREFIX = 4


class ReceiveBuffer:
    """Frames of one connection, parsed in place from a reused buffer (sans-IO).

    The socket writes into :meth:`writable`; :meth:`received` records how much
    it wrote; :meth:`next_frame` returns each complete frame's payload as a
    ``memoryview`` of the buffer, valid until the next call. A size prefix that
    is negative or above ``max_size`` raises ``FrameTooLargeError`` as soon as
    its four bytes are in. The buffer has ``base`` bytes; :meth:`grow` gives
    it room for a larger frame and :meth:`shrink` returns to ``base`` when
    what is left fits again.
    """

    def __init__(self, base: int = RECEIVE_BUFFER_BYTES, max_size: int = 2**31 - 1) -> None:
        self._base = bytearray(base)
        self._buf = self._base
        self._view = memoryview(self._buf)
        self._start = 0
        self._end = 0
        self._size: int | None = None
        self.max_size = max_size

    @property
    def base(self) -> int:
        return len(self._base)

    @property
    def capacity(self) -> int:
        return len(self._buf)

    @property
    def buffered(self) -> int:
        """Bytes received and not yet returned as a frame."""
        return self._end - self._start

    @property
    def free(self) -> int:
        return len(self._buf) - self._end

    def writable(self) -> memoryview:
        return self._view[self._end:]

    @property
    def empty_at_base(self) -> bool:
        """Nothing buffered, in the base buffer: nothing to move, grow or shrink."""
        return self._end == 0 and self._buf is self._base

    def received(self, nbytes: int) -> None:
        self._end += nbytes

    def discard(self) -> None:
        """Drop everything buffered (the connection is closing)."""
        self._start = self._end = 0
        self._size = None

    def next_size(self) -> int | None:
        """The size of the next frame once its prefix is in (checked against ``max_size``)."""
        if self._size is None and self._end - self._start >= SIZE_PREFIX:
            size = INT32.unpack_from(self._buf, self._start)[0]
            if size < 0 or size > self.max_size:
                raise FrameTooLargeError(size, self.max_size)
            self._size = size
        return self._size

    def next_frame(self) -> memoryview | None:
        """The next complete frame's payload, or None until more bytes arrive."""
        size = self.next_size()
        if size is None or self._end - self._start - SIZE_PREFIX < size:
            return None
        begin = self._start + SIZE_PREFIX
        self._start = begin + size
        self._size = None
        if self._start == self._end:
            self._start = self._end = 0
        return self._view[begin:begin + size]

    def next_api_key(self) -> int | None:
        """The API key of the next frame once it is complete, without taking it."""
        size = self.next_size()
        if size is None or size < INT16.size or self._end - self._start - SIZE_PREFIX < size:
            return None
        return INT16.unpack_from(self._buf, self._start + SIZE_PREFIX)[0]

    def room_needed(self) -> int:
        """Capacity the next frame needs to be held whole (4 while its size is unknown)."""
        size = self.next_size()
        return SIZE_PREFIX + (size or 0)

    def make_room(self) -> None:
        """Move the unparsed bytes to the front when the next frame would not fit after them."""
        if self._start and self._start + self.room_needed() > len(self._buf):
            n = self._end - self._start
            # bytes(): the two ranges may overlap.
            self._buf[:n] = bytes(self._view[self._start:self._end])
            self._start, self._end = 0, n

    def grow(self, capacity: int) -> None:
        """Hold ``capacity`` bytes (a frame larger than the buffer is coming)."""
        n = self._end - self._start
        buf = bytearray(capacity)
        buf[:n] = self._view[self._start:self._end]
        self._buf, self._view = buf, memoryview(buf)
        self._start, self._end = 0, n

    def shrink(self) -> bool:
        """Return to the base buffer if what is buffered and the next frame fit in it."""
        if self._buf is self._base:
            return False
        n = self._end - self._start
        if n > len(self._base) or self.room_needed() > len(self._base):
            return False
        self._base[:n] = self._view[self._start:self._end]
        self._buf, self._view = self._base, memoryview(self._base)
        self._start, self._end = 0, n
        return True
