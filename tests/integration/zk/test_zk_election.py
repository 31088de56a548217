"""ControllerElection against a real ZooKeeper: one controller at a time, takeover on
close and on session expiry, the epoch guard, and callbacks off kazoo's thread."""

from __future__ import annotations

import json
import threading

import pytest

from tests.support.wait import poll_until as eventually
from tests.support.zkclient import expire_session
from tokensvc.core.clock import FakeClock
from tokensvc.core.principal import KafkaPrincipal
from tokensvc.core.token import TokenInformation
from zk import layout
from zk.client import ZkSettings, open_client
from zk.election import ControllerElection
from zk.errors import NotControllerError
from zk.token_store import TokenStore

TIMEOUT_S = 10.0


class Broker:
    def __init__(self, connect: str, broker_id: int, session_timeout_ms: int = 4000) -> None:
        self.client = open_client(ZkSettings(connect, session_timeout_ms=session_timeout_ms))
        self.changes: list[tuple[int | None, bool, str]] = []
        self.election = ControllerElection(
            self.client,
            broker_id,
            on_change=lambda cid, me: self.changes.append(
                (cid, me, threading.current_thread().name)
            ),
            clock=FakeClock(1_700_000_000_000),
        )

    def close(self) -> None:
        self.election.close()
        self.client.stop()
        self.client.close()


@pytest.fixture
def brokers(zk_connect):
    made: list[Broker] = []

    def make(*ids: int) -> list[Broker]:
        new = [Broker(zk_connect, i) for i in ids]
        made.extend(new)
        for b in new:
            b.election.start()
        return new

    yield make
    for b in made:
        b.close()


def controllers(brokers: list[Broker]) -> list[int]:
    return [b.election.broker_id for b in brokers if b.election.is_controller]


def settled(brokers: list[Broker]) -> bool:
    """Exactly one controller, and every broker knows who it is."""
    winners = controllers(brokers)
    return len(winners) == 1 and all(b.election.controller_id() == winners[0] for b in brokers)


def test_three_brokers_elect_exactly_one_controller(brokers):
    group = brokers(1, 2, 3)
    assert eventually(lambda: settled(group))
    winner = next(b for b in group if b.election.is_controller)
    data, stat = winner.client.get(layout.CONTROLLER)
    assert json.loads(data) == {
        "version": 1,
        "brokerid": winner.election.broker_id,
        "timestamp": "1700000000000",
    }
    assert data == layout.encode_controller(winner.election.broker_id, 1_700_000_000_000)
    assert stat.ephemeralOwner == winner.client.client_id[0]
    assert winner.client.get(layout.CONTROLLER_EPOCH)[0] == b"1"
    assert winner.election.epoch == 1
    assert winner.election.guard() == (layout.CONTROLLER_EPOCH, 1)
    assert all(b.election.guard() is None for b in group if b is not winner)


def test_closing_the_controller_hands_over_and_bumps_the_epoch(brokers):
    group = brokers(1, 2, 3)
    assert eventually(lambda: settled(group))
    first = next(b for b in group if b.election.is_controller)
    old_guard = first.election.guard()
    first.election.close()
    rest = [b for b in group if b is not first]
    assert eventually(lambda: settled(rest))
    second = next(b for b in rest if b.election.is_controller)
    assert second is not first
    assert second.election.epoch == 2
    assert second.election.guard() != old_guard
    assert first.election.guard() is None


def test_a_deposed_controllers_guard_no_longer_lets_it_write(brokers):
    group = brokers(1, 2)
    assert eventually(lambda: settled(group))
    first = next(b for b in group if b.election.is_controller)
    stale_guard = first.election.guard()
    store = TokenStore(first.client)
    store.ensure_paths()
    first.election.close()
    assert eventually(lambda: settled([b for b in group if b is not first]))
    info = TokenInformation(
        "t1", KafkaPrincipal.user("a"), KafkaPrincipal.user("a"), (), 1, 2, 3
    )
    with pytest.raises(NotControllerError):
        store.create(info, guard=stale_guard)
    assert store.get("t1") is None


def test_session_expiry_of_the_controller_hands_over(brokers):
    group = brokers(1, 2, 3)
    assert eventually(lambda: settled(group))
    first = next(b for b in group if b.election.is_controller)
    old_epoch = first.election.epoch
    old_guard = first.election.guard()
    expire_session(first.client)
    assert eventually(lambda: settled(group))
    winner = next(b for b in group if b.election.is_controller)
    assert winner.election.epoch > old_epoch
    assert winner.election.guard() != old_guard
    assert len(controllers(group)) == 1


def test_on_change_runs_on_the_elections_report_thread_not_kazoos(brokers):
    group = brokers(1, 2)
    assert eventually(lambda: settled(group))
    assert eventually(lambda: all(b.changes for b in group))
    for b in group:
        assert {name for _, _, name in b.changes} == {
            f"controller-election-{b.election.broker_id}-reports"
        }
        last_id, last_me, _ = b.changes[-1]
        assert last_me == b.election.is_controller
        assert last_id == b.election.controller_id()


def test_a_leftover_znode_with_our_broker_id_from_another_session_is_not_ours(
    brokers, zk_connect
):
    other = open_client(ZkSettings(zk_connect, session_timeout_ms=4000))
    try:
        other.create(layout.CONTROLLER, layout.encode_controller(7, 1), ephemeral=True)
        (me,) = brokers(7)
        assert eventually(lambda: me.election.controller_id() == 7)
        assert not me.election.is_controller
        assert me.election.guard() is None
        other.stop()  # the old session ends: its znode goes, and broker 7 wins for real
        assert eventually(lambda: me.election.is_controller)
    finally:
        other.close()


def test_a_controller_that_loses_its_connection_stops_acting_until_it_is_back(tmp_path):
    """Issue #27: while its connection is suspended (ZooKeeper frozen here, a partition in
    production) the controller stops acting as one, so a new controller elected on the
    other side once its session expires is never the second; back within its session,
    it resumes with the same epoch and no election."""
    from zk.server import ManagedZooKeeper

    with ManagedZooKeeper(tmp_path / "zk") as server:
        # 8 s: kazoo suspends 5.3 s after it last heard from the server, so the resume
        # comes well within the session and the server does not expire it.
        broker = Broker(server.connect, 1, session_timeout_ms=8000)
        try:
            broker.election.start()
            assert eventually(lambda: broker.election.is_controller)
            guard, epoch = broker.election.guard(), broker.election.epoch
            server.pause()
            try:
                assert eventually(lambda: not broker.election.is_controller, timeout=8.0)
                assert broker.election.epoch is None
                assert eventually(lambda: (1, False) in [c[:2] for c in broker.changes])
            finally:
                server.resume()
            assert eventually(lambda: broker.election.is_controller, timeout=10.0)
            assert broker.election.guard() == guard
            assert broker.election.epoch == epoch
            # is_controller turns true before the listener hears of it: wait for the change.
            assert eventually(lambda: broker.changes[-1][:2] == (1, True))
        finally:
            broker.close()
