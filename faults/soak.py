"""``python -m faults.soak --minutes M``: a long fault soak of a 3-broker cluster (``./dev soak``).

Owns the soak: on a ``faults.cluster.FaultCluster`` (a 3-node ZooKeeper ensemble and
a 3-broker ``LocalCluster`` on it), a mixed client load for ``--minutes`` minutes, and a
fault every ``--fault-every`` seconds, in rotation:

- ``kill -9`` of the controller, restarted once its ZooKeeper session has expired,
- ``kill -9`` of another broker, restarted the same way,
- SIGSTOP of a broker for longer than its session timeout (its session expires), SIGCONT,
- SIGSTOP of a ZooKeeper node for 10 s (the ensemble keeps its quorum), SIGCONT,
- ``kill -9`` of a ZooKeeper node, started again 10 s later.

The load (client threads, each logged in to a random broker, reconnecting on errors):
token creates (some with a short lifetime, so the expiry sweep works too), renewals,
expire-now, token logins, password logins and describes.

After each fault is healed it measures the *resync time*: until a token created after the
heal, through another broker, logs in on every broker that was hit. At the end it checks
that no acknowledged token is lost (every token acknowledged, neither expired by the load
nor past its lifetime, is in ZooKeeper) and that every broker's cache equals ZooKeeper,
then prints: requests, errors by class, tokens lost (must be 0), max resync time. The
exit status is 1 if a token was lost, a cache diverged or an error was not retriable.

Every ``--sample-every`` seconds (default a minute) it records each broker's and
ZooKeeper node's resident memory, open file descriptors and threads, and the bytes and
files of ZooKeeper's data directories and of the audit files (``faults.soakmeter``,
a CSV that ``python -m faults.soak_plot`` draws), and at the end prints the slope per
hour of each. The tokens the load creates live at most ``--token-lifetime`` seconds, so
their number, and what the cluster keeps for them, levels off; ``--spare-broker`` keeps
one broker out of the kill faults so its series spans the whole run.

It measures; it asserts nothing about speed. It must not print passwords or HMACs.
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from faults.cluster import (
    REQUEST_TIMEOUT_S,
    RETRIABLE_REFUSALS,
    ClientError,
    Connection,
    FaultCluster,
    error_name,
    token_password,
)
from faults.soakmeter import Sampler, format_slopes, read_rows, summarize
from tokensvc.core.errors import Errors
from tokensvc.protocol.api import ApiKey
from zk.errors import StoreError
from zk.token_store import TokenStore

log = logging.getLogger("faults.soak")

SESSION_TIMEOUT_MS = 6000
ZK_PAUSE_S = 10.0
RESYNC_LIMIT_S = 120.0
SHORT_LIFETIME_MS = 20_000
# The brokers' zookeeper.max.staleness.ms (the default): how long after a create another
# broker may still not serve the token; and the margin a login takes on a loaded machine.
STALENESS_MS = 3_000
PROPAGATION_MARGIN_S = 1.0
TOKEN_LIFETIME_S = 600.0
# At the end, a token this close to its end (or past it) may be in the middle of the
# sweep's deletion: the cache check leaves it out (the sweep runs every 2 s here).
SWEEP_MARGIN_S = 5.0
RETRIABLE = {Errors.REQUEST_TIMED_OUT.name, Errors.NOT_CONTROLLER.name,
             Errors.COORDINATOR_LOAD_IN_PROGRESS.name, "connection"}
# Refused token logins that are not errors of the service: the token was removed, or had
# not yet reached that broker (it did a second later), or ZooKeeper could not say which,
# or the broker could not decide then and said so with a retriable error (a view of
# ZooKeeper it could not confirm current after a fault, a clock it did not trust).
REFUSED_OK = {"refused", "refused (propagation lag)", "refused (unverified)",
              "refused (at its max lifetime)"} | {
                  f"refused: {name}" for name in RETRIABLE_REFUSALS}
# Answers the load expects in normal operation (a renew or expire racing with an
# expire-now or the sweep finds no token).
EXPECTED = {"NONE", Errors.DELEGATION_TOKEN_NOT_FOUND.name, Errors.DELEGATION_TOKEN_EXPIRED.name}


@dataclass
class Token:
    token_id: str
    hmac: bytes = field(repr=False)
    max_ms: int
    expired_by_load: bool = False
    acked_at: float = field(default_factory=time.monotonic)  # when its create was answered


@dataclass
class Ledger:
    """What the load did and saw; shared by every client thread."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    requests: Counter = field(default_factory=Counter)
    outcomes: Counter = field(default_factory=Counter)
    tokens: dict[str, Token] = field(default_factory=dict)

    acknowledged: int = 0
    # The longest a token took, from its create's answer, to log in on a broker that had
    # refused it at first (bounded by zookeeper.max.staleness.ms, plus a login's time).
    longest_propagation_s: float = 0.0

    def propagated(self, token: Token) -> None:
        with self.lock:
            self.longest_propagation_s = max(self.longest_propagation_s,
                                             time.monotonic() - token.acked_at)

    def record(self, api: str, outcome: str) -> None:
        with self.lock:
            self.requests[api] += 1
            self.outcomes[(api, outcome)] += 1

    def acknowledge(self, token: Token, now_ms: int) -> None:
        """Keep an acknowledged token; forget those a minute past their max lifetime, so
        the load's own memory and work stay flat over hours."""
        with self.lock:
            self.acknowledged += 1
            self.tokens[token.token_id] = token
            if self.acknowledged % 500 == 0:
                for gone in [t for t in self.tokens.values() if t.max_ms < now_ms - 60_000]:
                    del self.tokens[gone.token_id]

    def live_token(self, rng: random.Random, now_ms: int) -> Token | None:
        with self.lock:
            live = [t for t in list(self.tokens.values())[-1_000:]
                    if not t.expired_by_load and t.max_ms > now_ms + 5_000]
        return rng.choice(live[-200:]) if live else None


