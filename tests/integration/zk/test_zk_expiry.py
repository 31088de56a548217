"""ExpirySweeper against a real ZooKeeper: only the controller sweeps, under its guard,
and sweeping carries on after a takeover (FakeClock-driven sweeps plus one real thread)."""

from __future__ import annotations

import time

import pytest

from tests.support.follower import hold_listings
from tests.support.wait import poll_until as eventually
from tokensvc.core.cache import TokenCache
from tokensvc.core.clock import FakeClock
from tokensvc.core.keys import MasterKeys
from tokensvc.core.principal import KafkaPrincipal
from tokensvc.core.token import TokenInformation
from zk import layout
from zk.client import ZkSettings, open_client
from zk.election import ControllerElection
from zk.expiry import ExpirySweeper
from zk.token_store import TokenStore
from zk.token_sync import TokenSync

KEYS = MasterKeys("expiry-test-master-key")
T0 = 1_700_000_000_000
HOUR = 3_600_000


def _info(token_id: str, expiry: int, max_ts: int = T0 + 100 * HOUR) -> TokenInformation:
    return TokenInformation(
        token_id=token_id,
        owner=KafkaPrincipal.user("alice"),
        token_requester=KafkaPrincipal.user("alice"),
        renewers=(),
        issue_timestamp=T0,
        expiry_timestamp=expiry,
        max_timestamp=max_ts,
        key_id=KEYS.current_id,
    )


class Broker:
    """A broker's ZooKeeper side: session, cache + sync, election, sweeper."""

    def __init__(self, connect: str, broker_id: int, clock: FakeClock, interval_ms: int) -> None:
        self.client = open_client(ZkSettings(connect, session_timeout_ms=4000))
        self.store = TokenStore(self.client)
        self.cache = TokenCache(KEYS)
        self.sync = TokenSync(self.store, self.cache)
        self.election = ControllerElection(self.client, broker_id)
        self.removed: list[tuple[str, str]] = []
        self.sweeper = ExpirySweeper(
            self.store,
            self.cache,
            self.election,
            clock,
            interval_ms=interval_ms,
            on_removed=lambda info, reason: self.removed.append((info.token_id, reason)),
            purge=self.sync.purge,
            apply_committed=self.sync.apply_committed,
        )

    def start(self) -> None:
        self.sync.start()
        self.election.start()

    def close(self) -> None:
        self.sweeper.close()
        self.election.close()
        self.sync.close()
        self.client.stop()
        self.client.close()

    def cached_ids(self) -> set[str]:
        return {t.info.token_id for t in self.cache.tokens()}


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(T0)


@pytest.fixture
def cluster(zk_connect, clock):
    made: list[Broker] = []

    def make(count: int, interval_ms: int = 60_000) -> list[Broker]:
        new = [Broker(zk_connect, i + 1, clock, interval_ms) for i in range(count)]
        made.extend(new)
        for b in new:
            b.start()
        assert eventually(lambda: sum(b.election.is_controller for b in new) == 1)
        return new

    yield make
    for b in made:
        b.close()


def controller_of(brokers: list[Broker]) -> Broker:
    (winner,) = [b for b in brokers if b.election.is_controller]
    return winner


def seed(broker: Broker, infos: list[TokenInformation], everyone: list[Broker]) -> None:
    for info in infos:
        broker.store.create(info)
    ids = {i.token_id for i in infos}
    assert eventually(lambda: all(ids <= b.cached_ids() for b in everyone))


def test_only_the_controller_sweeps(cluster, clock):
    group = cluster(3)
    leader = controller_of(group)
    seed(leader, [_info("due", T0 + HOUR), _info("fresh", T0 + 10 * HOUR)], group)
    clock.advance(2 * HOUR)
    for follower in (b for b in group if b is not leader):
        assert follower.sweeper.sweep_once() == 0
        assert follower.sweeper.sweeps == 0
    assert leader.store.get("due") is not None
    assert leader.sweeper.sweep_once() == 1
    assert leader.store.get("due") is None
    assert leader.store.get("fresh") is not None
    assert leader.removed == [("due", "expired")]
    assert eventually(lambda: all(b.cached_ids() == {"fresh"} for b in group), timeout=15.0)


def test_the_controller_applies_its_sweeps_deletions_and_does_not_read_them_back(
        cluster, clock, monkeypatch):
    group = cluster(2)
    leader = controller_of(group)
    due = [_info(f"due{n:03d}", T0 + HOUR) for n in range(150)]  # two delete groups
    seed(leader, due + [_info("fresh", T0 + 10 * HOUR)], group)
    assert leader.sync.wait_caught_up(5.0)
    # The leader's follower lists nothing until the sweep has returned (else it could list
    # a deletion before the sweeper applied it, and read the token back rightly).
    listing_allowed = hold_listings(leader.sync, monkeypatch)
    skipped = leader.sync.reads_skipped
    clock.advance(2 * HOUR)
    assert leader.sweeper.sweep_once() == 150
    assert leader.cached_ids() == {"fresh"}  # at once, before any listing
    listing_allowed.set()
    assert eventually(lambda: all(b.cached_ids() == {"fresh"} for b in group))
    assert leader.sync.wait_caught_up(5.0)
    assert leader.sync.reads_skipped - skipped == 150
    assert {t for t, _ in leader.removed} == {i.token_id for i in due}


