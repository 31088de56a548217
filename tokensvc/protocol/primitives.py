"""Kafka's primitive wire encodings: a bounds-checked Reader and a growing Writer.

This module owns the byte layout of the primitives every message is built from:
big-endian fixed-width integers, unsigned varints (at most 5 bytes, 32 bits), and
the classic (int16/int32) and compact (unsigned varint + 1) length prefixes.

The Reader never trusts a length: every read checks the bytes that remain first,
so a hostile length becomes a :class:`ProtocolError`, never an IndexError, a
struct.error or a large allocation. It knows nothing about messages or versions
and must not touch sockets.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

from tokensvc.protocol.errors import EncodeError, ProtocolError

INT8 = struct.Struct(">b")
INT16 = struct.Struct(">h")
INT32 = struct.Struct(">i")
INT64 = struct.Struct(">q")
FLOAT64 = struct.Struct(">d")

MAX_UVARINT_BYTES = 5
MAX_UINT32 = 0xFFFFFFFF


def encode_uvarint(value: int) -> bytes:
    """``value`` as an unsigned varint, unchecked: for callers that encode lengths and
    counts they computed themselves (:meth:`Writer.uvarint` checks the range)."""
    if value < 0x80:
        return bytes((value,))
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


class Reader:
    """Reads primitives from ``data`` starting at ``pos``; ``pos`` advances as it reads."""

    __slots__ = ("_view", "pos")

    def __init__(self, data: bytes | bytearray | memoryview, pos: int = 0) -> None:
        self._view = memoryview(data).cast("B") if not isinstance(data, bytes) else data
        self.pos = pos

    @property
    def remaining(self) -> int:
        return len(self._view) - self.pos

    def _need(self, n: int, what: str) -> int:
        start = self.pos
        if n > len(self._view) - start:
            raise ProtocolError(
                f"truncated {what}: needs {n} bytes at offset {start}, "
                f"{len(self._view) - start} left"
            )
        self.pos = start + n
        return start

    def take(self, n: int, what: str = "bytes") -> bytes:
        start = self._need(n, what)
        return bytes(self._view[start:start + n])

    def unpack(self, layout: struct.Struct, what: str) -> tuple:
        """Several fixed-size fields at once, read with one ``struct`` layout."""
        return layout.unpack_from(self._view, self._need(layout.size, what))

    def int8(self) -> int:
        return INT8.unpack_from(self._view, self._need(1, "int8"))[0]

    def int16(self) -> int:
        return INT16.unpack_from(self._view, self._need(2, "int16"))[0]

    def int32(self) -> int:
        return INT32.unpack_from(self._view, self._need(4, "int32"))[0]

    def int64(self) -> int:
        return INT64.unpack_from(self._view, self._need(8, "int64"))[0]

    def uvarint(self) -> int:
        """An unsigned varint of at most 5 bytes whose value fits 32 bits."""
        value = 0
        for i in range(MAX_UVARINT_BYTES):
            byte = self._view[self._need(1, "varint")]
            value |= (byte & 0x7F) << (7 * i)
            if not byte & 0x80:
                if value > MAX_UINT32:
                    raise ProtocolError(f"varint {value} does not fit 32 bits")
                return value
        raise ProtocolError(f"varint longer than {MAX_UVARINT_BYTES} bytes")

    def expect_end(self) -> None:
        if self.remaining:
            raise ProtocolError(f"{self.remaining} unexpected trailing bytes at offset {self.pos}")


class Writer:
    """Appends primitives to a bytearray; ``value()`` returns the bytes written.

    Large pre-encoded parts given to :meth:`parts` are kept as they are, not copied in:
    :meth:`segments` returns everything written as a list of bytes objects to send one
    after another (a 137 MB describe is not copied again to be framed).
    """

    __slots__ = ("_done", "buf")

    def __init__(self) -> None:
        self.buf = bytearray()
        self._done: list[bytes] = []

    def value(self) -> bytes:
        if not self._done:
            return bytes(self.buf)
        return b"".join(self.segments())

    def segments(self) -> list[bytes]:
        """What was written, in order, without joining the large parts."""
        return [*self._done, bytes(self.buf)] if self.buf or not self._done else list(self._done)

    def parts(self, chunks: Iterable[bytes]) -> None:
        """Append ``chunks`` by reference (for large pre-encoded data)."""
        if self.buf:
            self._done.append(bytes(self.buf))
            self.buf = bytearray()
        self._done.extend(chunk for chunk in chunks if chunk)

    def raw(self, data: bytes) -> None:
        self.buf += data

    def fixed(self, codec: struct.Struct, value: int) -> None:
        try:
            self.buf += codec.pack(value)
        except struct.error as exc:
            raise EncodeError(f"{value!r} does not fit {codec.format}: {exc}") from None

    def int8(self, value: int) -> None:
        self.fixed(INT8, value)

    def int16(self, value: int) -> None:
        self.fixed(INT16, value)

    def int32(self, value: int) -> None:
        self.fixed(INT32, value)

    def int64(self, value: int) -> None:
        self.fixed(INT64, value)

    def uvarint(self, value: int) -> None:
        if not 0 <= value <= MAX_UINT32:
            raise EncodeError(f"{value} does not fit an unsigned 32-bit varint")
        while value > 0x7F:
            self.buf.append((value & 0x7F) | 0x80)
            value >>= 7
        self.buf.append(value)