class Soak(FaultCluster):
    def __init__(self, directory: Path, minutes: float, fault_every_s: float, seed: int,
                 clients: int, *, token_lifetime_s: float = TOKEN_LIFETIME_S,
                 spare_broker: int | None = None, samples: Path | None = None,
                 sample_every_s: float = 60.0) -> None:
        super().__init__(directory)
        self.minutes = minutes
        self.started = time.monotonic()
        self.deadline = self.started + minutes * 60
        self.token_lifetime_ms = int(token_lifetime_s * 1000)
        self.spare_broker = spare_broker
        self.sampler = Sampler(samples, self.started) if samples is not None else None
        self.sample_every_s = sample_every_s
        self.fault_every_s = fault_every_s
        self.rng = random.Random(seed)
        self.clients = clients
        self.ledger = Ledger()
        self.stop = threading.Event()
        self.resync_s: list[tuple[str, float]] = []
        self.faults: list[str] = []

    # -- set-up -------------------------------------------------------------------------

    def start(self) -> None:
        self.start_cluster("soak", {
            "zookeeper.session.timeout.ms": str(SESSION_TIMEOUT_MS),
            "delegation.token.expiry.check.interval.ms": "2000",
            "zookeeper.max.staleness.ms": str(STALENESS_MS),
        })

    # -- load ---------------------------------------------------------------------------

    def client_loop(self, index: int) -> None:
        rng = random.Random(index)
        cache: dict = {}
        conn: Connection | None = None
        while not self.stop.is_set():
            if conn is None:
                broker = rng.choice(self.cluster.broker_ids())
                try:
                    conn = Connection(self.address(broker), *self.admin, cache=cache)
                except ClientError:
                    self.ledger.record("login", "connection")
                    time.sleep(0.2)
                    continue
                self.ledger.record("login", "NONE")
            try:
                self.one_request(conn, rng, cache)
            except ClientError:
                conn.close()
                conn = None
                time.sleep(0.1)
            except Exception as exc:  # noqa: BLE001 - counted as unexpected; the soak goes on
                self.ledger.record("client", f"exception {exc.__class__.__name__}")
                conn.close()
                conn = None
            time.sleep(rng.uniform(0.01, 0.05))
        if conn is not None:
            conn.close()

    def one_request(self, conn: Connection, rng: random.Random, cache: dict) -> None:
        now_ms = int(time.time() * 1000)
        roll = rng.random()
        token = self.ledger.live_token(rng, now_ms)
        if roll < 0.3 or token is None:
            lifetime = SHORT_LIFETIME_MS if rng.random() < 0.2 else self.token_lifetime_ms
            api = "create"
            try:
                answer = conn.call(ApiKey.CREATE_DELEGATION_TOKEN, 3,
                                   {"Renewers": [], "MaxLifetimeMs": lifetime})
            except ClientError:
                self.ledger.record(api, "connection")
                raise
            if answer["ErrorCode"] == 0:
                self.ledger.acknowledge(
                    Token(answer["TokenId"], answer["Hmac"], answer["MaxTimestampMs"]), now_ms)
        elif roll < 0.5:
            api = "renew"
            answer = self._call(conn, api, ApiKey.RENEW_DELEGATION_TOKEN, 2,
                                {"Hmac": token.hmac, "RenewPeriodMs": 3_600_000})
        elif roll < 0.55:
            api = "expire"
            with self.ledger.lock:
                token.expired_by_load = True
            answer = self._call(conn, api, ApiKey.EXPIRE_DELEGATION_TOKEN, 2,
                                {"Hmac": token.hmac, "ExpiryTimePeriodMs": -1})
        elif roll < 0.85:
            api = "token login"
            broker = rng.choice(self.cluster.broker_ids())
            outcome = self._token_login(broker, token, cache)
            if outcome == "refused":
                gone = self._gone(token)
                if gone is None:
                    outcome = "refused (unverified)"
                elif not gone:
                    again = self._until_propagated(broker, token, cache)
                    if again == "NONE":
                        outcome = "refused (propagation lag)"
                        self.ledger.propagated(token)
                    elif again.startswith("refused: "):
                        outcome = again  # the broker now says it cannot decide: retriable
                    elif time.time() * 1000 >= token.max_ms - 1_000:
                        # It reached its max lifetime meanwhile (a slow login under load).
                        outcome = "refused (at its max lifetime)"
                    else:
                        outcome = "refused (token live)"
                        log.warning("token %s refused by broker %d %.1f s after its create "
                                    "was answered, %.1f s before its max lifetime, still in "
                                    "ZooKeeper", token.token_id, broker,
                                    time.monotonic() - token.acked_at,
                                    token.max_ms / 1000 - time.time())
            self.ledger.record(api, outcome)
            return
        else:
            api = "describe"
            answer = self._call(conn, api, ApiKey.DESCRIBE_DELEGATION_TOKEN, 3, {"Owners": None})
        self.ledger.record(api, error_name(answer["ErrorCode"]))

    def _call(self, conn: Connection, api: str, key: int, version: int, body: dict) -> dict:
        try:
            return conn.call(key, version, body)
        except ClientError:
            self.ledger.record(api, "connection")
            raise

    def _until_propagated(self, broker: int, token: Token, cache: dict) -> str:
        """Try a refused token's login again on ``broker`` until it succeeds or the
        consistency contract's bound has passed: a broker other than the one that
        answered the create serves it once its view is confirmed current after the
        create, at most ``zookeeper.max.staleness.ms`` later (a broker that cannot
        confirm its view refuses with a retriable error instead). A second at least, as
        a margin for the login itself on a loaded machine."""
        deadline = token.acked_at + STALENESS_MS / 1000 + PROPAGATION_MARGIN_S
        pause = 1.0
        while True:
            time.sleep(pause)
            again = self._token_login(broker, token, cache)
            if again != "refused" or time.monotonic() >= deadline:
                return again
            pause = 0.5

    def _token_login(self, broker: int, token: Token, cache: dict) -> str:
        outcome = self.token_login(broker, token.token_id, token.hmac, cache)
        return "NONE" if outcome == "ok" else outcome

    def _gone(self, token: Token) -> bool | None:
        """Whether the token was expired or swept meanwhile (a refused login is then
        expected); None when ZooKeeper cannot tell right now."""
        with self.ledger.lock:
            if token.expired_by_load:
                return True
        try:
            return TokenStore(self.zk).get(token.token_id) is None
        except StoreError:
            return None

    # -- faults -------------------------------------------------------------------------

    def begin_load(self) -> None:
        """The ``minutes`` of the soak count from here, once the cluster is up: its start
        takes 10-20 s on a loaded machine, and the faults must not lose that time."""
        self.started = time.monotonic()
        self.deadline = self.started + self.minutes * 60

    def run_faults(self) -> None:
        kinds: list[Callable[[], None]] = [
            self.kill_controller, self.pause_zookeeper_node, self.kill_broker,
            self.expire_broker_session, self.kill_zookeeper_node,
        ]
        turn = 0
        while time.monotonic() + self.fault_every_s < self.deadline:
            if self._sleep(self.fault_every_s):
                return
            fault = kinds[turn % len(kinds)]
            turn += 1
            started = time.monotonic()
            fault()
            print(f"  [{time.strftime('%H:%M:%S')}] {self.faults[-1]}: done in "
                  f"{time.monotonic() - started:.1f}s, resync {self.resync_s[-1][1]:.2f}s",
                  flush=True)
        self._sleep(max(0.0, self.deadline - time.monotonic()))

    def _sleep(self, seconds: float) -> bool:
        return self.stop.wait(seconds)

    def kill_controller(self) -> None:
        victim = self.controller() or 1
        if victim == self.spare_broker:
            self.kill_broker()
            return
        self._crash_and_restart(victim, f"kill -9 controller (broker {victim})")

    def kill_broker(self) -> None:
        controller = self.controller()
        victim = self.rng.choice([b for b in self.cluster.broker_ids()
                                  if b not in (controller, self.spare_broker)])
        self._crash_and_restart(victim, f"kill -9 broker {victim}")

    def _crash_and_restart(self, victim: int, name: str) -> None:
        self.faults.append(name)
        self.cluster.kill_broker(victim)
        self.cluster.start_broker(victim, timeout=RESYNC_LIMIT_S)
        self._measure_resync(name, [victim])

    def expire_broker_session(self) -> None:
        victim = self.rng.choice(self.cluster.broker_ids())
        name = f"SIGSTOP broker {victim} past its session timeout"
        self.faults.append(name)
        pid = self.cluster.broker_pid(victim)
        if pid is None:
            return
        os.kill(pid, signal.SIGSTOP)
        try:
            time.sleep(SESSION_TIMEOUT_MS / 1000 * 1.5)
        finally:
            os.kill(pid, signal.SIGCONT)
        self._measure_resync(name, [victim])

    def pause_zookeeper_node(self) -> None:
        node = self.rng.choice(self.ensemble.nodes)
        name = f"SIGSTOP ZooKeeper node {node.server_id} ({node.mode() or '?'}) for {ZK_PAUSE_S:.0f}s"
        self.faults.append(name)
        node.pause()
        try:
            time.sleep(ZK_PAUSE_S)
        finally:
            node.resume()
        self._measure_resync(name, self.cluster.broker_ids())

    def kill_zookeeper_node(self) -> None:
        node = self.rng.choice(self.ensemble.nodes)
        name = f"kill -9 ZooKeeper node {node.server_id} ({node.mode() or '?'}), restart after " \
               f"{ZK_PAUSE_S:.0f}s"
        self.faults.append(name)
        node.kill()
        time.sleep(ZK_PAUSE_S)
        node.start()
        self._measure_resync(name, self.cluster.broker_ids())

    def _measure_resync(self, name: str, hit: list[int]) -> None:
        """Seconds from the heal until a token created after it, through a broker that was
        not hit (if any), logs in on every broker that was."""
        healed = time.monotonic()
        others = [b for b in self.cluster.broker_ids() if b not in hit] or hit
        created = None
        while created is None and time.monotonic() - healed < RESYNC_LIMIT_S:
            try:
                conn = Connection(self.address(self.rng.choice(others)), *self.admin)
                try:
                    answer = conn.call(ApiKey.CREATE_DELEGATION_TOKEN, 3,
                                       {"Renewers": [], "MaxLifetimeMs": -1})
                finally:
                    conn.close()
                if answer["ErrorCode"] == 0:
                    created = answer
            except ClientError:
                pass
            if created is None:
                time.sleep(0.2)
        waiting = set(hit)
        while created is not None and waiting and time.monotonic() - healed < RESYNC_LIMIT_S:
            for broker in sorted(waiting):
                try:
                    Connection(self.address(broker), created["TokenId"],
                               token_password(created["Hmac"]), token=True).close()
                    waiting.discard(broker)
                except ClientError:
                    pass
            if waiting:
                time.sleep(0.05)
        took = time.monotonic() - healed
        if created is None or waiting:
            took = float("inf")
        self.resync_s.append((name, took))

    # -- the resource series -------------------------------------------------------------

    def run_sampler(self) -> None:
        """A sample at the start and every ``sample_every_s`` until the soak stops."""
        while True:
            try:
                self.sample_once()
            except Exception as exc:  # noqa: BLE001 - a missed sample must not end the soak
                print(f"  sample failed: {exc.__class__.__name__}: {exc}", flush=True)
            if self.stop.wait(self.sample_every_s):
                return

    def sample_once(self) -> None:
        if self.sampler is None:
            return
        processes: dict[str, int | None] = {
            f"broker-{b}": self.cluster.broker_pid(b) for b in self.cluster.broker_ids()}
        processes.update({f"zookeeper-{n.server_id}": n.pid for n in self.ensemble.nodes})
        directories = {f"zookeeper-{n.server_id} data": [n.data_dir / "data"]
                       for n in self.ensemble.nodes}
        directories["audit files"] = [Path(self.cluster.info["audit_dir"])]
        self.sampler.sample(time.monotonic(), processes, directories)

    # -- the end ------------------------------------------------------------------------

    def verify(self) -> dict[str, Any]:
        store = TokenStore(self.zk)
        now_ms = int(time.time() * 1000)
        in_zookeeper = set(store.token_ids())
        with self.ledger.lock:
            expected = [t for t in self.ledger.tokens.values()
                        if not t.expired_by_load and t.max_ms > now_ms + 1_000]
        lost = [t.token_id for t in expected if t.token_id not in in_zookeeper]
        diverged = {}

        def live(ends: dict[str, int]) -> set[str]:
            # Tokens at (or within SWEEP_MARGIN_S of) their end are the sweep's: the
            # controller deletes them every few seconds, and its own cache and the
            # others follow each deletion a moment apart. A cache that differs from
            # ZooKeeper in a token that is not ending is what diverging means.
            horizon = int(time.time() * 1000) + int(SWEEP_MARGIN_S * 1000)
            return {token_id for token_id, end in ends.items() if end > horizon}

        def in_store() -> set[str]:
            return live({info.token_id: min(info.expiry_timestamp, info.max_timestamp)
                         for info in store.load_all()})

        for broker in self.cluster.broker_ids():
            described: set[str] | None = None
            current: set[str] = set()
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                try:
                    described = live(self.described_token_ends(broker))
                except ClientError:
                    described = None
                current = in_store()
                if described == current:
                    break
                time.sleep(0.5)
            if described != current:
                diverged[broker] = len((described or set()) ^ current)
        return {"lost": lost, "diverged": diverged, "tokens": len(in_zookeeper)}


