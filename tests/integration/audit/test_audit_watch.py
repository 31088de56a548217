"""``audit watch`` against real Spark: the report's findings from the stream, live lines
still being written, each finding once across batches and restarts.

Waits are bounded (the alert file appears, or the test fails after a generous
deadline); nothing here depends on how fast the machine is.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from tests.spark_support import shared_spark
from tests.support.wait import wait_for
from tokensvc.audit.events import authentication_event, stamp, token_event
from tokensvc.audit.generator import GROUND_TRUTH_FILE, generate
from tokensvc.audit.rules import RuleSettings
from tokensvc.audit.watch import WATCH_RULES, WatchError, WatchOptions, run_watch

pytestmark = pytest.mark.spark

DEADLINE_S = 240
SETTINGS = RuleSettings(host_threshold=5, burst_threshold=10, burst_window_s=60)


@pytest.fixture(scope="session")
def spark() -> SparkSession:
    return shared_spark()


class Watcher:
    """``run_watch`` in a thread, stopped on exit."""

    def __init__(self, spark: SparkSession, audit: Path, alerts: Path) -> None:
        self.stop = threading.Event()
        self.errors: list[WatchError] = []
        self.printed: list[str] = []
        options = WatchOptions(str(audit), str(alerts), SETTINGS, trigger_s=0.5, poll_s=0.25)

        def run() -> None:
            try:
                run_watch(spark, options, stop=self.stop, echo=self.printed.append)
            except WatchError as exc:  # reported by the test
                self.errors.append(exc)
        self.thread = threading.Thread(target=run, name="watch", daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.stop.set()
        self.thread.join(120)
        assert not self.thread.is_alive()
        assert not self.errors, self.errors


def alerts(directory: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for path in sorted(directory.glob("alerts-*.jsonl"))
            for line in path.read_text().splitlines()]


def alert_where(directory: Path, watcher: Watcher, **match: Any) -> dict[str, Any]:
    def find() -> dict[str, Any] | None:
        assert not watcher.errors, watcher.errors
        return next((a for a in alerts(directory)
                     if all(a[k] == v for k, v in match.items())), None)
    return wait_for(find, DEADLINE_S, f"alert {match}")


def failed_login(ts: int, n: int, *, token: str, host: str, reason: str = "bad_proof") -> str:
    body = authentication_event(outcome="failure", mechanism="SCRAM-SHA-512", kind="token",
                                username=token, token_id=token, client_host=host,
                                reason=reason)
    return json.dumps(stamp(body, ts=ts, broker_id=9, event_id=f"live{ts:020d}{n:08d}"))


@pytest.fixture(scope="module")
def watched(tmp_path_factory: pytest.TempPathFactory, spark: SparkSession
            ) -> Iterator[tuple[Path, Path, dict[str, Any]]]:
    audit = tmp_path_factory.mktemp("audit")
    generate(audit, 2_000, seed=5, brokers=3)
    truth = json.loads((audit / GROUND_TRUTH_FILE).read_text())
    yield audit, tmp_path_factory.mktemp("alerts"), truth


def key(finding: dict[str, Any]) -> tuple[Any, ...]:
    return finding["rule"], finding["token_id"], finding["client_host"], finding["first_ts"]


def test_watch_raises_the_reports_stream_findings_then_live_ones_once(
        spark: SparkSession, watched: tuple[Path, Path, dict[str, Any]]) -> None:
    audit, alert_dir, truth = watched
    expected = sorted(key(f) for f in truth["findings"] if f["rule"] in WATCH_RULES)
    assert {k[0] for k in expected} == set(WATCH_RULES)  # the generator planted each
    watcher = Watcher(spark, audit, alert_dir)
    try:
        wait_for(lambda: len(alerts(alert_dir)) >= len(expected) or watcher.errors,
                 DEADLINE_S, "the findings of the existing files")
        assert sorted(key(a) for a in alerts(alert_dir)) == expected
        assert len(watcher.printed) == len(expected)

        # A live file, still open: a burst of failed logins on one token, one line cut.
        now = int(time.time() * 1000)
        token = "LiveToken0000000000001"
        live = audit / "audit-9-20991231T000000-0.jsonl"
        with open(live, "w") as fh:
            fh.write("".join(failed_login(now + n, n, token=token, host="198.18.0.7") + "\n"
                             for n in range(10)))
            fh.write(failed_login(now + 10, 10, token=token, host="198.18.0.7")[:30])
            fh.flush()
            burst = alert_where(alert_dir, watcher, rule="failed_login_burst_token",
                                token_id=token)
            assert (burst["first_ts"], burst["last_ts"], burst["count"]) == (now, now + 9, 10)
            # More failures for the same token (the cut line completed), then a new
            # finding to know they were processed: the burst is not raised again.
            fh.write(failed_login(now + 10, 10, token=token, host="198.18.0.7")[30:] + "\n")
            fh.write("".join(failed_login(now + n, n, token=token, host="198.18.0.7") + "\n"
                             for n in range(11, 15)))
            fh.write(failed_login(now + 20, 20, token="NoSuchToken00000000001",
                                  host="198.18.0.8", reason="unknown_token") + "\n")
            fh.flush()
            alert_where(alert_dir, watcher, rule="unknown_token",
                        token_id="NoSuchToken00000000001")
    finally:
        watcher.close()
    raised = [a for a in alerts(alert_dir) if a["token_id"] == token]
    assert [a["rule"] for a in raised] == ["failed_login_burst_token"]
    hosts = [a for a in alerts(alert_dir) if a["client_host"] == "198.18.0.7"]
    assert [(a["rule"], a["count"]) for a in hosts] == [("failed_login_burst_host", 10)]

    # Restarted on the same checkpoint: nothing raised twice, new events still seen.
    before = alerts(alert_dir)
    watcher = Watcher(spark, audit, alert_dir)
    try:
        with open(live, "a") as fh:
            fh.write(failed_login(now + 30, 30, token="Expired000000000000001",
                                  host="198.18.0.9", reason="expired_token") + "\n")
        alert_where(alert_dir, watcher, rule="expired_token_use",
                    token_id="Expired000000000000001")
        # A token revoked (the audit's revoke event), then tried twice: raised once.
        revoked = "Revoked000000000000001"
        with open(live, "a") as fh:
            fh.write(json.dumps(stamp(token_event(
                action="revoke", outcome="success", requester="User:security",
                owner="User:alice", token_id=revoked, reason="revoked_by_id"),
                ts=now + 40, broker_id=9, event_id=f"live{now + 40:020d}{40:08d}")) + "\n")
            fh.writelines(failed_login(now + n, n, token=revoked, host="198.18.0.10",
                                      reason="unknown_token") + "\n" for n in (41, 42))
        found = alert_where(alert_dir, watcher, rule="revoked_token_use", token_id=revoked)
        assert (found["first_ts"], found["count"], found["severity"]) == (now + 41, 2, "high")
    finally:
        watcher.close()
    after = alerts(alert_dir)
    # the expired token's use, the revoked token's use and, for it, unknown_token
    assert len(after) == len(before) + 3
    assert len({key(a) for a in after}) == len(after)
