"""The token cache snapshot format (tokensvc.snapshot.format): round trip, every way a
file can be wrong, and the rules that decide whether a snapshot may be used. Pure: no
file, no clock, no ZooKeeper."""

from __future__ import annotations

import gc
import hashlib
import json
import struct

import pytest

from tokensvc.core.principal import KafkaPrincipal
from tokensvc.core.token import TokenInformation
from tokensvc.snapshot.format import (
    MAGIC,
    VERSION,
    SnapshotError,
    catch_up_refusal,
    count_refusal,
    decode,
    encode,
    encode_parts,
    identity_refusal,
)

IDENTITY = {"cluster_id": "c-1", "tokens_czxid": 17, "tokens_ctime": 1_700_000_000_123,
            "token_changes_czxid": 18, "token_changes_ctime": 1_700_000_000_124}
ALICE = KafkaPrincipal.user("alice")
BOB = KafkaPrincipal.user("bob")


def _tokens(count: int = 50) -> list[TokenInformation]:
    odd = KafkaPrincipal("Group", "ops:team ü\x00x")  # ':' in a name, non-ASCII, NUL
    out = []
    for i in range(count):
        owner = ALICE if i % 3 else odd
        renewers = () if i % 2 else (BOB, odd)
        out.append(TokenInformation(f"tok-{i:04d}-é", owner, BOB if i % 5 == 0 else owner,
                                    renewers, 1_000 + i, 2**40 + i, -5 if i == 7 else 2**62,
                                    "" if i % 4 else "k1"))
    out.append(TokenInformation("flagged", KafkaPrincipal("User", "carol", True), ALICE, (),
                                0, 1, 2, "k2"))
    return out


def _data(count: int = 50) -> bytes:
    return encode(41, IDENTITY, _tokens(count), 1_700_000_999_000)


def test_round_trip_keeps_every_field():
    tokens = _tokens()
    snapshot = decode(encode(41, IDENTITY, tokens, 123))
    assert snapshot.tokens == tokens
    assert [t.renewers for t in snapshot.tokens] == [t.renewers for t in tokens]
    assert snapshot.sequence == 41
    assert snapshot.identity == IDENTITY
    assert snapshot.written_ms == 123


def test_the_parts_are_the_file_in_pieces_none_of_them_large():
    # More ids than one part joins and more values than one column part holds: the
    # boundaries must not add or lose a separator or a value.
    base = _tokens()
    tokens = [TokenInformation(f"{t.token_id}-{i}", t.owner, t.token_requester, t.renewers,
                               t.issue_timestamp + i, t.expiry_timestamp, t.max_timestamp,
                               t.key_id)
              for i, t in ((i, base[i % len(base)]) for i in range(70_000))]
    parts = encode_parts(9, IDENTITY, tokens, 5)
    assert b"".join(parts) == encode(9, IDENTITY, tokens, 5)
    assert decode(b"".join(parts)).tokens == tokens
    assert len(parts) > 20
    # The largest part is one column part (65,536 timestamps of 8 bytes), not the file.
    assert max(len(p) for p in parts) <= 65_536 * 8 < len(b"".join(parts)) // 4


def test_the_encoder_keeps_its_columns_out_of_the_collectors_walk():
    # A collection that another thread's allocations start while a snapshot is encoded
    # walks every item of every list it finds, holding the GIL: the encoder's columns
    # are arrays, which it does not walk (lists of 1M ints made one young collection
    # take 53 ms). Looked at while the first pass over the tokens ends.
    longest: list[int] = []

    class Watched(list):
        def __iter__(self):
            for n, info in enumerate(list.__iter__(self)):
                if n == len(self) - 1 and not longest:
                    longest.append(max((len(o) for o in gc.get_objects()
                                        if type(o) is list and len(o) > 1_000
                                        and all(type(x) is int for x in o[:100])),
                                       default=0))
                yield info

    base = _tokens()
    tokens = Watched(TokenInformation(f"w-{i}", t.owner, t.token_requester, t.renewers,
                                      t.issue_timestamp, t.expiry_timestamp, t.max_timestamp,
                                      t.key_id)
                     for i, t in ((i, base[i % len(base)]) for i in range(30_000)))
    assert decode(b"".join(encode_parts(3, IDENTITY, tokens, 5))).tokens == tokens
    assert longest == [0]


def test_round_trip_of_lone_surrogates_in_names_and_ids():
    # json.loads makes them from "\ud800" in a znode: a snapshot must not fail on them.
    odd = KafkaPrincipal("User", "x\ud800y")
    tokens = [TokenInformation("id-\udfff", odd, odd, (odd,), 1, 2, 3, "k\ud801")]
    assert decode(encode(1, IDENTITY, tokens, 0)).tokens == tokens


def test_round_trip_of_an_empty_cache_and_no_sequence():
    snapshot = decode(encode(-1, IDENTITY, [], 0))
    assert snapshot.tokens == [] and snapshot.sequence == -1


def test_the_file_holds_no_hmac_and_no_key():
    secret_hmac = hashlib.sha512(b"not in the file").digest()
    data = _data()
    assert secret_hmac not in data
    assert b"hmac" not in data.lower() and b"password" not in data.lower()


def test_an_empty_file_is_refused():
    with pytest.raises(SnapshotError) as refused:
        decode(b"")
    assert refused.value.reason == "empty"


