"""B4: cold start -- a broker starting with 100,000 tokens in ZooKeeper until a token logs in.

Two figures, both from process start to the first token login:

* **restart from snapshot** (``measured``): the broker had run before on this ZooKeeper
  and was stopped cleanly, which left its token cache snapshot
  (``token.cache.snapshot.dir``, on in every local cluster); it is started again, loads
  the snapshot, checks it against ZooKeeper and reads only the tokens changed since
  (none here). The clock starts right before the stopped broker's process is started
  again (``LocalCluster.start_broker``, after its check that the old registration is
  gone: interpreter start, imports, ZooKeeper session, the snapshot load and catch-up,
  election, listeners) and stops at the first successful token login.
* **first start, no snapshot** (``first_start_s``): the same broker's first start, as
  before snapshots existed: ``sizes.tokens`` token znodes are written into ZooKeeper
  beforehand (set-up, pipelined, not measured); the clock starts when the suite asks
  for a 1-broker local cluster on that ZooKeeper (``LocalCluster.up``: config files,
  users, then the broker process) and stops when one of the preloaded tokens first
  completes a SCRAM login on it (every token read from ZooKeeper with multi-reads).

Meanwhile the suite tries that login every 20 ms. The broker derives that token's
credential on this first login, lazily, and no other.

Reference (same run): deriving SCRAM credentials eagerly for every token, as
Kafka's token cache does at load: both mechanisms, 4096 iterations. Timed on a
sample of ``sizes.b4_eager_sample`` tokens and extrapolated linearly to all
of them (PBKDF2 cost per token does not depend on how many there are).

Targets: <= 10 s, and >= 20x faster than eager (the restart; the first start is
reported beside it).
"""

from __future__ import annotations

import asyncio
import os
import time

from bench import env
from bench.common import (
    MECHANISM,
    OwnedCluster,
    address_when_written,
    attempts_until_login,
    broker_log_figures,
    timed_restart,
)
from bench.suite import BenchContext, Outcome, Target
from tokensvc.scram.formatter import MIN_ITERATIONS, ScramMechanism, derive_credential

ID = "B4"
TITLE = "cold start with preloaded tokens -> first token login"
TARGET_S = 10.0
TARGET_SPEEDUP = 20.0
START_TIMEOUT_S = 120.0

def eager_seconds_per_token(ctx: BenchContext, sample: list[str]) -> float:
    """PBKDF2-derive both mechanisms' credentials for each token id in ``sample``."""
    passwords = [env.token_password(ctx, token_id) for token_id in sample]
    started = time.perf_counter()
    for password in passwords:
        for mechanism in ScramMechanism:
            derive_credential(password, mechanism, MIN_ITERATIONS)
    return (time.perf_counter() - started) / len(sample)


def run(ctx: BenchContext) -> Outcome:
    sizes = ctx.sizes
    store = env.preloaded(ctx)
    probe = store.tokens[len(store.tokens) // 2]
    password = env.token_password(ctx, probe.token_id)
    directory = ctx.directory(f"b4-cold-start-{time.monotonic_ns()}")

    started = time.monotonic()
    deadline = started + START_TIMEOUT_S
    owned = OwnedCluster(directory, store.connect, env.broker_overrides(ctx),
                         START_TIMEOUT_S).start()
    try:
        address = address_when_written(directory, deadline)
        first_attempts = asyncio.run(attempts_until_login(address, probe.token_id, password, deadline))
        first_start = time.monotonic() - started
        owned.ready.wait(START_TIMEOUT_S)
        if owned.error is not None:
            raise owned.error
        assert owned.cluster is not None
        log_path = owned.cluster.broker_info(1)["log"]
        restart, attempts = timed_restart(owned, address, probe.token_id, password,
                                          START_TIMEOUT_S)
    finally:
        owned.close(START_TIMEOUT_S)
    if owned.error is not None:
        raise owned.error
    first = broker_log_figures(log_path)
    again = broker_log_figures(log_path, last=True)
    if not again.get("snapshot_tokens"):
        # Never report a full load under the restart's label.
        raise RuntimeError(f"the restart did not load its snapshot (broker log: {again})")

    sample = [t.token_id for t in store.tokens[: sizes.b4_eager_sample]]
    per_token = eager_seconds_per_token(ctx, sample)
    eager = per_token * len(store.tokens)
    speedup = eager / restart
    return Outcome(
        ID,
        TITLE,
        measured=restart,
        unit="s restart from snapshot",
        reference=eager,
        reference_unit="s",
        reference_label=f"eager PBKDF2, {len(sample):,}-token sample x{len(store.tokens) // len(sample)}",
        ratio=speedup,
        ratio_label="x faster than eager",
        targets=[
            Target(f"restart from snapshot <= {TARGET_S:.0f} s ({restart:.2f} s; first start, "
                   f"no snapshot: {first_start:.2f} s)", restart <= TARGET_S),
            Target(f">= {TARGET_SPEEDUP:.0f}x faster than eager", speedup >= TARGET_SPEEDUP),
        ],
        details={
            "tokens": len(store.tokens),
            "preload_seconds": round(store.load_seconds, 2),
            "restart_from_snapshot_s": round(restart, 3),
            "first_start_no_snapshot_s": round(first_start, 3),
            "login_attempts": attempts,
            "first_start_login_attempts": first_attempts,
            "mechanism": MECHANISM.mechanism_name,
            "eager_sample": len(sample),
            "eager_ms_per_token": round(per_token * 1000, 3),
            "first_start": first,
            "restart": again,
            "load_avg_1m": round(os.getloadavg()[0], 2),
        },
    )
