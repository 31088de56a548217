"""The live fuzzer's inputs (faults/live_fuzz.py): each kind of hostile frame is what its
name says, from the captured seed frames, and the same seed gives the same frames."""

from __future__ import annotations

import random
import struct

from faults.live_fuzz import KINDS, extreme, load_seeds, mutate, wire_bytes
from tokensvc.protocol import FrameDecoder

SEEDS = load_seeds()


def test_the_seed_frames_are_requests_real_clients_sent():
    assert len(SEEDS) >= 100
    assert all(len(seed) >= 8 for seed in SEEDS)


def test_a_split_frame_is_the_whole_frame_in_pieces_of_at_most_seven_bytes():
    rng = random.Random(3)
    for _ in range(50):
        pieces = wire_bytes(rng, "split", SEEDS)
        assert all(1 <= len(p) <= 7 for p in pieces)
        decoder = FrameDecoder(1 << 20)
        decoder.feed(b"".join(pieces))
        assert decoder.next_frame() is not None and decoder.buffered == 0


def test_an_oversized_frame_claims_more_than_a_stranger_may_send():
    rng = random.Random(4)
    for _ in range(50):
        (size,) = struct.unpack_from(">i", wire_bytes(rng, "oversized", SEEDS)[0])
        assert size > 524_288


def test_a_truncated_frame_is_shorter_than_its_seed():
    rng = random.Random(5)
    for _ in range(50):
        piece = wire_bytes(rng, "truncate", SEEDS)[0]
        assert len(piece) <= 4 + max(len(s) for s in SEEDS)


def test_extreme_sets_one_integer_to_an_edge_and_mutate_changes_the_bytes():
    rng = random.Random(6)
    seed = bytes(range(64))
    changed = extreme(rng, seed)
    assert len(changed) == len(seed) and changed != seed
    assert any(mutate(rng, seed) != seed for _ in range(10))


def test_the_same_seed_gives_the_same_frames():
    def frames(seed: int) -> list[bytes]:
        rng = random.Random(seed)
        return [b"".join(wire_bytes(rng, kind, SEEDS)) for kind in KINDS * 5]

    assert frames(7) == frames(7)
    assert frames(7) != frames(8)
