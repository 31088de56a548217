"""TokenCache and ExpiryIndex: indexes, due(), lazy SCRAM credentials, listeners."""

from __future__ import annotations

import random
import threading

import pytest

from tokensvc.core.cache import ExpiryIndex, TokenCache
from tokensvc.core.keys import MasterKeys, key_id, token_hmac
from tokensvc.core.principal import KafkaPrincipal
from tokensvc.core.token import TokenInformation
from tokensvc.scram.formatter import ScramMechanism, derive_credential

SHA256 = ScramMechanism.SCRAM_SHA_256
SHA512 = ScramMechanism.SCRAM_SHA_512
ALICE = KafkaPrincipal.user("alice")
KEY = "cache-master-key"
KID = key_id(KEY)


def info(
    token_id: str, expiry: int = 2000, max_ts: int = 5000, kid: str = KID, renewers=()
) -> TokenInformation:
    return TokenInformation(token_id, ALICE, ALICE, tuple(renewers), 0, expiry, max_ts, kid)


@pytest.fixture
def cache() -> TokenCache:
    return TokenCache(MasterKeys(KEY))


def record(cache: TokenCache) -> list[tuple[str, str]]:
    events: list[tuple[str, str]] = []
    cache.add_listener(lambda kind, i: events.append((kind, i.token_id)))
    return events


# -- ExpiryIndex -------------------------------------------------------------------------


def test_expiry_index_due_is_strictly_past_deadline_in_order() -> None:
    index = ExpiryIndex()
    index.put("b", 200)
    index.put("a", 100)
    index.put("c", 300)
    assert index.due(100) == []
    assert index.due(101) == ["a"]
    assert index.due(301) == ["a", "b", "c"]
    assert len(index) == 3


def test_expiry_index_put_many_agrees_with_put_whether_many_or_few() -> None:
    rng = random.Random(7)
    one_by_one, batched = ExpiryIndex(), ExpiryIndex()
    for round_size in (500, 3, 200, 1):  # heapify for many, pushes for few
        items = [(rng.randint(0, 1_000), f"t{rng.randint(0, 400)}") for _ in range(round_size)]
        for deadline, token_id in items:
            one_by_one.put(token_id, deadline)
        batched.put_many(items)
        assert len(batched) == len(one_by_one)
        for now in (0, 250, 500, 1_001):
            assert batched.due(now) == one_by_one.due(now)
        assert batched.next_deadline() == one_by_one.next_deadline()


def test_expiry_index_reput_moves_token_and_discard_forgets_it() -> None:
    index = ExpiryIndex()
    index.put("a", 100)
    index.put("b", 150)
    index.put("a", 500)
    index.discard("b")
    assert index.due(400) == []
    assert index.due(501) == ["a"]
    assert index.next_deadline() == 500
    index.discard("a")
    assert index.next_deadline() is None


def test_expiry_index_matches_a_scan_after_many_random_changes() -> None:
    rng = random.Random(7)
    index = ExpiryIndex()
    model: dict[str, int] = {}
    for _ in range(5000):
        token_id = f"t{rng.randrange(300)}"
        if rng.random() < 0.25:
            index.discard(token_id)
            model.pop(token_id, None)
        else:
            deadline = rng.randrange(10_000)
            index.put(token_id, deadline)
            model[token_id] = deadline
    for now in (0, 2500, 5000, 10_001):
        expected = sorted((d, t) for t, d in model.items() if d < now)
        assert index.due(now) == [t for _, t in expected]
    assert len(index._heap) <= 2 * len(model) + ExpiryIndex._COMPACT_SLACK + 1


# -- indexes -----------------------------------------------------------------------------


def test_upsert_indexes_by_id_hmac_and_expiry(cache: TokenCache) -> None:
    token = cache.upsert(info("t1"))
    assert token is not None
    assert token.hmac == token_hmac(KEY, "t1")
    assert cache.by_id("t1") == token
    assert cache.by_hmac(token.hmac) == token
    assert cache.info("t1") == info("t1")
    assert cache.tokens() == [token]
    assert len(cache) == 1
    assert cache.due(2001) == [info("t1")]


def test_renewal_updates_expiry_index_and_keeps_hmac(cache: TokenCache) -> None:
    first = cache.upsert(info("t1", expiry=2000))
    renewed = cache.upsert(info("t1", expiry=4000))
    assert renewed is not None and first is not None
    assert renewed.hmac == first.hmac
    assert cache.by_hmac(first.hmac).info.expiry_timestamp == 4000
    assert cache.due(2001) == []
    assert cache.due(4001) == [info("t1", expiry=4000)]
    assert len(cache) == 1


