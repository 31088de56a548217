"""``python -m faults.chaos_net`` (``./dev chaos --net``): partitions, not only crashes.

Owns: the fault suite's cluster (3 ZooKeeper nodes, 3 brokers) with every process on a
host of its own (``faults.netns``: a network namespace, a veth pair, a bridge), the
suite's writer load from the root namespace (``faults.chaos``), five link faults, and
the checks made from outside during and after each of them:

- ``zk-cut`` (a): a non-controller broker cut from every ZooKeeper node; its clients
  still reach it.
- ``controller-zk-cut`` (b): the controller cut from every ZooKeeper node; another
  broker must take over, and the old one must stop acting as controller (its writes
  are fenced by the controller epoch).
- ``zk-split`` (c): the ZooKeeper leader cut from the other two nodes (2|1), with a
  non-controller broker on its side: that broker and the node reach each other and
  nobody else.
- ``controller-cut`` (d): a non-controller broker cut from the controller only, so its
  forwarded writes have nowhere to go.
- ``flap`` (e): a non-controller broker's link set down and up every 1-3 s.

Checks, each a violation when broken:

- end state (``faults.chaos``): no acknowledged write lost, no duplicate, creates of
  unknown outcome resolved against ZooKeeper, acknowledged expiries refused everywhere,
  every describe equal to ZooKeeper, every broker alive;
- revocations: during the cut, tokens are expired, a user deleted and a password
  changed through a broker on the majority side; logins with the old credentials are
  tried on every broker (above all the cut one), and sessions opened with them before
  the cut send requests. One that a broker accepts although it began later than
  ``zookeeper.max.staleness.ms`` + one confirmation round (:data:`ROUND_S`) after the
  revocation was acknowledged is a violation (``faults.chaos_check.late_acceptances``);
- controllers: every :data:`SAMPLE_S` each broker's ``tokensvc_controller`` gauge and
  ZooKeeper's ``/controller``; two brokers acting at once is a violation;
- no hang: every write answered within ``request.timeout.ms`` + :data:`ANSWER_SLACK_S`
  (for ``flap``, plus the longest time the link was down and TCP's retransmission
  back-off, :data:`FLAP_SLACK_S`), with a retriable error when not a success;
- recovery: after the heal, the time until a write through the cut broker is
  acknowledged and a token created elsewhere logs in on it (none within
  ``RECOVERY_LIMIT_S`` is a failure).

It prints one row per fault and exits 1 on a violation, 2 when the harness cannot run
(no root, no ``ip``). It removes every namespace, link and process it created, also on
failure or SIGTERM. It never prints an HMAC or a password.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import random
import secrets
import shutil
import signal
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from faults.chaos import (
    ANY_ACL,
    RECOVERY_LIMIT_S,
    WARM_UP_S,
    Chaos,
    FaultResult,
    interrupt,
    parse_faults,
    table,
)
from faults.chaos_check import (
    Attempt,
    ControllerSample,
    Violation,
    controller_overlaps,
    late_acceptances,
    latest_acceptance_s,
)
from faults.cluster import (
    ClientError,
    Connection,
    error_name,
    token_password,
)
from faults.netns import DEFAULT_PREFIX, NetError, NetPlan, Network, free_subnet, routes
from tokensvc.admin.client import AdminClient
from tokensvc.client_config import load_client_config
from tokensvc.cluster import Placement
from tokensvc.protocol.api import ApiKey
from zk.errors import StoreError

NET_FAULTS = ("zk-cut", "controller-zk-cut", "zk-split", "controller-cut", "flap")
ZK_HOSTS = ("zk1", "zk2", "zk3")
BROKER_HOSTS = ("b1", "b2", "b3")
RETRIABLE = frozenset({"REQUEST_TIMED_OUT", "NOT_CONTROLLER"})
ROUND_S = 1.0           # one confirmation round's allowance beyond max.staleness
SAMPLE_S = 0.25         # controller sampling period
ANSWER_SLACK_S = 3.0
FLAP_SLACK_S = 10.0
# The broker-side bound for the flap (its own latency histogram has a 15 s bucket).
BROKER_ANSWER_S = 15.0
WRITE_APIS = ("CreateDelegationToken", "RenewDelegationToken", "ExpireDelegationToken")
PROBE_TOKENS = 4
PROBE_USERS = 2         # one deleted, one given a new password
REVOKE_EVERY_S = 1.0
SETTLE_S = 3.0          # load after the heal, before the end-state checks
MAX_STALENESS_MS = 3000
REQUEST_TIMEOUT_MS = 10_000
MECHANISM = "SCRAM-SHA-256"


@dataclass
class Subject:
    """A credential the probe revokes during the cut: a token, or a user's password."""

    name: str               # "token <id>" / "user <name> deleted" / "... new password"
    username: str
    password: str = field(repr=False)
    token: bool
    token_hmac: bytes | None = field(default=None, repr=False)
    held: Connection | None = field(default=None, repr=False)


