"""``python -m bench [--quick] [--only B1,B4]``: run the benchmark suite (``./dev bench``).

Runs each benchmark with its reference in the same run, prints one table and
writes ``bench/results/<timestamp>.json`` and ``bench/results/latest.json``.
``--quick`` runs every benchmark at a small size (CI smoke: it checks the suite
works, not its speed), its JVMs with the client compiler only (:data:`QUICK_JVM_FLAGS`).
If ``bench/authz_bench.py`` is present its authorizer throughput is added as an extra
line. The exit status is 0 when every benchmark ran (missed targets included) and 1 when
one failed with an error.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import logging
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

from bench.suite import RESULTS_DIR, BenchContext, Outcome, now_utc, table, timed, write_results
from tokensvc.jvm import FAST_COMPILE, SHORT_LIVED_KAFKA
from tokensvc.kafka import broker as kafka_broker
from zk import server as zk_server

BENCHMARKS = (
    "bench.b1_logins",
    # B8 before B3 on the shared cluster: B3's backlog measurement leaves 20,000 change
    # notifications behind on purpose (until the purge: by count once they are a minute
    # old), and every broker lists them all on each change it follows. B2 runs on a
    # cluster of its own for the same reason (it writes tens of thousands); in quick mode
    # (500 left behind, a few thousand writes) it runs last on the shared one.
    "bench.b8_all_brokers",
    "bench.b3_propagation",
    "bench.b2_forwarded_creates",
    "bench.b4_cold_start",
    "bench.b5_expiry_sweep",
    "bench.b7_cache_memory",
    "bench.b9_scale",
    "bench.b11_agent",
    "bench.b12_revoke",
    "bench.b13_stalls",
    # Beside Kafka: Apache Kafka brokers from Maven Central on the same ZooKeeper.
    "bench.b14_kafka_login",
    "bench.b15_kafka_revoke",
    "bench.b16_kafka_start",
    "bench.b6_audit_report",  # last: the heaviest, and it needs no broker
)
AUTHZ_ID = "authz"
# Quick mode's JVMs (ZooKeeper, Kafka brokers, the Spark driver) start as the tests start
# theirs, unless the environment names their flags already: the client compiler only (C2's
# compile time never pays back in a JVM that lives seconds; quick figures are not read)
# and, for Kafka, the serial collector. The full run keeps the JVMs' defaults.
QUICK_JVM_FLAGS = {
    zk_server.JVMFLAGS_ENV: FAST_COMPILE,
    kafka_broker.JVMFLAGS_ENV: SHORT_LIVED_KAFKA,
    "SPARK_SUBMIT_OPTS": FAST_COMPILE,
}


def _authz_outcome(ctx: BenchContext) -> Outcome:
    module = importlib.import_module("bench.authz_bench")
    acls, decisions = (2_000, 20_000) if ctx.quick else (10_000, 200_000)
    result = module.run(acls, decisions, 1)
    return Outcome(
        AUTHZ_ID,
        f"authorizer decisions/s with {result['acls']:,} ACLs (extra)",
        measured=float(result["decisions_per_second"]),
        unit="decisions/s",
        details=result,
    )


def plan(only: set[str] | None) -> list[tuple[str, str, Callable[[BenchContext], Outcome]]]:
    """(id, title, run) of every benchmark selected, in suite order."""
    selected = []
    for name in BENCHMARKS:
        module = importlib.import_module(name)
        if only is None or module.ID in only:
            selected.append((module.ID, module.TITLE, module.run))
    if importlib.util.find_spec("bench.authz_bench") is not None and (
        only is None or AUTHZ_ID in only
    ):
        selected.append((AUTHZ_ID, "authorizer decisions/s (extra)", _authz_outcome))
    return selected


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (CI smoke test)")
    parser.add_argument("--only", default=None,
                        help="comma-separated ids to run, e.g. B1,B4 (also: authz)")
    parser.add_argument("--results-dir", type=Path, default=RESULTS_DIR,
                        help=f"where the JSON goes (default {RESULTS_DIR})")
    parser.add_argument("--verbose", action="store_true", help="log what the suite starts")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a broker setting for every cluster the suite starts (repeatable)")
    parser.add_argument("--insecure-zookeeper", action="store_true",
                        help="start the local clusters' ZooKeeper open (plain port, no SASL, "
                             "no ACLs): the secure default's cost, measured against this")
    parser.add_argument("--label-tokens", action="store_true",
                        help="B1 and B2 create every token with 4 labels of 32 bytes")
    parser.add_argument("--pin-cores", action="store_true",
                        help="B12: ZooKeeper and the load generator on one half of the CPUs, "
                             "the brokers on the other (needs 2 CPUs)")
    args = parser.parse_args(argv)
    settings = {}
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            parser.error(f"--set expects KEY=VALUE, got {item!r}")
        settings[key.strip()] = value.strip()
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(name)s %(message)s")
    only = None
    if args.only:
        only = {part.strip() for part in args.only.split(",") if part.strip()}
        known = {importlib.import_module(n).ID for n in BENCHMARKS} | {AUTHZ_ID}
        unknown = sorted(only - known)
        if unknown:
            parser.error(f"unknown benchmark id(s): {', '.join(unknown)}")

    if args.quick:
        for name, flags in QUICK_JVM_FLAGS.items():
            os.environ.setdefault(name, flags)
    started = now_utc()
    clock = time.monotonic()
    ctx = BenchContext(args.quick, broker_settings=settings,
                       insecure_zookeeper=args.insecure_zookeeper,
                       label_tokens=args.label_tokens, pin_cores=args.pin_cores)
    outcomes: list[Outcome] = []
    try:
        planned = plan(only)
        for n, (bench_id, title, run) in enumerate(planned):
            print(f"[{bench_id}] {title} ...", file=sys.stderr, flush=True)
            outcome = timed(lambda run=run: run(ctx), bench_id, title)
            ctx.finished(later for later, _, _ in planned[n + 1:])
            outcomes.append(outcome)
            status = outcome.error or ("met" if outcome.met else "missed" if outcome.met is False
                                       else "done")
            print(f"[{bench_id}] {status} in {outcome.seconds:.1f}s", file=sys.stderr, flush=True)
    finally:
        ctx.close()
    path = write_results(outcomes, quick=args.quick, started=started,
                         seconds=time.monotonic() - clock, directory=args.results_dir)
    print(table(outcomes))
    print(f"\nresults: {path} (and latest.json)")
    return 1 if any(o.error for o in outcomes) else 0


if __name__ == "__main__":
    sys.exit(main())
