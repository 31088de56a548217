"""B4: cold start -- a broker starting with 100,000 tokens in ZooKeeper until a token logs in.

Measured: ``sizes.tokens`` token znodes are written into ZooKeeper beforehand
(set-up, pipelined, not measured). The clock starts when the suite asks for a
1-broker local cluster on that ZooKeeper (``LocalCluster.up``: config files,
users, then the broker process: interpreter start, imports, ZooKeeper session,
token cache load with multi-reads, election, listeners) and stops when one of
the preloaded tokens first completes a SCRAM login on it. Meanwhile the suite
tries that login every 20 ms. The broker derives that token's credential on this
first login, lazily, and no other.

Reference (same run): deriving SCRAM credentials eagerly for every token, as
Kafka's token cache does at load: both mechanisms, 4096 iterations. Timed on a
sample of ``sizes.b4_eager_sample`` tokens and extrapolated linearly to all
of them (PBKDF2 cost per token does not depend on how many there are).

Targets: <= 10 s, and >= 20x faster than eager.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
from pathlib import Path

from bench import env
from bench.b1_logins import MECHANISM
from bench.propagation import try_login
from bench.suite import BenchContext, Outcome, Target
from tokensvc.cluster import CLUSTER_FILE, LocalCluster
from tokensvc.scram.formatter import MIN_ITERATIONS, ScramMechanism, derive_credential

ID = "B4"
TITLE = "cold start with preloaded tokens -> first token login"
TARGET_S = 10.0
TARGET_SPEEDUP = 20.0
POLL_S = 0.02
START_TIMEOUT_S = 120.0

_RESYNC = re.compile(r"token cache resynchronised: (\d+) tokens in (\d+) ms")
_READY = re.compile(r"broker \d+ ready in ([0-9.]+)s")


def eager_seconds_per_token(ctx: BenchContext, sample: list[str]) -> float:
    """PBKDF2-derive both mechanisms' credentials for each token id in ``sample``."""
    passwords = [env.token_password(ctx, token_id) for token_id in sample]
    started = time.perf_counter()
    for password in passwords:
        for mechanism in ScramMechanism:
            derive_credential(password, mechanism, MIN_ITERATIONS)
    return (time.perf_counter() - started) / len(sample)


def _address_when_written(directory: Path, deadline: float) -> str:
    """The broker's SASL_PLAINTEXT address, as soon as ``cluster.json`` names it."""
    path = directory / CLUSTER_FILE
    while time.monotonic() < deadline:
        try:
            info = json.loads(path.read_text(encoding="utf-8"))
            return info["brokers"][0]["listeners"]["SASL_PLAINTEXT"]
        except (OSError, ValueError, KeyError, IndexError):
            time.sleep(POLL_S / 2)
    raise RuntimeError("the cold-start cluster never wrote cluster.json")


async def _first_login(address: str, token_id: str, password: str, deadline: float) -> int:
    """Try the login every POLL_S until it succeeds; how many attempts it took."""
    salted: dict = {}
    attempts = 0
    while time.monotonic() < deadline:
        attempts += 1
        try:
            if await try_login(address, token_id, password, salted):
                return attempts
        except OSError:
            pass  # not listening yet
        await asyncio.sleep(POLL_S)
    raise RuntimeError("no successful token login before the timeout")


def _from_log(path: str) -> dict:
    text = Path(path).read_text(encoding="utf-8", errors="replace")
    found: dict = {}
    if match := _RESYNC.search(text):
        found["cache_load_tokens"] = int(match.group(1))
        found["cache_load_ms"] = int(match.group(2))
    if match := _READY.search(text):
        found["broker_ready_s"] = float(match.group(1))
    return found


def run(ctx: BenchContext) -> Outcome:
    sizes = ctx.sizes
    store = env.preloaded(ctx)
    probe = store.tokens[len(store.tokens) // 2]
    password = env.token_password(ctx, probe.token_id)
    directory = ctx.directory(f"b4-cold-start-{time.monotonic_ns()}")

    started = time.monotonic()
    deadline = started + START_TIMEOUT_S
    holder: dict = {}
    finished = threading.Event()

    def own_cluster() -> None:
        # The broker dies with the thread that started it (die_with_parent), so this
        # thread lives until the measurement is over and stops the cluster itself.
        try:
            cluster = LocalCluster.up(
                directory, brokers=1, zookeeper=store.connect,
                overrides=env.broker_overrides(ctx), die_with_parent=True,
                timeout=START_TIMEOUT_S,
            )
        except BaseException as exc:  # noqa: BLE001 - re-raised by the measuring thread
            holder["error"] = exc
            return
        holder["log"] = cluster.broker_info(1)["log"]
        try:
            finished.wait()
        finally:
            cluster.down()

    owner = threading.Thread(target=own_cluster, name="b4-cluster", daemon=True)
    owner.start()
    try:
        address = _address_when_written(directory, deadline)
        attempts = asyncio.run(_first_login(address, probe.token_id, password, deadline))
        cold_start = time.monotonic() - started
    finally:
        finished.set()
        owner.join(START_TIMEOUT_S)
    if "error" in holder:
        raise holder["error"]
    from_log = _from_log(holder["log"])

    sample = [t.token_id for t in store.tokens[: sizes.b4_eager_sample]]
    per_token = eager_seconds_per_token(ctx, sample)
    eager = per_token * len(store.tokens)
    speedup = eager / cold_start
    return Outcome(
        ID,
        TITLE,
        measured=cold_start,
        unit="s",
        reference=eager,
        reference_unit="s",
        reference_label=f"eager PBKDF2, {len(sample):,}-token sample x{len(store.tokens) // len(sample)}",
        ratio=speedup,
        ratio_label="x faster than eager",
        targets=[
            Target(f"<= {TARGET_S:.0f} s", cold_start <= TARGET_S),
            Target(f">= {TARGET_SPEEDUP:.0f}x faster than eager", speedup >= TARGET_SPEEDUP),
        ],
        details={
            "tokens": len(store.tokens),
            "preload_seconds": round(store.load_seconds, 2),
            "login_attempts": attempts,
            "mechanism": MECHANISM.mechanism_name,
            "eager_sample": len(sample),
            "eager_ms_per_token": round(per_token * 1000, 3),
            **from_log,
        },
    )