class NetChaos(Chaos):
    """The cluster on its own hosts, the load, the link faults and their checks."""

    def __init__(self, directory: Path, network: Network, *, clients: int, hold_s: float,
                 flap_s: float, seed: int, session_timeout_ms: int) -> None:
        super().__init__(directory, clients=clients, seconds=hold_s, seed=seed,
                         session_timeout_ms=session_timeout_ms, rounds=1)
        self.net = network
        self.plan = network.plan
        self.hold_s = hold_s
        self.flap_s = flap_s
        self.bound_s = MAX_STALENESS_MS / 1000.0 + ROUND_S
        # Per broker, for the fault in progress: the slowest answer (ms) and the writes
        # left unanswered, by API (the flap judges its own broker's from the broker side).
        self._per_broker_lock = threading.Lock()
        self._slowest: dict[tuple[int, str], float] = {}
        self._unanswered: Counter = Counter()

    def _write(self, index: int, broker: int, conn: Connection, ledger, api: str, key: int,
               version: int, body: dict) -> dict | None:
        started = time.monotonic()
        try:
            answer = super()._write(index, broker, conn, ledger, api, key, version, body)
        except ClientError as exc:
            if "Timeout" in str(exc):
                with self._per_broker_lock:
                    self._unanswered[(broker, api)] += 1
            raise
        elapsed_ms = (time.monotonic() - started) * 1000
        with self._per_broker_lock:
            self._slowest[(broker, api)] = max(self._slowest.get((broker, api), 0.0),
                                               elapsed_ms)
        return answer

    def start(self) -> None:
        plan = self.plan
        overrides = {
            "zookeeper.session.timeout.ms": str(self.session_timeout_ms),
            "zookeeper.max.staleness.ms": str(MAX_STALENESS_MS),
            "request.timeout.ms": str(REQUEST_TIMEOUT_MS),
        }
        placements = {i + 1: Placement(plan.address(h), tuple(plan.exec_prefix(h)))
                      for i, h in enumerate(BROKER_HOSTS)}
        self.start_cluster("chaos", overrides, client_session_timeout_ms=self.session_timeout_ms,
                           zk_hosts=[plan.address(h) for h in ZK_HOSTS],
                           zk_prefixes=[plan.exec_prefix(h) for h in ZK_HOSTS],
                           placements=placements)

    @staticmethod
    def host(broker: int) -> str:
        return BROKER_HOSTS[broker - 1]

    def _admin_client(self, broker: int) -> AdminClient:
        address = self.cluster.broker_info(broker)["listeners"]["SASL_PLAINTEXT"]
        return AdminClient(address, load_client_config(self.cluster.info["admin"]["properties"]),
                           timeout_s=RECOVERY_LIMIT_S)

    # -- one fault ---------------------------------------------------------------------------

    def run_net_fault(self, kind: str) -> FaultResult:
        result = FaultResult(kind)
        before = set(self.zk_tokens())
        with self._per_broker_lock:
            self._slowest.clear()
            self._unanswered.clear()
        late_before = {b: self._late_answers(b) for b in self.cluster.broker_ids()}
        stop = threading.Event()
        load = [threading.Thread(target=self.client_loop,
                                 args=(i, self.rng.randrange(2**32), result.ledger, stop),
                                 daemon=True) for i in range(self.clients)]
        samples: list[ControllerSample] = []
        watcher = threading.Thread(target=self._watch_controllers, args=(samples, stop),
                                   daemon=True)
        for thread in [*load, watcher]:
            thread.start()
        attempts: list[Attempt] = []
        acknowledged: dict[str, float] = {}
        longest_down = [0.0]
        try:
            stop.wait(WARM_UP_S)
            victim, side_hosts, other_hosts, via = self._plan_fault(kind, result)
            subjects = self._prepare_subjects(result, victim, via, kind)
            probe_stop = threading.Event()
            probes = [threading.Thread(target=self._probe_logins, daemon=True,
                                       args=(subjects, acknowledged, attempts, probe_stop, s))
                      for s in range(2)]
            probes.append(threading.Thread(target=self._probe_sessions, daemon=True,
                                           args=(subjects, acknowledged, attempts, probe_stop,
                                                 victim)))
            through_victim: Counter = Counter()
            probes.append(threading.Thread(target=self._victim_writer, daemon=True,
                                           args=(victim, result, through_victim, probe_stop)))
            cut_at = time.monotonic()
            try:
                if kind == "flap":
                    flapper = threading.Thread(target=self._flap, daemon=True,
                                               args=(self.host(victim), longest_down))
                    flapper.start()
                else:
                    self.net.cut_between(side_hosts, other_hosts)
                for thread in probes:
                    thread.start()
                self._revoke(subjects, acknowledged, via, cut_at + self._hold(kind), result)
                if kind == "flap":
                    flapper.join()
                else:
                    time.sleep(max(0.0, cut_at + self.hold_s - time.monotonic()))
            finally:
                self.net.heal_all()
            healed = time.monotonic()
            result.notes.append(f"cut for {healed - cut_at:.1f}s")
            write_s = self._write_recovery(result.ledger, [victim], healed)
            resync_s = self._resync(result.ledger, victim, healed)
            result.recovery_s = None if write_s is None or resync_s is None \
                else max(write_s, resync_s)
            result.notes.append(
                f"after the heal: a write through broker {victim} in "
                f"{_seconds(write_s)}, a token created elsewhere logs in on it in "
                f"{_seconds(resync_s)}")
            probe_stop.set()
            for thread in probes:
                thread.join(60)
            outcomes = ", ".join(f"{k} {v}" for k, v in sorted(through_victim.items()))
            result.notes.append(f"creates through broker {victim} from the cut on: "
                                f"{outcomes or 'none'}")
            for subject in subjects:
                if subject.held is not None:
                    subject.held.close()
            stop.wait(SETTLE_S)
        finally:
            stop.set()
            for thread in [*load, watcher]:
                thread.join(60)
            self.net.heal_all()
        late = {b: self._late_answers(b) - late_before[b] for b in self.cluster.broker_ids()}
        self._judge(result, kind, victim, attempts, acknowledged, samples, longest_down[0],
                    late)
        self.end_state(result, before)
        return result

    def _hold(self, kind: str) -> float:
        return self.flap_s if kind == "flap" else self.hold_s

    def _plan_fault(self, kind: str, result: FaultResult
                    ) -> tuple[int, list[str], list[str], int]:
        """The broker the fault centres on, the two sides of the cut (host names), and a
        broker on the majority side to revoke through."""
        controller = self._settled_controller()
        others = [b for b in self.cluster.broker_ids() if b != controller]
        victim = controller if kind == "controller-zk-cut" else self.rng.choice(others)
        via = self.rng.choice([b for b in self.cluster.broker_ids() if b != victim])
        host = self.host(victim)
        if kind in ("zk-cut", "controller-zk-cut"):
            role = "controller" if victim == controller else "broker"
            result.name = f"cut {role} {victim} from ZooKeeper for {self.hold_s:.0f}s"
            return victim, [host], list(ZK_HOSTS), via
        if kind == "zk-split":
            leader = self._zookeeper_node(leader=True)
            minority = f"zk{leader.server_id}"
            majority = [h for h in ZK_HOSTS if h != minority]
            result.name = (f"split ZooKeeper 2|1 (leader {leader.server_id} and broker "
                           f"{victim} alone) for {self.hold_s:.0f}s")
            rest = [self.host(b) for b in self.cluster.broker_ids() if b != victim]
            return victim, [minority, host], majority + rest, via
        if kind == "controller-cut":
            result.name = (f"cut broker {victim} from controller {controller} "
                           f"for {self.hold_s:.0f}s")
            via = controller
            return victim, [host], [self.host(controller)], via
        result.name = f"flap broker {victim}'s link every 1-3s for {self.flap_s:.0f}s"
        return victim, [host], [], via

    def _settled_controller(self) -> int:
        deadline = time.monotonic() + RECOVERY_LIMIT_S
        while time.monotonic() < deadline:
            controller = self.controller()
            if controller is not None and self._gauge(controller) == 1:
                return controller
            time.sleep(0.1)
        raise RuntimeError("no controller settled before the fault")

    # -- the revocation probe -------------------------------------------------------------

    def _prepare_subjects(self, result: FaultResult, victim: int, via: int,
                          kind: str) -> list[Subject]:
        """Tokens and users that every broker accepts, each with a session opened on
        ``victim`` before the cut."""
        subjects: list[Subject] = []
        for _ in range(PROBE_TOKENS):
            token = None
            deadline = time.monotonic() + RECOVERY_LIMIT_S
            while token is None and time.monotonic() < deadline:
                token = self._admin_create(result.ledger, via)
            if token is None:
                raise RuntimeError("could not create the probe's tokens")
            subjects.append(Subject(f"token {token.token_id}", token.token_id,
                                    token_password(token.hmac), True, token.hmac))
        with self._admin_client(via) as admin:
            for i in range(PROBE_USERS):
                name = f"probe-{kind}-{i}-{secrets.token_hex(3)}"
                password = secrets.token_urlsafe(12)
                admin.upsert_user_scram_credential(name, MECHANISM, password)
                what = "deleted" if i % 2 == 0 else "given a new password"
                subjects.append(Subject(f"user {name} {what}", name, password, False))
        for subject in subjects:
            deadline = time.monotonic() + RECOVERY_LIMIT_S
            while True:
                try:
                    subject.held = Connection(self.address(victim), subject.username,
                                              subject.password, token=subject.token)
                    break
                except ClientError:
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"broker {victim} never accepted the probe's "
                                           f"{subject.name.split()[0]}") from None
                    time.sleep(0.1)
            # The held session is served before the cut, so "not served" later means
            # something.
            if not self._served(subject.held, subject):
                raise RuntimeError(f"the probe's {subject.name.split()[0]} session is not "
                                   "served before the cut")
            for broker in self.cluster.broker_ids():
                while not self._accepted(broker, subject):
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"broker {broker} never accepted the probe's "
                                           f"{subject.name.split()[0]}")
                    time.sleep(0.1)
        return subjects

    @staticmethod
    def _served(conn: Connection, subject: Subject) -> bool:
        """One request on a held session: a token's (an admin token) lists ACLs, a user
        describes her own tokens; True if it was served."""
        if subject.token:
            return conn.call(ApiKey.DESCRIBE_ACLS, 1, ANY_ACL)["ErrorCode"] == 0
        return conn.call(ApiKey.DESCRIBE_DELEGATION_TOKEN, 3, {"Owners": None})["ErrorCode"] == 0

    def _accepted(self, broker: int, subject: Subject) -> bool:
        try:
            Connection(self.address(broker), subject.username, subject.password,
                       token=subject.token).close()
        except ClientError:
            return False
        return True

    def _revoke(self, subjects: list[Subject], acknowledged: dict[str, float], via: int,
                until: float, result: FaultResult) -> None:
        """Revoke one subject every REVOKE_EVERY_S through ``via`` (retried until
        acknowledged); record when each was acknowledged."""
        pending = list(subjects)
        self.rng.shuffle(pending)
        admin = None
        try:
            for subject in pending:
                if time.monotonic() > until - REVOKE_EVERY_S:
                    result.notes.append(f"{len(pending) - len(acknowledged)} revocations not "
                                        "sent: the cut ended first")
                    break
                started = time.monotonic()
                while subject.name not in acknowledged and time.monotonic() < until:
                    try:
                        if subject.token:
                            self._expire_probe_token(result, subject, via)
                        else:
                            if admin is None:
                                admin = self._admin_client(via)
                            if "deleted" in subject.name:
                                admin.delete_user_scram_credential(subject.username, MECHANISM)
                            else:
                                admin.upsert_user_scram_credential(
                                    subject.username, MECHANISM, secrets.token_urlsafe(12))
                        acknowledged[subject.name] = time.monotonic()
                    except Exception:  # noqa: BLE001 - retried until the cut ends
                        if admin is not None:
                            admin.close()
                            admin = None
                        time.sleep(0.2)
                time.sleep(max(0.0, started + REVOKE_EVERY_S - time.monotonic()))
        finally:
            if admin is not None:
                admin.close()

    def _expire_probe_token(self, result: FaultResult, subject: Subject, via: int) -> None:
        token = result.ledger.tokens[subject.username]
        conn = Connection(self.address(via), *self.admin)
        try:
            result.ledger.sent("expire")
            result.ledger.expire_sending(token)
            answer = conn.call(ApiKey.EXPIRE_DELEGATION_TOKEN, 2,
                               {"Hmac": subject.token_hmac, "ExpiryTimePeriodMs": -1})
        finally:
            conn.close()
        if answer["ErrorCode"]:
            raise ClientError(f"expire answered {answer['ErrorCode']}")
        result.ledger.answered("expire", "NONE", 0.0)
        result.ledger.expired(token)

    def _probe_logins(self, subjects: list[Subject], acknowledged: dict[str, float],
                      attempts: list[Attempt], stop: threading.Event, seed: int) -> None:
        pick = random.Random(seed)
        brokers = self.cluster.broker_ids()
        while not stop.is_set():
            revoked = [s for s in subjects if s.name in acknowledged]
            if not revoked:
                stop.wait(0.05)
                continue
            subject = pick.choice(revoked)
            broker = pick.choice(brokers)
            started = time.monotonic()
            accepted = self._accepted(broker, subject)
            attempts.append(Attempt(subject.name, broker, started, accepted))

    def _probe_sessions(self, subjects: list[Subject], acknowledged: dict[str, float],
                        attempts: list[Attempt], stop: threading.Event, victim: int) -> None:
        """A request every 0.5 s on each session opened before the cut whose credential
        has been revoked since; served is an acceptance."""
        while not stop.wait(0.5):
            for subject in subjects:
                if subject.held is None or subject.name not in acknowledged:
                    continue
                started = time.monotonic()
                try:
                    served = self._served(subject.held, subject)
                except ClientError:
                    subject.held.close()
                    subject.held = None  # closed by the broker: not served, now or later
                    served = False
                attempts.append(Attempt(subject.name, victim, started, served))

    # -- the other probes -----------------------------------------------------------------

    def _victim_writer(self, victim: int, result: FaultResult, outcomes: Counter,
                       stop: threading.Event) -> None:
        """Creates through the broker the fault centres on, one at a time, from the cut
        until after the heal: the load's clients keep their brokers, so without this
        none might write through it."""
        conn: Connection | None = None
        while not stop.is_set():
            if conn is None:
                try:
                    conn = Connection(self.address(victim), *self.admin)
                except ClientError:
                    outcomes["login failed"] += 1
                    stop.wait(0.2)
                    continue
            try:
                answer = self._write(-2, victim, conn, result.ledger, "create", ApiKey.CREATE_DELEGATION_TOKEN, 3,
                                     {"Renewers": [], "MaxLifetimeMs": -1})
            except ClientError:
                outcomes["no answer"] += 1
                conn.close()
                conn = None
                continue
            error = error_name(answer["ErrorCode"])
            outcomes[error] += 1
            if error == "NONE":
                result.ledger.created(answer["TokenId"], answer["Hmac"], answer["MaxTimestampMs"])
            stop.wait(0.1)
        if conn is not None:
            conn.close()

    def _metrics(self, broker: int, timeout_s: float = 0.5) -> str | None:
        url = f"http://{self.cluster.broker_info(broker)['metrics']}/metrics"
        try:
            with urllib.request.urlopen(url, timeout=timeout_s) as answer:
                return answer.read().decode()
        except OSError:
            return None

    def _late_answers(self, broker: int) -> int:
        """Writes this broker answered later than BROKER_ANSWER_S since it started, from
        its own latency histogram (+Inf minus the 15 s bucket)."""
        text = self._metrics(broker, timeout_s=5.0)
        if text is None:
            raise RuntimeError(f"broker {broker}'s metrics cannot be read")
        total = within = 0.0
        for line in text.splitlines():
            if not line.startswith("tokensvc_request_latency_seconds_bucket{"):
                continue
            labels, value = line.rsplit(" ", 1)
            if not any(f'api="{api}"' in labels for api in WRITE_APIS):
                continue
            if 'le="+Inf"' in labels:
                total += float(value)
            elif f'le="{BROKER_ANSWER_S}"' in labels:
                within += float(value)
        return int(total - within)

    def _gauge(self, broker: int) -> int | None:
        text = self._metrics(broker)
        if text is None:
            return None
        for line in text.splitlines():
            if line.startswith("tokensvc_controller "):
                return int(float(line.split()[1]))
        return None

    def _watch_controllers(self, samples: list[ControllerSample], stop: threading.Event) -> None:
        began = time.monotonic()
        while not stop.wait(SAMPLE_S):
            gauges = {b: self._gauge(b) for b in self.cluster.broker_ids()}
            try:
                in_zookeeper = self.controller()
            except StoreError:
                continue  # this driver's own session is cut off: no sample this tick
            samples.append(ControllerSample(time.monotonic() - began, gauges, in_zookeeper))

    def _flap(self, host: str, longest_down: list[float]) -> None:
        pick = random.Random(self.rng.randrange(2**32))
        end = time.monotonic() + self.flap_s
        while time.monotonic() < end:
            down = min(pick.uniform(1.0, 3.0), max(0.0, end - time.monotonic()))
            self.net.set_link(host, up=False)
            time.sleep(down)
            self.net.set_link(host, up=True)
            longest_down[0] = max(longest_down[0], down)
            time.sleep(min(pick.uniform(1.0, 3.0), max(0.0, end - time.monotonic())))

    # -- judging --------------------------------------------------------------------------

    def _judge(self, result: FaultResult, kind: str, victim: int, attempts: list[Attempt],
               acknowledged: dict[str, float], samples: list[ControllerSample],
               longest_down: float, late: dict[int, int]) -> None:
        result.violations += late_acceptances(attempts, acknowledged, self.bound_s)
        accepted_late = latest_acceptance_s(attempts, acknowledged)
        result.notes.append(
            f"revocations: {len(acknowledged)} acknowledged, {len(attempts)} uses tried, "
            f"last accepted {_seconds(accepted_late)} after its revocation "
            f"(bound {self.bound_s:.1f}s)")
        if not acknowledged:
            result.violations.append(Violation("no revocation acknowledged", kind,
                                               "the probe checked nothing"))
        result.violations += controller_overlaps(samples)
        if kind == "controller-zk-cut" and samples:
            result.notes.append(_handover(samples, victim))
        gauges = [s for s in samples if any(v is not None for v in s.gauges.values())]
        result.notes.append(f"controllers: {len(samples)} samples, {len(gauges)} with metrics, "
                            f"named in ZooKeeper: {_runs(s.in_zookeeper for s in samples)}")
        limit_s = REQUEST_TIMEOUT_MS / 1000.0 + ANSWER_SLACK_S
        ledger = result.ledger
        with self._per_broker_lock:
            slowest = dict(self._slowest)
            unanswered = Counter(self._unanswered)
        # On the flapping link, TCP's retransmission back-off (each timeout doubles, and a
        # retransmission that falls in a down spell waits for the next) delays an answer
        # the broker sent in time, or the request itself, past any fixed bound, up to the
        # clients' 40 s timeout. That broker is judged by its own latency histogram: no
        # write answered later than BROKER_ANSWER_S; its clients' delays are reported.
        on_link = victim if kind == "flap" else None
        for (broker, api), ms in sorted(slowest.items()):
            if broker != on_link and ms > limit_s * 1000:
                result.violations.append(Violation("answer too slow", api,
                                                   f"broker {broker}: {ms:.0f} ms > {limit_s:.1f}s"))
        for (broker, api), count in sorted(unanswered.items()):
            if broker != on_link:
                result.violations.append(Violation("no answer", api,
                                                   f"broker {broker}: {count} unanswered"))
        for broker, count in sorted(late.items()):
            if count:
                result.violations.append(Violation(
                    "broker answered too late", f"broker {broker}",
                    f"{count} writes answered after {BROKER_ANSWER_S:.0f}s (its histogram)"))
        if on_link is not None:
            link_ms = max((ms for (b, _), ms in slowest.items() if b == on_link), default=0.0)
            link_lost = sum(n for (b, _), n in unanswered.items() if b == on_link)
            result.notes.append(
                f"through the flapping link (broker {on_link}): slowest answer {link_ms:.0f} ms, "
                f"{link_lost} without an answer in 40 s (TCP back-off); broker-side: "
                f"{late.get(on_link, 0)} writes answered after {BROKER_ANSWER_S:.0f}s")
        for (api, error), count in sorted(ledger.errors.items()):
            if error not in RETRIABLE:
                result.violations.append(Violation("non-retriable error", api,
                                                   f"{error} x{count}"))
        slowest = max(ledger.slowest_ms.values(), default=0.0)
        result.notes.append(f"slowest answer {slowest:.0f} ms (limit {limit_s:.1f}s); "
                            f"{ledger.writes(ledger.unknown)} writes of unknown outcome")


