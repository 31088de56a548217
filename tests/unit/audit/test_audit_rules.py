"""The report rules, on hand-made events (pure reference implementation)."""

from __future__ import annotations

import pytest

from tokensvc.audit.rules import (
    HOUR_MS,
    UNUSED_DETAIL,
    Finding,
    ReferenceAudit,
    RuleSettings,
)

T0 = 1_704_067_200_000
SETTINGS = RuleSettings(host_threshold=2, burst_threshold=3, burst_window_s=10)


def ok_login(audit: ReferenceAudit, ts: int, token: str, host: str = "h1", broker: int = 1,
             owner: str = "User:alice") -> None:
    audit.login(ts, broker, True, "token", token, token, owner, host, None)


def failed_login(audit: ReferenceAudit, ts: int, token: str | None, host: str = "h1",
                 reason: str = "bad_proof", kind: str = "token", user: str | None = None) -> None:
    audit.login(ts, 1, False, kind, user or token, token, None, host, reason)


def create(audit: ReferenceAudit, ts: int, token: str, owner: str = "User:alice",
           requester: str | None = None, host: str = "h9") -> None:
    audit.token_request(ts, "create", True, requester or owner, False, owner, token, host)


def rules(findings: list[Finding], rule: str) -> list[Finding]:
    return [f for f in findings if f.rule == rule]


def test_token_usage_counts_logins_hosts_brokers_and_first_last_use() -> None:
    audit = ReferenceAudit(SETTINGS)
    ok_login(audit, T0, "t1", "h1", broker=2)
    ok_login(audit, T0 + 5, "t1", "h2", broker=1)
    ok_login(audit, T0 + 9, "t1", "h1", broker=2)
    failed_login(audit, T0 + 20, "t1", "h3")
    usage = audit.result().token_usage["t1"]
    assert usage == {
        "token_id": "t1", "owner": "User:alice", "logins_ok": 3, "logins_failed": 1,
        "distinct_hosts": 2, "brokers": [1, 2], "first_use": T0, "last_use": T0 + 9,
    }


def test_owner_from_create_wins_over_later_sources() -> None:
    audit = ReferenceAudit(SETTINGS)
    audit.sweep(T0, "t1", "User:from-sweep")
    ok_login(audit, T0 + 1, "t1", owner="User:from-login")
    create(audit, T0 + 2, "t1", owner="User:creator")
    assert audit.result().token_usage["t1"]["owner"] == "User:creator"


def test_snapshot_owner_beats_login_principal() -> None:
    audit = ReferenceAudit(SETTINGS)
    ok_login(audit, T0, "t1", owner="User:from-login")
    snapshot = [{"token_id": "t1", "owner": "User:snap", "issue_ms": T0, "expiry_ms": T0 + 10,
                 "max_ms": T0 + 20}]
    assert audit.result(snapshot).token_usage["t1"]["owner"] == "User:snap"


def test_burst_needs_threshold_failures_inside_one_closed_window() -> None:
    audit = ReferenceAudit(SETTINGS)
    # 3 failures spanning exactly 10 s (window edges included): a burst.
    for ts in (T0, T0 + 4_000, T0 + 10_000):
        failed_login(audit, ts, "burst", host=f"h{ts}")
    # 3 failures spanning 10.001 s: never 3 inside 10 s.
    for ts in (T0, T0 + 5_000, T0 + 10_001):
        failed_login(audit, T0 + 100_000 + ts - T0, "calm", host=f"x{ts}")
    bursts = rules(audit.result().findings, "failed_login_burst_token")
    assert [(f.token_id, f.first_ts, f.last_ts, f.count) for f in bursts] == [
        ("burst", T0, T0 + 10_000, 3)
    ]


def test_burst_reports_earliest_start_latest_end_and_largest_count() -> None:
    audit = ReferenceAudit(SETTINGS)
    times = [T0, T0 + 1_000, T0 + 2_000, T0 + 3_000, T0 + 60_000, T0 + 61_000, T0 + 62_000]
    for ts in times:
        failed_login(audit, ts, "tok", host="10.0.0.1")
    findings = audit.result().findings
    by_token = rules(findings, "failed_login_burst_token")
    assert [(f.first_ts, f.last_ts, f.count) for f in by_token] == [(T0, T0 + 62_000, 4)]
    assert by_token[0].detail == "4 failed logins within 10s"
    by_host = rules(findings, "failed_login_burst_host")
    assert [(f.client_host, f.token_id, f.count) for f in by_host] == [("10.0.0.1", None, 4)]