def run(minutes: float, fault_every_s: float, seed: int, clients: int,
        directory: Path | None, *, token_lifetime_s: float = TOKEN_LIFETIME_S,
        spare_broker: int | None = None, samples: Path | None = None,
        sample_every_s: float = 60.0) -> int:
    scratch = directory or Path(tempfile.mkdtemp(prefix="tokensvc-soak-"))
    if samples is None:
        samples = (directory / "samples.csv") if directory is not None else Path(
            tempfile.gettempdir()) / f"tokensvc-soak-samples-{os.getpid()}.csv"
    soak = Soak(scratch, minutes, fault_every_s, seed, clients,
                token_lifetime_s=token_lifetime_s, spare_broker=spare_broker, samples=samples,
                sample_every_s=sample_every_s)
    print(f"soak: {minutes:g} min, a fault every {fault_every_s:.0f}s, {clients} clients, "
          f"seed {seed}, in {scratch}; samples every {sample_every_s:g}s in {samples}"
          + (f"; broker {spare_broker} is never killed" if spare_broker else ""), flush=True)
    started = time.monotonic()
    threads: list[threading.Thread] = []
    try:
        soak.start()
        print(f"  cluster up in {time.monotonic() - started:.1f}s: 3 ZooKeeper nodes, "
              f"3 brokers", flush=True)
        soak.begin_load()
        threads = [threading.Thread(target=soak.client_loop, args=(i,), daemon=True)
                   for i in range(clients)]
        sampler = threading.Thread(target=soak.run_sampler, name="soak-sampler", daemon=True)
        sampler.start()
        for thread in threads:
            thread.start()
        soak.run_faults()
        soak.sample_once()          # the last sample, before the load stops
        soak.stop.set()
        for thread in [*threads, sampler]:
            thread.join(REQUEST_TIMEOUT_S + 5)
        result = soak.verify()
    finally:
        soak.stop.set()
        soak.close()
        if directory is None:
            shutil.rmtree(scratch, ignore_errors=True)
    return report(soak, result, time.monotonic() - started)


