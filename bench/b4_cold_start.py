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
import json
import os
import queue
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


_SNAPSHOT = re.compile(r"token cache loaded from snapshot \S+: (\d+) tokens at notification "
                       r"(-?\d+), (\d+) changed since, in (\d+) ms")
_REFUSED = re.compile(r"token cache snapshot \S+ (?:refused|not used)")


def _from_log(path: str, *, last: bool = False) -> dict:
    """Figures of the broker's log: of its first start, or (``last``) of its latest."""
    text = Path(path).read_text(encoding="utf-8", errors="replace")
    found: dict = {}

    def pick(pattern: re.Pattern[str]) -> re.Match[str] | None:
        matches = list(pattern.finditer(text))
        return (matches[-1] if last else matches[0]) if matches else None

    if match := pick(_RESYNC):
        found["cache_load_tokens"] = int(match.group(1))
        found["cache_load_ms"] = int(match.group(2))
    if match := pick(_READY):
        found["broker_ready_s"] = float(match.group(1))
    if last:
        if match := pick(_SNAPSHOT):
            found["snapshot_tokens"] = int(match.group(1))
            found["snapshot_changes_applied"] = int(match.group(3))
            found["snapshot_load_ms"] = int(match.group(4))
        found["snapshot_refusals"] = len(_REFUSED.findall(text))
    return found


class OwnedCluster:
    """A 1-broker local cluster whose broker processes are started by one thread that
    lives until :meth:`close` (they die with the thread that started them:
    ``die_with_parent``), so a restart must be asked of that thread."""

    def __init__(self, directory: Path, zk_connect: str, overrides: dict, timeout: float,
                 name: str = "b4-cluster") -> None:
        self.directory = directory
        self._args = (directory, zk_connect, overrides, timeout)
        self.cluster: LocalCluster | None = None
        self.error: BaseException | None = None
        self.ready = threading.Event()
        self._requests: queue.Queue = queue.Queue()
        self.thread = threading.Thread(target=self._own, name=name, daemon=True)

    def start(self) -> OwnedCluster:
        self.thread.start()
        return self

    def _own(self) -> None:
        directory, zk_connect, overrides, timeout = self._args
        try:
            self.cluster = LocalCluster.up(directory, brokers=1, zookeeper=zk_connect,
                                           overrides=overrides, die_with_parent=True,
                                           timeout=timeout)
        except BaseException as exc:  # noqa: BLE001 - re-raised by the measuring thread
            self.error = exc
            return
        finally:
            self.ready.set()
        try:
            while (request := self._requests.get()) is not None:
                request()
        finally:
            self.cluster.down()

    def restart(self, timeout: float) -> tuple[float, threading.Event, dict]:
        """Stop the broker cleanly (it writes its snapshot), then start it again on the
        owning thread. Returns the monotonic time just before its process was started,
        an event set once the start returned, and a dict holding its error if any."""
        began, done, outcome = threading.Event(), threading.Event(), {}

        def restart() -> None:
            try:
                assert self.cluster is not None
                self.cluster.stop_broker(1)

                def clock() -> None:
                    outcome["t0"] = time.monotonic()
                    began.set()

                self.cluster.start_broker(1, timeout, before_spawn=clock)
            except BaseException as exc:  # noqa: BLE001 - handed to the measuring thread
                outcome["error"] = exc
            finally:
                began.set()
                done.set()

        self._requests.put(restart)
        if not began.wait(timeout) or "t0" not in outcome:
            raise RuntimeError(f"the broker could not be restarted: {outcome.get('error')}")
        return outcome["t0"], done, outcome

    def close(self, timeout: float) -> None:
        self._requests.put(None)
        self.thread.join(timeout)


def timed_restart(owned: OwnedCluster, address: str, token_id: str, password: str,
                  timeout: float) -> tuple[float, int]:
    """Seconds from asking the stopped broker to start again to its first token login,
    and the attempts that took."""
    t0, done, outcome = owned.restart(timeout)
    try:
        attempts = asyncio.run(_first_login(address, token_id, password, t0 + timeout))
    except RuntimeError:
        done.wait(timeout)
        if "error" in outcome:
            raise outcome["error"] from None
        raise
    restart = time.monotonic() - t0
    done.wait(timeout)
    if "error" in outcome:
        raise outcome["error"]
    return restart, attempts


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
        address = _address_when_written(directory, deadline)
        first_attempts = asyncio.run(_first_login(address, probe.token_id, password, deadline))
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
    first = _from_log(log_path)
    again = _from_log(log_path, last=True)
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
