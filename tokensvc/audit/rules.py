"""What the audit report computes, stated once in plain Python.

This module owns the report's vocabulary (rule names, thresholds, column
orders) and a pure reference implementation of every report the Spark job
writes: :class:`ReferenceAudit` consumes events in time order and produces the
per-token and per-owner usage, the hourly counts and the findings. The
synthetic generator uses it to write exact ground truth, and the tests hold the
Spark job (:mod:`tokensvc.audit.reporting`) to the same answers.

It does no I/O, reads no clock and must not import pyspark.

Definitions (docs/audit.md has the long form):

* A token's id in a login is ``token_id``, or ``username`` when that is null.
  Only ``kind == "token"`` logins count towards token usage.
* Token owner: the first known of create-success ``owner``, the snapshot's
  ``owner``, a successful token login's ``principal``, a sweep's ``owner``, any
  other token event's ``owner``.
* Failed-login bursts: ``n >= burst_threshold`` failures for one key (token
  id, or client host over all logins) with timestamps in one closed interval
  of ``burst_window_s`` seconds. One finding per key: ``first_ts`` is the
  earliest failure that starts such an interval, ``last_ts`` the latest
  failure inside one, ``count`` the most failures inside any one interval.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

RULES = (
    "failed_login_burst_token",
    "failed_login_burst_host",
    "unknown_token",
    "expired_token_use",
    "too_many_hosts",
    "token_session_token_request",
    "created_for_other_owner",
    "unused_before_expiry",
)

# How urgently a person should look: attacks in progress and misuse first, noise last.
SEVERITIES = ("high", "medium", "low")
RULE_SEVERITY = {
    "failed_login_burst_token": "high",
    "expired_token_use": "high",
    "token_session_token_request": "high",
    "too_many_hosts": "high",
    "failed_login_burst_host": "medium",
    "unknown_token": "medium",
    "created_for_other_owner": "medium",
    "unused_before_expiry": "low",
    # Raised by the live watch only (it needs the order of a revocation and a later use).
    "revoked_token_use": "high",
}

HOUR_MS = 3_600_000

TOKEN_USAGE_COLUMNS = (
    "token_id", "owner", "logins_ok", "logins_failed", "distinct_hosts", "brokers",
    "first_use", "last_use",
)
OWNER_USAGE_COLUMNS = ("owner", "tokens", "logins_ok", "logins_failed", "distinct_hosts")
LIFECYCLE_COLUMNS = ("hour", "hour_ms", "creates", "renews", "expiries", "sweeps")
LOGINS_HOURLY_COLUMNS = ("hour", "hour_ms", "ok", "failed")
FINDING_COLUMNS = (
    "rule", "token_id", "owner", "client_host", "detail", "first_ts", "last_ts", "count",
)

# Owner sources, best first.
OWNER_FROM_CREATE, OWNER_FROM_SNAPSHOT, OWNER_FROM_LOGIN, OWNER_FROM_SWEEP, OWNER_FROM_TOKEN = (
    range(1, 6)
)


@dataclass(frozen=True)
class RuleSettings:
    host_threshold: int = 5
    burst_threshold: int = 10
    burst_window_s: int = 60

    def __post_init__(self) -> None:
        if self.host_threshold < 0 or self.burst_threshold < 1 or self.burst_window_s < 0:
            raise ValueError("host_threshold >= 0, burst_threshold >= 1, burst_window_s >= 0")

    @property
    def burst_window_ms(self) -> int:
        return self.burst_window_s * 1000


DEFAULT_SETTINGS = RuleSettings()


@dataclass(frozen=True)
class Finding:
    rule: str
    token_id: str | None
    owner: str | None
    client_host: str | None
    detail: str
    first_ts: int
    last_ts: int
    count: int

    def as_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in FINDING_COLUMNS}


def sort_findings(findings: Iterable[Finding]) -> list[Finding]:
    return sorted(
        findings, key=lambda f: (f.rule, f.first_ts, f.token_id or "", f.client_host or "")
    )


# Detail texts: the Spark job builds the same strings.
def burst_detail(count: int, window_s: int) -> str:
    return f"{count} failed logins within {window_s}s"


def unknown_token_detail(count: int) -> str:
    return f"{count} logins with an unknown token id"


def expired_token_detail(count: int) -> str:
    return f"{count} logins with an expired token"


def revoked_token_detail(count: int) -> str:
    return f"{count} login attempt(s) with the token after it was revoked"


def too_many_hosts_detail(count: int, threshold: int) -> str:
    return f"used from {count} distinct hosts (threshold {threshold})"


def token_session_detail(count: int) -> str:
    return f"{count} token requests from a token-authenticated session"


def other_owner_detail(requester: str) -> str:
    return f"created by {requester}"


UNUSED_DETAIL = {
    "sweep": "removed by the expiry sweep with no successful login",
    "expire": "expired by request with no successful login",
    "snapshot": "expiry passed (snapshot) with no successful login",
}


@dataclass
class TokenUsage:
    token_id: str
    owner: str | None = None
    logins_ok: int = 0
    logins_failed: int = 0
    hosts: set[str] = field(default_factory=set)
    broker_ids: set[int] = field(default_factory=set)
    first_use: int | None = None
    last_use: int | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "token_id": self.token_id,
            "owner": self.owner,
            "logins_ok": self.logins_ok,
            "logins_failed": self.logins_failed,
            "distinct_hosts": len(self.hosts),
            "brokers": sorted(self.broker_ids),
            "first_use": self.first_use,
            "last_use": self.last_use,
        }


@dataclass
class ReferenceResult:
    token_usage: dict[str, dict[str, Any]]
    owner_usage: dict[str, dict[str, Any]]
    lifecycle: dict[int, dict[str, int]]
    logins_hourly: dict[int, dict[str, int]]
    findings: list[Finding]
    as_of_ms: int | None


class _BurstTracker:
    """Sliding closed window over failure timestamps per key (fed in time order)."""

    __slots__ = ("_recent", "_threshold", "_window", "hits")

    def __init__(self, threshold: int, window_ms: int) -> None:
        self._threshold = threshold
        self._window = window_ms
        self._recent: dict[str, deque[int]] = {}
        self.hits: dict[str, list[int]] = {}  # key -> [first_ts, last_ts, max_count]

    def add(self, key: str, ts: int) -> None:
        recent = self._recent.get(key)
        if recent is None:
            recent = self._recent[key] = deque()
        recent.append(ts)
        limit = ts - self._window
        while recent[0] < limit:
            recent.popleft()
        n = len(recent)
        if n >= self._threshold:
            hit = self.hits.get(key)
            if hit is None:
                self.hits[key] = [recent[0], ts, n]
            else:
                hit[1] = ts
                hit[2] = max(hit[2], n)


class ReferenceAudit:
    """Every report of the audit job, computed in memory from events in time order."""

    def __init__(self, settings: RuleSettings | None = None) -> None:
        settings = settings or DEFAULT_SETTINGS
        self.settings = settings
        self._usage: dict[str, TokenUsage] = {}
        self._owner: dict[str, tuple[int, str]] = {}
        self._created: dict[str, int] = {}
        self._ended: dict[str, tuple[int, str]] = {}
        self._burst_token = _BurstTracker(settings.burst_threshold, settings.burst_window_ms)
        self._burst_host = _BurstTracker(settings.burst_threshold, settings.burst_window_ms)
        self._grouped: dict[tuple[str, str | None, str | None], list[int]] = {}
        self._other_owner: list[Finding] = []
        self._lifecycle: dict[int, dict[str, int]] = {}
        self._logins: dict[int, dict[str, int]] = {}
        self._hour_start: int | None = None  # the hour whose counters are at hand
        self._hour_counts: dict[str, int] = {}
        self.last_ts: int | None = None

    # -- inputs -----------------------------------------------------------------

    def _token(self, token_id: str) -> TokenUsage:
        usage = self._usage.get(token_id)
        if usage is None:
            usage = self._usage[token_id] = TokenUsage(token_id)
        return usage

    def _note_owner(self, token_id: str, owner: str | None, priority: int) -> None:
        if owner is None:
            return
        known = self._owner.get(token_id)
        if known is None or priority < known[0]:
            self._owner[token_id] = (priority, owner)

    def _group(self, rule: str, key: str | None, host: str | None, ts: int) -> None:
        entry = self._grouped.get((rule, key, host))
        if entry is None:
            self._grouped[(rule, key, host)] = [1, ts, ts]
        else:
            entry[0] += 1
            entry[2] = ts

    def _hourly(self, table: dict[int, dict[str, int]], ts: int, column: str,
                columns: tuple[str, ...]) -> None:
        hour = ts - ts % HOUR_MS
        row = table.get(hour)
        if row is None:
            row = table[hour] = dict.fromkeys(columns, 0)
        row[column] += 1

    def _login_hour(self, ts: int) -> dict[str, int]:
        """The login counters of ``ts``'s hour (the current hour is kept at hand)."""
        start = self._hour_start
        if start is not None and start <= ts < start + HOUR_MS:
            return self._hour_counts
        hour = ts - ts % HOUR_MS
        counts = self._logins.get(hour)
        if counts is None:
            counts = self._logins[hour] = {"ok": 0, "failed": 0}
        self._hour_start, self._hour_counts = hour, counts
        return counts

    def login(
        self,
        ts: int,
        broker_id: int,
        ok: bool,
        kind: str,
        username: str | None,
        token_id: str | None,
        principal: str | None,
        client_host: str | None,
        reason: str | None,
    ) -> None:
        """One ``authentication`` event."""
        tid = token_id if token_id is not None else username
        if ok and kind == "token" and tid is not None:
            self.token_login_ok(ts, broker_id, tid, principal, client_host)
            return
        self.last_ts = ts
        counts = self._login_hour(ts)
        if ok:
            counts["ok"] += 1
            return
        counts["failed"] += 1
        if client_host is not None:
            self._burst_host.add(client_host, ts)
        if kind == "token" and tid is not None:
            self._token(tid).logins_failed += 1
            self._burst_token.add(tid, ts)
        if reason == "unknown_token":
            self._group("unknown_token", tid, client_host, ts)
        elif reason == "expired_token":
            self._group("expired_token_use", tid, client_host, ts)

    def token_login_ok(
        self, ts: int, broker_id: int, token_id: str, owner: str | None, client_host: str | None
    ) -> None:
        """A successful token login (the hot case of :meth:`login`)."""
        self.last_ts = ts
        counts = self._login_hour(ts)
        counts["ok"] += 1
        usage = self._usage.get(token_id) or self._token(token_id)
        usage.logins_ok += 1
        if client_host is not None:
            usage.hosts.add(client_host)
        usage.broker_ids.add(broker_id)
        if usage.first_use is None:
            usage.first_use = ts
        usage.last_use = ts
        if owner is not None:
            known = self._owner.get(token_id)
            if known is None or known[0] > OWNER_FROM_LOGIN:
                self._owner[token_id] = (OWNER_FROM_LOGIN, owner)

    def token_request(
        self,
        ts: int,
        action: str,
        ok: bool,
        requester: str | None,
        token_authenticated: bool,
        owner: str | None,
        token_id: str | None,
        client_host: str | None,
    ) -> None:
        """One ``token`` event."""
        self.last_ts = ts
        if token_id is not None:
            self._token(token_id)
            self._note_owner(token_id, owner, OWNER_FROM_CREATE if action == "create" and ok
                             else OWNER_FROM_TOKEN)
        if token_authenticated:
            self._group("token_session_token_request", requester, client_host, ts)
        if not ok:
            return
        if action == "create":
            self._hourly(self._lifecycle, ts, "creates", LIFECYCLE_COLUMNS[2:])
            if token_id is not None:
                self._created.setdefault(token_id, ts)
            if owner is not None and requester is not None and owner != requester:
                self._other_owner.append(Finding(
                    "created_for_other_owner", token_id, owner, client_host,
                    other_owner_detail(requester), ts, ts, 1,
                ))
        elif action == "renew":
            self._hourly(self._lifecycle, ts, "renews", LIFECYCLE_COLUMNS[2:])
        elif action == "expire":
            self._hourly(self._lifecycle, ts, "expiries", LIFECYCLE_COLUMNS[2:])
            if token_id is not None:
                self._ended.setdefault(token_id, (ts, "expire"))

    def sweep(self, ts: int, token_id: str, owner: str | None) -> None:
        """One ``sweep`` event."""
        self.last_ts = ts
        self._token(token_id)
        self._note_owner(token_id, owner, OWNER_FROM_SWEEP)
        self._hourly(self._lifecycle, ts, "sweeps", LIFECYCLE_COLUMNS[2:])
        self._ended.setdefault(token_id, (ts, "sweep"))

    def other(self, ts: int) -> None:
        """Any other event: only moves the observed time range."""
        self.last_ts = ts

    def observe(self, event: Mapping[str, Any]) -> None:
        """Feed one decoded event of the schema (events must come in ``ts`` order)."""
        kind = event.get("type")
        ts = event["ts"]
        if kind == "authentication":
            self.login(ts, event["broker_id"], event.get("outcome") == "success",
                       event.get("kind") or "user", event.get("username"), event.get("token_id"),
                       event.get("principal"), event.get("client_host"), event.get("reason"))
        elif kind == "token":
            self.token_request(ts, event["action"], event.get("outcome") == "success",
                               event.get("requester"), bool(event.get("token_authenticated")),
                               event.get("owner"), event.get("token_id"),
                               event.get("client_host"))
        elif kind == "sweep":
            self.sweep(ts, event["token_id"], event.get("owner"))
        else:
            self.other(ts)

    # -- outputs ----------------------------------------------------------------

    def result(
        self, snapshot: Iterable[Mapping[str, Any]] = (), as_of_ms: int | None = None
    ) -> ReferenceResult:
        """All reports. ``as_of_ms`` (default: the last event's ts) decides which
        snapshot tokens have expired."""
        as_of = as_of_ms if as_of_ms is not None else self.last_ts
        snapshot = list(snapshot)
        for token in snapshot:
            self._token(token["token_id"])
            self._note_owner(token["token_id"], token.get("owner"), OWNER_FROM_SNAPSHOT)
        for token_id, usage in self._usage.items():
            known = self._owner.get(token_id)
            usage.owner = known[1] if known else None

        findings = list(self._other_owner)
        findings += self._burst_findings()
        for (rule, key, host), (count, first, last) in self._grouped.items():
            if rule == "token_session_token_request":
                findings.append(Finding(rule, None, key, host, token_session_detail(count),
                                        first, last, count))
            else:
                detail = (unknown_token_detail if rule == "unknown_token"
                          else expired_token_detail)(count)
                findings.append(Finding(rule, key, self._owner_of(key), host, detail,
                                        first, last, count))
        threshold = self.settings.host_threshold
        for usage in self._usage.values():
            if len(usage.hosts) > threshold:
                assert usage.first_use is not None and usage.last_use is not None
                findings.append(Finding(
                    "too_many_hosts", usage.token_id, usage.owner, None,
                    too_many_hosts_detail(len(usage.hosts), threshold),
                    usage.first_use, usage.last_use, len(usage.hosts),
                ))
        findings += self._unused_findings(snapshot, as_of)
        return ReferenceResult(
            token_usage={tid: u.as_dict() for tid, u in self._usage.items()},
            owner_usage=self._owner_usage(),
            lifecycle=dict(self._lifecycle),
            logins_hourly=dict(self._logins),
            findings=sort_findings(findings),
            as_of_ms=as_of,
        )

    def _owner_of(self, token_id: str | None) -> str | None:
        known = self._owner.get(token_id) if token_id is not None else None
        return known[1] if known else None

    def _burst_findings(self) -> list[Finding]:
        window_s = self.settings.burst_window_s
        out = []
        for rule, tracker in (("failed_login_burst_token", self._burst_token),
                              ("failed_login_burst_host", self._burst_host)):
            for key, (first, last, count) in tracker.hits.items():
                token_id, host = (key, None) if rule == "failed_login_burst_token" else (None, key)
                owner = self._owner_of(token_id)
                out.append(Finding(rule, token_id, owner, host, burst_detail(count, window_s),
                                   first, last, count))
        return out

    def _unused_findings(
        self, snapshot: list[Mapping[str, Any]], as_of: int | None
    ) -> list[Finding]:
        out: dict[str, Finding] = {}
        for token_id, created in self._created.items():
            ended = self._ended.get(token_id)
            if ended is None or self._usage[token_id].logins_ok:
                continue
            out[token_id] = Finding("unused_before_expiry", token_id, self._owner_of(token_id),
                                    None, UNUSED_DETAIL[ended[1]], created, ended[0], 0)
        if as_of is not None:
            for token in snapshot:
                token_id = token["token_id"]
                end = min(token["expiry_ms"], token["max_ms"])
                if token_id in out or end >= as_of or self._usage[token_id].logins_ok:
                    continue
                out[token_id] = Finding("unused_before_expiry", token_id,
                                        self._owner_of(token_id), None,
                                        UNUSED_DETAIL["snapshot"], token["issue_ms"], end, 0)
        return list(out.values())

    def _owner_usage(self) -> dict[str, dict[str, Any]]:
        owners: dict[str, dict[str, Any]] = {}
        for usage in self._usage.values():
            if usage.owner is None:
                continue
            row = owners.get(usage.owner)
            if row is None:
                row = owners[usage.owner] = {
                    "owner": usage.owner, "tokens": 0, "logins_ok": 0, "logins_failed": 0,
                    "hosts": set(),
                }
            row["tokens"] += 1
            row["logins_ok"] += usage.logins_ok
            row["logins_failed"] += usage.logins_failed
            row["hosts"] |= usage.hosts
        for row in owners.values():
            row["distinct_hosts"] = len(row.pop("hosts"))
        return owners
