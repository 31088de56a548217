"""AuditLog against a real directory and its real writer thread (clock injected)."""

from __future__ import annotations

import base64
import json
import os
import stat
import time
from pathlib import Path

import pytest

from tokensvc.audit.events import REDACTED, AuditEventError
from tokensvc.audit.writer import AuditLog, audit_file_name
from tokensvc.core.clock import FakeClock

T0 = 1_704_067_200_000  # 2024-01-01T00:00:00Z


def sweep(log: AuditLog, n: int) -> bool:
    return log.emit("sweep", token_id=f"token-{n}", owner="User:alice", expiry_ms=1, max_ms=2,
                    reason="expired")


def lines(directory: Path) -> list[dict]:
    out = []
    for path in sorted(directory.glob("audit-*.jsonl")):
        out += [json.loads(line) for line in path.read_text().splitlines()]
    return out


def files(directory: Path) -> list[Path]:
    return sorted(directory.glob("audit-*.jsonl"), key=lambda p: int(p.stem.rsplit("-", 1)[1]))


def test_events_carry_the_common_fields_and_land_in_a_named_file(tmp_path: Path) -> None:
    clock = FakeClock(T0)
    log = AuditLog(tmp_path, 7, clock=clock)
    log.start()
    assert log.emit("authentication", outcome="success", mechanism="SCRAM-SHA-512",
                    kind="user", username="alice", principal="User:alice",
                    client_host="127.0.0.1", client_port=40000, listener="SASL_PLAINTEXT")
    log.close()
    assert [p.name for p in files(tmp_path)] == ["audit-7-20240101T000000-0.jsonl"]
    (event,) = lines(tmp_path)
    assert event["schema"] == 1 and event["ts"] == T0 and event["broker_id"] == 7
    assert event["type"] == "authentication" and event["principal"] == "User:alice"
    assert len(event["event_id"]) == 32 and int(event["event_id"], 16) >= 0
    assert log.written == 1 and log.dropped == 0


def test_files_are_created_with_mode_0640(tmp_path: Path) -> None:
    old = os.umask(0o077)  # a strict umask must not change the result
    try:
        log = AuditLog(tmp_path / "audit", 1, clock=FakeClock(T0))
        log.start()
        sweep(log, 1)
        log.close()
    finally:
        os.umask(old)
    (path,) = files(tmp_path / "audit")
    assert stat.S_IMODE(path.stat().st_mode) == 0o640


def test_rotates_by_size_without_losing_or_reordering_events(tmp_path: Path) -> None:
    log = AuditLog(tmp_path, 1, max_file_bytes=1_000, clock=FakeClock(T0))
    log.start()
    for n in range(60):
        sweep(log, n)
    log.close()
    written = files(tmp_path)
    assert len(written) > 5
    assert all(p.stat().st_size <= 1_000 for p in written)
    assert [e["token_id"] for e in lines_in_order(written)] == [f"token-{n}" for n in range(60)]


def lines_in_order(paths: list[Path]) -> list[dict]:
    return [json.loads(line) for p in paths for line in p.read_text().splitlines()]


def test_rotates_by_time_using_the_event_clock(tmp_path: Path) -> None:
    clock = FakeClock(T0)
    log = AuditLog(tmp_path, 3, rotate_interval_ms=60_000, clock=clock)
    log.start()
    sweep(log, 1)
    clock.advance(59_999)
    sweep(log, 2)
    clock.advance(1)
    sweep(log, 3)
    clock.advance(3_600_000)
    sweep(log, 4)
    log.close()
    assert [p.name for p in files(tmp_path)] == [
        "audit-3-20240101T000000-0.jsonl",
        "audit-3-20240101T000100-1.jsonl",
        "audit-3-20240101T010100-2.jsonl",
    ]
    assert [[e["token_id"] for e in lines_in_order([p])] for p in files(tmp_path)] == [
        ["token-1", "token-2"], ["token-3"], ["token-4"]
    ]


