"""Synthetic audit logs with exact ground truth, for testing and sizing the report job.

This module owns ``tokensvc audit generate``: a seeded simulation of a small
cluster (token creation, renewal, expiry and the hourly sweep on the controller,
token and user logins from each token's usual hosts, forwarding, ACL and
credential changes, session re-authentication) that writes events of the
:mod:`tokensvc.audit.events` schema the way brokers do, one file series per
broker, plus:

* ``tokens.jsonl``: a token snapshot (the format of ``tokensvc tokens export``,
  written by :mod:`tokensvc.audit.token_export`),

Two thirds of the tokens carry a ``job`` label (:data:`GENERATED_JOBS`, chosen from the
token id, so the random sequence and every other value are what they were before labels
existed): their create event and their snapshot line have ``labels``, and the ground
truth has the labels report per job (``labels``).
* ``ground_truth.json``: the exact reports expected, computed while generating
  with :class:`tokensvc.audit.rules.ReferenceAudit`, and the anomalies that were
  planted on purpose (each rule has at least one once ``events`` is large enough).

Speed: lines are formatted from templates rather than ``json.dumps`` (every value
is generated here and needs no escaping), and large runs are split into shards,
populations that share no user, host or token, simulated in parallel processes
and merged; the ground truth of the whole is the sum of the shards'. Shards are
fixed by the event count alone, so a seed gives the same files on any machine.
Programs that call :func:`generate` must guard their entry point with
``if __name__ == "__main__"`` (worker processes are spawned).

It must not import pyspark and does not touch the network.
"""

from __future__ import annotations

import base64
import heapq
import json
import multiprocessing
import os
import random
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO, Any

from tokensvc.audit.rules import (
    DEFAULT_SETTINGS,
    ReferenceAudit,
    ReferenceResult,
    RuleSettings,
    sort_findings,
)
from tokensvc.audit.token_export import ExportedToken, write_tokens
from tokensvc.audit.writer import audit_file_name

DEFAULT_START_MS = 1_704_067_200_000  # 2024-01-01T00:00:00Z
SPAN_MS = 2 * 86_400_000  # the simulated time the events are spread over
RENEW_PERIOD_MS = 6 * 3_600_000
MAX_LIFETIME_MS = 24 * 3_600_000
SWEEP_INTERVAL_MS = 3_600_000
CONTROLLER_ID = 1
SNAPSHOT_FILE = "tokens.jsonl"
GROUND_TRUTH_FILE = "ground_truth.json"

_USERS = 50
SHARD_EVENTS = 500_000  # events per independent population
_HOSTS = 400
_BUFFER_LINES = 8192

# The jobs the generated tokens belong to (a token whose id picks None has no labels).
GENERATED_JOBS = ("etl-nightly", "ingest", None)

_COMMON = '{"schema":1,"ts":%d,"broker_id":%d,"event_id":"%032x","type":'
_AUTH = (_COMMON + '"authentication","outcome":"%s","mechanism":"SCRAM-SHA-256","kind":"%s",'
         '"implicit":false,"username":"%s","token_id":%s,"principal":%s,"client_host":"%s","client_port":%d,'
         '"listener":"SASL_PLAINTEXT","reason":%s,"client_id":null}\n')
_TOKEN = (_COMMON + '"token","action":"%s","outcome":"%s","error_code":%d,"error":"%s",'
          '"requester":"%s","token_authenticated":%s,"owner":%s,"token_id":%s,"renewers":%s,'
          '"expiry_ms":%s,"max_ms":%s,"count":%s,"client_host":"%s","listener":"SASL_PLAINTEXT",'
          '"forwarded":%s,"client_id":null,"reason":null,"labels":%s,"selector":null}\n')
_FORWARD = (_COMMON + '"forward","api":"%s","client_id":"%s","principal":"%s","client_host":"%s",'
            '"controller_id":%d,"outcome":"success","error_code":0,"attempts":%d,'
            '"latency_ms":%.1f}\n')
