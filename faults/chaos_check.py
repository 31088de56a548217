"""What the fault suite (``faults.chaos``) saw, and the rules it checks against ZooKeeper.

Owns: the ledger of one fault's writes as a client saw them (attempted, acknowledged,
answered with an error, or unknown: the connection died with the request sent), the
record of a pause-revocation round, and the pure checks that turn the ledger plus what
ZooKeeper holds at the end into violations:

- an acknowledged create whose token is not in ZooKeeper (unless an expiry of it was
  sent) is a lost write;
- a token whose expiry in ZooKeeper is earlier than an acknowledged renewal is a lost
  renew;
- an acknowledged expiry whose token is still in ZooKeeper is a lost expiry;
- a token id or HMAC acknowledged twice, or more new tokens in ZooKeeper than the
  creates that may have landed without an acknowledgement (unknown, or answered
  REQUEST_TIMED_OUT) explain, is a duplicate.

It does no I/O and reads no clock: ``faults.chaos`` gathers the facts from outside the
brokers (ZooKeeper, logins, describes) and passes them in, so every rule is unit-tested
on its own. It must not hold or print a token's HMAC beyond the ledger's own use.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

# Answers after which a create may still have landed (docs/operations.md: "A write
# answered REQUEST_TIMED_OUT may still have landed").
MAYBE_LANDED = frozenset({"REQUEST_TIMED_OUT"})
WRITES = ("create", "renew", "expire")


@dataclass
class TrackedToken:
    """One token whose create was acknowledged, and what was done to it since."""

    token_id: str
    hmac: bytes = field(repr=False)
    max_ms: int
    renewed_to_ms: int = 0          # highest ExpiryTimestampMs of an acknowledged renew
    expire_sent: bool = False       # an expire was sent (its outcome may be unknown)
    expire_acknowledged: bool = False


@dataclass(frozen=True)
class Violation:
    rule: str
    token_id: str
    detail: str = ""

    def __str__(self) -> str:
        return f"{self.rule}: {self.token_id}" + (f" ({self.detail})" if self.detail else "")


@dataclass
class WriteLedger:
    """Every write of one fault, as the clients saw it; shared by the client threads."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    attempted: Counter = field(default_factory=Counter)      # api -> count
    acknowledged: Counter = field(default_factory=Counter)   # api -> count
    unknown: Counter = field(default_factory=Counter)        # api -> count
    errors: Counter = field(default_factory=Counter)         # (api, error name) -> count
    fastest_error_ms: dict[tuple[str, str], float] = field(default_factory=dict)
    slowest_ms: dict[str, float] = field(default_factory=dict)   # api -> slowest answer
    hung: Counter = field(default_factory=Counter)           # api -> no answer in time
    tokens: dict[str, TrackedToken] = field(default_factory=dict)
    acknowledged_ids: list[str] = field(default_factory=list)
    acknowledged_hmacs: Counter = field(default_factory=Counter)
    creates_maybe_landed: int = 0
    logins: Counter = field(default_factory=Counter)         # outcome -> count

    def sent(self, api: str) -> None:
        with self.lock:
            self.attempted[api] += 1

    def lost_answer(self, api: str, *, hung: bool = False) -> None:
        """The connection failed after the request was sent: the outcome is unknown.
        ``hung``: no answer came within the client's own timeout."""
        with self.lock:
            self.unknown[api] += 1
            if hung:
                self.hung[api] += 1
            if api == "create":
                self.creates_maybe_landed += 1

    def answered(self, api: str, error: str, elapsed_ms: float) -> None:
        """An answer arrived; ``error`` is the error name, "NONE" on success."""
        with self.lock:
            self.slowest_ms[api] = max(self.slowest_ms.get(api, elapsed_ms), elapsed_ms)
            if error == "NONE":
                self.acknowledged[api] += 1
                return
            self.errors[(api, error)] += 1
            key = (api, error)
            self.fastest_error_ms[key] = min(self.fastest_error_ms.get(key, elapsed_ms),
                                             elapsed_ms)
            if api == "create" and error in MAYBE_LANDED:
                self.creates_maybe_landed += 1

    def created(self, token_id: str, hmac: bytes, max_ms: int) -> TrackedToken:
        with self.lock:
            token = TrackedToken(token_id, hmac, max_ms)
            self.tokens.setdefault(token_id, token)
            self.acknowledged_ids.append(token_id)
            self.acknowledged_hmacs[hmac] += 1
            return token

    def renewed(self, token: TrackedToken, expiry_ms: int) -> None:
        with self.lock:
            token.renewed_to_ms = max(token.renewed_to_ms, expiry_ms)

    def expire_sending(self, token: TrackedToken) -> None:
        with self.lock:
            token.expire_sent = True

    def expired(self, token: TrackedToken) -> None:
        with self.lock:
            token.expire_acknowledged = True

    def login(self, outcome: str) -> None:
        with self.lock:
            self.logins[outcome] += 1

    # -- views for the checks and the table ----------------------------------------------

    def writes(self, counter: Counter) -> int:
        return sum(counter[api] for api in WRITES)

    def error_count(self) -> int:
        return sum(self.errors.values())

    def acknowledged_expiries(self) -> list[TrackedToken]:
        with self.lock:
            return [t for t in self.tokens.values() if t.expire_acknowledged]


