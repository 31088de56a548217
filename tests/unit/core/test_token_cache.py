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


def test_expiry_index_put_many_agrees_with_put() -> None:
    rng = random.Random(7)
    one_by_one, batched = ExpiryIndex(), ExpiryIndex()
    items = [(rng.randint(0, 10 * ExpiryIndex.BUCKET_MS), f"t{i}") for i in range(500)]
    for deadline, token_id in items:
        one_by_one.put(token_id, deadline)
    batched.put_many(items)
    assert len(batched) == len(one_by_one) == 500
    for now in (0, ExpiryIndex.BUCKET_MS, 5 * ExpiryIndex.BUCKET_MS + 1, 11 * ExpiryIndex.BUCKET_MS):
        assert batched.due(now) == one_by_one.due(now)
    assert batched.next_deadline() == one_by_one.next_deadline() == min(d for d, _ in items)


def test_expiry_index_moving_a_token_and_discarding_it() -> None:
    index = ExpiryIndex()
    late = 3 * ExpiryIndex.BUCKET_MS + 5
    index.put("a", 100)
    index.put("b", 150)
    index.discard("a", 100)
    index.put("a", late)  # moved to another bucket
    index.discard("b", 150)
    index.discard("b", 150)  # twice: nothing
    index.discard("a", 100)  # a deadline it no longer has: nothing
    assert len(index) == 1
    assert index.due(late) == []
    assert index.due(late + 1) == ["a"]
    assert index.next_deadline() == late
    index.discard("a", late)
    assert index.next_deadline() is None
    assert len(index) == 0