def test_host_burst_counts_user_and_token_failures_together() -> None:
    audit = ReferenceAudit(SETTINGS)
    failed_login(audit, T0, None, host="evil", kind="user", user="alice", reason="unknown_user")
    failed_login(audit, T0 + 1, "t1", host="evil")
    failed_login(audit, T0 + 2, None, host="evil", kind="user", user="bob")
    findings = audit.result().findings
    assert [f.client_host for f in rules(findings, "failed_login_burst_host")] == ["evil"]
    assert rules(findings, "failed_login_burst_token") == []


def test_unknown_and_expired_token_failures_group_by_token_and_host() -> None:
    audit = ReferenceAudit(SETTINGS)
    create(audit, T0, "old")
    failed_login(audit, T0 + 1, "ghost", "h1", "unknown_token")
    failed_login(audit, T0 + 50_000, "ghost", "h1", "unknown_token")
    failed_login(audit, T0 + 60_000, "ghost", "h2", "unknown_token")
    failed_login(audit, T0 + 70_000, "old", "h1", "expired_token")
    findings = audit.result().findings
    unknown = [(f.token_id, f.client_host, f.count, f.first_ts, f.last_ts)
               for f in rules(findings, "unknown_token")]
    assert unknown == [("ghost", "h1", 2, T0 + 1, T0 + 50_000),
                       ("ghost", "h2", 1, T0 + 60_000, T0 + 60_000)]
    expired = rules(findings, "expired_token_use")
    assert [(f.token_id, f.owner, f.count) for f in expired] == [("old", "User:alice", 1)]


def test_too_many_hosts_is_strictly_more_than_the_threshold() -> None:
    audit = ReferenceAudit(SETTINGS)
    for i, host in enumerate(["a", "b"]):
        ok_login(audit, T0 + i, "two", host)
    for i, host in enumerate(["a", "b", "c"]):
        ok_login(audit, T0 + 10 + i, "three", host)
    found = rules(audit.result().findings, "too_many_hosts")
    assert [(f.token_id, f.count, f.first_ts, f.last_ts) for f in found] == [
        ("three", 3, T0 + 10, T0 + 12)
    ]


def test_token_requests_from_token_sessions_group_by_requester_and_host() -> None:
    audit = ReferenceAudit(SETTINGS)
    audit.token_request(T0, "create", False, "User:bob", True, "User:bob", None, "h1")
    audit.token_request(T0 + 5, "describe", True, "User:bob", True, None, None, "h1")
    audit.token_request(T0 + 9, "renew", True, "User:bob", False, "User:bob", "t", "h1")
    found = rules(audit.result().findings, "token_session_token_request")
    assert found == [Finding("token_session_token_request", None, "User:bob", "h1",
                             "2 token requests from a token-authenticated session", T0, T0 + 5,
                             2)]


def test_create_for_another_owner_is_a_finding_per_token() -> None:
    audit = ReferenceAudit(SETTINGS)
    create(audit, T0, "mine", owner="User:alice")
    create(audit, T0 + 1, "theirs", owner="User:svc", requester="User:admin", host="h7")
    audit.token_request(T0 + 2, "create", False, "User:admin", False, "User:svc2", None, "h7")
    found = rules(audit.result().findings, "created_for_other_owner")
    assert found == [Finding("created_for_other_owner", "theirs", "User:svc", "h7",
                             "created by User:admin", T0 + 1, T0 + 1, 1)]


