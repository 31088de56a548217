"""``python -m faults.chaos``: the fault suite (``./dev chaos``), checked from outside.

Owns: on a ``faults.cluster.FaultCluster`` (a 3-node ZooKeeper ensemble with 3
broker processes on it), client threads that create,
renew and expire their own tokens on random brokers, the faults below, and after each
fault the checks of ``faults.chaos_check`` plus those that need the brokers:

- ``controller``: kill -9 of the controller, restarted once its session has expired.
  Recovery: until a create sent through a survivor after the kill is acknowledged
  (the writes are held during the failover); the note gives the new controller's time.
- ``zk-leader`` / ``zk-follower``: kill -9 of that ZooKeeper node, started again once
  writes have recovered without it, at least ``ZK_DOWN_S`` after the kill (so the
  survivors recover alone). Recovery: until a create sent after the kill is acknowledged;
  the note gives when a surviving node first led (:class:`LeaderWatch`).
- ``zk-quorum``: kill -9 of the ZooKeeper leader with a follower frozen (SIGSTOP) for
  ``ZK_FREEZE_S``: no quorum until the SIGCONT, and the follower left running has been
  looking for a leader alone all that time. Recovery as for ``zk-leader``.
- ``broker``: kill -9 of a broker a client has a write in flight to, restarted once its
  session has expired. Recovery: until a token created after its restart, through
  another broker, logs in on it.
- ``pause5`` / ``pause15``: SIGSTOP of a broker for 5 s / 15 s, then SIGCONT. Recovery:
  until a token created after the resume, through another broker, logs in on it.
- ``revocation5`` / ``revocation15``: the pause-revocation probe, ``--rounds`` rounds
  with no other load: freeze a non-controller broker, expire ``REVOKED`` tokens through
  another broker (each acknowledged), start logins with them on the frozen broker
  (they queue in its socket buffers), SIGCONT, and for ``FRESH_WINDOW_S`` seconds (at
  least ``FRESH_MIN_PER_THREAD`` per thread) start fresh logins with the same tokens; a connection logged in with one of them before the
  freeze sends a DescribeAcls during it. Every success (a login, or that request served)
  is a violation.

End-state checks after each load fault (load stopped): every acknowledged create is in
ZooKeeper unless an expiry of it was sent, no acknowledged renew is lost, no duplicate
token, every acknowledged expiry (a sample of ``EXPIRY_SAMPLE``) is refused at login on
every broker, every broker is alive and logs in, and every broker's describe equals
ZooKeeper's token ids. It prints one table row per fault and exits 1 on a violation.

It measures and checks; it asserts nothing about speed. It never prints an HMAC or a
password. It restarts processes from the main thread only: the children are tied to the
thread that started them (``die_with_parent``).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import random
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from faults.chaos_check import RevocationRound, TrackedToken, Violation, WriteLedger, check_writes
from faults.cluster import (
    ClientError,
    Connection,
    FaultCluster,
    error_name,
    token_password,
)
from tokensvc.cluster import answers_api_versions
from tokensvc.protocol.api import ApiKey
from zk.client import negotiated_session_timeout_ms
from zk.errors import StoreError
from zk.server import ZooKeeperNode
from zk.token_store import TokenStore

FAULTS = ("controller", "zk-leader", "zk-follower", "zk-quorum", "broker", "pause5", "pause15",
          "revocation5", "revocation15")
ZK_DOWN_S = 10.0
ZK_FREEZE_S = 8.0
WARM_UP_S = 2.0
RECOVERY_LIMIT_S = 120.0
CONVERGE_LIMIT_S = 30.0
EXPIRY_SAMPLE = 40
REVOKED = 10
FRESH_WINDOW_S = 1.0
FRESH_THREADS = 2
FRESH_MIN_PER_THREAD = 5  # so a round tries at least REVOKED + 10 logins, however slow
RENEW_PERIOD_MS = 3_600_000
ANY_ACL = {"ResourceTypeFilter": 1, "ResourceNameFilter": None, "PatternTypeFilter": 1,
           "PrincipalFilter": None, "HostFilter": None, "Operation": 1, "PermissionType": 1}


@dataclass
class FaultResult:
    name: str
    ledger: WriteLedger = field(default_factory=WriteLedger)
    violations: list[Violation] = field(default_factory=list)
    recovery_s: float | None = None
    notes: list[str] = field(default_factory=list)
    rounds: list[RevocationRound] = field(default_factory=list)


class LeaderWatch:
    """Asks the surviving ZooKeeper nodes their mode every ``poll_s`` from a thread of its
    own, from ``since`` until :meth:`stop`; the note says when one first led, so that a
    slow recovery shows whether ZooKeeper or the brokers took the time."""

    def __init__(self, nodes: Sequence[ZooKeeperNode], since: float, poll_s: float = 0.2) -> None:
        self._nodes = list(nodes)
        self._since = since
        self._poll_s = poll_s
        self._stop = threading.Event()
        self.led: tuple[float, int] | None = None  # (seconds after ``since``, server id)
        self.last_modes: dict[int, str | None] = {}
        self._thread = threading.Thread(target=self._run, name="zk-leader-watch", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while self.led is None and not self._stop.is_set():
            self.last_modes = {n.server_id: n.mode() for n in self._nodes}
            leading = [sid for sid, mode in self.last_modes.items() if mode == "leader"]
            if leading:
                self.led = (time.monotonic() - self._since, leading[0])
                return
            self._stop.wait(self._poll_s)

    def stop(self) -> str:
        """Stop asking; the note for the fault's row."""
        self._stop.set()
        self._thread.join(5)
        if self.led is not None:
            return f"ZooKeeper node {self.led[1]} leading {self.led[0]:.1f}s after the kill"
        modes = ", ".join(f"node {sid} {mode or 'not serving'}"
                          for sid, mode in sorted(self.last_modes.items()))
        return (f"no ZooKeeper leader {time.monotonic() - self._since:.0f}s after the kill "
                f"({modes})")