def _handover(samples: list[ControllerSample], old: int) -> str:
    """When the cut controller stopped acting and another broker started (sample times)."""
    acting = [s for s in samples if s.gauges.get(old) == 1]
    last_old = acting[-1].at if acting else None
    new = next(((s.at, b) for s in samples if s.at > (last_old or 0)
                for b, v in s.gauges.items() if v == 1 and b != old), None)
    if last_old is None or new is None:
        return "controller handover: not seen"
    return (f"controller handover: broker {old} acted last at {last_old:.2f}s, broker "
            f"{new[1]} first at {new[0]:.2f}s ({new[0] - last_old:.2f}s with none)")


def _seconds(value: float | None) -> str:
    return "never" if value is None else f"{value:.2f}s"


def _runs(values) -> str:
    """``1,1,None,2`` as ``1 -> None -> 2``."""
    out: list[str] = []
    for value in values:
        text = str(value)
        if not out or out[-1] != text:
            out.append(text)
    return " -> ".join(out) or "-"


def run(faults: list[str], *, hold_s: float = 20.0, flap_s: float = 60.0, clients: int = 4,
        seed: int = 1, session_timeout_ms: int = 6000, subnet: str | None = None,
        directory: Path | None = None, prefix: str = DEFAULT_PREFIX) -> list[FaultResult]:
    """Build the network, start the cluster on it, run every fault, print the table;
    remove everything it made on the way out. Without ``subnet``, the first free /24 from
    10.213.7.0/24 up (a network left by a killed run keeps its own)."""
    Network.require_root()
    plan = NetPlan(ZK_HOSTS + BROKER_HOSTS, subnet=subnet or free_subnet(routes()),
                   prefix=prefix)
    network = Network(plan)
    scratch = directory or Path(tempfile.mkdtemp(prefix="tokensvc-chaos-net-"))
    results: list[FaultResult] = []
    chaos: NetChaos | None = None
    try:
        network.up()
        chaos = NetChaos(scratch, network, clients=clients, hold_s=hold_s, flap_s=flap_s,
                         seed=seed, session_timeout_ms=session_timeout_ms)
        started = time.monotonic()
        chaos.start()
        print(f"chaos --net: 3 ZooKeeper nodes, 3 brokers on {plan.subnet} (one network "
              f"namespace each) up in {time.monotonic() - started:.1f}s in {scratch}",
              flush=True)
        for kind in faults:
            began = time.monotonic()
            result = chaos.run_net_fault(kind)
            results.append(result)
            print(f"  {result.name}: {len(result.violations)} violations, "
                  f"{time.monotonic() - began:.0f}s", flush=True)
    finally:
        if chaos is not None:
            chaos.close()
        network.close()
        if directory is None:
            shutil.rmtree(scratch, ignore_errors=True)
    print()
    print(table(results), flush=True)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m faults.chaos_net",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--faults", default=",".join(NET_FAULTS),
                        help=f"comma-separated, in order (default: all of {','.join(NET_FAULTS)})")
    parser.add_argument("--repeat", type=int, default=1,
                        help="run the list N times on the same cluster (default 1)")
    parser.add_argument("--seconds", type=float, default=20.0,
                        help="how long each cut lasts (default 20)")
    parser.add_argument("--flap-seconds", type=float, default=60.0,
                        help="how long the link flaps (default 60)")
    parser.add_argument("--clients", type=int, default=4, help="writer threads (default 4)")
    parser.add_argument("--session-timeout-ms", type=int, default=6000,
                        help="brokers' zookeeper.session.timeout.ms (default 6000)")
    parser.add_argument("--subnet", default=None, help="the /24 for the hosts (default: "
                        "the first of 10.213.7.0/24, 10.213.8.0/24, ... the machine does "
                        "not route; one given here is refused if the machine routes it)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--dir", type=Path, default=None,
                        help="keep the cluster's files and logs here")
    args = parser.parse_args(argv)
    faults = parse_faults(parser, args.faults, NET_FAULTS)
    if min(args.seconds, args.flap_seconds) <= 0 or min(args.clients, args.repeat) < 1 \
            or args.session_timeout_ms < 1000:
        parser.error("--seconds, --flap-seconds, --clients and --repeat must be positive, "
                     "--session-timeout-ms at least 1000")
    faults = faults * args.repeat
    try:
        Network.require_root()
    except NetError as exc:
        print(f"chaos --net: {exc}", file=sys.stderr)
        return 2
    # SIGTERM unwinds like Ctrl-C, so the finally blocks remove what was created.
    signal.signal(signal.SIGTERM, interrupt)
    logging.basicConfig(level=logging.WARNING)
    for noisy in ("kazoo", "zk.client", "tokensvc.admin"):
        logging.getLogger(noisy).setLevel(logging.ERROR)
    try:
        results = run(faults, hold_s=args.seconds, flap_s=args.flap_seconds,
                      clients=args.clients, seed=args.seed,
                      session_timeout_ms=args.session_timeout_ms, subnet=args.subnet,
                      directory=args.dir)
    except NetError as exc:
        print(f"chaos --net: {exc}", file=sys.stderr)
        return 2
    bad = any(r.violations or r.recovery_s is None for r in results)
    print("RESULT: " + ("FAIL" if bad else "OK"))
    return 1 if bad else 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
    sys.exit(130)
