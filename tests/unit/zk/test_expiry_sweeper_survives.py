"""The expiry sweeper's thread outlives a ZooKeeper failure in the purge it runs."""

from __future__ import annotations

import threading
from types import SimpleNamespace

from kazoo.exceptions import ConnectionLoss

from tokensvc.core.clock import FakeClock
from zk.expiry import ExpirySweeper


class _NothingDue:
    def due(self, now_ms: int) -> list:
        return []


def test_a_connection_loss_in_the_purge_does_not_end_the_sweeper() -> None:
    calls: list[int] = []
    second = threading.Event()

    def purge(now_ms: int) -> int:
        calls.append(now_ms)
        if len(calls) == 1:
            raise ConnectionLoss()
        second.set()
        return 0

    clock = FakeClock(1_000_000)
    sweeper = ExpirySweeper(
        store=SimpleNamespace(), cache=_NothingDue(),
        election=SimpleNamespace(is_controller=True), clock=clock,
        interval_ms=10, purge=purge, purge_interval_ms=0,
    )
    sweeper.start()
    try:
        # The first purge failed; the thread sweeps (and purges) again.
        assert second.wait(5.0)
    finally:
        sweeper.close()
    assert len(calls) >= 2