class Chaos(FaultCluster):
    """The cluster, the load and the faults of one run."""

    def __init__(self, directory: Path, *, clients: int, seconds: float, seed: int,
                 session_timeout_ms: int | None, rounds: int,
                 zk_tick_ms: int | None = None) -> None:
        super().__init__(directory)
        self.clients = clients
        self.seconds = seconds
        self.rng = random.Random(seed)
        self.rounds = rounds
        self.session_timeout_ms = session_timeout_ms
        self.zk_tick_ms = zk_tick_ms
        self.negotiated_ms: int | None = None
        self._in_flight: dict[int, int] = {}   # client index -> broker of its pending write
        self._in_flight_lock = threading.Lock()

    # -- set-up ---------------------------------------------------------------------------

    def start(self) -> None:
        overrides = {}
        if self.session_timeout_ms is not None:
            overrides["zookeeper.session.timeout.ms"] = str(self.session_timeout_ms)
        self.start_cluster("chaos", overrides, zk_tick_ms=self.zk_tick_ms,
                           client_session_timeout_ms=self.session_timeout_ms)
        self.negotiated_ms = negotiated_session_timeout_ms(self.zk)

    def zk_tokens(self) -> dict[str, int]:
        """Every token in ZooKeeper with its expiry timestamp; retried through faults."""
        store = TokenStore(self.zk)
        deadline = time.monotonic() + RECOVERY_LIMIT_S
        while True:
            try:
                return {t.token_id: t.expiry_timestamp for t in store.load_all()}
            except StoreError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)

    # -- load -----------------------------------------------------------------------------

    def client_loop(self, index: int, seed: int, ledger: WriteLedger,
                    stop: threading.Event) -> None:
        rng = random.Random(seed)
        cache: dict = {}
        mine: list[TrackedToken] = []
        conn: Connection | None = None
        broker = 0
        while not stop.is_set():
            if conn is None:
                broker = rng.choice(self.cluster.broker_ids())
                try:
                    conn = Connection(self.address(broker), *self.admin, cache=cache)
                except ClientError:
                    ledger.login("admin login failed")
                    stop.wait(0.2)
                    continue
            try:
                self._one_write(index, broker, conn, rng, mine, ledger, cache)
            except ClientError:
                conn.close()
                conn = None
            stop.wait(rng.uniform(0.01, 0.04))
        if conn is not None:
            conn.close()

    def _one_write(self, index: int, broker: int, conn: Connection, rng: random.Random,
                   mine: list[TrackedToken], ledger: WriteLedger, cache: dict) -> None:
        roll = rng.random()
        if roll < 0.4 or not mine:
            answer = self._write(index, broker, conn, ledger, "create", ApiKey.CREATE_DELEGATION_TOKEN, 3,
                                 {"Renewers": [], "MaxLifetimeMs": -1})
            if answer is not None and answer["ErrorCode"] == 0:
                mine.append(ledger.created(answer["TokenId"], answer["Hmac"],
                                           answer["MaxTimestampMs"]))
        elif roll < 0.7:
            token = rng.choice(mine)
            answer = self._write(index, broker, conn, ledger, "renew", ApiKey.RENEW_DELEGATION_TOKEN, 2,
                                 {"Hmac": token.hmac, "RenewPeriodMs": RENEW_PERIOD_MS})
            if answer is not None and answer["ErrorCode"] == 0:
                ledger.renewed(token, answer["ExpiryTimestampMs"])
        elif roll < 0.85:
            token = mine.pop(rng.randrange(len(mine)))
            ledger.expire_sending(token)
            answer = self._write(index, broker, conn, ledger, "expire", ApiKey.EXPIRE_DELEGATION_TOKEN, 2,
                                 {"Hmac": token.hmac, "ExpiryTimePeriodMs": -1})
            if answer is not None and answer["ErrorCode"] == 0:
                ledger.expired(token)
        else:
            token = rng.choice(mine)
            target = rng.choice(self.cluster.broker_ids())
            ledger.login(self.token_login(target, token.token_id, token.hmac, cache))

    def _write(self, index: int, broker: int, conn: Connection, ledger: WriteLedger,
               api: str, key: int, version: int, body: dict) -> dict | None:
        ledger.sent(api)
        with self._in_flight_lock:
            self._in_flight[index] = broker
        started = time.monotonic()
        try:
            answer = conn.call(key, version, body)
        except ClientError as exc:
            ledger.lost_answer(api, hung="Timeout" in str(exc))
            raise
        finally:
            with self._in_flight_lock:
                self._in_flight.pop(index, None)
        ledger.answered(api, error_name(answer["ErrorCode"]),
                        (time.monotonic() - started) * 1000)
        return answer

    # -- one fault under load -------------------------------------------------------------

    def run_fault(self, kind: str) -> FaultResult:
        if kind.startswith("revocation"):
            return self.revocation(float(kind.removeprefix("revocation")))
        result = FaultResult(kind)
        before = set(self.zk_tokens())
        stop = threading.Event()
        threads = [threading.Thread(target=self.client_loop, args=(i, self.rng.randrange(2**32), result.ledger, stop),
                                    daemon=True) for i in range(self.clients)]
        for thread in threads:
            thread.start()
        started = time.monotonic()
        try:
            stop.wait(WARM_UP_S)
            inject: dict[str, Callable[[FaultResult], None]] = {
                "controller": self.kill_controller, "zk-leader": self.kill_zookeeper_leader,
                "zk-follower": self.kill_zookeeper_follower, "broker": self.kill_writer,
                "zk-quorum": self.kill_zookeeper_quorum,
                "pause5": self.pause, "pause15": self.pause,
            }
            inject[kind](result)
            stop.wait(max(0.0, self.seconds - (time.monotonic() - started)))
        finally:
            stop.set()
            for thread in threads:
                thread.join(60)
        self.end_state(result, before)
        return result

    def kill_controller(self, result: FaultResult) -> None:
        victim = self.controller() or 1
        result.name = f"kill -9 controller (broker {victim})"
        killed = time.monotonic()
        self.cluster.kill_broker(victim)
        survivors = [b for b in self.cluster.broker_ids() if b != victim]
        result.recovery_s = self._write_recovery(result.ledger, survivors, killed)
        deadline = killed + RECOVERY_LIMIT_S
        while self.controller() in (None, victim) and time.monotonic() < deadline:
            time.sleep(0.05)
        result.notes.append(f"controller {self.controller()} in {time.monotonic() - killed:.1f}s")
        self.cluster.start_broker(victim, timeout=RECOVERY_LIMIT_S)

    def kill_zookeeper_leader(self, result: FaultResult) -> None:
        self._kill_zookeeper(result, leader=True)

    def kill_zookeeper_follower(self, result: FaultResult) -> None:
        self._kill_zookeeper(result, leader=False)

    def kill_zookeeper_quorum(self, result: FaultResult) -> None:
        self._kill_zookeeper(result, leader=True, freeze_s=ZK_FREEZE_S)

    def _kill_zookeeper(self, result: FaultResult, *, leader: bool, freeze_s: float = 0.0) -> None:
        node = self._zookeeper_node(leader)
        result.name = f"kill -9 ZooKeeper node {node.server_id} ({node.mode() or '?'})"
        survivors = [n for n in self.ensemble.nodes if n is not node]
        # The frozen one: the lowest id, whose vote loses to the other's when both have
        # seen the same transactions, so the election waits for the running one's next vote.
        frozen = min(survivors, key=lambda n: n.server_id) if freeze_s else None
        if frozen is not None:
            result.name += f", node {frozen.server_id} frozen {freeze_s:.0f}s"
            os.kill(frozen.pid, signal.SIGSTOP)
        try:
            killed = time.monotonic()
            node.kill()
            time.sleep(freeze_s)
        finally:
            if frozen is not None:
                os.kill(frozen.pid, signal.SIGCONT)
        leader = LeaderWatch(survivors, killed)
        try:
            result.recovery_s = self._write_recovery(result.ledger, self.cluster.broker_ids(),
                                                     killed)
        finally:
            result.notes.append(leader.stop())
        time.sleep(max(0.0, ZK_DOWN_S - (time.monotonic() - killed)))
        node.start()
        result.notes.append(f"serving again {time.monotonic() - killed:.0f}s after the kill")

    def _zookeeper_node(self, leader: bool) -> ZooKeeperNode:
        deadline = time.monotonic() + RECOVERY_LIMIT_S
        while time.monotonic() < deadline:
            for node in self.ensemble.nodes:
                if (node.mode() == "leader") == leader and node.mode() is not None:
                    return node
            time.sleep(0.2)
        raise RuntimeError("no ZooKeeper node in the wanted mode")

    def kill_writer(self, result: FaultResult) -> None:
        controller = self.controller()
        started = time.monotonic()
        victim = None
        while victim is None and time.monotonic() - started < 10:
            with self._in_flight_lock:
                writing = set(self._in_flight.values())
            # A broker other than the controller for 5 s (that fault has its own row).
            victim = min(writing - {controller}, default=None)
            if victim is None and time.monotonic() - started > 5:
                victim = min(writing, default=None)
            if victim is None:
                time.sleep(0.001)
        victim = victim or self.rng.choice(self.cluster.broker_ids())
        result.name = f"kill -9 broker {victim} (a client writing to it)"
        if victim == controller:
            result.name += ", the controller"
        killed = time.monotonic()
        self.cluster.kill_broker(victim)
        self.cluster.start_broker(victim, timeout=RECOVERY_LIMIT_S)
        result.notes.append(f"serving again after {time.monotonic() - killed:.1f}s")
        result.recovery_s = self._resync(result.ledger, victim, killed)

    def pause(self, result: FaultResult) -> None:
        seconds = float(result.name.removeprefix("pause"))
        victim = self.rng.choice(self.cluster.broker_ids())
        role = " (controller)" if victim == self.controller() else ""
        result.name = f"SIGSTOP broker {victim}{role} for {seconds:.0f}s"
        pid = self.cluster.broker_pid(victim)
        os.kill(pid, signal.SIGSTOP)
        try:
            time.sleep(seconds)
        finally:
            os.kill(pid, signal.SIGCONT)
        result.recovery_s = self._resync(result.ledger, victim, time.monotonic())

    def _write_recovery(self, ledger: WriteLedger, brokers: list[int], since: float) -> float | None:
        """Seconds from ``since`` until a create sent after it, through one of ``brokers``,
        is acknowledged; None if none is within the limit."""
        while time.monotonic() - since < RECOVERY_LIMIT_S:
            if self._admin_create(ledger, self.rng.choice(brokers)) is not None:
                return time.monotonic() - since
            time.sleep(0.1)
        return None

    def _admin_create(self, ledger: WriteLedger, broker: int) -> TrackedToken | None:
        """A token created through ``broker`` and recorded in ``ledger``; None if the
        create failed."""
        try:
            conn = Connection(self.address(broker), *self.admin)
        except ClientError:
            return None
        try:
            answer = self._write(-1, broker, conn, ledger, "create", ApiKey.CREATE_DELEGATION_TOKEN, 3,
                                 {"Renewers": [], "MaxLifetimeMs": -1})
        except ClientError:
            return None
        finally:
            conn.close()
        if answer["ErrorCode"]:
            return None
        return ledger.created(answer["TokenId"], answer["Hmac"], answer["MaxTimestampMs"])

    def _resync(self, ledger: WriteLedger, victim: int, since: float) -> float | None:
        """Seconds from ``since`` until a token created after it, through another broker,
        logs in on ``victim``."""
        others = [b for b in self.cluster.broker_ids() if b != victim]
        created = None
        while created is None and time.monotonic() - since < RECOVERY_LIMIT_S:
            created = self._admin_create(ledger, self.rng.choice(others))
            if created is None:
                time.sleep(0.1)
        while created is not None and time.monotonic() - since < RECOVERY_LIMIT_S:
            if self.token_login(victim, created.token_id, created.hmac, None) == "ok":
                return time.monotonic() - since
            time.sleep(0.05)
        return None

    # -- end-state checks -----------------------------------------------------------------

    def end_state(self, result: FaultResult, before: set[str]) -> None:
        for broker in self.cluster.broker_ids():
            if self.cluster.broker_pid(broker) is None or not answers_api_versions(
                    self.cluster.broker_info(broker)["listeners"]["SASL_PLAINTEXT"]):
                result.violations.append(Violation("broker dead", str(broker)))
        for broker in self.cluster.broker_ids():
            diff = self._describe_converges(broker)
            if diff:
                result.violations.append(Violation("describe != ZooKeeper", str(broker), diff))
        tokens = self.zk_tokens()
        result.violations += check_writes(result.ledger, tokens, set(tokens) - before)
        expired = result.ledger.acknowledged_expiries()
        sample = self.rng.sample(expired, min(EXPIRY_SAMPLE, len(expired)))
        cache: dict = {}
        for token in sample:
            for broker in self.cluster.broker_ids():
                outcome = self.token_login(broker, token.token_id, token.hmac, cache)
                if not outcome.startswith("refused"):  # "refused: <retriable>" accepts nothing either
                    result.violations.append(Violation(
                        "expired token not refused", token.token_id,
                        f"login on broker {broker}: {outcome}"))
        result.notes.append(f"{len(sample)} expired tokens tried on every broker")

    def _describe_converges(self, broker: int) -> str:
        """"" once the broker's describe equals ZooKeeper's ids (within the limit), else
        how they differ."""
        deadline = time.monotonic() + CONVERGE_LIMIT_S
        while True:
            current = set(self.zk_tokens())
            try:
                described = self.described_token_ids(broker)
                diff = f"{len(described - current)} extra, {len(current - described)} missing"
            except ClientError as exc:
                described, diff = None, f"describe failed: {exc}"
            if described == current:
                return ""
            if time.monotonic() > deadline:
                return diff
            time.sleep(0.5)

    # -- the pause-revocation probe -------------------------------------------------------

    def revocation(self, pause_s: float) -> FaultResult:
        result = FaultResult(f"revoked tokens after a {pause_s:.0f}s SIGSTOP")
        for _ in range(self.rounds):
            result.rounds.append(self._revocation_round(result.ledger, pause_s))
        result.violations += [
            Violation("revoked token accepted after a pause", f"round {n}",
                      f"broker {r.victim}: queued {r.queued_succeeded}/{r.queued}, fresh "
                      f"{r.fresh_succeeded}/{r.fresh} logins succeeded, held sessions "
                      f"served {r.sessions_served}/{r.sessions}")
            for n, r in enumerate(result.rounds, 1) if r.violations]
        queued = sum(r.queued for r in result.rounds)
        fresh = sum(r.fresh for r in result.rounds)
        result.notes.append(
            f"{len(result.rounds)} rounds: queued {sum(r.queued_succeeded for r in result.rounds)}"
            f"/{queued} succeeded, fresh {sum(r.fresh_succeeded for r in result.rounds)}/{fresh}"
            f", held sessions served {sum(r.sessions_served for r in result.rounds)}"
            f"/{sum(r.sessions for r in result.rounds)}")
        lasts = [r.last_success_after_resume_s for r in result.rounds
                 if r.last_success_after_resume_s is not None]
        if lasts:
            result.notes.append(f"last success {max(lasts):.2f}s after SIGCONT")
        return result

    def _revocation_round(self, ledger: WriteLedger, pause_s: float) -> RevocationRound:
        controller = self.controller()
        victim = self.rng.choice([b for b in self.cluster.broker_ids() if b != controller])
        via = controller if controller is not None else next(
            b for b in self.cluster.broker_ids() if b != victim)
        rnd = RevocationRound(victim, pause_s)
        tokens = []
        deadline = time.monotonic() + RECOVERY_LIMIT_S
        while len(tokens) < REVOKED and time.monotonic() < deadline:
            token = self._admin_create(ledger, via)
            if token is not None:
                tokens.append(token)
        for token in tokens:  # the victim knows every token before it is frozen
            deadline = time.monotonic() + CONVERGE_LIMIT_S
            while self.token_login(victim, token.token_id, token.hmac, None) != "ok":
                if time.monotonic() > deadline:
                    raise RuntimeError(f"broker {victim} never learnt token {token.token_id}")
                time.sleep(0.1)
        revoked: list[TrackedToken] = []
        resumed = [0.0]
        lock = threading.Lock()
        queued: list[threading.Thread] = []

        def queued_login(token: TrackedToken) -> None:
            ok = self.token_login(victim, token.token_id, token.hmac, None) == "ok"
            with lock:
                rnd.queued += 1
                if ok:
                    rnd.queued_succeeded += 1
                    rnd.success(time.monotonic() - resumed[0])

        def held_request(conn: Connection) -> None:
            try:
                served = conn.call(ApiKey.DESCRIBE_ACLS, 1, ANY_ACL)["ErrorCode"] == 0
            except ClientError:
                served = False  # closed: the session was revoked
            finally:
                conn.close()
            with lock:
                rnd.sessions += 1
                if served:
                    rnd.sessions_served += 1
                    rnd.success(time.monotonic() - resumed[0])

        held = Connection(self.address(victim), tokens[0].token_id, token_password(tokens[0].hmac),
                          token=True) if tokens else None
        pid = self.cluster.broker_pid(victim)
        os.kill(pid, signal.SIGSTOP)
        frozen = time.monotonic()
        try:
            conn = Connection(self.address(via), *self.admin)
            try:
                for token in tokens:
                    ledger.sent("expire")
                    ledger.expire_sending(token)
                    answer = conn.call(ApiKey.EXPIRE_DELEGATION_TOKEN, 2,
                                       {"Hmac": token.hmac, "ExpiryTimePeriodMs": -1})
                    ledger.answered("expire", error_name(answer["ErrorCode"]), 0.0)
                    if answer["ErrorCode"] == 0:
                        ledger.expired(token)
                        rnd.expired += 1
            finally:
                conn.close()
            revoked = [t for t in tokens if t.expire_acknowledged]
            queued = [threading.Thread(target=queued_login, args=(t,), daemon=True)
                      for t in revoked]
            if held is not None and tokens[0] in revoked:
                queued.append(threading.Thread(target=held_request, args=(held,), daemon=True))
            elif held is not None:
                held.close()
            for thread in queued:
                thread.start()
            time.sleep(max(0.0, pause_s - (time.monotonic() - frozen)))
        finally:
            resumed[0] = time.monotonic()
            os.kill(pid, signal.SIGCONT)

        def fresh_logins(seed: int) -> None:
            pick = random.Random(seed)
            tried = 0
            while time.monotonic() - resumed[0] < FRESH_WINDOW_S or tried < FRESH_MIN_PER_THREAD:
                tried += 1
                token = pick.choice(revoked)
                ok = self.token_login(victim, token.token_id, token.hmac, None) == "ok"
                with lock:
                    rnd.fresh += 1
                    if ok:
                        rnd.fresh_succeeded += 1
                        rnd.success(time.monotonic() - resumed[0])

        fresh = [threading.Thread(target=fresh_logins, args=(i,), daemon=True)
                 for i in range(FRESH_THREADS if revoked else 0)]
        for thread in fresh:
            thread.start()
        for thread in queued + fresh:
            thread.join(RECOVERY_LIMIT_S)
        self._resync(ledger, victim, time.monotonic())
        print(f"    round: broker {victim} frozen {pause_s:.0f}s, {rnd.expired} expired; "
              f"queued {rnd.queued_succeeded}/{rnd.queued} succeeded, fresh "
              f"{rnd.fresh_succeeded}/{rnd.fresh}, held sessions served "
              f"{rnd.sessions_served}/{rnd.sessions}", flush=True)
        return rnd


