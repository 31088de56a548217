"""FreshnessGate (bounded staleness, issue #20) with a fake monotonic clock and fake
confirmations: no ZooKeeper, no sleeps in the tests themselves."""

from __future__ import annotations

import asyncio

import pytest

from tokensvc.broker.gates.freshness import STALE_VIEW, FreshnessGate, StaleView
from tokensvc.core.errors import Errors


class FakeMonotonic:
    def __init__(self) -> None:
        self.now = 1000.0
        self.reads = 0

    def __call__(self) -> float:
        self.reads += 1
        return self.now


class FakeZooKeeper:
    """A confirm callable: counts rounds; each may move the clock, fail or hang."""

    def __init__(self, clock: FakeMonotonic) -> None:
        self.clock = clock
        self.calls = 0
        self.advance_s = 0.0
        self.first_advance_s = 0.0
        self.fail: Exception | None = None
        self.release: asyncio.Event | None = None

    async def __call__(self) -> None:
        self.calls += 1
        if self.release is not None:
            await self.release.wait()
        self.clock.now += self.advance_s + (self.first_advance_s if self.calls == 1 else 0.0)
        if self.fail is not None:
            raise self.fail


def make(bound_ms: int = 3000, round_timeout_s: float = 10.0):
    clock = FakeMonotonic()
    zk = FakeZooKeeper(clock)
    return FreshnessGate(bound_ms, zk, round_timeout_s=round_timeout_s, monotonic=clock), clock, zk


def run(coro):
    return asyncio.run(coro)


def test_a_new_gate_is_stale_until_its_first_confirmation() -> None:
    gate, _clock, zk = make()
    assert not gate.fresh()
    run(gate.catch_up(1.0))
    assert gate.fresh() and zk.calls == 1


def test_fresh_within_the_bound_and_stale_past_it() -> None:
    gate, clock, zk = make(bound_ms=3000)
    run(gate.catch_up(1.0))
    clock.now += 3.0
    assert gate.fresh()
    clock.now += 0.001
    assert not gate.fresh()
    assert zk.calls == 1


def test_the_fast_path_is_one_clock_read_and_no_round() -> None:
    gate, clock, zk = make()
    run(gate.catch_up(1.0))
    clock.reads = 0
    for _ in range(100):
        assert gate.fresh()
    assert clock.reads == 100
    clock.reads = 0
    run(gate.catch_up(1.0))  # fresh: returns after the one read
    assert clock.reads == 1 and zk.calls == 1


def test_confirmed_at_is_the_time_before_zookeeper_was_asked() -> None:
    gate, clock, zk = make(bound_ms=3000)
    zk.advance_s = 2.0  # the round takes 2 s
    started = clock.now
    run(gate.catch_up(10.0))
    assert gate.confirmed_at == started
    clock.now += 1.0  # 3 s after the round was sent
    assert gate.fresh()
    clock.now += 0.5
    assert not gate.fresh()


def test_a_pause_of_five_seconds_makes_the_view_stale() -> None:
    gate, clock, zk = make(bound_ms=3000)
    run(gate.catch_up(1.0))
    clock.now += 5.0  # SIGSTOP: the monotonic clock jumps
    assert not gate.fresh()
    run(gate.catch_up(1.0))
    assert zk.calls == 2 and gate.fresh()


def test_concurrent_callers_share_one_round() -> None:
    gate, _clock, zk = make()

    async def scenario() -> None:
        zk.release = asyncio.Event()
        waiting = [asyncio.ensure_future(gate.catch_up(10.0)) for _ in range(50)]
        for _ in range(20):  # let every caller reach the round
            await asyncio.sleep(0)
        assert zk.calls == 1
        zk.release.set()
        await asyncio.gather(*waiting)

    run(scenario())
    assert zk.calls == 1 and gate.fresh()


def test_a_round_that_ends_still_stale_is_followed_by_another() -> None:
    """A round sent before a pause confirms an old time: the caller needs a new one."""
    gate, _clock, zk = make(bound_ms=3000)
    zk.first_advance_s = 5.0  # the process froze while the first round was in flight
    run(gate.catch_up(30.0))
    assert zk.calls == 2
    assert gate.fresh()


def test_unreachable_zookeeper_fails_closed_with_a_retriable_error() -> None:
    gate, clock, zk = make(bound_ms=3000)
    run(gate.catch_up(1.0))
    clock.now += 10.0
    zk.fail = ConnectionError("connection lost")
    zk.advance_s = 0.5
    with pytest.raises(StaleView) as raised:
        run(gate.catch_up(0.3))
    error = raised.value
    assert error.error is Errors.REQUEST_TIMED_OUT and error.error.retriable
    assert error.reason == STALE_VIEW == "stale_view"
    assert "ConnectionError: connection lost" in error.message and "within 0.3s" in error.message
    assert gate.refusals == 1 and gate.failed_rounds >= 1
    assert not gate.fresh()


def test_a_hung_round_fails_the_caller_at_its_timeout() -> None:
    gate, _clock, zk = make(bound_ms=3000)

    async def scenario() -> None:
        zk.release = asyncio.Event()  # never set: ZooKeeper does not answer
        with pytest.raises(StaleView):
            await gate.catch_up(0.05)
        with pytest.raises(StaleView):  # the same round, still hung, is shared
            await gate.catch_up(0.05)
        assert zk.calls == 1
        await gate.close()

    run(scenario())


def test_a_failed_round_does_not_move_confirmed_at() -> None:
    gate, clock, zk = make(bound_ms=3000)
    run(gate.catch_up(1.0))
    confirmed = gate.confirmed_at
    clock.now += 4.0
    zk.fail = TimeoutError()
    zk.advance_s = 1.0
    with pytest.raises(StaleView):
        run(gate.catch_up(0.3))
    assert gate.confirmed_at == confirmed


def test_minus_one_keeps_kafkas_behaviour() -> None:
    gate, clock, zk = make(bound_ms=-1)
    assert gate.fresh()
    clock.now += 3600.0
    assert gate.fresh() and gate.age_s() == 0.0

    async def scenario() -> None:
        gate.start()
        await gate.catch_up(1.0)
        await asyncio.sleep(0)
        await gate.close()

    run(scenario())
    assert zk.calls == 0


def test_the_background_task_confirms_at_once_and_keeps_confirming() -> None:
    gate, _clock, zk = make(bound_ms=3)  # a round every 1 ms of real time

    async def scenario() -> None:
        gate.start()
        for _ in range(1000):
            if zk.calls >= 3:
                break
            await asyncio.sleep(0.001)
        await gate.close()

    run(scenario())
    assert zk.calls >= 3
    assert gate.fresh()
