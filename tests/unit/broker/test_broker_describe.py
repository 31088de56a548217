"""tokensvc.broker.describe: Kafka's describe rule over the index, direct encoding, slices.

No I/O: a cache filled in memory, the schema codec as the reference encoder, and an
event loop only to drive the coroutine.
"""

from __future__ import annotations

import asyncio
import random

import pytest

from tokensvc.broker.describe import describe_tokens
from tokensvc.core.cache import TokenCache
from tokensvc.core.clock import FakeClock
from tokensvc.core.keys import MasterKeys, key_id
from tokensvc.core.manager import TokenManager
from tokensvc.core.principal import KafkaPrincipal
from tokensvc.core.token import DelegationToken, TokenInformation
from tokensvc.protocol import (
    RequestHeader,
    decode_response,
    encode_response,
    encode_response_segments,
)
from tokensvc.protocol.api import ApiKey

KEY = "describe-master-key"
PEOPLE = [KafkaPrincipal.user(n) for n in ("ann", "bob", "cyd", "dée", "e" * 40)]


def _cache(count: int, seed: int) -> TokenCache:
    rng = random.Random(seed)
    cache = TokenCache(MasterKeys(KEY))
    for i in range(count):
        foreign = rng.random() < 0.1
        cache.upsert(TokenInformation(
            f"tok-{i}", rng.choice(PEOPLE), rng.choice(PEOPLE),
            tuple(rng.sample(PEOPLE, rng.randint(0, 2))), 1_000 + i, 2_000 + i, 3_000 + i,
            key_id("not-held") if foreign else key_id(KEY),
        ))
    return cache


def _entry(token: DelegationToken) -> dict:
    info = token.info
    return {
        "PrincipalType": info.owner.principal_type,
        "PrincipalName": info.owner.name,
        "TokenRequesterPrincipalType": info.token_requester.principal_type,
        "TokenRequesterPrincipalName": info.token_requester.name,
        "IssueTimestamp": info.issue_timestamp,
        "ExpiryTimestamp": info.expiry_timestamp,
        "MaxTimestamp": info.max_timestamp,
        "TokenId": info.token_id,
        "Hmac": token.hmac,
        "Renewers": [{"PrincipalType": r.principal_type, "PrincipalName": r.name}
                     for r in info.renewers],
    }


def _may_describe(info: TokenInformation) -> bool:
    return info.token_id.endswith(("1", "7"))


def _manager() -> TokenManager:
    return TokenManager(MasterKeys(KEY), max_lifetime_ms=10**9, renew_period_ms=10**8,
                        clock=FakeClock(0))


OWNER_FILTERS = [None, [], [PEOPLE[0]], [PEOPLE[1], PEOPLE[3]],
                 [KafkaPrincipal("User", "ann", token_authenticated=True)],
                 [KafkaPrincipal.user("nobody")]]


@pytest.mark.parametrize("version", [0, 1, 2, 3])
@pytest.mark.parametrize("owners", OWNER_FILTERS)
def test_describe_bytes_equal_the_schema_encoding_of_kafkas_rule(version, owners):
    cache = _cache(300, seed=version)
    me = PEOPLE[2]
    expected = _manager().describe(cache.tokens(), me, owners, _may_describe)
    described = asyncio.run(describe_tokens(cache, me, owners, _may_describe, version))
    header = RequestHeader(ApiKey.DESCRIBE_DELEGATION_TOKEN, version, 7, "test")
    ours = encode_response(header, {"ErrorCode": 0, "Tokens": described.tokens, "ThrottleTimeMs": 0})
    _, decoded = decode_response(ApiKey.DESCRIBE_DELEGATION_TOKEN, version, ours)
    expected_ids = sorted(t.info.token_id for t in expected)
    assert sorted(t["TokenId"] for t in decoded["Tokens"]) == expected_ids
    assert described.count == len(expected)
    # Byte for byte what the schema codec writes for the same tokens in the same order.
    by_id = {t.info.token_id: t for t in expected}
    ordered = [by_id[t["TokenId"]] for t in decoded["Tokens"]]
    reference = encode_response(
        header, {"ErrorCode": 0, "Tokens": [_entry(t) for t in ordered], "ThrottleTimeMs": 0}
    )
    assert ours == reference


def test_a_large_describe_yields_to_the_loop_between_slices():
    cache = _cache(3_000, seed=1)
    ticks = 0

    async def main() -> int:
        nonlocal ticks
        stop = False

        async def ticker() -> None:
            nonlocal ticks
            while not stop:
                ticks += 1
                await asyncio.sleep(0)

        task = asyncio.create_task(ticker())
        described = await describe_tokens(
            cache, PEOPLE[0], None, lambda info: True, 3, budget_s=0.0
        )
        stop = True
        await task
        return described.count

    count = asyncio.run(main())
    assert count == len(cache.tokens())
    # budget 0: every slice of tokens yields, and the other task runs each time.
    assert ticks >= count // 128


def test_a_sliced_describe_is_encoded_as_segments_that_reuse_the_slices():
    cache = _cache(3_000, seed=2)
    me = PEOPLE[2]
    described = asyncio.run(describe_tokens(cache, me, None, _may_describe, 3, budget_s=0.0))
    assert len(described.tokens.parts) > 1
    header = RequestHeader(ApiKey.DESCRIBE_DELEGATION_TOKEN, 3, 9, "test")
    body = {"ErrorCode": 0, "Tokens": described.tokens, "ThrottleTimeMs": 0}
    segments = encode_response_segments(header, body)
    assert b"".join(segments) == encode_response(header, body)
    # The slices are sent as they are: the same objects, not copies.
    slice_ids = {id(part) for part in described.tokens.parts}
    assert sum(id(s) in slice_ids for s in segments) == len(described.tokens.parts)