# -- the table ------------------------------------------------------------------------------

def table(results: list[FaultResult]) -> str:
    head = (f"{'fault':60s} {'writes':>6s} {'acked':>6s} {'unknown':>7s} {'errors':>6s} "
            f"{'violations':>10s} {'recovery':>9s}")
    lines = [head, "-" * len(head)]
    for r in results:
        led = r.ledger
        recovery = "-" if r.recovery_s is None else f"{r.recovery_s:.2f}s"
        if r.recovery_s is None and not r.rounds:
            recovery = "NONE"
        lines.append(f"{r.name[:60]:60s} {led.writes(led.attempted):6d} "
                     f"{led.writes(led.acknowledged):6d} {led.writes(led.unknown):7d} "
                     f"{led.error_count():6d} {len(r.violations):10d} {recovery:>9s}")
        for (api, error), count in sorted(led.errors.items()):
            fastest = led.fastest_error_ms[(api, error)]
            lines.append(f"    error {api} {error}: {count} (fastest answer {fastest:.0f} ms)")
        for note in r.notes:
            lines.append(f"    {note}")
        for violation in r.violations[:10]:
            lines.append(f"    VIOLATION {violation}")
        if len(r.violations) > 10:
            lines.append(f"    ... {len(r.violations) - 10} more violations")
    return "\n".join(lines)