def test_full_queue_drops_newest_and_writes_a_dropped_line(tmp_path: Path) -> None:
    log = AuditLog(tmp_path, 1, queue_size=5, clock=FakeClock(T0))  # not started: queue fills
    accepted = [sweep(log, n) for n in range(8)]
    assert accepted == [True] * 5 + [False] * 3
    assert log.dropped == 3 and log.queue_depth == 5
    log.start()
    log.close()
    events = lines(tmp_path)
    marker = events[0]
    assert marker["type"] == "audit" and marker["action"] == "dropped"
    assert marker["dropped"] == 3 and marker["dropped_total"] == 3
    assert [e["token_id"] for e in events[1:]] == [f"token-{n}" for n in range(5)]
    assert log.written == 5


def test_close_flushes_everything_queued(tmp_path: Path) -> None:
    log = AuditLog(tmp_path, 1, queue_size=50_000, clock=FakeClock(T0))
    log.start()
    for n in range(20_000):
        sweep(log, n)
    log.close()
    assert log.written == 20_000 and log.dropped == 0 and log.queue_depth == 0
    assert len(lines(tmp_path)) == 20_000


def test_idle_writer_flushes_without_close(tmp_path: Path) -> None:
    log = AuditLog(tmp_path, 1, clock=FakeClock(T0))
    log.start()
    try:
        sweep(log, 1)
        deadline = time.monotonic() + 10
        while not lines(tmp_path) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert [e["token_id"] for e in lines(tmp_path)] == ["token-1"]
    finally:
        log.close()


def test_emit_after_close_is_counted_as_dropped(tmp_path: Path) -> None:
    log = AuditLog(tmp_path, 1, clock=FakeClock(T0))
    log.start()
    log.close()
    assert sweep(log, 1) is False
    assert log.dropped == 1


def test_secret_fields_are_refused_before_queueing(tmp_path: Path) -> None:
    log = AuditLog(tmp_path, 1, clock=FakeClock(T0))
    log.start()
    with pytest.raises(AuditEventError):
        log.emit("token", action="create", outcome="success", hmac="c2VjcmV0")
    with pytest.raises(AuditEventError):
        log.emit("credential", action="upsert", outcome="success", salted_password="x")
    log.close()
    assert log.written == 0 and lines(tmp_path) == []


def test_client_chosen_hmac_like_values_are_written_redacted(tmp_path: Path) -> None:
    hmac_like = base64.b64encode(bytes(range(64))).decode()
    log = AuditLog(tmp_path, 1, clock=FakeClock(T0))
    log.start()
    assert log.emit("authentication", outcome="failure", kind="user", username=hmac_like,
                    client_host="10.0.0.9", reason="unknown_user")
    log.close()
    (event,) = lines(tmp_path)
    assert event["username"] == REDACTED and event["reason"] == "unknown_user"
    assert hmac_like not in files(tmp_path)[0].read_text()


def test_restart_never_overwrites_an_existing_file(tmp_path: Path) -> None:
    for _ in range(2):
        log = AuditLog(tmp_path, 1, clock=FakeClock(T0))
        log.start()
        sweep(log, 1)
        log.close()
    assert [p.name for p in files(tmp_path)] == [
        audit_file_name(1, T0, 0), audit_file_name(1, T0, 1)
    ]
    assert len(lines(tmp_path)) == 2


def test_disabled_log_writes_nothing_but_still_validates(tmp_path: Path) -> None:
    log = AuditLog.disabled()
    log.start()
    assert not log.enabled
    assert sweep(log, 1) is False
    with pytest.raises(AuditEventError):
        log.emit("sweep", token_id="t", password="pw")
    log.close()
    assert log.dropped == 0 and list(tmp_path.iterdir()) == []


def test_unsupported_full_queue_policy_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="drop-newest"):
        AuditLog(tmp_path, 1, on_full="block")


