"""B5: the expiry sweep with 100,000 tokens of which 1% are due, and creates while it runs.

Set-up: a 1-broker cluster (so it is the controller and runs the sweep, every
500 ms here) on the ZooKeeper preloaded with ``sizes.tokens`` tokens. Once it is
up, 1% of those tokens are rewritten (with change notifications, as a renew
would) to expire all at one instant ``T`` a few seconds ahead; the broker learns
of them through its watch.

Measured, in one create load (8 connections of the super user, one create in
flight each, from a separate process) that runs from before ``T`` until after the
last sweep: each sweep's time, from the first due token's znode deletion to the
last (seen by exists watches of a separate ZooKeeper session), and the create p99
of the creates that overlap a sweep. One sweep is too short for a p99, so three
batches of 1% fall due 3 s apart (``T``, ``T+3``, ``T+6``; 1 s apart with ``--quick``)
and the creates that overlap any of the three sweeps are pooled; the figure is the
slowest sweep.

Reference (same run, same load): the create p99 of the creates sent before ``T``,
when nothing is due and sweeps find nothing.

Targets: sweep <= 2 s; create p99 during the sweep <= 2x the p99 without it.
"""

from __future__ import annotations

import time
import urllib.request

from bench import env, zkraw
from bench.common import UNLIMITED
from bench.load import run_processes
from bench.suite import BenchContext, Outcome, Target, ratio

ID = "B5"
TITLE = "expiry sweep (1% due) and create p99 during it"
TARGET_SWEEP_S = 2.0
TARGET_P99_RATIO = 2.0
SWEEP_INTERVAL_MS = 500
CONCURRENCY = 8
# Sweeps per run, each of its own 1% batch: one sweep of 1,000 tokens takes about a
# quarter of a second, too few creates for a p99; the rounds' creates are pooled. The
# load's window opens ``sizes.b5_settle_s`` (the broker follows the rewrites) and
# ``sizes.spawn_allowance_s`` (the load's process starts) after the rewrites; the first
# batch falls due ``sizes.b5_window_s`` later, the others ``sizes.b5_round_gap_s`` apart.
ROUNDS = 3


def swept_total(metrics_address: str) -> float:
    """The broker's ``tokensvc_expiry_swept_tokens_total`` counter."""
    with urllib.request.urlopen(f"http://{metrics_address}/metrics", timeout=5) as response:
        for line in response.read().decode("utf-8").splitlines():
            if line.startswith("tokensvc_expiry_swept_tokens_total "):
                return float(line.split()[1])
    return 0.0


def run(ctx: BenchContext) -> Outcome:
    sizes = ctx.sizes
    store = env.preloaded(ctx)
    due_count = max(1, int(len(store.tokens) * sizes.b5_due_fraction))
    # ROUNDS batches of 1% each, due b5_round_gap_s apart; within a batch all share one
    # deadline, so the cache orders them by token id, which is the deletion order.
    batches = [
        sorted(store.tokens[len(store.tokens) - (k + 1) * due_count:
                            len(store.tokens) - k * due_count], key=lambda t: t.token_id)
        for k in range(ROUNDS)
    ]
    window_s = sizes.b5_window_s
    # The preloaded tokens and the creates share one owner, far above the default
    # delegation.token.max.per.owner: without a limit, the creates are creates.
    extra = {"delegation.token.expiry.check.interval.ms": str(SWEEP_INTERVAL_MS), **UNLIMITED}
    with env.cluster_on(ctx, f"b5-sweep-{time.monotonic_ns()}", store.connect,
                        extra=extra) as handle:
        broker = handle.cluster.broker_info(1)
        due_at = time.time() + sizes.b5_settle_s + window_s + sizes.spawn_allowance_s
        due_times = [due_at + k * sizes.b5_round_gap_s for k in range(ROUNDS)]
        for batch, when in zip(batches, due_times, strict=True):
            zkraw.rewrite_tokens(store.connect, [t.with_expiry(int(when * 1000)) for t in batch])
        ends = [tid for batch in batches for tid in (batch[0].token_id, batch[-1].token_id)]
        with zkraw.deletion_times(store.connect, ends) as deleted:
            report, _ = run_processes(
                "bench.b2_forwarded_creates:create_workload",
                {
                    "address": handle.address(1),
                    "user": handle.admin_user,
                    "password": handle.admin_password,
                    "concurrency": CONCURRENCY,
                },
                processes=1,
                warmup_s=0.0,
                seconds=window_s + (ROUNDS - 1) * sizes.b5_round_gap_s
                + sizes.b5_sweep_allowance_s,
                start_at=due_at - window_s,
            )
            deadline = time.monotonic() + 30
            while len(deleted) < len(ends) and time.monotonic() < deadline:
                time.sleep(0.1)
        swept = swept_total(broker["metrics"])
    if len(deleted) < len(ends):
        raise RuntimeError(f"the sweep did not delete the due tokens (saw {len(deleted)} "
                           f"of {len(ends)} watched)")
    if report.errors:
        raise RuntimeError(f"{report.errors} creates failed, e.g. {report.error_samples[:3]}: "
                           "their latencies would not be creates")
    sweeps = [(deleted[b[0].token_id], deleted[b[-1].token_id]) for b in batches]
    sweep_seconds = [end - start for start, end in sweeps]
    sweep_s = max(sweep_seconds)

    calm, during = [], []
    for sent, latency in zip(report.sent_at, report.latencies, strict=True):
        if sent + latency < due_at:
            calm.append(latency)
        elif any(sent <= end and sent + latency >= start for start, end in sweeps):
            during.append(latency)
    calm_stats, during_stats = env.summary(calm), env.summary(during)
    if not calm or not during:
        raise RuntimeError(f"not enough creates measured (calm {len(calm)}, during {len(during)})")
    r = ratio(during_stats["p99_ms"], calm_stats["p99_ms"])
    return Outcome(
        ID,
        TITLE,
        measured=during_stats["p99_ms"],
        unit="ms create p99 in sweep",
        reference=calm_stats["p99_ms"],
        reference_unit="ms",
        reference_label="create p99, no sweep",
        ratio=r,
        targets=[
            Target(f"sweep <= {TARGET_SWEEP_S:.0f} s (was {sweep_s:.2f} s)",
                   sweep_s <= TARGET_SWEEP_S),
            Target(f"create p99 <= {TARGET_P99_RATIO:.0f}x", r is not None and r <= TARGET_P99_RATIO),
        ],
        details={
            "tokens": len(store.tokens),
            "due": due_count,
            "swept_by_broker": swept,
            "sweep_seconds": round(sweep_s, 3),
            "sweeps": ROUNDS,
            "sweep_seconds_each": [round(x, 3) for x in sweep_seconds],
            "sweep_interval_ms": SWEEP_INTERVAL_MS,
            "concurrency": CONCURRENCY,
            "creates_without_sweep": calm_stats,
            "creates_during_sweep": during_stats,
            "create_errors": report.errors,
            "error_samples": report.error_samples,
        },
    )
