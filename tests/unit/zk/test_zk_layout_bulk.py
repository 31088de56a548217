"""The bulk token decoder gives exactly what decoding znode by znode gives.

``layout.decode_tokens`` parses a batch in one call and takes a fast path for
well-formed version-3 objects; whatever it meets (Kafka's older versions, garbage,
wrong types, bools for integers, a znode whose JSON names another token, znodes
crafted so that their joined bytes parse as other objects), its tokens and its
refusals must be those of :func:`layout.decode_token` applied to each znode.
"""

from __future__ import annotations

import json
import random

import pytest

from tokensvc.core.principal import KafkaPrincipal
from tokensvc.core.token import TokenInformation
from zk import layout

OWNERS = [KafkaPrincipal.user(n) for n in ("ann", "bob b", "cyd*", "dée")]


def _token(i: int, rng: random.Random) -> TokenInformation:
    return TokenInformation(
        f"tok{i}",
        rng.choice(OWNERS),
        rng.choice(OWNERS),
        tuple(rng.sample(OWNERS, rng.randint(0, 2))),
        1_000 + i,
        2_000 + i,
        3_000 + i,
        rng.choice(["", "kid-a", "kid-b"]),
    )


def _json(**fields) -> bytes:
    return json.dumps(fields).encode()


ODD = [
    None,
    b"",
    b"not json",
    b"\xff\xfe",
    b"[1, 2]",
    _json(version=2, owner="User:ann", renewers=[], issueTimestamp=1, expiryTimestamp=2,
          maxTimestamp=3, tokenId="SLOT"),
    _json(version=1, owner="User:bob", renewers=["User:cyd"], issueTimestamp=1,
          expiryTimestamp=2, maxTimestamp=3, tokenId="SLOT"),
    _json(version=3.0, owner="User:ann", tokenRequester="User:ann", renewers=[],
          issueTimestamp=1, expiryTimestamp=2, maxTimestamp=3, tokenId="SLOT"),
    _json(version=3, owner="User:ann", tokenRequester="User:ann", renewers=[],
          issueTimestamp=True, expiryTimestamp=2, maxTimestamp=3, tokenId="SLOT"),
    _json(version=3, owner="nobody", tokenRequester="User:ann", renewers=[],
          issueTimestamp=1, expiryTimestamp=2, maxTimestamp=3, tokenId="SLOT"),
    _json(version=3, owner="User:ann", tokenRequester="User:ann", renewers=[7],
          issueTimestamp=1, expiryTimestamp=2, maxTimestamp=3, tokenId="SLOT"),
    _json(version=3, owner="User:ann", tokenRequester="User:ann", renewers=[],
          issueTimestamp=1, expiryTimestamp=2, maxTimestamp=3, tokenId="SLOT", keyId=5),
    _json(version=3, owner="User:ann", tokenRequester="User:ann", renewers=[],
          issueTimestamp=1, expiryTimestamp=2, maxTimestamp=3, tokenId="another-token"),
    _json(version=3, owner="User:ann", tokenRequester="User:ann", renewers=[],
          issueTimestamp=1, expiryTimestamp=2, maxTimestamp=3, tokenId=""),
]


def _one_by_one(znodes):
    tokens, failed = [], []
    for token_id, data in znodes:
        try:
            tokens.append(layout.decode_token(data))
        except layout.LayoutError as exc:
            failed.append((token_id, str(exc)))
    return tokens, failed


@pytest.mark.parametrize("seed", range(6))
def test_bulk_decode_equals_decoding_each_znode(seed, monkeypatch):
    monkeypatch.setattr(layout, "BULK_BATCH", 7)  # many batches, some clean, some not
    rng = random.Random(seed)
    znodes = []
    for i in range(60):
        if rng.random() < 0.2:
            data = rng.choice(ODD)
            if data:
                data = data.replace(b"SLOT", f"odd{i}".encode())
            znodes.append((f"odd{i}", data))
        else:
            token = _token(i, rng)
            znodes.append((token.token_id, layout.encode_token(token)))
    assert layout.decode_tokens(znodes) == _one_by_one(znodes)


def test_clean_batches_share_key_ids_and_renewer_lists():
    rng = random.Random(1)
    tokens = [_token(i, rng) for i in range(200)]
    decoded, failed = layout.decode_tokens([(t.token_id, layout.encode_token(t)) for t in tokens])
    assert failed == [] and decoded == tokens
    assert len({id(t.key_id) for t in decoded}) <= 3
    by_value = {}
    for t in decoded:
        assert by_value.setdefault(t.renewers, t.renewers) is t.renewers


def test_znodes_crafted_to_parse_as_other_objects_when_joined_are_decoded_one_by_one():
    # Joined, these two parse as two objects: '{}' and one token spanning both znodes.
    good = layout.encode_token(_token(0, random.Random(0)))
    first, second = b'{},' + good[:-1] + b',"x":[{}', b"{}]}"
    znodes = [("tok0", first), ("tok1", second)]
    tokens, failed = layout.decode_tokens(znodes)
    assert tokens == []
    assert [token_id for token_id, _ in failed] == ["tok0", "tok1"]