def test_remove_clears_every_index(cache: TokenCache) -> None:
    token = cache.upsert(info("t1"))
    removed = cache.remove("t1")
    assert removed == info("t1")
    assert cache.by_id("t1") is None
    assert cache.by_hmac(token.hmac) is None
    assert cache.info("t1") is None
    assert cache.due(10**12) == []
    assert len(cache) == 0
    assert cache.remove("t1") is None


def test_unknown_hmac_finds_nothing(cache: TokenCache) -> None:
    cache.upsert(info("t1"))
    assert cache.by_hmac(b"\x00" * 64) is None


def test_due_counts_max_lifetime_as_well_as_expiry(cache: TokenCache) -> None:
    cache.upsert(info("capped", expiry=9000, max_ts=3000))
    assert cache.due(3000) == []
    assert [i.token_id for i in cache.due(3001)] == ["capped"]
    assert cache.next_deadline() == 3000


def test_replace_all_applies_the_diff(cache: TokenCache) -> None:
    cache.upsert(info("keep"))
    cache.upsert(info("change", expiry=1000))
    cache.upsert(info("gone"))
    gone_hmac = cache.by_id("gone").hmac
    events = record(cache)
    cache.replace_all([info("keep"), info("change", expiry=3000), info("new")])
    assert sorted(events) == [("remove", "gone"), ("upsert", "change"), ("upsert", "new")]
    assert sorted(t.info.token_id for t in cache.tokens()) == ["change", "keep", "new"]
    assert cache.by_hmac(gone_hmac) is None
    assert cache.info("change").expiry_timestamp == 3000
    assert [i.token_id for i in cache.due(2001)] == ["keep", "new"]


def test_replace_all_with_nothing_empties_the_cache(cache: TokenCache) -> None:
    cache.upsert(info("a"))
    cache.upsert(info("b"))
    cache.replace_all([])
    assert len(cache) == 0
    assert cache.tokens() == []


# -- listeners ---------------------------------------------------------------------------


def test_listeners_hear_upserts_and_removes_but_not_no_op_upserts(cache: TokenCache) -> None:
    events = record(cache)
    cache.upsert(info("t1"))
    cache.upsert(info("t1"))
    cache.upsert(info("t1", expiry=3000))
    cache.remove("t1")
    cache.remove("t1")
    assert events == [("upsert", "t1"), ("upsert", "t1"), ("remove", "t1")]


def test_failing_listener_does_not_break_the_cache_or_other_listeners(cache: TokenCache) -> None:
    def broken(kind: str, i: TokenInformation) -> None:
        raise RuntimeError("listener bug")

    cache.add_listener(broken)
    events = record(cache)
    assert cache.upsert(info("t1")) is not None
    assert events == [("upsert", "t1")]


def test_listener_may_read_the_cache(cache: TokenCache) -> None:
    seen = []
    cache.add_listener(lambda kind, i: seen.append(cache.info(i.token_id)))
    cache.upsert(info("t1"))
    assert seen == [info("t1")]


# -- unknown key ids ---------------------------------------------------------------------


def test_token_under_unknown_key_is_kept_out_of_hmac_index(cache: TokenCache) -> None:
    foreign = info("foreign", kid=key_id("some-other-key"))
    assert cache.upsert(foreign) is None
    assert cache.unknown_key_tokens() == 1
    assert cache.info("foreign") == foreign
    assert cache.by_id("foreign") is None
    assert cache.by_hmac(token_hmac("some-other-key", "foreign")) is None
    assert cache.tokens() == []
    assert cache.scram_credential("foreign", SHA256) is None
    assert cache.due(2001) == [foreign]
    cache.remove("foreign")
    assert cache.unknown_key_tokens() == 0


def test_token_without_key_id_uses_current_key(cache: TokenCache) -> None:
    token = cache.upsert(info("kafka-made", kid=""))
    assert token is not None and token.hmac == token_hmac(KEY, "kafka-made")


def test_previous_key_tokens_authenticate_after_rotation() -> None:
    cache = TokenCache(MasterKeys("new-key", ["old-key"]))
    token = cache.upsert(info("old", kid=key_id("old-key")))
    assert token is not None and token.hmac == token_hmac("old-key", "old")
    assert cache.unknown_key_tokens() == 0


# -- SCRAM credentials -------------------------------------------------------------------


def test_credential_is_derived_on_first_use_from_hmac_password(cache: TokenCache) -> None:
    token = cache.upsert(info("t1"))
    assert cache.derived_count() == 0
    credential, current = cache.scram_credential("t1", SHA256)
    assert cache.derived_count() == 1
    assert current == info("t1")
    again = derive_credential(token.hmac_b64, SHA256, credential.iterations, credential.salt)
    assert again == credential
    assert credential.iterations == 4096


def test_credential_is_cached_per_mechanism(cache: TokenCache) -> None:
    cache.upsert(info("t1"))
    first, _ = cache.scram_credential("t1", SHA256)
    second, _ = cache.scram_credential("t1", SHA256)
    assert first == second
    assert cache.derived_count() == 1
    other, _ = cache.scram_credential("t1", SHA512)
    assert len(other.stored_key) == 64
    assert cache.derived_count() == 2