def failed(results: list[FaultResult]) -> bool:
    return any(r.violations or (r.recovery_s is None and not r.rounds) for r in results)


def run(faults: list[str], *, repeat: int = 1, seconds: float = 30.0, clients: int = 6,
        seed: int = 1, session_timeout_ms: int | None = None, rounds: int = 5,
        zk_tick_ms: int | None = None, directory: Path | None = None) -> list[FaultResult]:
    """Start the cluster, run every fault ``repeat`` times, print a table; return the
    results (the caller decides what a failure is)."""
    scratch = directory or Path(tempfile.mkdtemp(prefix="tokensvc-chaos-"))
    chaos = Chaos(scratch, clients=clients, seconds=seconds, seed=seed,
                  session_timeout_ms=session_timeout_ms, rounds=rounds, zk_tick_ms=zk_tick_ms)
    results: list[FaultResult] = []
    try:
        started = time.monotonic()
        chaos.start()
        print(f"chaos: 3 ZooKeeper nodes, 3 brokers up in {time.monotonic() - started:.1f}s "
              f"in {scratch}; ZooKeeper session timeout negotiated "
              f"{chaos.negotiated_ms} ms (asked {session_timeout_ms or 18_000} ms)", flush=True)
        for turn in range(repeat):
            for kind in faults:
                began = time.monotonic()
                result = chaos.run_fault(kind)
                results.append(result)
                print(f"  [{turn + 1}/{repeat}] {result.name}: {len(result.violations)} "
                      f"violations, {time.monotonic() - began:.0f}s", flush=True)
    finally:
        chaos.close()
        if directory is None:
            shutil.rmtree(scratch, ignore_errors=True)
    print()
    print(table(results), flush=True)
    return results


