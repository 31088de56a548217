"""B2: token creates per second sent to a non-controller broker (KIP-590 forwarding).

Measured: ``concurrency`` client connections (in a separate process), each
logged in as the super user and sending CreateDelegationToken v3 requests one
after another, to a broker of a 3-broker cluster of its own that is not the
controller. Each create is forwarded in an EnvelopeRequest to the controller,
which commits it with the other creates queued meanwhile in one ZooKeeper
transaction (group commit: one guard check, then per create its token znode, request
record and change notification) and answers through the forwarding broker. The details
give the controller's group commit over the window: transactions, writes, writes per
transaction.

Reference (same run): the same transaction committed with kazoo alone from this
process, the same number in flight, for the same time, on the same znodes: the
cluster's own ``/delegation_token`` tree, so the three brokers follow these
writes exactly as they follow the forwarded ones (change notification, listing,
token read). Also in the details: the same writes into a separate chroot that no
broker follows -- ZooKeeper's ceiling on this machine with nobody reading.

Target: >= 0.7 of the raw write rate.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import urllib.request
from typing import Any

from bench import env, zkraw
from bench.common import UNLIMITED
from bench.load import Window, WorkerReport, run_processes, until
from bench.suite import BenchContext, Outcome, Target, ratio
from bench.wire import BENCH_LABELS, WireError, create_token_body, open_logged_in
from tokensvc.protocol.api import ApiKey

ID = "B2"
TITLE = "forwarded token creates/s (non-controller broker)"
TARGET_RATIO = 0.7


async def create_workload(window: Window, params: dict[str, Any]) -> WorkerReport:
    """Worker: ``concurrency`` logged-in connections, one create in flight on each; records
    each create's latency and wall-clock send time."""
    report = WorkerReport()
    conns = [
        await open_logged_in(params["address"], params["user"], params["password"])
        for _ in range(params["concurrency"])
    ]
    body = create_token_body(labels=params.get("labels"))

    async def loop(conn) -> None:
        while time.time() < window.end:
            sent_at = time.time()
            started = time.perf_counter()
            try:
                response = await conn.request(ApiKey.CREATE_DELEGATION_TOKEN, 3, body)
            except WireError as exc:
                report.errors += 1
                report.error_samples.append(str(exc))
                return
            finished = time.time()
            if not window.holds(finished):
                continue
            if response["ErrorCode"]:
                report.errors += 1
                report.error_samples.append(f"error code {response['ErrorCode']}")
            else:
                report.done += 1
                report.latencies.append(time.perf_counter() - started)
                report.sent_at.append(sent_at)

    try:
        await asyncio.gather(*(loop(c) for c in conns))
    finally:
        for conn in conns:
            conn.close()
    await until(window.end)
    return report


GAUGES = ("tokensvc_group_commit_batches", "tokensvc_group_commit_writes",
          "tokensvc_committed_tokens_applied", "tokensvc_forwarded_cache_waits")


def group_commit_counts(metrics_address: str) -> dict[str, float]:
    """A broker's gauges of the write path: group-commit transactions and writes sent,
    committed token states applied without waiting, forwarded writes that waited."""
    found = dict.fromkeys(GAUGES, 0.0)
    with urllib.request.urlopen(f"http://{metrics_address}/metrics", timeout=5) as response:
        for line in response.read().decode("utf-8").splitlines():
            name, _, value = line.partition(" ")
            if name in found:
                found[name] = float(value)
    return found


def run(ctx: BenchContext) -> Outcome:
    # A cluster of its own: every broker lists all pending change notifications on each
    # change it follows, and other benchmarks leave thousands behind (B3's backlog
    # measurement writes 20,000 on purpose), which would slow every broker here; B2's own
    # writes, tens of thousands, then slow no other benchmark either.
    # No per-owner limit: the super user creates tens of thousands of tokens here, and a
    # create refused by delegation.token.max.per.owner would be timed as a create.
    # Quick mode (a smoke test, a few thousand writes) runs on the shared 3-broker cluster,
    # the last benchmark to use it, which saves a cluster's start.
    if ctx.quick:
        return _run(ctx, env.cluster3(ctx))
    with contextlib.ExitStack() as stack:
        return _run(ctx, env.start_cluster(ctx, stack, "b2-cluster", 3, extra=UNLIMITED))


