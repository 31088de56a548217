"""The stall meter's pure core: histogram bookkeeping and the sampling grid, on a fake clock.

Times come from :class:`tokensvc.core.clock.FakeClock` (milliseconds, turned into the
seconds the meter takes), never from the wall clock.
"""

from __future__ import annotations

import pytest
from prometheus_client import generate_latest

from tokensvc.broker.loop.loopwatch import STALL_BUCKETS, StallHistogram, StallMeter
from tokensvc.broker.metrics import BrokerMetrics
from tokensvc.core.clock import FakeClock


def seconds(clock: FakeClock) -> float:
    return clock.now_ms() / 1000.0


def test_histogram_puts_each_duration_in_the_first_bucket_that_holds_it():
    hist = StallHistogram((0.01, 0.02))
    for value in (0.0, 0.01, 0.015, 0.02, 0.5):
        hist.observe(value)
    assert hist.cumulative() == [(0.01, 2), (0.02, 4), (float("inf"), 5)]
    assert hist.count == 5
    assert hist.sum == pytest.approx(0.545)
    assert hist.largest == 0.5


def test_histogram_counts_a_negative_duration_as_zero():
    hist = StallHistogram((0.01,))
    hist.observe(-0.003)  # a clock read on another thread a hair earlier
    assert hist.cumulative()[0] == (0.01, 1)
    assert hist.sum == 0.0


def test_histogram_refuses_unordered_buckets():
    with pytest.raises(ValueError):
        StallHistogram((0.02, 0.01))
    with pytest.raises(ValueError):
        StallHistogram(())


def test_the_default_buckets_have_a_bound_at_the_20_ms_target():
    assert 0.02 in STALL_BUCKETS


def test_a_loop_that_keeps_up_shows_only_its_small_lags():
    clock = FakeClock(1_000_000)
    meter = StallMeter(0.005)
    due = meter.first_due(seconds(clock))
    for _ in range(100):
        clock.advance(5)  # the thread wakes on time
        woke = seconds(clock)
        next_due = meter.woke(due, woke)
        meter.ran(due, woke + 0.001)  # the loop runs the callback 1 ms later
        assert next_due == pytest.approx(due + 0.005)
        due = next_due
    assert meter.lag.count == 100
    assert meter.lag.largest == pytest.approx(0.001)
    assert meter.gil.largest == pytest.approx(0.0)


def test_a_stall_is_one_sample_as_long_as_the_stall_and_missed_instants_are_skipped():
    clock = FakeClock(0)
    meter = StallMeter(0.005)
    due = meter.first_due(seconds(clock))
    clock.advance(5)
    # The thread itself woke 37 ms late (the GIL was held in one stretch).
    clock.advance(37)
    next_due = meter.woke(due, seconds(clock))
    # The grid goes on after now: 0.005 + 8 intervals = 0.045, past 0.042.
    assert next_due == pytest.approx(0.045)
    assert meter.gil.count == 1 and meter.gil.largest == pytest.approx(0.037)
    # The loop ran the callback of the instant 0.005 only at 0.120: one sample of 115 ms.
    clock.advance(78)
    meter.ran(due, seconds(clock))
    assert meter.lag.count == 1
    assert meter.lag.largest == pytest.approx(0.115)
    assert dict(meter.lag.cumulative())[0.1] == 0
    assert dict(meter.lag.cumulative())[0.15] == 1


def test_meter_refuses_a_period_that_is_not_positive():
    with pytest.raises(ValueError):
        StallMeter(0)


def test_broker_metrics_export_both_histograms():
    metrics = BrokerMetrics()
    meter = StallMeter()
    metrics.stalls(meter)
    meter.ran(1.0, 1.028)
    meter.woke(1.0, 1.0005)
    sample = metrics.registry.get_sample_value
    assert sample("tokensvc_event_loop_lag_seconds_count") == 1
    assert sample("tokensvc_event_loop_lag_seconds_bucket", {"le": "0.025"}) == 0
    assert sample("tokensvc_event_loop_lag_seconds_bucket", {"le": "0.03"}) == 1
    assert sample("tokensvc_event_loop_lag_seconds_bucket", {"le": "+Inf"}) == 1
    assert sample("tokensvc_event_loop_lag_seconds_sum") == pytest.approx(0.028)
    assert sample("tokensvc_gil_hold_seconds_bucket", {"le": "0.001"}) == 1
    text = generate_latest(metrics.registry).decode()
    assert "# TYPE tokensvc_event_loop_lag_seconds histogram" in text
    assert "# TYPE tokensvc_gil_hold_seconds histogram" in text
    assert "# TYPE tokensvc_event_loop_lag_cpu_seconds histogram" in text


def test_lag_without_cpu_behind_it_is_the_machine_not_the_broker():
    meter = StallMeter(0.005)
    meter.ran(0.0, 0.050, cpu_s=0.002)  # 50 ms late, the process ran 2 ms: starved
    meter.ran(1.0, 1.049, cpu_s=0.060)  # 50 ms late, the process ran all along: a stall
    cpu = dict(meter.lag_cpu.cumulative())
    assert cpu[0.002] == 1  # the starved sample
    assert cpu[0.05] == 2  # the stall, capped at its lag
    assert meter.lag_cpu.largest == pytest.approx(0.049)
