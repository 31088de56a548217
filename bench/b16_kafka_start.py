"""B16: an Apache Kafka broker's start with 10,000 and 100,000 tokens in ZooKeeper.

Measured: a managed ZooKeeper of its own (with ``--quick`` the one the suite's quick run
shares); per size (none, 10,000 and 100,000 tokens; ``--quick``: none and 20), the
tokens are written straight into a chroot of their own (Kafka's znode, no change
notifications: what a Kafka broker finds at start), with the admin user a Kafka broker
logs in to the others as. One Kafka 3.9 broker (ZooKeeper mode) is then started on the
chroot and timed until it is ready (its listener accepts connections and it is
registered) and until a token login works on it. A Kafka broker loads every token at
start and derives, for each, a SCRAM-SHA-256 and a SCRAM-SHA-512 credential (4,096
PBKDF2 iterations each) before it serves; the figure is the start with the largest size,
the reference the start with none. B4 is tokensvc's own cold start, which derives
nothing at load.

``python -m bench.b16_kafka_start --tokens 0,100000 --budget-s 3600`` runs the sizes given
alone, with a longer budget per start.

Target: none. The figure says what a Kafka cluster's token population costs each of its
brokers at every start (docs/kafka.md).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import time
from pathlib import Path

from bench import env, zkraw
from bench.common import try_login
from bench.suite import BenchContext, Outcome, ratio, run_alone
from tokensvc.kafka import KafkaBroker, KafkaStartError
from zk.client import ZkSettings
from zk.credential_store import bootstrap_user

ID = "B16"
TITLE = "an Apache Kafka broker's start with N tokens in ZooKeeper"
ADMIN = ("bench-admin", "bench-admin-password")
# How long one start may take; a start still loading then is reported as "not ready within".
START_BUDGET_S = 1800


def _start(ctx: BenchContext, connect: str, name: str, token_id: str | None,
           password: str | None, budget_s: float = START_BUDGET_S) -> dict:
    broker = KafkaBroker(ctx.directory(name), 1, ZkSettings(connect), admin=ADMIN,
                         secret_key=ctx.master_key, heap_mb=1024)
    began = time.monotonic()
    try:
        broker.start(timeout=budget_s)
    except KafkaStartError as exc:
        if broker.pid is not None or "not ready" not in str(exc):
            raise
        # Still loading when the budget ran out: that is the figure (a lower bound).
        return {"ready_s": None, "not_ready_within_s": budget_s}
    ready_s = time.monotonic() - began
    login_s = None
    try:
        if token_id is not None and password is not None:
            salted: dict = {}
            deadline = time.monotonic() + 600
            while not asyncio.run(try_login(broker.bootstrap, token_id, password, salted)):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"a token never logged in on the Kafka broker ({name})")
                time.sleep(0.1)
            login_s = time.monotonic() - began
    finally:
        broker.stop()
    return {"ready_s": round(ready_s, 2),
            "first_token_login_s": round(login_s, 2) if login_s is not None else None}


def measure(ctx: BenchContext, sizes: tuple[int, ...],
            budget_s: float = START_BUDGET_S) -> dict[int, dict]:
    """One Kafka broker's start per size (the first size should be 0: the reference)."""
    results: dict[int, dict] = {}
    with contextlib.ExitStack() as stack:
        server = stack.enter_context(env.zookeeper(ctx, "b16-zk"))
        for size in sizes:
            connect = f"{server.connect}/b16-{size}"
            bootstrap_user(ZkSettings(connect), *ADMIN)
            tokens = env.make_tokens(ctx.master_key, size)
            began = time.monotonic()
            zkraw.write_tokens(connect, tokens)
            written_s = time.monotonic() - began
            last = tokens[-1].token_id if tokens else None
            result = _start(ctx, connect, f"b16-kafka-{size}", last,
                            env.token_password(ctx, last) if last else None, budget_s)
            result["written_s"] = round(written_s, 1)
            results[size] = result
            print(f"[B16] {size} tokens: {result}", file=sys.stderr, flush=True)
    return results


def run(ctx: BenchContext) -> Outcome:
    sizes = (0, 20) if ctx.quick else (0, 10_000, 100_000)
    results = measure(ctx, sizes)
    ready = [size for size in sizes if results[size]["ready_s"] is not None]
    largest_size = ready[-1]
    largest = results[largest_size]["ready_s"]
    empty = results[0]["ready_s"]
    per_token_ms = ((largest - empty) / largest_size * 1000) if largest_size else None
    return Outcome(
        ID, TITLE,
        measured=largest, unit=f"s ready with {largest_size:,} tokens",
        reference=empty, reference_unit="s ready with none",
        reference_label="the same broker on an empty chroot",
        ratio=ratio(largest, empty),
        targets=[],
        details={"by_size": {str(k): v for k, v in results.items()},
                 "ms_per_token": round(per_token_ms, 3) if per_token_ms else None},
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.b16_kafka_start",
                                     description="B16 alone, at the sizes given")
    parser.add_argument("--tokens", default="0,10000,100000",
                        help="comma-separated sizes, the first the reference (default "
                             "0,10000,100000)")
    parser.add_argument("--budget-s", type=float, default=START_BUDGET_S,
                        help=f"how long one start may take (default {START_BUDGET_S})")
    parser.add_argument("--out", type=Path, default=None, help="write the figures as JSON here")
    args = parser.parse_args(argv)
    sizes = tuple(int(part) for part in args.tokens.split(",") if part.strip())
    return run_alone(False, lambda ctx: measure(ctx, sizes, args.budget_s), args.out)


if __name__ == "__main__":
    sys.exit(main())