_SWEEP = (_COMMON + '"sweep","token_id":"%s","owner":"%s","expiry_ms":%d,"max_ms":%d,'
          '"reason":"%s"}\n')
_ACL = (_COMMON + '"acl","action":"%s","outcome":"success","error_code":0,"requester":"User:admin",'
        '"resource_type":"TOPIC","resource_name":"topic-%d","pattern_type":"LITERAL",'
        '"acl_principal":"%s","host":"*","operation":"READ","permission":"ALLOW"}\n')
_CREDENTIAL = (_COMMON + '"credential","action":"upsert","outcome":"success","error_code":0,'
               '"requester":"User:admin","user":"%s","mechanism":"SCRAM-SHA-256",'
               '"iterations":8192}\n')
_LOGIN_TAIL = '","client_port":%d,"listener":"SASL_PLAINTEXT","reason":null,"client_id":null}\n'
_SESSION = (_COMMON + '"session","action":"reauthenticated","principal":"%s","token_id":%s,'
            '"client_host":"%s","listener":"SASL_PLAINTEXT","reason":null}\n')

_UUID4_CLEAR = ~((0xF << 76) | (0x3 << 62))
_UUID4_SET = (0x4 << 76) | (0x2 << 62)


def _q(value: str | None) -> str:
    return "null" if value is None else f'"{value}"'


@dataclass
class GeneratedDataset:
    """What :func:`generate` wrote and how fast."""

    directory: str
    events: int
    files: list[str]
    snapshot: str
    ground_truth: str
    tokens: int
    findings: int
    elapsed_s: float

    @property
    def events_per_s(self) -> float:
        return self.events / self.elapsed_s if self.elapsed_s > 0 else float("inf")


def generated_labels(token_id: str) -> dict[str, str] | None:
    """The labels a generated token carries, from its id alone."""
    job = GENERATED_JOBS[ord(token_id[0]) % len(GENERATED_JOBS)]
    return None if job is None else {"job": job}


class _Token:
    __slots__ = ("expiry", "hosts", "idle", "issue", "labels", "login_line", "max", "owner",
                 "renewers", "requester", "token_id")

    def __init__(self, token_id: str, owner: str, requester: str, renewers: list[str],
                 issue: int, hosts: list[str], idle: bool) -> None:
        self.token_id = token_id
        self.owner = owner
        self.requester = requester
        self.renewers = renewers
        self.issue = issue
        self.max = issue + MAX_LIFETIME_MS
        self.expiry = min(self.max, issue + RENEW_PERIOD_MS)
        self.hosts = hosts
        self.idle = idle
        self.login_line: str | None = None
        self.labels = generated_labels(token_id)

    def exported(self) -> ExportedToken:
        return ExportedToken(self.token_id, self.owner, self.requester, tuple(self.renewers),
                             self.issue, self.expiry, self.max, self.labels or {})


class _BrokerFiles:
    """One broker's file series: buffered lines, a new file every ``per_file`` lines.

    The simulation appends to ``buffer`` itself (hot path); files open lazily."""

    def __init__(self, directory: Path, broker_id: int, per_file: int, shard: int,
                 shards: int) -> None:
        self.directory = directory
        self.broker_id = broker_id
        self.per_file = per_file
        self.shard = shard
        self.shards = shards
        self.buffer: list[str] = []
        self.paths: list[str] = []
        self.in_file = per_file  # the first line opens a file
        self._file: IO[str] | None = None

    def roll(self, ts: int) -> None:
        self.close()
        n = self.shard + self.shards * len(self.paths)  # unique across shards
        path = self.directory / audit_file_name(self.broker_id, ts, n)
        self._file = open(path, "w", encoding="ascii")  # noqa: SIM115 (closed in close)
        self.paths.append(str(path))
        self.in_file = 0

    def drain(self) -> None:
        assert self._file is not None
        self._file.write("".join(self.buffer))
        self.buffer.clear()

    def close(self) -> None:
        if self._file is not None:
            self.drain()
            self._file.close()
            self._file = None