def report(soak: Soak, result: dict[str, Any], elapsed_s: float) -> int:
    ledger = soak.ledger
    total = sum(ledger.requests.values())
    errors = Counter()
    for (api, outcome), count in ledger.outcomes.items():
        if outcome not in EXPECTED:
            errors[(api, outcome)] += count
    unexpected = {k: v for k, v in errors.items() if k[1] not in RETRIABLE | REFUSED_OK}
    resyncs = [s for _, s in soak.resync_s]
    print(f"\nsoak finished after {elapsed_s / 60:.1f} min; faults: {len(soak.faults)}")
    for name, seconds in soak.resync_s:
        print(f"  {name}: resync {seconds:.2f}s")
    print(f"requests: {total} ({', '.join(f'{k} {v}' for k, v in sorted(ledger.requests.items()))})")
    print("errors by class:" + ("" if errors else " none"))
    for (api, outcome), count in sorted(errors.items()):
        kind = "retriable" if outcome in RETRIABLE else (
            "expected" if outcome in REFUSED_OK else "UNEXPECTED")
        print(f"  {api:12s} {outcome:32s} {count:6d}  ({kind})")
    print(f"tokens acknowledged: {ledger.acknowledged}; in ZooKeeper at the end: {result['tokens']}")
    print(f"tokens lost: {len(result['lost'])}")
    print(f"caches diverged from ZooKeeper: {result['diverged'] or 'none'}")
    print(f"max resync time: {max(resyncs, default=0.0):.2f}s")
    print(f"longest propagation of a token refused at first: "
          f"{ledger.longest_propagation_s:.2f}s (bound {STALENESS_MS / 1000:g}s + "
          f"{PROPAGATION_MARGIN_S:g}s)")
    if soak.sampler is not None and soak.sampler.path.exists():
        print(f"\nresources (samples in {soak.sampler.path}); slope per hour over each "
              f"series' longest life:")
        print(format_slopes(summarize(read_rows(soak.sampler.path))))
    failed = bool(result["lost"] or result["diverged"] or unexpected)
    print("RESULT: " + ("FAIL" if failed else "OK"))
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m faults.soak", description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=30.0, help="how long to run (default 30)")
    parser.add_argument("--fault-every", type=float, default=None,
                        help="seconds between faults (default: 30 for runs under 10 minutes, "
                             "else 180)")
    parser.add_argument("--clients", type=int, default=6, help="client threads (default 6)")
    parser.add_argument("--seed", type=int, default=1, help="random seed (default 1)")
    parser.add_argument("--token-lifetime", type=float, default=TOKEN_LIFETIME_S,
                        help="max lifetime in seconds of the tokens the load creates (default "
                             f"{TOKEN_LIFETIME_S:.0f}; a fifth live 20 s), so their number "
                             "levels off")
    parser.add_argument("--spare-broker", type=int, default=None,
                        help="never kill -9 this broker, so its series spans the whole run")
    parser.add_argument("--sample-every", type=float, default=60.0,
                        help="seconds between resource samples (default 60)")
    parser.add_argument("--samples", type=Path, default=None,
                        help="CSV of the samples (default: DIR/samples.csv, or a file in the "
                             "temporary directory)")
    parser.add_argument("--dir", type=Path, default=None,
                        help="keep the cluster's files here (default: a temporary directory)")
    args = parser.parse_args(argv)
    if args.minutes <= 0:
        parser.error("--minutes must be positive")
    fault_every = args.fault_every or (30.0 if args.minutes < 10 else 180.0)
    logging.basicConfig(level=logging.WARNING)
    # The soak's own ZooKeeper client rides through the faults too; its reconnects are noise.
    logging.getLogger("kazoo").setLevel(logging.ERROR)
    if args.spare_broker is not None and args.spare_broker not in (1, 2, 3):
        parser.error("--spare-broker must be 1, 2 or 3")
    return run(args.minutes, fault_every, args.seed, args.clients, args.dir,
               token_lifetime_s=args.token_lifetime, spare_broker=args.spare_broker,
               samples=args.samples, sample_every_s=args.sample_every)


if __name__ == "__main__":
    sys.exit(main())
