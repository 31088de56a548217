"""One broker's lifecycle: start, ready, stop, on the parts the assembly built.

Owns the order in which the broker's parts start and stop, the ZooKeeper session and
the worker threads they run on, and what the broker says about itself (registered,
forwarding, controller). The parts themselves are built by
:mod:`tokensvc.broker.assembly`: :class:`~tokensvc.broker.assembly.LocalParts` when the
broker is made, :class:`~tokensvc.broker.assembly.BrokerParts` once in :meth:`Broker.start`;
requests go to their :class:`~tokensvc.broker.dispatch.Dispatcher`.

Start-up order: ZooKeeper session → the clock measured against ZooKeeper's time (one
round of samples; :mod:`tokensvc.broker.gates.clockskew`) → ``early.start.listeners`` open → token,
credential and ACL caches loaded (authorizer ready; the token cache from its
snapshot, caught up from ZooKeeper, when ``token.cache.snapshot.dir`` holds a
usable one: :mod:`tokensvc.snapshot`) → election and expiry sweep → the other
listeners open → registration under ``/brokers/ids``. Writes are forwarded from the
moment the other listeners open (before, a non-controller answers NOT_CONTROLLER).
Blocking ZooKeeper calls run in worker threads, never on the event loop; the snapshot
is written by a thread of its own, periodically and at a clean stop. :meth:`Broker.stop`
stops what started, in the opposite direction: listeners, forwarder, gates, the
snapshot, the ZooKeeper followers, the session, then metrics, audit and threads.

Bounded staleness (issue #20): the broker's
:class:`~tokensvc.broker.gates.freshness.FreshnessGate` confirms, in the background every
``zookeeper.max.staleness.ms / 3``, that the token, credential and ACL caches are current
(:meth:`zk.notifications.VersionWaiter.confirm_current`); the dispatcher holds every
request of a token-authenticated connection until the view is fresh, the SASL
handler every login step.

One clock (issue #36): ``broker.local.clock`` is a
:class:`~tokensvc.core.clock.CorrectedClock` -- the cluster's time, measured against
ZooKeeper's by the :class:`~tokensvc.broker.gates.clockskew.ClockGate` -- and is the clock of
the token rules, SCRAM's expiry check, the session registry, the expiry sweep and the
syncs' purges. While the gate does not trust it (beyond ``max.clock.skew.ms`` or not
measured), token logins (SASL handler), token writes (dispatcher and ledger) and the
expiry sweep are refused.

Must not: build a part (the assembly does), or handle a request.
"""

from __future__ import annotations

import asyncio
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from tokensvc.broker.assembly import BrokerParts, LocalParts, assemble, build_local
from tokensvc.broker.gauges import register_gauges
from tokensvc.broker.loop.loopwatch import LoopWatch
from tokensvc.core import collector
from tokensvc.core.clock import Clock
from tokensvc.core.config import BrokerConfig
from tokensvc.snapshot import format as snapshot_format
from tokensvc.snapshot.files import SnapshotWriter
from zk.client import ZkSettings, open_client

log = logging.getLogger("tokensvc.broker")

# Threads for the blocking store calls (asyncio.to_thread). Every ZooKeeper call of the
# token, credential and ACL stores is capped (10 s, StoreUnavailable past it), so a
# partition holds a thread for at most that long; the pool's size only bounds how many
# such writes wait at once.
ZK_WORKER_THREADS = 64