def check_writes(ledger: WriteLedger, in_zookeeper: Mapping[str, int],
                 new_in_zookeeper: Iterable[str]) -> list[Violation]:
    """The end-state rules. ``in_zookeeper`` maps every token id ZooKeeper holds to its
    expiry timestamp (ms); ``new_in_zookeeper`` are the ids that appeared during the
    fault (ZooKeeper's ids at the end minus those at the start)."""
    violations: list[Violation] = []
    with ledger.lock:
        tokens = list(ledger.tokens.values())
        ids = Counter(ledger.acknowledged_ids)
        hmacs = ledger.acknowledged_hmacs.copy()
        maybe_landed = ledger.creates_maybe_landed
    for token in tokens:
        present = token.token_id in in_zookeeper
        if token.expire_acknowledged:
            if present:
                violations.append(Violation("expiry lost", token.token_id,
                                            "acknowledged expiry, token still in ZooKeeper"))
            continue
        if token.expire_sent:
            continue  # an expiry with no answer may or may not have landed
        if not present:
            violations.append(Violation("write lost", token.token_id,
                                        "acknowledged create, not in ZooKeeper"))
        elif in_zookeeper[token.token_id] < token.renewed_to_ms:
            violations.append(Violation(
                "renew lost", token.token_id,
                f"expiry {in_zookeeper[token.token_id]} < acknowledged {token.renewed_to_ms}"))
    violations += [Violation("duplicate", token_id, f"acknowledged {count} times")
                   for token_id, count in sorted(ids.items()) if count > 1]
    twice = sum(1 for count in hmacs.values() if count > 1)
    if twice:
        violations.append(Violation("duplicate", "-", f"{twice} HMACs acknowledged twice"))
    unexplained = sorted(set(new_in_zookeeper) - set(ids))
    if len(unexplained) > maybe_landed:
        violations.append(Violation(
            "duplicate", ",".join(unexplained[:3]) + ("..." if len(unexplained) > 3 else ""),
            f"{len(unexplained)} new tokens in ZooKeeper nobody was given, but only "
            f"{maybe_landed} creates may have landed unacknowledged"))
    return violations


@dataclass
class RevocationRound:
    """One pause-revocation round: tokens expired (acknowledged) through another broker
    while the victim was frozen, then logins with them on the victim, and a request on a
    connection that had logged in with one of them before the freeze."""

    victim: int
    pause_s: float
    expired: int = 0
    queued: int = 0
    queued_succeeded: int = 0
    fresh: int = 0
    fresh_succeeded: int = 0
    # A connection logged in with a revoked token before the freeze, whose request was
    # sent during it: served (ErrorCode 0) is a violation.
    sessions: int = 0
    sessions_served: int = 0
    last_success_after_resume_s: float | None = None

    def success(self, after_resume_s: float) -> None:
        last = self.last_success_after_resume_s
        self.last_success_after_resume_s = after_resume_s if last is None else max(
            last, after_resume_s)

    @property
    def violations(self) -> int:
        return self.queued_succeeded + self.fresh_succeeded + self.sessions_served


# -- the partition suite's rules (faults.chaos_net) ---------------------------------------


@dataclass(frozen=True)
class Attempt:
    """One use of a revoked credential: a login, or a request on a session opened before
    the revocation. ``started`` is when the client began it (monotonic seconds)."""

    subject: str
    broker: int
    started: float
    accepted: bool


def late_acceptances(attempts: Iterable[Attempt], acknowledged: Mapping[str, float],
                     bound_s: float) -> list[Violation]:
    """Uses of a revoked credential that a broker accepted although they began more than
    ``bound_s`` after the revocation was acknowledged (``acknowledged``: subject ->
    monotonic time of the acknowledgement). Within the bound an acceptance is allowed:
    that is the staleness the brokers promise."""
    late = []
    for attempt in attempts:
        acked = acknowledged.get(attempt.subject)
        if attempt.accepted and acked is not None and attempt.started > acked + bound_s:
            late.append(Violation(
                "revoked credential accepted late", attempt.subject,
                f"broker {attempt.broker}, {attempt.started - acked:.2f}s after the revocation "
                f"was acknowledged (bound {bound_s:.2f}s)"))
    return late


def latest_acceptance_s(attempts: Iterable[Attempt],
                        acknowledged: Mapping[str, float]) -> float | None:
    """How long after its revocation a credential was last accepted (None: never)."""
    lags = [a.started - acknowledged[a.subject] for a in attempts
            if a.accepted and a.subject in acknowledged]
    return max(lags) if lags else None


@dataclass(frozen=True)
class ControllerSample:
    """Who acts as controller at one moment: each broker's ``tokensvc_controller`` gauge
    (None: its metrics could not be read) and the broker ``/controller`` names."""

    at: float
    gauges: Mapping[int, int | None]
    in_zookeeper: int | None


def controller_overlaps(samples: Iterable[ControllerSample]) -> list[Violation]:
    """Two brokers acting as controller at once: two gauges at 1 in one sample, or a
    broker at 1 while ZooKeeper names another in two samples running (one sample may
    straddle a handover)."""
    violations = []
    previous_disagreed = False
    for sample in samples:
        acting = sorted(b for b, v in sample.gauges.items() if v == 1)
        if len(acting) > 1:
            violations.append(Violation("two controllers", ",".join(map(str, acting)),
                                        f"at {sample.at:.2f}s"))
        disagrees = bool(acting) and sample.in_zookeeper is not None \
            and sample.in_zookeeper not in acting
        if disagrees and previous_disagreed:
            violations.append(Violation(
                "controller not the one ZooKeeper names", ",".join(map(str, acting)),
                f"ZooKeeper names {sample.in_zookeeper} at {sample.at:.2f}s"))
        previous_disagreed = disagrees
    return violations
