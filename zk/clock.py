"""ClockProbe: read ZooKeeper's time by writing a znode of our own.

Owns ``/tokensvc/clock/<broker id>`` (one persistent znode per broker, created on first
use) and the one operation a clock sample needs: a ``setData`` on it, bracketed by the
caller's local timeline read just before the request is sent and just after its answer
arrives. ZooKeeper stamps the write's transaction with its leader's wall clock; the
answer's ``mtime`` is that time, so the sample is ``(sent, received, mtime)``
(:class:`tokensvc.core.clocksync.TimeSample`). The data written is the broker's last
estimate of its own offset (:func:`zk.layout.encode_clock_report`), so an operator can
read every broker's offset in ZooKeeper.

Why a write of its own: a write is the only request ZooKeeper answers with a time it has
just stamped; this znode is watched by nobody and written by nobody else, so the probe
wakes no watcher and contends with nothing. One ``setData`` is one small transaction: at
3 samples every 10 s per broker it is a fraction of a write per second.

Must not: write anything but this broker's probe znode, block longer than its timeout
(kazoo queues requests while it reconnects), or read any clock but the one handed in.
"""

from __future__ import annotations

from collections.abc import Callable

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from tokensvc.core.clocksync import ClockOffset, TimeSample
from zk import layout
from zk.errors import StoreError, zk_call

DEFAULT_TIMEOUT_S = 5.0


class ClockProbe:
    """One broker's clock probe on a started kazoo client (which the caller owns)."""

    def __init__(self, client: KazooClient, broker_id: int, *,
                 timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        self._client = client
        self.broker_id = int(broker_id)
        self.path = layout.clock_path(broker_id)
        self._timeout_s = timeout_s
        self._created = False

    def sample(self, local_ms: Callable[[], float], last: ClockOffset | None) -> TimeSample:
        """Write ``last`` (the broker's latest offset estimate, None before the first) to
        the probe znode; the write's mtime bracketed by ``local_ms()``. Raises a
        :class:`zk.errors.StoreError` (StoreUnavailable when ZooKeeper does not answer in
        time)."""
        report = layout.encode_clock_report(
            self.broker_id,
            None if last is None else last.offset_ms,
            None if last is None else last.uncertainty_ms,
        )
        if not self._created:
            self._ensure()
        try:
            return self._write(local_ms, report)
        except StoreError as exc:
            if not isinstance(exc.__cause__, NoNodeError):
                raise
        self._ensure()  # deleted by hand since: create it again, once
        return self._write(local_ms, report)

    def _write(self, local_ms: Callable[[], float], report: bytes) -> TimeSample:
        sent = local_ms()
        stat = zk_call(f"write {self.path}",
                       lambda: self._client.set_async(self.path, report).get(
                           timeout=self._timeout_s))
        received = local_ms()
        return TimeSample(sent, received, int(stat.mtime))

    def _ensure(self) -> None:
        zk_call(f"create {self.path}",
                lambda: self._client.ensure_path_async(self.path).get(timeout=self._timeout_s))
        self._created = True
