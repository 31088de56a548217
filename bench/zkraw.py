"""Raw ZooKeeper work outside the brokers: fast set-up writes and the kazoo-only references.

Owns everything the benchmarks, the fault drivers (``faults/``) and the tests do on
ZooKeeper without a broker: loading many token znodes quickly (pipelined async
creates: set-up, not measured), rewriting tokens with their change notifications,
reading the controller id (:func:`controller_of`), and the two
references measured "with kazoo alone": B2's raw write rate (the same
transaction the controller commits, at the same concurrency) and B3's watch
latency. Clients come from :func:`zk.client.open_client`, so like the rest of
the project this module does not import kazoo; it only calls the client's
methods.

It must not be used by the service, and writes only the znode layout of
:mod:`zk.layout` (tokens the brokers will read as theirs).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import replace
from typing import Any

from tokensvc.core.token import TokenInformation
from zk import layout
from zk.client import ZkSettings, open_client
from zk.errors import ZnodeMissing, zk_call
from zk.token_store import TokenStore

PIPELINE_WINDOW = 4_000
BATCH = 200


# A benchmark reaches ZooKeeper with a connect string (a ZooKeeper the suite started
# itself, open) or with the settings of a local cluster's secure ZooKeeper
# (``LocalCluster.zk_settings()``: its TLS files and SASL login).
Target = ZkSettings | str


def settings(target: Target) -> ZkSettings:
    return target if isinstance(target, ZkSettings) else ZkSettings(target)


def sibling(target: Target, chroot: str) -> ZkSettings:
    """The same ensemble and credentials, another chroot."""
    found = settings(target)
    return replace(found, connect=f"{found.hosts}/{chroot.strip('/')}")


@contextlib.contextmanager
def client(target: Target) -> Iterator[Any]:
    """A started client on ``target`` (chroot created), stopped on exit."""
    zk = open_client(settings(target))
    try:
        yield zk
    finally:
        zk.stop()
        zk.close()


def _drain(results: deque, keep: int) -> None:
    """Wait for the oldest pending results until at most ``keep`` remain; a failed
    transaction raises."""
    while len(results) > keep:
        outcome = results.popleft().get(timeout=60)
        if isinstance(outcome, list):
            failures = [r for r in outcome if isinstance(r, Exception)]
            if failures:
                raise RuntimeError(f"ZooKeeper transaction failed: {failures[0]!r}")


def write_tokens(connect: Target, infos: Iterable[TokenInformation]) -> int:
    """Create one znode per token without change notifications (brokers started
    afterwards load them): ``BATCH`` creates per transaction, transactions pipelined.
    Returns how many were written."""
    written = 0
    with client(connect) as zk:
        TokenStore(zk).ensure_paths()
        results: deque = deque()
        tx = zk.transaction()
        in_tx = 0
        for info in infos:
            tx.create(layout.token_path(info.token_id), layout.encode_token(info))
            in_tx += 1
            if in_tx == BATCH:
                results.append(tx.commit_async())
                written += in_tx
                tx, in_tx = zk.transaction(), 0
                _drain(results, PIPELINE_WINDOW // BATCH)
        if in_tx:
            results.append(tx.commit_async())
            written += in_tx
        _drain(results, 0)
    return written


def rewrite_tokens(connect: Target, infos: Sequence[TokenInformation]) -> None:
    """Overwrite existing token znodes, each in one transaction with its change
    notification (what the controller does on renew), pipelined."""
    with client(connect) as zk:
        results: deque = deque()
        for info in infos:
            tx = zk.transaction()
            tx.set_data(layout.token_path(info.token_id), layout.encode_token(info))
            tx.create(layout.token_change_create_path(),
                      layout.encode_token_change(info.token_id), sequence=True)
            results.append(tx.commit_async())
            _drain(results, PIPELINE_WINDOW)
        _drain(results, 0)


def controller_of(zk: Any) -> int | None:
    """The broker id in ``/controller`` read with the started client ``zk``; None when
    there is no controller at this moment. Raises ``zk.errors.StoreError`` when
    ZooKeeper cannot be asked (the client's own session lost or cut off by a fault)."""
    try:
        data, _ = zk_call("read /controller", lambda: zk.get(layout.CONTROLLER))
    except ZnodeMissing:  # no controller, or deleted between elections
        return None
    return layout.decode_controller(data)


def controller_id(connect: Target) -> int | None:
    """The broker id in ``/controller`` on ``connect``, None when there is no controller."""
    with client(connect) as zk:
        return controller_of(zk)


def raw_create_rate(
    connect: Target, infos: Sequence[TokenInformation], concurrency: int, seconds: float
) -> dict[str, Any]:
    """Commit ``check(guard) + create(token) + create(token_change)`` transactions with
    ``concurrency`` in flight on one client for ``seconds``; the rate and latencies.

    The transaction is the controller's create (``TokenStore.create`` with its guard).
    """
    with client(connect) as zk:
        TokenStore(zk).ensure_paths()
        guard = f"{layout.DELEGATION_TOKEN}/bench_guard"
        zk.ensure_path(guard)
        version = zk.exists(guard).version
        lock = threading.Condition()
        state = {"in_flight": 0, "done": 0, "failed": 0}
        latencies: list[float] = []
        pending = iter(infos)
        deadline = time.perf_counter() + seconds
        started = time.perf_counter()

        def submit() -> bool:
            info = next(pending, None)
            if info is None or time.perf_counter() >= deadline:
                return False
            tx = zk.transaction()
            tx.check(guard, version)
            tx.create(layout.token_path(info.token_id), layout.encode_token(info))
            tx.create(layout.token_change_create_path(),
                      layout.encode_token_change(info.token_id), sequence=True)
            sent = time.perf_counter()
            result = tx.commit_async()
            result.rawlink(lambda r, sent=sent: completed(r, sent))
            return True

        def completed(result: Any, sent: float) -> None:
            elapsed = time.perf_counter() - sent
            ok = result.successful() and not any(isinstance(r, Exception) for r in result.value)
            with lock:
                state["in_flight"] -= 1
                if ok:
                    state["done"] += 1
                    latencies.append(elapsed)
                else:
                    state["failed"] += 1
                lock.notify_all()

        with lock:
            while time.perf_counter() < deadline:
                while state["in_flight"] < concurrency:
                    state["in_flight"] += 1
                    if not submit():
                        state["in_flight"] -= 1
                        break
                if not lock.wait(timeout=1.0) and state["in_flight"] == 0:
                    break
            lock.wait_for(lambda: state["in_flight"] == 0, timeout=30)
        elapsed = time.perf_counter() - started
        return {
            "creates": state["done"],
            "failed": state["failed"],
            "seconds": elapsed,
            "per_second": state["done"] / elapsed,
            "latencies_s": latencies,
        }


def watch_latencies(connect: Target, samples: int, pause_s: float) -> list[float]:
    """Seconds from a writer's acknowledged create (token + change notification, as the
    controller commits) until a second session's children watch on the notifications
    fires -- the floor under any broker's propagation."""
    latencies: list[float] = []
    with client(connect) as writer, client(connect) as watcher:
        TokenStore(writer).ensure_paths()
        for n in range(samples):
            fired = threading.Event()
            fired_at: list[float] = []

            def on_event(_event: Any, fired: threading.Event = fired,
                         fired_at: list[float] = fired_at) -> None:
                fired_at.append(time.perf_counter())
                fired.set()

            watcher.get_children(layout.TOKEN_CHANGES, watch=on_event)
            token_id = f"watch-probe-{n}-{time.monotonic_ns()}"
            tx = writer.transaction()
            tx.create(layout.token_path(token_id), b"{}")
            tx.create(layout.token_change_create_path(), layout.encode_token_change(token_id),
                      sequence=True)
            tx.commit()
            acked = time.perf_counter()
            if not fired.wait(10):
                raise RuntimeError("ZooKeeper watch did not fire within 10 s")
            latencies.append(max(0.0, fired_at[0] - acked))
            writer.delete(layout.token_path(token_id))
            time.sleep(pause_s)
    return latencies


@contextlib.contextmanager
def deletion_times(connect: Target, token_ids: Sequence[str]) -> Iterator[dict[str, float]]:
    """While the block runs, record the wall-clock time (``time.time()``) at which each
    token znode of ``token_ids`` is deleted, from an exists watch of a separate session."""
    times: dict[str, float] = {}
    with client(connect) as zk:
        for token_id in token_ids:
            def on_event(event: Any, token_id: str = token_id) -> None:
                if event.type == "DELETED":
                    times[token_id] = time.time()

            if zk.exists(layout.token_path(token_id), watch=on_event) is None:
                raise RuntimeError(f"token {token_id} is not in ZooKeeper")
        yield times



def pending_notifications(connect: Target) -> int:
    """How many token change notifications ZooKeeper holds (each broker lists them all
    on every change it follows, so propagation grows with this until the purge)."""
    with client(connect) as zk:
        return len(TokenStore(zk).notifications())
