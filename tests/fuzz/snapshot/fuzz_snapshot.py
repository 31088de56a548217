"""The token cache snapshot file (tokensvc.snapshot.format.decode).

A file whose SHA-256 does not match is refused before anything else is read, so when
the first byte is odd the harness appends the right digest to the rest: the mutations
then reach the header, the tables and the columns. Properties: only SnapshotError
escapes; a snapshot read is written again (``encode``) byte for byte as it was read,
and decodes to the same snapshot.
"""

from __future__ import annotations

import hashlib

from tokensvc.core.labels import validate
from tokensvc.core.principal import KafkaPrincipal
from tokensvc.core.token import TokenInformation
from tokensvc.snapshot.format import SnapshotError, decode, encode

ERRORS = (SnapshotError,)
DICTIONARY = "json.dict"


def fuzz_one(data: bytes) -> None:
    if not data:
        return
    body = data[1:]
    snapshot = decode(body + hashlib.sha256(body).digest() if data[0] % 2 else body)
    again = encode(snapshot.sequence, snapshot.identity, snapshot.tokens, snapshot.written_ms)
    assert decode(again) == snapshot, "snapshot round trip differs"


def seeds() -> dict[str, bytes]:
    """Snapshots as a broker saves them (tokensvc.snapshot.format.encode), without their
    digest (first byte odd: the harness appends it) and with it."""
    alice, bob = KafkaPrincipal.user("alice"), KafkaPrincipal.user("bob")
    tokens = [
        TokenInformation("Zl0YT9kvSLaHtdxp5pMVbA", alice, alice, (bob,), 1, 2, 3),
        TokenInformation("a2", bob, alice, (), 10, 20, 30, key_id="k1",
                         labels=validate({"job": "etl", "team": "data"})),
        TokenInformation("a3", KafkaPrincipal("Group", "ops", True), alice, (alice, bob),
                         -5, 0, 9_223_372_036_854_775_807),
    ]
    identity = {"zk": "127.0.0.1:2181/kafka", "czxid": 12}
    out = {}
    for count in (0, 1, 3):
        data = encode(41, identity, tokens[:count], 1_700_000_000_000)
        out[f"tokens-{count}"] = b"\x01" + data[:-32]
        out[f"tokens-{count}-with-digest"] = b"\x00" + data
    return out