def test_expiry_index_matches_a_scan_after_many_random_changes() -> None:
    rng = random.Random(7)
    index = ExpiryIndex()
    model: dict[str, int] = {}
    span = 20 * ExpiryIndex.BUCKET_MS
    for _ in range(5000):
        token_id = f"t{rng.randrange(300)}"
        if token_id in model:
            index.discard(token_id, model.pop(token_id))
        if rng.random() < 0.75:
            deadline = rng.randrange(span)
            index.put(token_id, deadline)
            model[token_id] = deadline
    assert len(index) == len(model)
    for now in (0, span // 4, span // 2, span + 1):
        expected = sorted((d, t) for t, d in model.items() if d < now)
        assert index.due(now) == [t for _, t in expected]
    assert index.next_deadline() == min(model.values())
    # An emptied bucket is dropped, not kept as an empty dict.
    for token_id, deadline in list(model.items()):
        index.discard(token_id, deadline)
    assert len(index) == 0 and index.next_deadline() is None and index._buckets == {}


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


# -- the HMAC index: keys shared by several tokens ----------------------------------------


def test_tokens_sharing_an_hmac_key_are_each_found_by_their_own_hmac_only(monkeypatch) -> None:
    """The index keeps 60 bits of each HMAC; tokens whose keys collide share a slot, and
    a lookup compares the whole HMAC (forced here: every HMAC gets the same key)."""
    import tokensvc.core.cache as cache_module

    monkeypatch.setattr(cache_module, "hmac_key", lambda hmac: 7)
    cache = TokenCache(MasterKeys(KEY))
    tokens = [cache.upsert(info(f"t{i}")) for i in range(3)]
    for token in tokens:
        assert cache.by_hmac(token.hmac) == token
    forged = bytearray(tokens[0].hmac)
    forged[-1] ^= 1
    assert cache.by_hmac(bytes(forged)) is None
    assert cache.by_hmac(b"short") is None
    cache.remove("t1")
    assert cache.by_hmac(tokens[1].hmac) is None
    assert cache.by_hmac(tokens[0].hmac) == tokens[0]
    assert cache.by_hmac(tokens[2].hmac) == tokens[2]
    cache.remove("t0")
    assert cache.by_hmac(tokens[2].hmac) == tokens[2]
    cache.remove("t2")
    assert cache._by_hmac == {}


def test_a_renewal_keeps_the_hmac_index_and_the_credentials_and_a_rekey_replaces_them() -> None:
    new_kid = key_id("new-key")
    cache = TokenCache(MasterKeys("new-key", [KEY]))
    under_old = cache.upsert(info("t1", kid=KID))
    cache.scram_credential("t1", SHA256)
    assert cache.derived_count() == 1
    cache.upsert(info("t1", expiry=3000, kid=KID))  # renewal: same key, same HMAC
    assert cache.scram_salt("t1", SHA256).derived
    assert cache.by_hmac(under_old.hmac).info.expiry_timestamp == 3000
    under_new = cache.upsert(info("t1", expiry=3000, kid=new_kid))  # re-keyed
    assert under_new.hmac != under_old.hmac
    assert cache.by_hmac(under_old.hmac) is None
    assert cache.by_hmac(under_new.hmac) == under_new
    assert not cache.scram_salt("t1", SHA256).derived
    assert cache.due(3001) == [under_new.info] and cache.due(2001) == []
    cache.upsert(info("t1", kid=key_id("a-key-nobody-has")))
    assert cache.unknown_key_tokens() == 1
    assert cache.by_hmac(under_new.hmac) is None and cache.by_id("t1") is None
    cache.remove("t1")
    assert cache.unknown_key_tokens() == 0 and len(cache) == 0 and cache._by_hmac == {}


# --- the fill of an empty cache (a start) ----------------------------------------------


def _fill_cases():
    from tokensvc.core.keys import key_id
    from tokensvc.core.principal import KafkaPrincipal
    from tokensvc.core.token import TokenInformation

    people = [KafkaPrincipal.user(n) for n in ("ann", "bob", "cyd")]
    kid, old_kid = key_id("fill-key"), key_id("fill-old-key")
    foreign = key_id("a key nobody holds")
    infos = []
    for i in range(300):
        owner = people[i % 3]
        requester = people[(i // 3) % 3]
        renewers = tuple(people[: i % 4])
        key = (kid, old_kid, "", foreign)[i % 4]
        infos.append(TokenInformation(f"fill-{i}", owner, requester, renewers,
                                      i, 60_000 * (i % 7) + i, 10**9, key))
    # A duplicate id: the later state wins, as in the general path.
    infos.append(TokenInformation("fill-5", people[0], people[0], (), 1, 2, 3, kid))
    return infos


def _state(cache):
    return (cache._entries, cache._by_hmac, cache._owned, cache._by_principal,
            cache._expiry._buckets, len(cache._expiry), cache._unknown_key)


def test_fill_of_an_empty_cache_equals_the_general_path():
    from tokensvc.core.cache import TokenCache
    from tokensvc.core.keys import MasterKeys

    keys = MasterKeys("fill-key", ["fill-old-key"])
    infos = _fill_cases()
    filled, general = TokenCache(keys), TokenCache(keys)
    heard: list = []
    filled.add_batch_listener(lambda up, gone: heard.append((len(up), len(gone))))
    filled.replace_all(iter(infos))
    assert general._replace_changes(list(infos)) == 300
    assert _state(filled) == _state(general)
    assert heard == [(300, 0)]
    assert filled.unknown_key_tokens() == 75
    token = filled.by_id("fill-1")
    assert token is not None and filled.by_hmac(token.hmac) == token


def test_a_token_arriving_during_a_fill_is_not_lost_or_kept():
    from tokensvc.core.cache import TokenCache
    from tokensvc.core.keys import MasterKeys
    from tokensvc.core.principal import KafkaPrincipal
    from tokensvc.core.token import TokenInformation

    intruder = TokenInformation("intruder", KafkaPrincipal.user("eve"),
                                KafkaPrincipal.user("eve"), (), 1, 2, 3, "")
    calls = []

    class Racing(MasterKeys):
        __slots__ = ()

        def hmac_keys(self, token_ids, token_key_ids, bits=64):
            if not calls:
                cache.upsert(intruder)  # e.g. a token read from ZooKeeper on a cache miss
            calls.append(bits)
            return super().hmac_keys(token_ids, token_key_ids, bits)

    cache = TokenCache(Racing("fill-key", ["fill-old-key"]))
    infos = _fill_cases()
    cache.replace_all(infos)
    expected = TokenCache(MasterKeys("fill-key", ["fill-old-key"]))
    expected.replace_all(infos)
    assert _state(cache) == _state(expected)
    assert cache.info("intruder") is None


# -- the copy in slices (what a snapshot is made from) ------------------------------------


def _ids(infos: list[TokenInformation]) -> list[str]:
    return [i.token_id for i in infos]


def test_a_copy_in_slices_is_the_whole_cache_and_gives_way_between_slices(cache) -> None:
    for n in range(1_000):
        cache.upsert(info(f"t{n:04d}"))
    pauses: list[int] = []
    copied = cache.infos_in_slices(slice_size=64, pause=lambda: pauses.append(1))
    assert _ids(copied) == _ids(cache.infos())
    assert len(pauses) == 1_000 // 64  # one between every two holds of the lock


def test_a_state_replaced_between_slices_shows_old_or_new_and_every_token_once(cache) -> None:
    for n in range(300):
        cache.upsert(info(f"t{n:03d}"))
    renewed = iter(range(300))

    def renew_one() -> None:  # one token renewed in place at each pause
        n = next(renewed)
        cache.upsert(info(f"t{n:03d}", expiry=9_000))

    copied = cache.infos_in_slices(slice_size=50, pause=renew_one)
    assert sorted(_ids(copied)) == [f"t{n:03d}" for n in range(300)]
    assert {i.expiry_timestamp for i in copied} <= {2000, 9000}
    # The first slice was copied before any renewal; the last after five of them.
    assert copied[0].expiry_timestamp == 2000 and copied[-1].expiry_timestamp == 2000


def test_a_token_added_or_removed_between_slices_starts_the_walk_again(cache) -> None:
    for n in range(300):
        cache.upsert(info(f"t{n:03d}"))
    changes = [lambda: cache.upsert(info("added")), lambda: cache.remove("t000")]

    def change_once() -> None:
        if changes:
            changes.pop(0)()

    copied = cache.infos_in_slices(slice_size=100, pause=change_once)
    assert sorted(_ids(copied)) == sorted([f"t{n:03d}" for n in range(1, 300)] + ["added"])
    assert len(copied) == len(set(_ids(copied)))


def test_under_churn_at_every_pause_the_copy_is_taken_in_one_hold(cache) -> None:
    for n in range(300):
        cache.upsert(info(f"t{n:03d}"))
    added = iter(range(10_000))

    def churn() -> None:
        cache.upsert(info(f"new{next(added)}"))

    copied = cache.infos_in_slices(slice_size=100, attempts=3, pause=churn)
    assert _ids(copied) == _ids(cache.infos())  # three walks began again: one hold
    assert len(copied) == 303
