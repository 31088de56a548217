"""How a catch-up brings the cache up to date: a start fills it from a snapshot, a
resync applies only the changed tokens to the cache in place.

Pure: a real TokenCache, no ZooKeeper. ``count`` must give the number of tokens the
cache will hold before anything changes (ZooKeeper's count is checked against it), and
``fill`` must then make the cache equal to the snapshot or held tokens with the
changes applied.
"""

from __future__ import annotations

from tokensvc.core.cache import TokenCache
from tokensvc.core.keys import MasterKeys, key_id
from tokensvc.core.principal import KafkaPrincipal
from tokensvc.core.token import TokenInformation
from zk.token_sync import _HeldFill, _SnapshotFill

KEY = "unit-master-key"
OWNER = KafkaPrincipal.user("alice")


def info(token_id: str, expiry: int = 100) -> TokenInformation:
    return TokenInformation(token_id, OWNER, OWNER, (), 0, expiry, 10_000_000, key_id(KEY))


def held(*ids: str) -> TokenCache:
    cache = TokenCache(MasterKeys(KEY))
    cache.replace_all([info(t) for t in ids])
    return cache


def contents(cache: TokenCache) -> dict[str, int]:
    return {i.token_id: i.expiry_timestamp for i in cache.infos()}


# Deleted (held), deleted (never held), created, renewed, created then deleted.
CHANGED = {"t0": None, "gone": None, "t9": info("t9"), "t1": info("t1", 200), "x": None}


def test_the_held_count_is_what_the_cache_will_hold_and_nothing_changes_before_fill():
    cache = held("t0", "t1", "t2")
    fill = _HeldFill(cache)
    assert fill.count(CHANGED) == 3  # -t0 +t9
    assert contents(cache) == {"t0": 100, "t1": 100, "t2": 100}
    fill.fill(CHANGED)
    assert contents(cache) == {"t1": 200, "t2": 100, "t9": 100}
    assert fill.count({}) == len(cache) == 3


def test_a_snapshot_fill_gives_the_same_tokens_as_the_held_one():
    cache = held()
    fill = _SnapshotFill(cache, [info("t0"), info("t1"), info("t2")])
    assert fill.count(CHANGED) == 3
    assert len(cache) == 0  # the cache never holds the snapshot before it is caught up
    fill.fill(CHANGED)
    assert contents(cache) == {"t1": 200, "t2": 100, "t9": 100}


def test_the_held_fill_leaves_unchanged_tokens_and_their_credentials_alone():
    cache = held("t0", "t1")
    before = cache.info("t1")
    _HeldFill(cache).fill({"t0": None})
    assert cache.info("t1") is before