def _run(ctx: BenchContext, handle: env.ClusterHandle) -> Outcome:
    sizes = ctx.sizes
    controller, others = handle.roles()
    broker_id = others[0]
    concurrency = sizes.b2_concurrency
    metrics = handle.cluster.broker_info(controller)["metrics"]
    forwarding_metrics = handle.cluster.broker_info(broker_id)["metrics"]
    before = group_commit_counts(metrics)
    forwarding_before = group_commit_counts(forwarding_metrics)
    report, seconds = run_processes(
        "bench.b2_forwarded_creates:create_workload",
        {
            "address": handle.address(broker_id),
            "user": handle.admin_user,
            "password": handle.admin_password,
            "concurrency": concurrency,
            "labels": BENCH_LABELS if ctx.label_tokens else None,
        },
        processes=1,
        warmup_s=sizes.warmup_s,
        seconds=sizes.b2_seconds,
        spawn_allowance_s=sizes.spawn_allowance_s,
    )
    if report.errors:
        raise RuntimeError(f"{report.errors} creates failed in the window, e.g. "
                           f"{report.error_samples[:3]}: not a measurement of creates")
    measured = report.done / seconds
    after = group_commit_counts(metrics)
    forwarding_after = group_commit_counts(forwarding_metrics)
    transactions = after["tokensvc_group_commit_batches"] - before["tokensvc_group_commit_batches"]
    writes = after["tokensvc_group_commit_writes"] - before["tokensvc_group_commit_writes"]

    # Enough token details for the raw writer never to run out.
    budget = max(50_000, int(measured * sizes.b2_seconds * 4))
    raw = zkraw.raw_create_rate(
        handle.zk, env.make_tokens(ctx.master_key, budget), concurrency,
        sizes.b2_seconds,
    )
    isolated = zkraw.raw_create_rate(
        zkraw.sibling(handle.zk, f"bench-raw-{time.monotonic_ns()}"),
        env.make_tokens(ctx.master_key, budget),
        concurrency,
        sizes.b2_seconds,
    )
    reference = raw["per_second"]
    r = ratio(measured, reference)
    return Outcome(
        ID,
        TITLE,
        measured=measured,
        unit="creates/s",
        reference=reference,
        reference_unit="txn/s",
        reference_label="raw kazoo, same txn, same znodes",
        ratio=r,
        targets=[Target(f">= {TARGET_RATIO} of raw writes", r is not None and r >= TARGET_RATIO)],
        details={
            "broker_id": broker_id,
            "controller_id": controller,
            "concurrency": concurrency,
            "window_s": seconds,
            "creates": report.done,
            "errors": report.errors,
            "error_samples": report.error_samples,
            "create_latency": env.summary(report.latencies),
            "group_commit": {
                "transactions": int(transactions),
                "writes": int(writes),
                "writes_per_transaction": round(writes / transactions, 2) if transactions else None,
            },
            # Read-your-writes without the followers' round trip: committed states the
            # controller and the forwarding broker put straight into their caches, and
            # forwarded creates whose answer still waited for the forwarding broker's
            # follower (0 unless a full load was running).
            "committed_states_applied": {
                "controller": int(after["tokensvc_committed_tokens_applied"]
                                  - before["tokensvc_committed_tokens_applied"]),
                "forwarding_broker": int(forwarding_after["tokensvc_committed_tokens_applied"]
                                         - forwarding_before["tokensvc_committed_tokens_applied"]),
            },
            "forwarded_waits_for_follower": int(
                forwarding_after["tokensvc_forwarded_cache_waits"]
                - forwarding_before["tokensvc_forwarded_cache_waits"]),
            "raw_transactions": raw["creates"],
            "raw_failed": raw["failed"],
            "raw_latency": env.summary(raw["latencies_s"]),
            "raw_unfollowed_per_s": round(isolated["per_second"], 1),
            "ratio_to_unfollowed": ratio(measured, isolated["per_second"]),
            "raw_unfollowed_latency": env.summary(isolated["latencies_s"]),
        },
    )
