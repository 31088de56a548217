"""CommittedOrder: a cache fed by the follower and by committed writes stays in commit order.

Pure: a real TokenCache, no ZooKeeper, no clock. Each test is one interleaving of the
two writers that the broker can meet (the follower's read may predate or follow a
committed write; a load may be running).
"""

from __future__ import annotations

from tokensvc.core.cache import TokenCache
from tokensvc.core.keys import MasterKeys, key_id
from tokensvc.core.principal import KafkaPrincipal
from tokensvc.core.token import TokenInformation
from zk.token_sync import CommittedOrder

KEY = "unit-master-key"
OWNER = KafkaPrincipal.user("alice")


def info(token_id: str, expiry: int) -> TokenInformation:
    return TokenInformation(token_id, OWNER, OWNER, (), 0, expiry, 10_000_000, key_id(KEY))


def loaded() -> tuple[TokenCache, CommittedOrder]:
    cache = TokenCache(MasterKeys(KEY))
    order = CommittedOrder(cache)
    order.begin_load()
    order.end_load(10)
    return cache, order


def expiry(cache: TokenCache, token_id: str) -> int | None:
    found = cache.info(token_id)
    return None if found is None else found.expiry_timestamp


def test_a_committed_state_is_served_before_the_follower_lists_it():
    cache, order = loaded()
    assert order.apply("t1", info("t1", 100), 11)
    assert expiry(cache, "t1") == 100
    assert order.pending == 1
    order.follow(11, {"t1": info("t1", 100)})
    assert order.pending == 0 and order.through == 11


def test_a_follower_read_older_than_a_pending_committed_state_is_skipped():
    cache, order = loaded()
    order.apply("t1", info("t1", 100), 11)
    assert order.apply("t1", None, 12)  # expired (deleted) at 12
    # The follower listed through 11 and read t1 before the delete committed.
    order.follow(11, {"t1": info("t1", 100)})
    assert cache.info("t1") is None
    assert order.pending == 1
    order.follow(12, {"t1": None})
    assert cache.info("t1") is None and order.pending == 0


def test_a_committed_state_the_follower_already_passed_is_not_applied_again():
    cache, order = loaded()
    order.follow(20, {"t1": info("t1", 300)})  # read after a later renew
    assert order.apply("t1", info("t1", 100), 15)  # a late answer for an older write
    assert expiry(cache, "t1") == 300


def test_an_older_committed_state_never_replaces_a_newer_one():
    cache, order = loaded()
    assert order.apply("t1", info("t1", 200), 13)
    assert order.apply("t1", info("t1", 100), 12)
    assert expiry(cache, "t1") == 200


def test_committed_states_are_refused_while_a_load_runs_and_accepted_after():
    cache, order = loaded()
    order.begin_load()
    assert not order.apply("t1", info("t1", 100), 11)
    assert cache.info("t1") is None
    order.end_load(11)
    assert order.through == 11
    assert order.apply("t1", info("t1", 100), 11)  # covered by the load's mark
    assert cache.info("t1") is None  # the load, not this call, is what serves it
    assert order.apply("t2", info("t2", 100), 12)
    assert expiry(cache, "t2") == 100


def test_nothing_is_applied_before_the_first_load():
    cache = TokenCache(MasterKeys(KEY))
    order = CommittedOrder(cache)
    assert not order.apply("t1", info("t1", 100), 1)
    assert len(cache) == 0


def test_the_follower_applies_tokens_without_a_newer_pending_state():
    cache, order = loaded()
    order.apply("t1", info("t1", 100), 14)
    order.follow(12, {"t1": info("t1", 50), "t2": info("t2", 70), "t3": None})
    assert expiry(cache, "t1") == 100  # pending at 14 > 12: kept
    assert expiry(cache, "t2") == 70
    assert order.through == 12 and order.pending == 1


class _BetweenChunks:
    """The order's lock, running ``between`` once before the follower's second chunk
    takes it (what a committed write on the event loop can do meanwhile)."""

    def __init__(self, lock, between) -> None:
        self._lock = lock
        self._between = between
        self._takes = 0

    def __enter__(self):
        self._takes += 1
        if self._takes == 2 and self._between is not None:
            between, self._between = self._between, None
            between()
            self._takes += 1  # the committed write took the lock once itself
        return self._lock.__enter__()

    def __exit__(self, *exc):
        return self._lock.__exit__(*exc)


def test_between_chunks_a_committed_state_older_than_an_applied_follower_state_is_skipped(
        monkeypatch):
    import zk.token_sync

    monkeypatch.setattr(zk.token_sync, "FOLLOW_CHUNK", 1)
    cache, order = loaded()
    # The follower listed through 20 and read t1 deleted (at 15) and t2 renewed; the
    # answer of the write that renewed t1 at 12 arrives between the two chunks.
    order._lock = _BetweenChunks(order._lock, lambda: order.apply("t1", info("t1", 100), 12))
    order.follow(20, {"t1": None, "t2": info("t2", 200)})
    assert cache.info("t1") is None  # not brought back by the older committed state
    assert expiry(cache, "t2") == 200
    assert order.through == 20 and order.pending == 0


def test_between_chunks_a_committed_state_of_a_token_still_to_come_is_served_then_replaced(
        monkeypatch):
    import zk.token_sync

    monkeypatch.setattr(zk.token_sync, "FOLLOW_CHUNK", 1)
    cache, order = loaded()
    seen: list[int | None] = []

    def committed_write() -> None:
        assert order.apply("t2", info("t2", 150), 14)
        seen.append(expiry(cache, "t2"))  # served at once (read-your-writes)

    order._lock = _BetweenChunks(order._lock, committed_write)
    # The follower's state of t2 was read after the listing through 20: newer than 14.
    order.follow(20, {"t1": info("t1", 100), "t2": info("t2", 200)})
    assert seen == [150]
    assert expiry(cache, "t2") == 200
    assert order.through == 20 and order.pending == 0


def test_a_token_whose_last_listed_change_is_the_committed_state_held_needs_no_read():
    cache, order = loaded()
    order.apply("t1", info("t1", 100), 11)  # this broker's writes, applied directly
    order.apply("t2", None, 12)
    order.apply("t3", info("t3", 100), 13)
    latest = {
        "t1": 11,  # the held state is that of its last listed change: no read
        "t2": 12,  # a delete, likewise
        "t3": 15,  # changed again at 15 by another broker: read it
        "t4": 14,  # never committed here: read it
    }
    assert order.covered(latest) == {"t1", "t2"}
    # The follower applies what it read of the rest; the covered ones stay as they are.
    order.follow(15, {"t3": info("t3", 300), "t4": info("t4", 100)})
    assert expiry(cache, "t1") == 100 and cache.info("t2") is None
    assert expiry(cache, "t3") == 300 and expiry(cache, "t4") == 100
    assert order.pending == 0 and order.through == 15
    assert order.covered({"t1": 11}) == set()  # passed: nothing pending any more


def test_nothing_is_covered_while_a_load_runs():
    _cache, order = loaded()
    order.apply("t1", info("t1", 100), 11)
    order.begin_load()
    assert order.covered({"t1": 11}) == set()
    order.end_load(10)
    assert order.covered({"t1": 11}) == {"t1"}