def test_renewal_keeps_derived_credential_and_returns_new_expiry(cache: TokenCache) -> None:
    cache.upsert(info("t1", expiry=2000))
    before, _ = cache.scram_credential("t1", SHA512)
    cache.upsert(info("t1", expiry=4000))
    after, current = cache.scram_credential("t1", SHA512)
    assert after == before
    assert current.expiry_timestamp == 4000
    assert cache.derived_count() == 1


def test_replace_all_keeps_credentials_of_unchanged_and_renewed_tokens(cache: TokenCache) -> None:
    cache.upsert(info("t1"))
    cache.upsert(info("t2"))
    c1, _ = cache.scram_credential("t1", SHA256)
    c2, _ = cache.scram_credential("t2", SHA256)
    cache.replace_all([info("t1"), info("t2", expiry=4000)])
    assert cache.scram_credential("t1", SHA256)[0] == c1
    assert cache.scram_credential("t2", SHA256)[0] == c2
    assert cache.derived_count() == 2


def test_removal_drops_credentials(cache: TokenCache) -> None:
    cache.upsert(info("t1"))
    first, _ = cache.scram_credential("t1", SHA256)
    cache.remove("t1")
    assert cache.scram_credential("t1", SHA256) is None
    cache.upsert(info("t1"))
    second, _ = cache.scram_credential("t1", SHA256)
    assert second is not first
    assert cache.derived_count() == 2


def test_unknown_token_has_no_credential(cache: TokenCache) -> None:
    assert cache.scram_credential("nope", SHA256) is None
    assert cache.derived_count() == 0


def test_concurrent_first_use_agrees_on_one_credential(cache: TokenCache) -> None:
    cache.upsert(info("t1"))
    results = []
    barrier = threading.Barrier(4)

    def authenticate() -> None:
        barrier.wait()
        results.append(cache.scram_credential("t1", SHA256)[0])

    threads = [threading.Thread(target=authenticate) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 4
    assert all(r == results[0] for r in results)
    assert cache.derived_count() == 1


def test_scram_iterations_are_configurable() -> None:
    cache = TokenCache(MasterKeys(KEY), scram_iterations=8192)
    cache.upsert(info("t1"))
    assert cache.scram_credential("t1", SHA256)[0].iterations == 8192


def test_batch_listener_hears_a_resync_in_one_call_and_each_change_alone(
    cache: TokenCache,
) -> None:
    batches: list[list[tuple[str, str]]] = []
    cache.add_batch_listener(lambda upserted, removed: batches.append(
        [("remove", i.token_id) for i in removed] + [("upsert", i.token_id) for i in upserted]
    ))
    cache.upsert(info("gone"))
    cache.replace_all([info("a"), info("b"), info("c")])
    cache.remove("a")
    cache.upsert(info("b"))  # unchanged: not reported
    assert batches[0] == [("upsert", "gone")]
    assert sorted(batches[1]) == [("remove", "gone"), ("upsert", "a"), ("upsert", "b"),
                                  ("upsert", "c")]
    assert batches[2:] == [[("remove", "a")]]


def test_a_resync_compares_in_chunks_releasing_the_lock_between_them(monkeypatch) -> None:
    import tokensvc.core.cache as cache_module

    monkeypatch.setattr(cache_module, "RESYNC_CHUNK", 2)
    cache = TokenCache(MasterKeys(KEY))
    cache.replace_all([info(f"t{i}") for i in range(10)])
    holds = 0
    real = cache._lock

    class Counting:
        def __enter__(self):
            nonlocal holds
            holds += 1
            return real.__enter__()

        def __exit__(self, *exc):
            return real.__exit__(*exc)

    cache._lock = Counting()
    events = record(cache)
    cache.replace_all([info(f"t{i}", expiry=3000 if i % 3 == 0 else 2000) for i in range(1, 12)])
    cache._lock = real
    # 11 tokens in chunks of 2: 6 holds to compare, one to list the ids, one to apply.
    assert holds >= 8
    assert sorted(cache.token_ids()) == sorted(f"t{i}" for i in range(1, 12))
    assert sorted(events) == sorted(
        [("remove", "t0"), ("upsert", "t3"), ("upsert", "t6"), ("upsert", "t9"),
         ("upsert", "t10"), ("upsert", "t11")]
    )
    assert cache.info("t3").expiry_timestamp == 3000
    assert sorted(i.token_id for i in cache.due(2001)) == sorted(
        ["t1", "t2", "t4", "t5", "t7", "t8", "t10", "t11"]
    )
    assert sorted(i.token_id for i in cache.due(3001)) == sorted(cache.token_ids())
