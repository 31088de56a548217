"""ClockGate (issue #36) with fake clocks and a fake probe of ZooKeeper's time: the
verdict, the refusal, one log line per change, failed samples; and the expiry sweep that
skips while the clock is not trusted. No ZooKeeper, no sleeps."""

from __future__ import annotations

import asyncio
import logging

import pytest

from tokensvc.broker.gates.clockskew import CLOCK_SKEW, SKEW_LOG_PREFIX, ClockGate, ClockSkewed
from tokensvc.core.clock import CorrectedClock
from tokensvc.core.clocksync import ClockOffset, ClockState, ClusterTimeEstimator, TimeSample
from tokensvc.core.errors import Errors
from tokensvc.core.principal import KafkaPrincipal
from tokensvc.core.token import TokenInformation
from zk.errors import StoreUnavailable
from zk.expiry import ExpirySweeper

TRUE_START = 1_800_000_000_000.0
MINUTE = 60_000.0


class Host:
    """True time, a wall clock off by ``error_ms``, a local timeline that only runs."""

    def __init__(self, error_ms: float) -> None:
        self.true_ms = TRUE_START
        self.error_ms = error_ms

    def wall(self) -> float:
        return self.true_ms + self.error_ms

    def local(self) -> float:
        return self.true_ms - TRUE_START


class FakeProbe:
    """ZooKeeper's time is the true time; each write takes ``rtt_ms``, stamped halfway."""

    def __init__(self, host: Host, rtt_ms: float = 2.0) -> None:
        self.host = host
        self.rtt_ms = rtt_ms
        self.fail: Exception | None = None
        self.reports: list[ClockOffset | None] = []

    def __call__(self, local_ms, last: ClockOffset | None) -> TimeSample:
        self.reports.append(last)
        if self.fail is not None:
            raise self.fail
        sent = local_ms()
        self.host.true_ms += self.rtt_ms / 2
        stamped = int(self.host.true_ms)
        self.host.true_ms += self.rtt_ms / 2
        return TimeSample(sent, local_ms(), stamped)


def gate_for(error_ms: float, bound_ms: int = 30_000) -> tuple[ClockGate, Host, FakeProbe]:
    host = Host(error_ms)
    clock = CorrectedClock(ClusterTimeEstimator(), wall=host.wall, local=host.local)
    probe = FakeProbe(host)
    return ClockGate(clock, bound_ms, probe), host, probe


def test_before_the_first_measurement_token_logins_and_writes_are_refused() -> None:
    gate, _host, _probe = gate_for(0)
    assert gate.state() is ClockState.UNCHECKED
    refused = gate.refusal()
    assert isinstance(refused, ClockSkewed)
    assert refused.error is Errors.REQUEST_TIMED_OUT and Errors.REQUEST_TIMED_OUT.retriable
    assert refused.reason == CLOCK_SKEW
    assert "not been measured" in refused.message
    assert not gate.trusted()


def test_a_clock_within_the_bound_is_trusted_and_corrected() -> None:
    gate, host, _probe = gate_for(-20_000)  # 20 s behind, bound 30 s
    assert asyncio.run(gate.measure())
    assert gate.refusal() is None and gate.trusted()
    assert gate.offset_seconds() == pytest.approx(20.0, abs=0.01)
    assert abs(gate.clock.now_ms() - host.true_ms) <= 2


@pytest.mark.parametrize(("error_ms", "side"), [(-10 * MINUTE, "behind"), (10 * MINUTE, "ahead of")])
def test_ten_minutes_off_is_refused_with_the_skew_error(error_ms: float, side: str) -> None:
    gate, host, _probe = gate_for(error_ms)
    asyncio.run(gate.measure())
    refused = gate.refusal()
    assert refused is not None and refused.reason == CLOCK_SKEW
    assert f"600.0 s {side} the cluster's time" in refused.message
    assert "max.clock.skew.ms=30000" in refused.message
    assert gate.refusing() == 1.0 and gate.refusals == 1
    # The corrected clock is right all the same.
    assert abs(gate.clock.now_ms() - host.true_ms) <= 2


def test_a_bound_above_the_offset_serves_and_minus_one_never_refuses() -> None:
    gate, _host, _probe = gate_for(10 * MINUTE, bound_ms=900_000)
    asyncio.run(gate.measure())
    assert gate.refusal() is None
    unbounded, _host, _probe = gate_for(10 * MINUTE, bound_ms=-1)
    assert unbounded.refusal() is None  # not even measured: -1 refuses nothing
    assert unbounded.refusing() == 0.0