def test_unused_tokens_from_the_log_need_a_create_and_an_end_without_logins() -> None:
    audit = ReferenceAudit(SETTINGS)
    create(audit, T0, "swept")
    create(audit, T0, "expired")
    create(audit, T0, "used")
    create(audit, T0, "alive")
    ok_login(audit, T0 + 1, "used")
    audit.token_request(T0 + 2, "expire", True, "User:alice", False, "User:alice", "expired",
                        "h9")
    audit.sweep(T0 + 3, "swept", "User:alice")
    audit.sweep(T0 + 3, "used", "User:alice")
    audit.sweep(T0 + 3, "before-log", "User:alice")  # created before the log: not judged
    found = {f.token_id: f for f in rules(audit.result().findings, "unused_before_expiry")}
    assert set(found) == {"swept", "expired"}
    assert (found["swept"].first_ts, found["swept"].last_ts) == (T0, T0 + 3)
    assert found["swept"].detail == UNUSED_DETAIL["sweep"]
    assert found["expired"].detail == UNUSED_DETAIL["expire"]


def test_unused_snapshot_tokens_are_judged_against_as_of() -> None:
    audit = ReferenceAudit(SETTINGS)
    ok_login(audit, T0, "used")
    snapshot = [
        {"token_id": "lapsed", "owner": "User:a", "issue_ms": T0 - 50, "expiry_ms": T0 - 10,
         "max_ms": T0 + 99},
        {"token_id": "maxed", "owner": "User:a", "issue_ms": T0 - 50, "expiry_ms": T0 + 99,
         "max_ms": T0 - 5},
        {"token_id": "current", "owner": "User:a", "issue_ms": T0, "expiry_ms": T0 + 10,
         "max_ms": T0 + 10},
        {"token_id": "used", "owner": "User:a", "issue_ms": T0 - 50, "expiry_ms": T0 - 1,
         "max_ms": T0},
    ]
    found = rules(audit.result(snapshot, as_of_ms=T0 + 10).findings, "unused_before_expiry")
    assert [(f.token_id, f.first_ts, f.last_ts) for f in found] == [
        ("lapsed", T0 - 50, T0 - 10), ("maxed", T0 - 50, T0 - 5)
    ]
    assert all(f.detail == UNUSED_DETAIL["snapshot"] for f in found)


def test_hourly_counts_split_by_hour() -> None:
    audit = ReferenceAudit(SETTINGS)
    ok_login(audit, T0, "t")
    failed_login(audit, T0 + HOUR_MS - 1, "t")
    create(audit, T0 + HOUR_MS, "t2")
    audit.token_request(T0 + HOUR_MS, "renew", True, "User:alice", False, "User:alice", "t2",
                        "h")
    audit.sweep(T0 + 2 * HOUR_MS, "t2", "User:alice")
    result = audit.result()
    assert result.logins_hourly == {T0: {"ok": 1, "failed": 1}}
    assert result.lifecycle == {
        T0 + HOUR_MS: {"creates": 1, "renews": 1, "expiries": 0, "sweeps": 0},
        T0 + 2 * HOUR_MS: {"creates": 0, "renews": 0, "expiries": 0, "sweeps": 1},
    }


def test_owner_usage_unions_hosts_across_an_owners_tokens() -> None:
    audit = ReferenceAudit(SETTINGS)
    ok_login(audit, T0, "t1", "h1")
    ok_login(audit, T0 + 1, "t2", "h1")
    ok_login(audit, T0 + 2, "t2", "h2")
    failed_login(audit, T0 + 3, "t2", "h3")
    assert audit.result().owner_usage == {
        "User:alice": {"owner": "User:alice", "tokens": 2, "logins_ok": 3, "logins_failed": 1,
                       "distinct_hosts": 2}
    }


def test_observe_reads_decoded_events() -> None:
    audit = ReferenceAudit(SETTINGS)
    audit.observe({"type": "authentication", "ts": T0, "broker_id": 3, "outcome": "success",
                   "kind": "token", "username": "t1", "token_id": "t1",
                   "principal": "User:alice", "client_host": "h"})
    audit.observe({"type": "acl", "ts": T0 + 7, "broker_id": 1})
    result = audit.result()
    assert result.token_usage["t1"]["brokers"] == [3]
    assert result.as_of_ms == T0 + 7


def test_settings_refuse_nonsense_thresholds() -> None:
    with pytest.raises(ValueError):
        RuleSettings(burst_threshold=0)
