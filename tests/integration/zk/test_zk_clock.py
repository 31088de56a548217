"""ClockProbe against a real ZooKeeper (issue #36): the mtime of its write lies inside the
round trip it reports, its znode carries the broker's last estimate, and a probe znode
deleted by hand is created again. ZooKeeper and this test share the host's clock, so the
estimated offset of an honest clock is about zero."""

from __future__ import annotations

import time

import pytest

from tokensvc.core.clock import CorrectedClock, boot_ms
from tokensvc.core.clocksync import ClockOffset, ClusterTimeEstimator
from zk import layout
from zk.client import ZkSettings, open_client
from zk.clock import ClockProbe


@pytest.fixture
def client(zk_connect):
    zk = open_client(ZkSettings(zk_connect))
    yield zk
    zk.stop()
    zk.close()


def test_the_write_time_lies_inside_the_round_trip(client) -> None:
    probe = ClockProbe(client, 7)
    before = time.time() * 1000
    sample = probe.sample(lambda: time.time() * 1000, None)
    after = time.time() * 1000
    assert before <= sample.sent_ms <= sample.received_ms <= after
    # mtime is whole milliseconds, stamped between send and answer
    assert sample.sent_ms - 1 <= sample.reference_ms <= sample.received_ms


def test_an_honest_clock_is_estimated_within_its_uncertainty_of_zero(client) -> None:
    clock = CorrectedClock(ClusterTimeEstimator())
    probe = ClockProbe(client, 3)
    for _ in range(3):
        clock.estimator.add(probe.sample(boot_ms, clock.offset()))
    offset = clock.offset()
    assert offset is not None
    assert abs(offset.offset_ms) <= offset.uncertainty_ms + 1
    assert offset.uncertainty_ms < 1_000


def test_the_znode_carries_the_last_estimate_and_comes_back_when_deleted(client) -> None:
    probe = ClockProbe(client, 5)
    probe.sample(boot_ms, None)
    data, _ = client.get(layout.clock_path(5))
    assert layout.decode_clock_report(data) == {"brokerid": 5, "offsetMs": None,
                                                "uncertaintyMs": None}
    client.delete(layout.clock_path(5))
    probe.sample(boot_ms, ClockOffset(-600_000.4, 2.6, 0.0))
    data, _ = client.get(layout.clock_path(5))
    assert layout.decode_clock_report(data) == {"brokerid": 5, "offsetMs": -600_000,
                                                "uncertaintyMs": 3}