def test_each_change_of_verdict_is_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    gate, host, _probe = gate_for(10 * MINUTE)
    caplog.set_level(logging.INFO, logger="tokensvc.broker.clockskew")
    asyncio.run(gate.measure())
    for _ in range(50):
        assert gate.refusal() is not None
    refusing = [r for r in caplog.records if SKEW_LOG_PREFIX in r.getMessage()]
    assert len(refusing) == 1 and refusing[0].levelno == logging.ERROR

    host.error_ms = 0  # someone fixed the clock (a step): the next round measures it
    caplog.clear()
    asyncio.run(gate.measure())
    for _ in range(50):
        assert gate.refusal() is None
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 1 and "back within max.clock.skew.ms" in messages[0]


def test_a_step_of_the_wall_clock_is_seen_at_once_without_a_new_sample() -> None:
    gate, host, _probe = gate_for(0)
    asyncio.run(gate.measure())
    assert gate.refusal() is None
    host.error_ms = 10 * MINUTE
    assert gate.refusal() is not None
    assert gate.offset_seconds() == pytest.approx(-600.0, abs=0.01)


def test_failed_samples_age_the_estimate_and_are_logged_once(
        caplog: pytest.LogCaptureFixture) -> None:
    gate, host, probe = gate_for(0)
    asyncio.run(gate.measure())
    caplog.set_level(logging.WARNING, logger="tokensvc.broker.clockskew")
    probe.fail = StoreUnavailable("write /tokensvc/clock/1: ZooKeeper unavailable")
    before = gate.uncertainty_seconds()
    host.true_ms += 3_600_000
    assert not asyncio.run(gate.measure())
    assert not asyncio.run(gate.measure())
    assert gate.failed_samples == 6
    assert gate.uncertainty_seconds() > before + 1.7  # an hour at 500 ppm
    assert gate.estimate_age_seconds() == pytest.approx(3_600.0, abs=1.0)
    assert gate.refusal() is None  # still within: the estimate only grew less certain
    failing = [r for r in caplog.records if "samples of ZooKeeper's time fail" in r.getMessage()]
    assert len(failing) == 1


def test_each_sample_reports_the_previous_estimate() -> None:
    gate, _host, probe = gate_for(5_000)
    asyncio.run(gate.measure())
    assert probe.reports[0] is None
    assert probe.reports[-1] is not None
    assert probe.reports[-1].offset_ms == pytest.approx(-5_000, abs=5)


class _Election:
    is_controller = True

    def guard(self) -> tuple[str, int]:
        return ("/controller_epoch", 1)


class _Cache:
    def __init__(self, due: list[TokenInformation]) -> None:
        self._due = due

    def due(self, now_ms: int) -> list[TokenInformation]:
        return [t for t in self._due if t.expired_at(now_ms)]

    def upsert(self, info: TokenInformation) -> None:
        raise AssertionError("not expected")

    def remove(self, token_id: str) -> None:
        raise AssertionError("not expected")


class _Store:
    def get_many_versioned(self, token_ids):
        raise AssertionError("a sweep on an untrusted clock must not touch ZooKeeper")

    def delete_many(self, items, guard):
        raise AssertionError("a sweep on an untrusted clock must not touch ZooKeeper")


def test_the_sweep_skips_while_the_clock_is_not_trusted() -> None:
    gate, host, _probe = gate_for(10 * MINUTE)  # ten minutes ahead: beyond the bound
    asyncio.run(gate.measure())
    sweeper = ExpirySweeper(_Store(), _Cache([_three_minutes_left(host)]), _Election(),
                            gate.clock, interval_ms=1_000, trusted=gate.trusted)  # type: ignore[arg-type]
    assert sweeper.sweep_once() == 0
    assert sweeper.skipped == 1 and sweeper.sweeps == 0


def test_a_controller_ten_minutes_ahead_within_its_bound_expires_nothing_early() -> None:
    gate, host, _probe = gate_for(10 * MINUTE, bound_ms=900_000)
    asyncio.run(gate.measure())
    sweeper = ExpirySweeper(_Store(), _Cache([_three_minutes_left(host)]), _Election(),
                            gate.clock, interval_ms=1_000, trusted=gate.trusted)  # type: ignore[arg-type]
    assert sweeper.sweep_once() == 0  # nothing due by the cluster's time: the store untouched
    assert sweeper.sweeps == 1 and sweeper.skipped == 0


def _three_minutes_left(host: Host) -> TokenInformation:
    owner = KafkaPrincipal.user("alice")
    issue = int(host.true_ms)
    return TokenInformation("t1", owner, owner, (), issue, issue + 180_000, issue + 180_000, "")