def interrupt(*_: object) -> None:
    """A SIGTERM handler: raise KeyboardInterrupt, as Ctrl-C does."""
    raise KeyboardInterrupt


def parse_faults(parser: argparse.ArgumentParser, text: str, known: Sequence[str]) -> list[str]:
    """``--faults``: the comma-separated names, in order; a parser error for an unknown one."""
    faults = [f.strip() for f in text.split(",") if f.strip()]
    unknown = sorted(set(faults) - set(known))
    if unknown or not faults:
        parser.error(f"unknown fault(s) {', '.join(unknown) or '(none given)'}; "
                     f"choose from {', '.join(known)}")
    return faults


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m faults.chaos",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--faults", default=",".join(FAULTS),
                        help=f"comma-separated, in order (default: all of {','.join(FAULTS)})")
    parser.add_argument("--repeat", type=int, default=1, help="run the list N times")
    parser.add_argument("--seconds", type=float, default=30.0,
                        help="load time per fault, at least (default 30)")
    parser.add_argument("--clients", type=int, default=6, help="client threads (default 6)")
    parser.add_argument("--rounds", type=int, default=5,
                        help="rounds per revocation probe (default 5)")
    parser.add_argument("--session-timeout-ms", type=int, default=None,
                        help="brokers' zookeeper.session.timeout.ms (default: the broker's)")
    parser.add_argument("--zk-tick-ms", type=int, default=None,
                        help="the ensemble's tickTime (default: zk.server's); ZooKeeper caps "
                             "sessions at 20 ticks")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--dir", type=Path, default=None,
                        help="keep the cluster's files and logs here")
    args = parser.parse_args(argv)
    faults = parse_faults(parser, args.faults, FAULTS)
    if (min(args.repeat, args.clients, args.rounds) < 1 or args.seconds <= 0
            or (args.zk_tick_ms is not None and args.zk_tick_ms < 1)):
        parser.error("--repeat, --seconds, --clients, --rounds and --zk-tick-ms must be positive")
    # SIGTERM unwinds like Ctrl-C: the finally blocks resume a frozen node, stop the
    # cluster and remove the scratch directory.
    signal.signal(signal.SIGTERM, interrupt)
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("kazoo").setLevel(logging.ERROR)
    # The suite's own ZooKeeper clients ask for the default timeout; it prints the
    # negotiated one itself.
    logging.getLogger("zk.client").setLevel(logging.ERROR)
    results = run(faults, repeat=args.repeat, seconds=args.seconds, clients=args.clients,
                  seed=args.seed, session_timeout_ms=args.session_timeout_ms,
                  rounds=args.rounds, zk_tick_ms=args.zk_tick_ms, directory=args.dir)
    bad = failed(results)
    print("RESULT: " + ("FAIL" if bad else "OK"))
    return 1 if bad else 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
    sys.exit(130)