def test_a_steady_stream_wakes_the_writer_rarely_and_an_idle_one_promptly(tmp_path: Path) -> None:
    """Under load the request path makes no wake-up per event (the writer lingers and
    collects them); after a pause the first event wakes the parked writer at once."""
    log = AuditLog(tmp_path, 1, clock=FakeClock(T0))
    wakes = 0
    real_wake = log._wake

    def counting_wake() -> None:
        nonlocal wakes
        wakes += 1
        real_wake()

    log._wake = counting_wake  # type: ignore[method-assign]
    log.start()
    # 2,000 events, one every 0.1 ms or so: the pace of a broker at thousands of logins/s.
    for n in range(2_000):
        sweep(log, n)
        if n % 10 == 0:
            time.sleep(0.001)
    deadline = time.monotonic() + 10
    while log.written < 2_000 and time.monotonic() < deadline:
        time.sleep(0.005)
    assert log.written == 2_000
    # Before: one wake-up each time the queue turned non-empty (hundreds here).
    assert wakes <= 50, wakes
    # Parked now (nothing for far longer than the linger): the next event wakes it, and it
    # reaches the file.
    time.sleep(0.2)
    before = wakes
    sweep(log, 2_000)
    deadline = time.monotonic() + 5
    while len(lines(tmp_path)) < 2_001 and time.monotonic() < deadline:
        time.sleep(0.002)
    assert len(lines(tmp_path)) == 2_001
    assert wakes <= before + 1  # one wake-up, or none if the writer had not parked yet
    log.close()


def _revoke_common() -> dict:
    return {"action": "revoke", "outcome": "success", "error_code": 0, "error": "NONE",
            "requester": "User:admin", "reason": "revoked_by_owner"}


def test_a_bulk_of_events_is_built_by_the_writer_one_line_per_row(tmp_path: Path) -> None:
    clock = FakeClock(T0)
    log = AuditLog(tmp_path, 3, clock=clock)
    log.start()
    hmac_like = base64.b64encode(bytes(range(64))).decode()
    rows = [{"owner": "User:bulk", "token_id": f"t{n}"} for n in range(130)]
    rows[7]["owner"] = hmac_like  # a client-chosen name that looks like a secret
    assert log.emit_many("token", _revoke_common(), rows) == 130
    sweep(log, 1)  # a single event after the bulk keeps its place
    log.close()
    events = lines(tmp_path)
    assert [e.get("token_id") for e in events] == [f"t{n}" for n in range(130)] + ["token-1"]
    bulk = events[:130]
    assert all(e["type"] == "token" and e["action"] == "revoke" and e["ts"] == T0
               and e["broker_id"] == 3 and e["requester"] == "User:admin" for e in bulk)
    assert len({e["event_id"] for e in bulk}) == 130
    assert bulk[7]["owner"] == REDACTED and hmac_like not in files(tmp_path)[0].read_text()
    assert log.written == 131 and log.dropped == 0


def test_a_bulk_whose_shape_is_wrong_is_refused_whole_and_a_bad_later_row_is_counted(
        tmp_path: Path) -> None:
    log = AuditLog(tmp_path, 1, clock=FakeClock(T0))
    log.start()
    with pytest.raises(AuditEventError):
        log.emit_many("token", _revoke_common(), [{"token_id": "t0", "hmac": "c2VjcmV0"}])
    assert log.queue_depth == 0
    rows = [{"token_id": "t0"}, {"token_id": "t1", "salted_password": "x"}, {"token_id": "t2"}]
    assert log.emit_many("token", _revoke_common(), rows) == 3
    log.close()
    events = [e for e in lines(tmp_path) if e["type"] == "token"]
    assert [e["token_id"] for e in events] == ["t0", "t2"]
    assert log.dropped == 1 and "x" not in {e.get("salted_password") for e in events}


def test_a_bulk_takes_one_place_in_a_full_queue_and_is_dropped_whole(tmp_path: Path) -> None:
    log = AuditLog(tmp_path, 1, queue_size=2, clock=FakeClock(T0))  # not started: fills
    assert log.emit_many("token", _revoke_common(), [{"token_id": "a"}, {"token_id": "b"}]) == 2
    assert sweep(log, 1)
    assert log.emit_many("token", _revoke_common(), [{"token_id": "c"}]) == 0
    assert log.dropped == 1 and log.queue_depth == 2
    log.start()
    log.close()
    assert [e.get("token_id") for e in lines(tmp_path)][1:] == ["a", "b", "token-1"]