class _Simulation:
    """One shard: its own users, hosts and tokens, over the whole simulated span."""

    def __init__(self, out: Path, events: int, seed: int, shard: int, shards: int, brokers: int,
                 settings: RuleSettings, start_ms: int, per_file: int) -> None:
        self.rng = random.Random(f"tokensvc-audit:{seed}:{shard}")
        self._random = self.rng.random
        self._bits = self.rng.getrandbits
        self.shard = shard
        self.limit = events
        self.count = 0
        self.brokers = brokers
        self.now = start_ms
        self.mean_gap = max(1, SPAN_MS // max(events, 1))
        self.truth = ReferenceAudit(settings)
        self.settings = settings
        self.files = [_BrokerFiles(out, b, per_file, shard, shards) for b in range(1, brokers + 1)]
        self.tokens: dict[str, _Token] = {}
        self.live: list[_Token] = []
        self.live_index: dict[str, int] = {}
        self.expiries: list[tuple[int, str]] = []
        self.swept: deque[_Token] = deque(maxlen=16)
        self.target = min(20_000, max(8, events // 500))
        # Shards never share a user, host or token, so their reports simply add up.
        self.hosts = [f"10.{shard}.{i // 50}.{i % 50 + 1}" for i in range(_HOSTS)]
        self.users = [f"User:user-{shard * _USERS + i}" for i in range(_USERS)]
        self.user_names = {u: u.split(":", 1)[1] for u in self.users}
        self.planted: dict[str, list[Any]] = {}
        self.next_sweep = start_ms - start_ms % SWEEP_INTERVAL_MS + SWEEP_INTERVAL_MS
        self.stale: list[_Token] = []
        self.first_ts: int | None = None
        # Token id -> labels of every token created with labels (or listed in the snapshot).
        self.labelled: dict[str, dict[str, str]] = {}

    # -- primitives -------------------------------------------------------------

    def _event_id(self) -> int:
        return (self._bits(128) & _UUID4_CLEAR) | _UUID4_SET

    def _below(self, n: int) -> int:
        """Uniform in [0, n): ``random()`` scaled, much cheaper than ``randrange``."""
        return int(self._random() * n)

    def _pick(self, seq: list[str]) -> str:
        return seq[int(self._random() * len(seq))]

    def _write(self, broker_id: int, line: str) -> bool:
        if self.first_ts is None:
            self.first_ts = self.now
        files = self.files[broker_id - 1]
        if files.in_file >= files.per_file:
            files.roll(self.now)
        files.buffer.append(line)
        files.in_file += 1
        if len(files.buffer) >= _BUFFER_LINES:
            files.drain()
        self.count += 1
        return self.count < self.limit

    def _broker(self) -> int:
        return 1 + self._below(self.brokers)

    def _new_token_id(self) -> str:
        raw = self.rng.getrandbits(128).to_bytes(16, "big")
        return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()

    def _tick(self, gap: int | None = None) -> None:
        self.now += gap if gap is not None else 1 + self._below(2 * self.mean_gap)

    def _add_live(self, token: _Token) -> None:
        self.tokens[token.token_id] = token
        self.live_index[token.token_id] = len(self.live)
        self.live.append(token)
        heapq.heappush(self.expiries, (token.expiry, token.token_id))

    def _remove_live(self, token_id: str) -> _Token:
        i = self.live_index.pop(token_id)
        last = self.live.pop()
        if last.token_id != token_id:
            self.live[i] = last
            self.live_index[last.token_id] = i
        return self.tokens.pop(token_id)

    def _pick_live(self) -> _Token | None:
        if not self.live:
            return None
        return self.live[int(self._random() * len(self.live))]

    # -- events -----------------------------------------------------------------

    def login(self, token: _Token | None, user: str | None, ok: bool, host: str,
              reason: str | None = None, token_id: str | None = None) -> bool:
        """One authentication event: a token login when ``token`` or ``token_id``
        is given (``token_id`` alone: the id is not a live token), else ``user``'s."""
        broker = 1 + int(self._random() * self.brokers)
        now = self.now
        if token is not None or token_id is not None:
            tid = token.token_id if token is not None else token_id
            principal = token.owner if ok and token is not None else None
            kind, username, tid_json = "token", tid, f'"{tid}"'
        else:
            assert user is not None
            tid, kind, username, tid_json = None, "user", self.user_names[user], "null"
            principal = user if ok else None
        self.truth.login(now, broker, ok, kind, username, tid, principal, host, reason)
        return self._write(broker, _AUTH % (
            now, broker, (self._bits(128) & _UUID4_CLEAR) | _UUID4_SET,
            "success" if ok else "failure", kind, username, tid_json,
            "null" if principal is None else f'"{principal}"', host,
            30000 + int(self._random() * 31000), "null" if reason is None else f'"{reason}"'))

    def token_event(self, action: str, requester: str, *, error: tuple[int, str] = (0, "NONE"),
                    token: _Token | None = None, owner: str | None = None,
                    token_authenticated: bool = False, count: int | None = None,
                    host: str | None = None) -> bool:
        """A token request, forwarded to the controller when a write lands elsewhere."""
        ok = error[0] == 0
        host = host or self._pick(self.hosts)
        broker = self._broker()
        forwarded = action != "describe" and broker != CONTROLLER_ID and ok
        if forwarded:
            api = {"create": "CreateDelegationToken", "renew": "RenewDelegationToken",
                   "expire": "ExpireDelegationToken"}[action]
            self.truth.other(self.now)
            if not self._write(broker, _FORWARD % (
                    self.now, broker, self._event_id(), api, f"client-{self._below(99)}",
                    requester, host, CONTROLLER_ID, 1, self.rng.uniform(0.5, 9.0))):
                return False
            broker = CONTROLLER_ID
        owner = owner if token is None else token.owner
        token_id = token.token_id if token is not None else None
        renewers = "null"
        expiry = max_ms = "null"
        labels = "null"
        if token is not None and ok and action != "describe":
            expiry, max_ms = str(token.expiry), str(token.max)
            if action == "create":
                renewers = json.dumps(token.renewers)
                if token.labels:
                    labels = json.dumps(token.labels, separators=(",", ":"))
        self.truth.token_request(self.now, action, ok, requester, token_authenticated, owner,
                                 token_id, host)
        return self._write(broker, _TOKEN % (
            self.now, broker, self._event_id(), action, "success" if ok else "failure",
            error[0], error[1], requester, "true" if token_authenticated else "false", _q(owner),
            _q(token_id), renewers, expiry, max_ms, "null" if count is None else count, host,
            "true" if forwarded else "false", labels))

    def create(self, owner: str | None = None, requester: str | None = None,
               idle: bool | None = None) -> bool:
        owner = owner or self._pick(self.users)
        renewers = [self._pick(self.users)] if self.rng.random() < 0.3 else []
        hosts = self.rng.sample(self.hosts, self.rng.randint(1, 2))
        idle = self.rng.random() < 0.1 if idle is None else idle
        token = _Token(self._new_token_id(), owner, requester or owner, renewers, self.now,
                       hosts, idle)
        self._add_live(token)
        if token.labels:
            self.labelled[token.token_id] = token.labels
        return self.token_event("create", token.requester, token=token, host=hosts[0])

    def renew(self) -> bool:
        token = self._pick_live()
        if token is None or token.idle or token.expiry < self.now:
            return self.describe()
        if self.rng.random() < 0.1:
            stranger = self._pick(self.users)
            if stranger != token.owner and stranger not in token.renewers:
                return self.token_event("renew", stranger, token=token,
                                        error=(63, "DELEGATION_TOKEN_OWNER_MISMATCH"))
        token.expiry = min(token.max, self.now + RENEW_PERIOD_MS)
        heapq.heappush(self.expiries, (token.expiry, token.token_id))
        return self.token_event("renew", token.owner, token=token, host=token.hosts[0])

    def expire(self) -> bool:
        token = self._pick_live()
        if token is None:
            return self.describe()
        self._remove_live(token.token_id)
        token.expiry = self.now
        return self.token_event("expire", token.owner, token=token, host=token.hosts[0])

    def describe(self) -> bool:
        user = self._pick(self.users)
        count = sum(1 for token in self.live[:32] if token.owner == user)
        return self.token_event("describe", user, count=count)

    def sweep(self) -> bool:
        """The controller's hourly expiry check: remove every token past its expiry."""
        while self.expiries and self.expiries[0][0] < self.now:
            expiry, token_id = heapq.heappop(self.expiries)
            token = self.tokens.get(token_id)
            if token is None or token.expiry != expiry:
                continue  # renewed or already removed since this entry was pushed
            self._remove_live(token_id)
            self.swept.append(token)
            reason = "max_lifetime" if token.expiry >= token.max else "expired"
            self.truth.sweep(self.now, token_id, token.owner)
            if not self._write(CONTROLLER_ID, _SWEEP % (
                    self.now, CONTROLLER_ID, self._event_id(), token_id, token.owner,
                    token.expiry, token.max, reason)):
                return False
        return True

    def reauthenticate(self) -> bool:
        token = self._pick_live()
        broker = self._broker()
        self.truth.other(self.now)
        if token is not None and not token.idle:
            principal, token_id, host = token.owner, f'"{token.token_id}"', token.hosts[0]
        else:
            principal, token_id, host = self._pick(self.users), "null", \
                self._pick(self.hosts)
        return self._write(broker, _SESSION % (self.now, broker, self._event_id(), principal,
                                               token_id, host))

    def token_login_ok(self, token: _Token) -> bool:
        """The most common event, kept on a short path: a token login that succeeds
        (the same line ``login`` would write, from pieces prepared per token)."""
        rnd = self._random
        broker = 1 + int(rnd() * self.brokers)
        now = self.now
        host = token.hosts[int(rnd() * len(token.hosts))]
        self.truth.token_login_ok(now, broker, token.token_id, token.owner, host)
        if token.login_line is None:
            token.login_line = (
                '"authentication","outcome":"success","mechanism":"SCRAM-SHA-256",'
                f'"kind":"token","implicit":false,"username":"{token.token_id}","token_id":"{token.token_id}",'
                f'"principal":"{token.owner}","client_host":"'
            )
        return self._write(broker, "".join((
            _COMMON % (now, broker, (self._bits(128) & _UUID4_CLEAR) | _UUID4_SET),
            token.login_line, host, _LOGIN_TAIL % (30000 + int(rnd() * 31000)),
        )))

    def background(self) -> bool:
        rng = self.rng
        r = rng.random()
        if r < 0.62:
            live = self.live
            if live:
                token = live[int(self._random() * len(live))]
                if not token.idle and token.expiry >= self.now:
                    return self.token_login_ok(token)
            return self.login(None, self._pick(self.users), True, self._pick(self.hosts))
        if r < 0.72:
            return self.login(None, self._pick(self.users), True, self._pick(self.hosts))
        if r < 0.75:
            token = self._pick_live()
            if token is not None and not token.idle:
                return self.login(token, None, False, self._pick(token.hosts), "bad_proof")
            return self.login(None, self._pick(self.users), False, self._pick(self.hosts),
                              "bad_proof")
        if r < 0.77:
            reason = "unknown_user" if rng.random() < 0.3 else "bad_proof"
            return self.login(None, self._pick(self.users), False, self._pick(self.hosts), reason)
        if r < 0.81:
            return self.reauthenticate()
        if r < 0.84:
            return self.describe()
        if r < 0.89:
            return self.renew()
        if r < 0.91 or len(self.live) < self.target:
            return self.create()
        if r < 0.915:
            return self.expire()
        self.truth.other(self.now)
        b = self._broker()
        if r < 0.96:
            action = "create" if rng.random() < 0.7 else "delete"
            return self._write(b, _ACL % (self.now, b, self._event_id(), action,
                                          self._below(500), self._pick(self.users)))
        if b != CONTROLLER_ID and r < 0.98:
            return self._write(b, _FORWARD % (
                self.now, b, self._event_id(), "AlterUserScramCredentials", "admin-cli",
                "User:admin", self._pick(self.hosts), CONTROLLER_ID, rng.randint(1, 2),
                rng.uniform(0.5, 20.0)))
        return self._write(b, _CREDENTIAL % (self.now, b, self._event_id(),
                                             self.user_names[self._pick(self.users)]))

    # -- planted anomalies ------------------------------------------------------

    def _plant(self, rule: str, what: str, steps: list[Callable[[], bool]]) -> bool:
        """Run ``steps`` (each writes one event); record the anomaly if all were written."""
        for i, step in enumerate(steps):
            going = step()
            if not going and i < len(steps) - 1:
                return False
        self.planted.setdefault(rule, []).append(what)
        return going

    def _at(self, gap: int, step: Callable[[], bool]) -> Callable[[], bool]:
        def run() -> bool:
            self._tick(gap)
            return step()
        return run

    def plant_token_burst(self) -> bool:
        token = self._pick_live()
        if token is None:
            return True
        return self._plant("failed_login_burst_token", token.token_id, [
            self._at(1000, lambda: self.login(token, None, False, self._pick(self.hosts),
                                              "bad_proof"))
            for _ in range(self.settings.burst_threshold + 2)
        ])

    def plant_host_burst(self) -> bool:
        host = f"203.0.113.{self.shard + 1}"
        return self._plant("failed_login_burst_host", host, [
            self._at(500, lambda: self.login(None, self._pick(self.users), False, host,
                                             "unknown_user"))
            for _ in range(self.settings.burst_threshold + 5)
        ])

    def plant_unknown_token(self) -> bool:
        token_id = self._new_token_id()
        host = f"198.51.100.{self.shard + 1}"
        return self._plant("unknown_token", token_id, [
            self._at(5000, lambda: self.login(None, None, False, host, "unknown_token", token_id))
            for _ in range(3)
        ])

    def plant_expired_use(self) -> bool:
        token = self.swept[-1] if self.swept else self._pick_live()
        if token is None:
            return True
        return self._plant("expired_token_use", token.token_id, [
            self._at(2000, lambda: self.login(None, None, False, token.hosts[0], "expired_token",
                                              token.token_id))
            for _ in range(2)
        ])

    def plant_many_hosts(self) -> bool:
        token = self._pick_live()
        if token is None:
            return True
        if token.idle or token.expiry < self.now:
            token.idle = False
            token.expiry = min(token.max, self.now + RENEW_PERIOD_MS)
            heapq.heappush(self.expiries, (token.expiry, token.token_id))
        hosts = [f"172.16.{self.shard}.{k + 1}" for k in range(self.settings.host_threshold + 3)]
        return self._plant("too_many_hosts", token.token_id, [
            self._at(3000, lambda h=host: self.login(token, None, True, h)) for host in hosts
        ])

    def plant_token_session_request(self) -> bool:
        user = self._pick(self.users)
        host = f"10.{self.shard}.250.9"
        refused = (64, "DELEGATION_TOKEN_REQUEST_NOT_ALLOWED")
        return self._plant("token_session_token_request", user, [
            self._at(1, lambda: self.token_event("create", user, owner=user, host=host,
                                                 token_authenticated=True, error=refused)),
            self._at(1, lambda: self.token_event("describe", user, count=0, host=host,
                                                 token_authenticated=True, error=refused)),
        ])

    def plant_other_owner(self) -> bool:
        owner = f"User:svc-{self.shard}-{self._below(100)}"
        return self._plant("created_for_other_owner", owner, [
            self._at(1, lambda: self.create(owner=owner, requester="User:admin", idle=False)),
        ])

    # -- the run ----------------------------------------------------------------

    def run(self) -> None:
        for _ in range(max(1, self.target // 2)):
            owner = self._pick(self.users)
            self._add_live(_Token(
                self._new_token_id(), owner, owner, [],
                self.now - self._below(RENEW_PERIOD_MS),
                self.rng.sample(self.hosts, 1 + self._below(2)), self._random() < 0.1,
            ))
        if self.shard == 0:
            for k in range(2):
                stale = _Token(self._new_token_id(), f"User:legacy-{k}", f"User:legacy-{k}", [],
                               self.now - 30 * 3_600_000, [self.hosts[0]], True)
                self.stale.append(stale)
                self.planted.setdefault("unused_before_expiry", []).append(stale.token_id)
        plants = [
            (int(self.limit * frac), fn) for frac, fn in (
                (0.75, self.plant_other_owner), (0.65, self.plant_token_session_request),
                (0.55, self.plant_many_hosts), (0.45, self.plant_expired_use),
                (0.35, self.plant_unknown_token), (0.25, self.plant_host_burst),
                (0.15, self.plant_token_burst),
            )
        ]
        going = self.limit > 0
        rnd, span = self._random, 2 * self.mean_gap
        while going:
            self.now += 1 + int(rnd() * span)
            if self.now >= self.next_sweep:
                self.next_sweep += SWEEP_INTERVAL_MS
                if not self.sweep():
                    break
            if plants and self.count >= plants[-1][0]:
                going = plants.pop()[1]()
            else:
                going = self.background()
        for files in self.files:
            files.close()

    def snapshot_tokens(self) -> list[ExportedToken]:
        live = [token.exported() for token in self.live]
        return [t.exported() for t in self.stale] + sorted(live, key=lambda t: t.token_id)


@dataclass
class _ShardOutput:
    truth: ReferenceAudit
    snapshot: list[ExportedToken]
    planted: dict[str, list[Any]]
    count: int
    first_ts: int | None
    paths: list[str]
    labels: dict[str, dict[str, str]]


def _run_shard(args: tuple[str, int, int, int, int, int, RuleSettings, int, int]) -> _ShardOutput:
    out, events, seed, shard, shards, brokers, settings, start_ms, per_file = args
    sim = _Simulation(Path(out), events, seed, shard, shards, brokers, settings, start_ms,
                      per_file)
    sim.run()
    snapshot = sim.snapshot_tokens()
    labelled = {**sim.labelled, **{t.token_id: dict(t.labels) for t in snapshot if t.labels}}
    return _ShardOutput(sim.truth, snapshot, sim.planted, sim.count, sim.first_ts,
                        [p for f in sim.files for p in f.paths], labelled)


def shard_count(events: int, shard_events: int = SHARD_EVENTS) -> int:
    """How many independent populations ``events`` are split into. It depends on the
    arguments only, so the output is the same on any machine."""
    return max(1, min(16, events // shard_events))


def generate(
    out: str | Path,
    events: int,
    *,
    seed: int = 1,
    brokers: int = 3,
    settings: RuleSettings = DEFAULT_SETTINGS,
    start_ms: int = DEFAULT_START_MS,
    events_per_file: int = 1_000_000,
    workers: int | None = None,
    shard_events: int = SHARD_EVENTS,
) -> GeneratedDataset:
    """Write ``events`` synthetic events under ``out`` with their exact ground truth.

    Events are split into ``events // shard_events`` (1..16) shards: populations
    that share no user, host or token, simulated independently and in parallel. The
    same arguments give the same files whatever ``workers`` is (default: one process
    per CPU, at most one per shard). ``settings`` are the rule thresholds the ground
    truth's findings are computed with.
    """
    if events < 0 or brokers < 1 or events_per_file < 1 or shard_events < 1:
        raise ValueError("events must be >= 0; brokers, events_per_file, shard_events >= 1")
    directory = Path(out)
    directory.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    shards = shard_count(events, shard_events)
    jobs = [
        (str(directory), events // shards + (1 if k < events % shards else 0), seed, k, shards,
         brokers, settings, start_ms, events_per_file)
        for k in range(shards)
    ]
    processes = min(shards, workers or os.cpu_count() or 1)
    if processes > 1:
        with multiprocessing.get_context("spawn").Pool(processes) as pool:
            outputs = pool.map(_run_shard, jobs)
    else:
        outputs = [_run_shard(job) for job in jobs]

    count = sum(o.count for o in outputs)
    last_ts = max((o.truth.last_ts for o in outputs if o.truth.last_ts is not None), default=None)
    snapshot = [token for o in outputs for token in o.snapshot]
    labelled = {t: labels for o in outputs for t, labels in o.labels.items()}
    results = [o.truth.result([t.as_record() for t in o.snapshot], as_of_ms=last_ts)
               for o in outputs]
    result = _merge(results, last_ts)
    snapshot_path = directory / SNAPSHOT_FILE
    with open(snapshot_path, "w", encoding="ascii") as fh:
        write_tokens(snapshot, fh)
    planted: dict[str, list[Any]] = {}
    for o in outputs:
        for rule, what in o.planted.items():
            planted.setdefault(rule, []).extend(what)
    truth = {
        "events": count,
        "seed": seed,
        "brokers": brokers,
        "shards": shards,
        "settings": asdict(settings),
        "as_of_ms": result.as_of_ms,
        "first_ts": min((o.first_ts for o in outputs if o.first_ts is not None), default=None),
        "last_ts": last_ts,
        "token_usage": result.token_usage,
        "owner_usage": result.owner_usage,
        "lifecycle": {str(hour): row for hour, row in sorted(result.lifecycle.items())},
        "logins_hourly": {str(hour): row for hour, row in sorted(result.logins_hourly.items())},
        "findings": [f.as_dict() for f in result.findings],
        "findings_by_rule": dict(Counter(f.rule for f in result.findings)),
        "labels": _labels_truth(result, labelled),
        "planted": planted,
    }
    truth_path = directory / GROUND_TRUTH_FILE
    truth_path.write_text(json.dumps(truth, separators=(",", ":")), encoding="utf-8")
    return GeneratedDataset(
        directory=str(directory),
        events=count,
        files=sorted(p for o in outputs for p in o.paths),
        snapshot=str(snapshot_path),
        ground_truth=str(truth_path),
        tokens=len(result.token_usage),
        findings=len(result.findings),
        elapsed_s=time.perf_counter() - started,
    )


def _labels_truth(result: ReferenceResult, labelled: dict[str, dict[str, str]]
                  ) -> dict[str, dict[str, dict[str, int]]]:
    """The labels report expected per job: tokens, logins and failures of the tokens
    whose labels are known (created in the log, or in the snapshot) and that the token
    report has (a token with no event in range is in neither)."""
    jobs: dict[str, dict[str, int]] = {}
    for token_id, labels in labelled.items():
        usage = result.token_usage.get(token_id)
        if usage is None or "job" not in labels:
            continue
        row = jobs.setdefault(labels["job"], {"tokens": 0, "logins_ok": 0, "logins_failed": 0})
        row["tokens"] += 1
        row["logins_ok"] += usage["logins_ok"]
        row["logins_failed"] += usage["logins_failed"]
    return {"job": dict(sorted(jobs.items()))}


def _merge(results: list[ReferenceResult], as_of_ms: int | None) -> ReferenceResult:
    """Add up shard results; shards share no token, owner, user or host."""
    merged = ReferenceResult({}, {}, {}, {}, [], as_of_ms)
    for result in results:
        assert merged.token_usage.keys().isdisjoint(result.token_usage)
        assert merged.owner_usage.keys().isdisjoint(result.owner_usage)
        merged.token_usage.update(result.token_usage)
        merged.owner_usage.update(result.owner_usage)
        for mine, theirs in ((merged.lifecycle, result.lifecycle),
                             (merged.logins_hourly, result.logins_hourly)):
            for hour, row in theirs.items():
                into = mine.setdefault(hour, dict.fromkeys(row, 0))
                for column, value in row.items():
                    into[column] += value
        merged.findings.extend(result.findings)
    merged.findings = sort_findings(merged.findings)
    return merged
