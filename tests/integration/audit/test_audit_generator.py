"""The synthetic generator: schema-valid, reproducible, and its ground truth is exact."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from cli.audit_cmd import audit
from tokensvc.audit.events import COMMON_FIELDS, build_event
from tokensvc.audit.generator import GROUND_TRUTH_FILE, SNAPSHOT_FILE, generate
from tokensvc.audit.rules import RULES, ReferenceAudit, RuleSettings
from tokensvc.audit.token_export import read_tokens

EVENTS = 6_000


def read_events(directory: Path) -> list[dict]:
    events = []
    for path in sorted(directory.glob("audit-*.jsonl")):
        events += [json.loads(line) for line in path.read_text().splitlines()]
    return events


def digest(directory: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(directory.iterdir())}


@pytest.fixture(scope="module")
def sharded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """4 shards in 2 worker processes: the path big runs take."""
    out = tmp_path_factory.mktemp("sharded")
    generate(out, EVENTS, seed=5, brokers=3, shard_events=1_500, workers=2)
    return out


def test_writes_exactly_the_requested_number_of_events(sharded: Path) -> None:
    events = read_events(sharded)
    assert len(events) == EVENTS
    assert len({e["event_id"] for e in events}) == EVENTS
    assert {e["broker_id"] for e in events} == {1, 2, 3}
    truth = json.loads((sharded / GROUND_TRUTH_FILE).read_text())
    assert truth["events"] == EVENTS and truth["shards"] == 4
    assert truth["first_ts"] == min(e["ts"] for e in events)
    assert truth["last_ts"] == max(e["ts"] for e in events)


def test_every_line_is_a_valid_schema_event_without_secrets(sharded: Path) -> None:
    for event in read_events(sharded):
        assert event["schema"] == 1
        body = {k: v for k, v in event.items() if k not in COMMON_FIELDS}
        assert build_event(event["type"], body) == {"type": event["type"], **body}


def test_ground_truth_equals_the_reference_over_the_written_files(sharded: Path) -> None:
    """Merging shard results must give what one pass over all files gives."""
    truth = json.loads((sharded / GROUND_TRUTH_FILE).read_text())
    with open(sharded / SNAPSHOT_FILE, encoding="utf-8") as lines:
        snapshot = [token.as_record() for token in read_tokens(lines)]
    reference = ReferenceAudit(RuleSettings(**truth["settings"]))
    for event in sorted(read_events(sharded), key=lambda e: e["ts"]):
        reference.observe(event)
    result = reference.result(snapshot)
    assert result.token_usage == truth["token_usage"]
    assert result.owner_usage == truth["owner_usage"]
    assert {str(h): row for h, row in result.lifecycle.items()} == truth["lifecycle"]
    assert {str(h): row for h, row in result.logins_hourly.items()} == truth["logins_hourly"]
    assert [f.as_dict() for f in result.findings] == truth["findings"]


def test_every_rule_is_planted_and_found(sharded: Path) -> None:
    truth = json.loads((sharded / GROUND_TRUTH_FILE).read_text())
    assert set(truth["planted"]) == set(RULES)
    found = {(f["rule"], f["token_id"]) for f in truth["findings"]}
    found |= {(f["rule"], f["client_host"]) for f in truth["findings"]}
    found |= {(f["rule"], f["owner"]) for f in truth["findings"]}
    for rule, planted in truth["planted"].items():
        for what in planted:
            assert (rule, what) in found, (rule, what)


def test_same_arguments_give_identical_files_whatever_the_workers(
    sharded: Path, tmp_path: Path
) -> None:
    generate(tmp_path, EVENTS, seed=5, brokers=3, shard_events=1_500, workers=1)
    assert digest(tmp_path) == digest(sharded)


def test_another_seed_gives_other_events(tmp_path: Path) -> None:
    generate(tmp_path / "a", 500, seed=1)
    generate(tmp_path / "b", 500, seed=2)
    assert digest(tmp_path / "a") != digest(tmp_path / "b")


def test_zero_events_still_writes_snapshot_and_truth(tmp_path: Path) -> None:
    dataset = generate(tmp_path, 0)
    assert dataset.events == 0 and read_events(tmp_path) == []
    truth = json.loads((tmp_path / GROUND_TRUTH_FILE).read_text())
    assert truth["events"] == 0 and truth["last_ts"] is None
    assert (tmp_path / SNAPSHOT_FILE).exists()


def test_generate_command_reports_what_it_wrote(tmp_path: Path) -> None:
    result = CliRunner().invoke(audit, ["generate", "--events", "800", "--out", str(tmp_path),
                                        "--seed", "3", "--brokers", "2"])
    assert result.exit_code == 0, result.output
    assert "wrote 800 events" in result.output
    assert len(read_events(tmp_path)) == 800
    assert {e["broker_id"] for e in read_events(tmp_path)} == {1, 2}