@pytest.mark.parametrize("cut", [1, 7, 13, 45, 100, 1000, -33, -32, -1])
def test_every_truncation_is_refused(cut):
    data = _data()
    with pytest.raises(SnapshotError) as refused:
        decode(data[:cut])
    assert refused.value.reason in ("truncated", "checksum")


def test_a_flipped_byte_anywhere_is_refused():
    data = _data(8)
    for position in range(len(data)):
        broken = bytearray(data)
        broken[position] ^= 0x20
        with pytest.raises(SnapshotError) as refused:
            decode(bytes(broken))
        assert refused.value.reason in ("magic", "version", "checksum"), position


def test_appended_bytes_are_refused():
    with pytest.raises(SnapshotError) as refused:
        decode(_data() + b"\x00")
    assert refused.value.reason == "checksum"


def _resealed(body: bytes) -> bytes:
    return body + hashlib.sha256(body).digest()


def test_another_format_version_is_refused_before_anything_else():
    body = bytearray(_data()[:-32])
    struct.pack_into(">H", body, 8, VERSION + 1)
    with pytest.raises(SnapshotError) as refused:
        decode(_resealed(bytes(body)))
    assert refused.value.reason == "version"
    assert str(VERSION + 1) in str(refused.value)


def test_other_magic_is_refused():
    with pytest.raises(SnapshotError) as refused:
        decode(b"NOTASNAP" + _data()[8:])
    assert refused.value.reason == "magic"


def _with_header(change) -> bytes:
    data = _data(4)
    _, _, header_len = struct.unpack_from(">8sHI", data)
    header = json.loads(data[14:14 + header_len])
    change(header)
    encoded = json.dumps(header).encode()
    body = struct.pack(">8sHI", MAGIC, VERSION, len(encoded)) + encoded + data[14 + header_len:-32]
    return _resealed(body)


@pytest.mark.parametrize("change", [
    lambda h: h.update(count=h["count"] + 1),
    lambda h: h.update(count=-1),
    lambda h: h.update(ids_bytes=h["ids_bytes"] - 1),
    lambda h: h.update(sequence="41"),
    lambda h: h.update(sequence=-2),
    lambda h: h.update(identity=[1]),
    lambda h: h.update(principals=[["User", "alice", False]]),
    lambda h: h.update(principals=[["User:x", "alice", False]] * 3),
    lambda h: h.update(renewer_sets=[[99]]),
    lambda h: h.update(key_ids=[]),
    lambda h: h.pop("written_ms"),
])
def test_a_checksummed_but_inconsistent_header_is_refused(change):
    with pytest.raises(SnapshotError) as refused:
        decode(_with_header(change))
    assert refused.value.reason == "malformed"


def test_a_header_that_is_not_json_is_refused():
    body = struct.pack(">8sHI", MAGIC, VERSION, 3) + b"{x}"
    with pytest.raises(SnapshotError) as refused:
        decode(_resealed(body))
    assert refused.value.reason == "malformed"


# --- identity --------------------------------------------------------------------------


def test_the_same_identity_is_accepted():
    assert identity_refusal(IDENTITY, dict(IDENTITY)) is None


@pytest.mark.parametrize("field", sorted(IDENTITY))
def test_any_other_identity_is_refused(field):
    other = dict(IDENTITY)
    other[field] = "other" if isinstance(other[field], str) else other[field] + 1
    refusal = identity_refusal(IDENTITY, other)
    assert refusal is not None and field in refusal


def test_a_missing_identity_field_is_refused():
    other = dict(IDENTITY)
    del other["cluster_id"]
    assert identity_refusal(IDENTITY, other) is not None
    assert identity_refusal({}, IDENTITY) is not None


# --- catching up ---------------------------------------------------------------------


def test_notifications_after_the_sequence_all_listed():
    assert catch_up_refusal(100, -1, [100, 101, 105], 106) is None
    assert catch_up_refusal(100, 99, [100], 101) is None


def test_nothing_happened_since():
    assert catch_up_refusal(100, 50, [90, 100], 101) is None


def test_purged_exactly_through_the_sequence_is_accepted():
    assert catch_up_refusal(100, 100, [], 101) is None
    assert catch_up_refusal(100, 100, [130, 131], 132) is None


def test_purged_past_the_sequence_is_refused():
    refusal = catch_up_refusal(100, 101, [102, 103], 104)
    assert refusal is not None and "purged" in refusal


def test_gone_without_a_mark_is_refused():
    refusal = catch_up_refusal(100, 50, [120, 121], 122)
    assert refusal is not None and "without a purge mark" in refusal


def test_a_sequence_ahead_of_zookeeper_is_refused():
    refusal = catch_up_refusal(100, -1, [10], 11)
    assert refusal is not None and "ahead" in refusal
    assert catch_up_refusal(100, -1, [], 100) is not None


def test_no_sequence_is_accepted_only_when_nothing_was_purged():
    assert catch_up_refusal(-1, -1, [0, 1, 2], 3) is None
    assert catch_up_refusal(-1, -1, [], 0) is None
    assert catch_up_refusal(-1, 4, [5], 6) is not None


def test_a_count_that_differs_while_nothing_was_written_is_refused():
    refusal = count_refusal(10, 11, quiet=True)
    assert refusal is not None and "without a change notification" in refusal
    assert count_refusal(10, 9, quiet=True) is not None
    assert count_refusal(10, 10, quiet=True) is None
    assert count_refusal(10, 11, quiet=False) is None  # writes meanwhile: not decided
