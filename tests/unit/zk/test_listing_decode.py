"""The listing reply's decoding (:class:`zk.client._Listing`) against kazoo's own
``GetChildren2`` decoder, on reply bytes built here: the same names and Stat, in the
C-call path (one length, ASCII) and in the fallback (any other reply)."""

from __future__ import annotations

import struct

import pytest
from kazoo.protocol.serialization import GetChildren2, write_string

from zk.client import _Listing

STAT = struct.pack("!qqqqiiiqiiq", 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11)


def reply(names: list[str], tail: bytes = STAT) -> bytes:
    out = bytearray(struct.pack("!i", len(names)))
    for name in names:
        out += write_string(name)
    return b"\x00" * 3 + bytes(out) + tail  # decoded from offset 3


@pytest.mark.parametrize("names", [
    [f"token_change_{n:010d}" for n in (7, 3, 12, 0, 9_999_999_999)],
    ["a"],
    ["ab", "cd", "e"],                       # one shorter at the end
    ["abc", "de", "fgh"],                    # one shorter in the middle
    ["caf\u00e9", "cafe"],                   # same byte length, not ASCII
    ["x" * 130, "y" * 130],                  # a length byte above 0x7f
    [],
])
def test_listing_decodes_as_kazoo_does(names: list[str]) -> None:
    data = reply(names)
    assert _Listing.deserialize(data, 3) == GetChildren2.deserialize(data, 3)
    assert _Listing.deserialize(data, 3)[0] == names


def test_a_record_whose_length_field_differs_only_in_one_byte_is_not_taken_as_uniform() -> None:
    names = ["n" * 300, "m" * 44]  # 300 = 0x012c, 44 = 0x002c: same last byte
    data = reply(names)
    assert _Listing.deserialize(data, 3)[0] == names