def test_reason_is_max_lifetime_once_the_max_timestamp_passed(cluster, clock):
    (leader,) = cluster(1)
    seed(leader, [_info("capped", T0 + HOUR, max_ts=T0 + HOUR)], [leader])
    clock.advance(HOUR + 1)
    assert leader.sweeper.sweep_once() == 1
    assert leader.removed == [("capped", "max_lifetime")]


def test_a_token_renewed_in_zookeeper_but_not_yet_in_the_cache_survives(cluster, clock):
    (leader,) = cluster(1)
    seed(leader, [_info("t1", T0 + HOUR)], [leader])
    leader.sync.close()  # the cache will not hear of the renewal
    leader.store.update(_info("t1", T0 + 5 * HOUR))
    clock.advance(2 * HOUR)
    assert leader.sweeper.sweep_once() == 0
    assert leader.store.get("t1").expiry_timestamp == T0 + 5 * HOUR
    assert leader.cache.info("t1").expiry_timestamp == T0 + 5 * HOUR  # cache refreshed


def test_sweep_purges_notifications_older_than_15_minutes(cluster, clock):
    (leader,) = cluster(1)
    seed(leader, [_info("t1", T0 + HOUR), _info("t2", T0 + 50 * HOUR)], [leader])
    clock.advance(2 * HOUR)  # still long before the znodes' real ctime
    assert leader.sweeper.sweep_once() == 1
    assert len(leader.client.get_children(layout.TOKEN_CHANGES)) == 3
    assert leader.sweeper.purged_notifications == 0
    clock.set(int(time.time() * 1000) + 16 * 60 * 1000)
    assert leader.sweeper.sweep_once() == 1  # t2 is due by now as well
    # Three notifications were 16 minutes old; the one for t2's deletion is new
    # by ZooKeeper's clock but not by this fake one, so it goes too.
    assert leader.sweeper.purged_notifications == 4
    assert leader.client.get_children(layout.TOKEN_CHANGES) == []


def test_sweeping_continues_on_the_new_controller_after_takeover(cluster, clock):
    group = cluster(3)
    first = controller_of(group)
    seed(first, [_info("a", T0 + HOUR), _info("b", T0 + 3 * HOUR)], group)
    clock.advance(2 * HOUR)
    assert first.sweeper.sweep_once() == 1

    first.election.close()
    rest = [b for b in group if b is not first]
    assert eventually(lambda: sum(b.election.is_controller for b in rest) == 1)
    second = controller_of(rest)
    clock.advance(2 * HOUR)
    assert first.sweeper.sweep_once() == 0
    assert second.sweeper.sweep_once() == 1
    assert second.removed == [("b", "expired")]
    assert second.store.load_all() == []


def test_sweeper_thread_runs_only_on_the_controller_and_keeps_running_after_takeover(
    cluster, clock
):
    group = cluster(3, interval_ms=20)
    first = controller_of(group)
    for b in group:
        b.sweeper.start()
    seed(first, [_info("a", T0 + HOUR)], group)
    clock.advance(2 * HOUR)
    assert eventually(lambda: first.removed == [("a", "expired")])
    assert first.store.get("a") is None
    assert all(b.sweeper.sweeps == 0 for b in group if b is not first)

    first.election.close()
    rest = [b for b in group if b is not first]
    assert eventually(lambda: sum(b.election.is_controller for b in rest) == 1)
    second = controller_of(rest)
    second.store.create(_info("b", T0 + HOUR))  # already due at the clock's time
    assert eventually(lambda: second.removed == [("b", "expired")])
    assert second.store.get("b") is None
    assert first.removed == [("a", "expired")]
    assert eventually(lambda: all(b.cached_ids() == set() for b in group), timeout=15.0)


def test_sweep_stops_when_controllership_is_lost_midway(cluster, clock):
    (leader,) = cluster(1)
    seed(leader, [_info(f"t{i}", T0 + HOUR) for i in range(3)], [leader])
    clock.advance(2 * HOUR)
    leader.election.close()
    assert leader.sweeper.sweep_once() == 0
    assert len(leader.store.load_all()) == 3


def test_sweeper_close_stops_its_thread(cluster):
    (leader,) = cluster(1, interval_ms=10)
    leader.sweeper.start()
    assert leader.sweeper.running
    assert eventually(lambda: leader.sweeper.sweeps > 0)
    leader.sweeper.close()
    count = leader.sweeper.sweeps
    time.sleep(0.1)
    assert leader.sweeper.sweeps == count
    assert not leader.sweeper.running


def test_sweeps_closer_than_the_purge_interval_purge_once(cluster, clock):
    """A short sweep interval does not purge on every sweep: the purge lists and stats
    the notification roots, and at 2 sweeps a second that kept ZooKeeper busy."""
    (leader,) = cluster(1)
    calls: list[int] = []
    sweeper = ExpirySweeper(leader.store, leader.cache, leader.election, clock, interval_ms=500,
                            purge=lambda now: calls.append(now) or 0)
    for _ in range(3):
        sweeper.sweep_once()
        clock.advance(500)
    assert calls == [T0]
    clock.advance(60_000)
    sweeper.sweep_once()
    assert calls == [T0, T0 + 61_500]