class Broker:
    """One broker: ``local`` from the start, ``parts`` once :meth:`start` built them."""

    def __init__(self, config: BrokerConfig, *, clock: Clock | None = None) -> None:
        self.config = config
        self.broker_id = config.broker_id
        self.local: LocalParts = build_local(config, clock)
        self.parts: BrokerParts | None = None
        self.metrics_address: tuple[str, int] | None = None
        self._zk: Any = None
        self._executor: ThreadPoolExecutor | None = None
        self._loop_watch: LoopWatch | None = None
        self._snapshot_writer: SnapshotWriter | None = None
        # The election, the sweeper and the ZooKeeper ACL check, as they started.
        self._running: list[Any] = []
        self._forwarding = False
        self._started = False

    # -- lifecycle ----------------------------------------------------------

    async def start(self) -> None:
        config, local = self.config, self.local
        loop = asyncio.get_running_loop()
        # ZooKeeper calls run in worker threads; while ZooKeeper is slow or without quorum
        # each may hold one for its whole timeout, so the pool is sized for that, not for
        # the CPU count (asyncio's default).
        self._executor = ThreadPoolExecutor(max_workers=ZK_WORKER_THREADS,
                                            thread_name_prefix="zk-call")
        loop.set_default_executor(self._executor)
        self._loop_watch = LoopWatch(loop, local.stall_meter)
        self._loop_watch.start()
        local.audit.start()
        settings = ZkSettings(
            config.zookeeper_connect,
            session_timeout_ms=config.zookeeper_session_timeout_ms,
            connection_timeout_ms=config.zookeeper_connection_timeout_ms,
            security=config.zookeeper_security,
        )
        self._zk = await asyncio.to_thread(open_client, settings)
        parts = self.parts = await assemble(
            config, local, self._zk,
            registered=lambda: self._started,
            forwarding=lambda: self._forwarding,
            on_controller_change=_controller_changed,
        )

        if local.oauth is not None:
            local.oauth.start()  # the JWKS endpoints' first fetch and refresher
        early = [lst for lst in config.listeners if lst.name in config.early_start_listeners]
        await parts.server.open(early)

        await asyncio.to_thread(parts.token_sync.start)
        if local.snapshot_file is not None:
            # Started from a snapshot and nothing changed since: the file is current, and
            # the first periodic write waits for a change.
            loaded = parts.token_sync.snapshot_loaded
            self._snapshot_writer = SnapshotWriter(
                local.snapshot_file, self._take_snapshot,
                config.token_cache_snapshot_interval_ms / 1000.0,
                written=_snapshot_key(*loaded) if loaded else None)
            self._snapshot_writer.start()
        await asyncio.to_thread(parts.credential_sync.start)
        if parts.acl_sync is not None:
            await asyncio.to_thread(parts.acl_sync.start)
        parts.freshness.start()

        self._running.append(parts.election)
        await asyncio.to_thread(parts.election.start)
        self._running.append(parts.sweeper)
        parts.sweeper.start()
        self._running.append(parts.acl_check)
        await asyncio.to_thread(parts.acl_check.start)
        register_gauges(config, local, parts)
        if config.metrics_listener:
            host, port = config.metrics_listener
            self.metrics_address = await asyncio.to_thread(local.metrics.serve, host, port)
            log.info("metrics on http://%s:%d/metrics", *self.metrics_address)

        self._forwarding = True
        await parts.server.open(config.listeners)
        endpoints = {
            lst.name: (lst.security_protocol, *parts.server.addresses[lst.name])
            for lst in config.listeners
        }
        advertised = config.advertised_listeners or []
        for lst in advertised:
            if lst.name in endpoints:
                endpoints[lst.name] = (lst.security_protocol, lst.host, lst.port)
        await asyncio.to_thread(parts.registry.register, self.broker_id, endpoints)
        await asyncio.to_thread(parts.registry.start)
        self._started = True
        log.info("broker %d started; controller is %s", self.broker_id,
                 parts.election.controller_id())

    async def stop(self) -> None:
        log.info("broker %d stopping", self.broker_id)
        parts = self.parts
        if parts is not None:
            await parts.server.close()
            await parts.forwarder.close()
            await parts.freshness.close()
            if parts.clock_gate is not None:
                await parts.clock_gate.close()
        if self.local.oauth is not None:
            await self.local.oauth.close()
        if self._snapshot_writer is not None:
            # A clean stop leaves a snapshot of the cache as it is now (off the loop).
            await asyncio.to_thread(self._snapshot_writer.close)
        for part in reversed(self._running):  # the ACL check, the sweeper, the election
            await asyncio.to_thread(part.close)
        if parts is not None:
            for follower in (parts.registry, parts.acl_sync, parts.credential_sync,
                             parts.token_sync, parts.migration):
                if follower is not None:
                    await asyncio.to_thread(follower.close)
        if self._zk is not None:
            await asyncio.to_thread(self._close_zk)
        self.local.metrics.close()
        if self._loop_watch is not None:
            self._loop_watch.close()
        self.local.audit.close()
        self.local.derivations.close()
        if self._executor is not None:
            self._executor.shutdown(wait=False)

    def _take_snapshot(self, written: object) -> tuple[object, list[bytes]] | None:
        """The snapshot file's bytes, unless the cache followed no change since the one
        written last (``written``: its sequence and identity). The writer's thread.

        The cyclic collector is paused meanwhile: the copy of the cache is one list of
        every token, and a young collection that the event loop's allocations start
        while it lives walks all of it holding the GIL (23 ms at 1M tokens in a probe;
        docs/performance.md, B13). The copy is gone when the pause ends."""
        with collector.paused():
            return self._encode_snapshot(written)

    def _encode_snapshot(self, written: object) -> tuple[object, list[bytes]] | None:
        assert self.parts is not None
        position = self.parts.token_sync.snapshot_position()
        if position is None or _snapshot_key(*position) == written:
            return None  # (before copying a million tokens for nothing)
        view = self.parts.token_sync.snapshot_view()
        if view is None:
            return None
        sequence, identity, tokens = view
        del view
        key = _snapshot_key(sequence, identity)
        parts = snapshot_format.encode_parts(sequence, identity, tokens,
                                             self.local.clock.now_ms())
        # The copy freed a slice at a time: freeing a million references at once is one
        # C call that holds the GIL (6-7 ms at 1M tokens).
        while tokens:
            del tokens[-_FREE_PER_SLICE:]
        return key, parts

    def _close_zk(self) -> None:
        self._zk.stop()
        self._zk.close()

    # -- what the broker says about itself ------------------------------------

    @property
    def is_controller(self) -> bool:
        return self.parts is not None and self.parts.election.is_controller


# References the snapshot's copy of the cache drops per C call once the file is encoded.
_FREE_PER_SLICE = 65_536


def _controller_changed(controller: int | None, is_me: bool) -> None:
    log.info("controller is now %s%s", controller, " (this broker)" if is_me else "")


def _snapshot_key(sequence: int, identity: dict) -> tuple:
    """What tells two snapshots of the same cache apart: its sequence and identity."""
    return sequence, tuple(sorted(identity.items()))


async def run_broker(config: BrokerConfig, stop: asyncio.Event) -> None:
    broker = Broker(config)
    start = time.monotonic()
    await broker.start()
    log.info("broker %d ready in %.2fs", config.broker_id, time.monotonic() - start)
    try:
        await stop.wait()
    finally:
        await broker.stop()
