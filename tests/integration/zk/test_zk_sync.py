"""TokenSync against a real ZooKeeper: several service instances (own kazoo client, own
TokenCache, own TokenSync) on one ZooKeeper converge after changes, after a forced
session expiry and after a ZooKeeper restart."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest
from kazoo.client import KazooState

from tests.support.follower import hold_listings
from tests.support.wait import poll_until
from tests.support.zkclient import expire_session
from tokensvc.core.cache import TokenCache
from tokensvc.core.keys import MasterKeys
from tokensvc.core.principal import KafkaPrincipal
from tokensvc.core.token import TokenInformation
from zk import layout
from zk.client import ZkSettings, open_client
from zk.notifications import Resync
from zk.server import ManagedZooKeeper
from zk.token_store import TokenStore
from zk.token_sync import MIN_LISTING_INTERVAL_S, TokenSync

KEYS = MasterKeys("sync-test-master-key")
# A correctness bound for propagation, not a benchmark.
# A correctness bound, not a speed target: propagation speed is benchmark B3.
PROPAGATION_S = 15.0


def _info(token_id: str, expiry: int = 1_700_086_400_000) -> TokenInformation:
    return TokenInformation(
        token_id=token_id,
        owner=KafkaPrincipal.user("alice"),
        token_requester=KafkaPrincipal.user("alice"),
        renewers=(),
        issue_timestamp=1_700_000_000_000,
        expiry_timestamp=expiry,
        max_timestamp=1_700_604_800_000,
        key_id=KEYS.current_id,
    )


def eventually(predicate: Callable[[], bool], timeout: float = PROPAGATION_S) -> bool:
    return poll_until(predicate, timeout, interval=0.005)


class Instance:
    """One service instance: its own kazoo session, cache and sync."""

    def __init__(self, connect: str, **sync_options: object) -> None:
        self.client = open_client(ZkSettings(connect, session_timeout_ms=4000))
        self.store = TokenStore(self.client)
        self.cache = TokenCache(KEYS)
        self.sync = TokenSync(self.store, self.cache, **sync_options)
        self.closed = False

    def cached(self) -> dict[str, TokenInformation]:
        return {t.info.token_id: t.info for t in self.cache.tokens()}

    def in_zookeeper(self) -> dict[str, TokenInformation]:
        return {i.token_id: i for i in self.store.load_all()}

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.sync.close()
        self.client.stop()
        self.client.close()


@pytest.fixture
def instances(zk_connect):
    made: list[Instance] = []

    def make(count: int, connect: str = zk_connect, **options: object) -> list[Instance]:
        new = [Instance(connect, **options) for _ in range(count)]
        made.extend(new)
        for instance in new:
            instance.sync.start()
        return new

    yield make
    for instance in made:
        instance.close()


def test_start_loads_every_existing_token(instances, zk_connect):
    (writer,) = instances(1)
    for i in range(20):
        writer.store.create(_info(f"t{i}"))
    (reader,) = instances(1)
    assert reader.cached() == writer.in_zookeeper()
    assert len(reader.cached()) == 20
    assert reader.sync.resync_count == 1


def test_changes_on_one_instance_reach_the_others(instances):
    a, b, c = instances(3)
    a.store.create(_info("t1"))
    assert eventually(lambda: "t1" in b.cached() and "t1" in c.cached())
    renewed = _info("t1", expiry=1_700_090_000_000)
    b.store.update(renewed)
    assert eventually(lambda: a.cached().get("t1") == renewed and c.cached().get("t1") == renewed)
    c.store.delete("t1")
    assert eventually(lambda: not a.cached() and not b.cached() and not c.cached())


def test_a_burst_of_changes_is_applied_and_counted(instances):
    a, b = instances(2)
    for i in range(50):
        a.store.create(_info(f"t{i}"))
    for i in range(0, 50, 2):
        a.store.delete(f"t{i}")
    assert eventually(lambda: b.cached() == a.in_zookeeper(), timeout=2 * PROPAGATION_S)
    assert b.sync.wait_caught_up(2.0)
    assert b.sync.applied_changes == 75
    assert set(b.cached()) == {f"t{i}" for i in range(1, 50, 2)}


def test_a_follower_does_not_read_back_the_states_its_broker_committed(instances, monkeypatch):
    # The controller applies each state it commits at once (apply_committed); its follower
    # then lists those changes too. It reads back only the tokens whose last listed change
    # is not the state it holds: here the one another instance changed afterwards.
    a, b = instances(2)
    read: list[str] = []
    get_many = a.store.get_many

    def counting(token_ids):
        read.extend(token_ids)
        return get_many(token_ids)

    monkeypatch.setattr(a.store, "get_many", counting)
    # a's follower lists nothing until a's own writes are applied (else it could list a
    # change before a applied it, and read it back rightly).
    listing_allowed = hold_listings(a.sync, monkeypatch)
    committed = {}
    for i in range(30):
        info = _info(f"t{i}")
        committed[info.token_id] = a.store.create(info)
        assert a.sync.apply_committed(info.token_id, info, committed[info.token_id])
    for i in range(10):
        sequence = a.store.delete(f"t{i}")
        assert a.sync.apply_committed(f"t{i}", None, sequence)
    renewed = _info("t29", expiry=1_700_090_000_000)
    b.store.update(renewed)  # not a's write: a must read it
    listing_allowed.set()
    assert eventually(lambda: a.cached().get("t29") == renewed)
    assert a.sync.wait_caught_up(5.0)
    assert a.cached() == a.in_zookeeper() == b.in_zookeeper()
    assert len(a.cached()) == 20
    assert "t29" in read
    assert not set(read) & {f"t{i}" for i in range(29)}
    assert a.sync.reads_skipped >= 29


def test_a_stream_of_changes_shares_listings_spaced_by_the_minimum_interval(instances):
    a, b = instances(2)
    listings_before = b.sync.listings
    started = time.monotonic()
    for i in range(100):  # one after another: each change a few ms after the last
        a.store.create(_info(f"s{i}"))
    assert eventually(lambda: len(b.cached()) == 100)
    assert b.sync.wait_caught_up(5.0)
    elapsed = time.monotonic() - started
    listings = b.sync.listings - listings_before
    assert b.sync.applied_changes == 100
    # Every listing after the first waited MIN_LISTING_INTERVAL_S since the previous one.
    assert 1 <= listings <= 1 + elapsed / MIN_LISTING_INTERVAL_S, (listings, elapsed)


def test_expired_session_resyncs_to_zookeepers_contents(instances):
    a, b = instances(2)
    for i in range(10):
        a.store.create(_info(f"old{i}"))
    assert eventually(lambda: len(b.cached()) == 10)
    resyncs_before = b.sync.resync_count

    stop = threading.Event()

    def churn() -> None:
        n = 0
        while not stop.is_set():
            a.store.create(_info(f"new{n}"))
            if n % 2:
                a.store.delete(f"new{n - 1}")
            n += 1
            time.sleep(0.002)

    writer = threading.Thread(target=churn)
    writer.start()
    try:
        expire_session(b.client)
        for i in range(5):
            a.store.delete(f"old{i}")
        time.sleep(0.2)
    finally:
        stop.set()
        writer.join()
    assert eventually(lambda: b.cached() == a.in_zookeeper(), timeout=5.0)
    assert b.sync.resync_count > resyncs_before
    assert not any(f"old{i}" in b.cached() for i in range(5))


def _hold_worker(instance: Instance) -> threading.Event:
    """Keep ``instance``'s sync worker busy until the returned event is set: the resync
    a session loss requests then runs after whatever the test does meanwhile."""
    release, holding = threading.Event(), threading.Event()

    def hold() -> None:
        holding.set()
        release.wait(30)

    instance.sync._worker.submit("test-hold", hold)
    assert holding.wait(5)
    return release


def test_a_session_loss_catches_the_held_cache_up_instead_of_reading_every_token(instances):
    a, b = instances(2)
    for i in range(10):
        a.store.create(_info(f"t{i}"))
    assert eventually(lambda: len(b.cached()) == 10)
    assert (b.sync.full_loads, b.sync.caught_up_resyncs) == (1, 0)
    release = _hold_worker(b)
    try:
        expire_session(b.client)
        # While b is away: a deletion, a creation and a renewal (a new expiry).
        a.store.delete("t0")
        a.store.create(_info("t10"))
        a.store.update(_info("t1", expiry=1_700_090_000_000))
    finally:
        release.set()
    # (the reconnection may ask for a second resync: caught up from there, with nothing)
    assert eventually(lambda: b.sync.caught_up_resyncs >= 1)
    assert eventually(lambda: b.cached() == a.in_zookeeper())
    assert "t0" not in b.cached() and b.cached()["t1"].expiry_timestamp == 1_700_090_000_000
    assert b.sync.full_loads == 1  # no token was read but the three named since
    assert not b.sync.catch_up_refusals


@pytest.mark.parametrize(("damage", "refusal"), [("notifications purged", "purged"),
                                                 ("a token deleted by hand", "mismatch")])
def test_a_session_loss_reads_every_token_when_the_held_cache_cannot_be_caught_up(
    instances, damage, refusal,
):
    a, b = instances(2)
    for i in range(10):
        a.store.create(_info(f"t{i}"))
    assert eventually(lambda: len(b.cached()) == 10)
    release = _hold_worker(b)
    try:
        expire_session(b.client)
        if damage == "notifications purged":
            # Changes b did not see, then every notification purged (as 15 minutes on).
            a.store.delete("t0")
            a.store.create(_info("t10"))
            assert a.sync.purge(int(time.time() * 1000) + 86_400_000) > 0
        else:
            # No notification: only the count of token znodes can tell.
            a.client.delete(layout.token_path("t0"))
    finally:
        release.set()
    assert eventually(lambda: b.sync.catch_up_refusals[refusal] == 1)
    assert eventually(lambda: b.sync.full_loads == 2)
    assert b.cached() == a.in_zookeeper()
    assert "t0" not in b.cached()


def test_zookeeper_restart_caches_converge(tmp_path, instances):
    server = ManagedZooKeeper(tmp_path / "zk")
    server.start()
    try:
        connect = f"{server.connect}/restart"
        a, b = instances(2, connect)
        a.store.create(_info("before"))
        assert eventually(lambda: "before" in b.cached())

        server.stop()
        server.start()

        assert eventually(lambda: a.client.state == KazooState.CONNECTED, timeout=10)
        a.store.create(_info("after"))
        a.store.delete("before")
        assert eventually(lambda: b.cached() == a.in_zookeeper(), timeout=10)
        assert set(b.cached()) == {"after"}
        a.close()
        b.close()
    finally:
        server.stop()


def test_on_resync_reports_token_count(instances):
    (writer,) = instances(1)
    writer.store.create(_info("t1"))
    writer.store.create(_info("t2"))
    calls: list[Resync] = []
    instances(1, on_resync=calls.append)
    assert len(calls) == 1
    assert (calls[0].name, calls[0].entries, calls[0].caught_up) == ("token-sync", 2, False)
    assert calls[0].duration_ms >= 0


def test_closed_sync_stops_following(instances):
    a, b = instances(2)
    b.sync.close()
    a.store.create(_info("t1"))
    time.sleep(0.2)
    assert b.cached() == {}
