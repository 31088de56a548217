"""A snapshot file with a valid digest whose header is nested without bound (found by
tests/fuzz/snapshot): refused as malformed, so the broker falls back to the full load."""

from __future__ import annotations

import hashlib
import struct

import pytest

from tokensvc.snapshot.format import MAGIC, VERSION, SnapshotError, decode


def test_header_nested_too_deep_is_a_malformed_snapshot():
    header = b"[" * 100_000
    body = struct.pack(">8sHI", MAGIC, VERSION, len(header)) + header
    with pytest.raises(SnapshotError) as refused:
        decode(body + hashlib.sha256(body).digest())
    assert refused.value.reason == "malformed"
