"""The cache's principal index agrees with a full scan after any sequence of changes.

Property-based (hypothesis, derandomized so every run draws the same cases): a
sequence of creates, renews, expiries (a sweep at a fake clock's time), deletions,
upserts that change owners or renewers, tokens whose master key is unknown, and
resyncs (``replace_all``) is applied to a cache; after every step, for every
principal, ``ids_of`` must equal the ids a full scan finds with
``TokenInformation.owner_or_renewer``, and ``tokens_by_ids`` must return exactly
the known-key tokens of those ids.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tokensvc.core.cache import TokenCache
from tokensvc.core.clock import FakeClock
from tokensvc.core.keys import MasterKeys, key_id
from tokensvc.core.principal import KafkaPrincipal
from tokensvc.core.token import TokenInformation

KEY = "index-master-key"
KID = key_id(KEY)
FOREIGN_KID = key_id("a-key-this-broker-does-not-hold")
PEOPLE = [KafkaPrincipal.user(name) for name in ("ann", "bob", "cyd", "dee")]
IDS = [f"t{i}" for i in range(12)]

people = st.sampled_from(PEOPLE)
token_ids = st.sampled_from(IDS)
details = st.tuples(
    token_ids,
    people,
    people,
    st.lists(people, max_size=3, unique=True),
    st.integers(1, 50),
    st.booleans(),
)
operations = st.one_of(
    st.tuples(st.just("create"), details),
    st.tuples(st.just("renew"), token_ids, st.integers(1, 50)),
    st.tuples(st.just("advance"), st.integers(1, 30)),
    st.tuples(st.just("delete"), token_ids),
    st.tuples(st.just("resync"), st.lists(details, max_size=8)),
)


def _info(now: int, detail: tuple) -> TokenInformation:
    token_id, owner, requester, renewers, life, foreign = detail
    return TokenInformation(
        token_id, owner, requester, tuple(renewers), now, now + life, now + 100,
        FOREIGN_KID if foreign else KID,
    )


def _full_scan(cache: TokenCache, principal: KafkaPrincipal) -> set[str]:
    infos = [cache.info(token_id) for token_id in cache.token_ids()]
    return {i.token_id for i in infos if i is not None and i.owner_or_renewer(principal)}


def _check(cache: TokenCache) -> None:
    for principal in PEOPLE:
        expected = _full_scan(cache, principal)
        assert cache.ids_of([principal]) == expected
        flagged = KafkaPrincipal(principal.principal_type, principal.name, token_authenticated=True)
        assert cache.ids_of([flagged]) == expected
        known = {t.info.token_id for t in cache.tokens() if t.info.token_id in expected}
        assert {t.info.token_id for t in cache.tokens_by_ids(sorted(expected))} == known
    assert cache.ids_of(PEOPLE) == set().union(*(_full_scan(cache, p) for p in PEOPLE))


@settings(derandomize=True, max_examples=300, deadline=None)
@given(st.lists(operations, max_size=40))
def test_principal_index_agrees_with_a_full_scan(steps: list[tuple]) -> None:
    clock = FakeClock(1_000)
    cache = TokenCache(MasterKeys(KEY))
    for step in steps:
        kind = step[0]
        now = clock.now_ms()
        if kind == "create":
            cache.upsert(_info(now, step[1]))
        elif kind == "renew":
            current = cache.info(step[1])
            if current is not None:
                cache.upsert(current.with_expiry(now + step[2]))
        elif kind == "advance":
            clock.advance(step[1])
            for due in cache.due(clock.now_ms()):
                cache.remove(due.token_id)
        elif kind == "delete":
            cache.remove(step[1])
        else:
            latest = {d[0]: _info(now, d) for d in step[1]}
            cache.replace_all(latest.values())
        _check(cache)


def test_owner_counts_follow_upserts_renewals_removals_and_resyncs() -> None:
    from tokensvc.core.cache import TokenCache
    from tokensvc.core.keys import MasterKeys
    from tokensvc.core.principal import KafkaPrincipal
    from tokensvc.core.token import TokenInformation

    alice, bob = KafkaPrincipal.user("alice"), KafkaPrincipal.user("bob")
    cache = TokenCache(MasterKeys("k"))

    def token(i: int, owner: KafkaPrincipal, expiry: int = 10) -> TokenInformation:
        return TokenInformation(f"t{i}", owner, owner, (), 0, expiry, 100, "")

    for i in range(3):
        cache.upsert(token(i, alice))
    cache.upsert(token(9, bob))
    cache.upsert(token(0, alice, expiry=20))  # a renewal: still 3
    assert cache.owned_count(alice) == 3 and cache.owned_count(bob) == 1
    cache.remove("t1")
    assert cache.top_owners(10) == [(alice, 2), (bob, 1)]
    cache.replace_all([token(9, bob), token(8, bob)])
    assert cache.owned_count(alice) == 0 and cache.top_owners(1) == [(bob, 2)]
