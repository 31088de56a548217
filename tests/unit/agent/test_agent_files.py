"""The credentials-file contract (render/parse, every format) and atomic writes."""

from __future__ import annotations

import json
import os
import stat
import threading

import pytest

from tokensvc.agent.credentials import FORMATS, Credentials, CredentialsError, parse, render, sniff
from tokensvc.agent.files import check_writable, write_atomic
from tokensvc.agent.schedule import Held
from tokensvc.agent.state import AgentState, HeldToken, StateError, StateFile
from tokensvc.properties import parse_properties

CREDS = Credentials("Zm9vYmFyYmF6cXV4cXV1eA", "c2VjcmV0K2htYWMvd2l0aD1wYWRkaW5nPQ==",
                    "User:etl-job", 1_700_000_000_000, 1_700_086_400_000, 1_700_604_800_000)


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_format_reads_back_what_was_written(fmt: str) -> None:
    data = render(CREDS, fmt, written_at_ms=5)
    assert sniff(data) == fmt
    assert parse(data) == CREDS


def test_properties_are_what_kafka_clients_take() -> None:
    props = parse_properties(render(CREDS, "properties", 0).decode())
    assert props["sasl.username"] == CREDS.token_id
    assert props["sasl.password"] == CREDS.hmac_b64
    assert props["sasl.mechanism"] == "SCRAM-SHA-512"
    assert props["security.protocol"] == "SASL_PLAINTEXT"
    assert props["sasl.jaas.config"] == (
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="{CREDS.token_id}" password="{CREDS.hmac_b64}" tokenauth=true;')
    # Plain lines: a shell's cut -d= -f2- gets the password too.
    line = next(x for x in render(CREDS, "properties", 0).decode().splitlines()
                if x.startswith("sasl.password="))
    assert line.split("=", 1)[1] == CREDS.hmac_b64


def test_json_has_the_documented_fields() -> None:
    body = json.loads(render(CREDS, "json", 42))
    assert body == {"token_id": CREDS.token_id, "hmac": CREDS.hmac_b64, "owner": "User:etl-job",
                    "issue_timestamp_ms": CREDS.issue_ms, "expiry_timestamp_ms": CREDS.expiry_ms,
                    "max_timestamp_ms": CREDS.max_ms, "sasl_mechanism": "SCRAM-SHA-512",
                    "security_protocol": "SASL_PLAINTEXT", "labels": {}, "written_at_ms": 42}


def test_json_carries_the_labels_and_reads_them_back() -> None:
    labelled = Credentials("tok", "x", "User:a", 1, 2, 3,
                           labels=(("agent/host", "h1"), ("job", 'etl "nightly"')))
    body = json.loads(render(labelled, "json", 7))
    assert body["labels"] == {"agent/host": "h1", "job": 'etl "nightly"'}
    assert parse(render(labelled, "json", 7)) == labelled


def test_env_values_with_shell_characters_are_quoted() -> None:
    odd = Credentials("tok", "x", "User:a b$c", 1, 2, 3)
    text = render(odd, "env", 0).decode()
    assert "TOKENSVC_TOKEN_OWNER='User:a b$c'" in text
    assert parse(text.encode()) == odd


@pytest.mark.parametrize("cut", [0, 10, 60, 150])
def test_a_cut_short_file_is_refused_never_half_applied(cut: int) -> None:
    for fmt in FORMATS:
        data = render(CREDS, fmt, 0)[:cut]
        with pytest.raises(CredentialsError):
            parse(data)


def test_the_repr_hides_the_hmac() -> None:
    assert CREDS.hmac_b64 not in repr(CREDS)


def test_write_atomic_replaces_with_mode_0600_and_leaves_no_temporary(tmp_path) -> None:
    target = tmp_path / "creds.properties"
    target.write_text("old")
    os.chmod(target, 0o644)
    write_atomic(target, b"new")
    assert target.read_bytes() == b"new"
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert os.listdir(tmp_path) == ["creds.properties"]


def test_write_atomic_of_parts_writes_their_concatenation(tmp_path) -> None:
    target = tmp_path / "snapshot"
    target.write_bytes(b"old")
    write_atomic(target, [b"head", b"", b"-middle-", b"tail"])
    assert target.read_bytes() == b"head-middle-tail"
    assert os.listdir(tmp_path) == ["snapshot"]


def test_a_reader_never_sees_a_partial_or_empty_file(tmp_path) -> None:
    target = tmp_path / "creds.json"
    write_atomic(target, render(CREDS, "json", 0))
    stop = threading.Event()
    bad: list[bytes] = []

    def read() -> None:
        while not stop.is_set():
            data = target.read_bytes()
            try:
                parse(data)
            except CredentialsError:
                bad.append(data)

    reader = threading.Thread(target=read)
    reader.start()
    for i in range(2000):
        write_atomic(target, render(Credentials(f"t{i}", "aGk=", "User:a", i, i + 1, i + 2),
                                    "json", i))
    stop.set()
    reader.join()
    assert bad == []


def test_write_into_a_missing_directory_fails_and_check_writable_says_why(tmp_path) -> None:
    with pytest.raises(OSError):
        write_atomic(tmp_path / "nope" / "f", b"x")
    assert "does not exist" in check_writable(tmp_path / "nope" / "f")
    assert "is a directory" in check_writable(tmp_path)
    assert check_writable(tmp_path / "f") is None


def test_state_round_trips_and_refuses_another_owners_file(tmp_path) -> None:
    state = AgentState(owner="User:job", period_ms=20_000,
                       current=HeldToken(Held("a", 1, 2, 3, 4), b"\x01\x02"),
                       retiring=[HeldToken(Held("b", 1, 2, 3, None, 9), b"\x03")],
                       create_started_ms=7, clock_offset_ms=-600_000, clock_uncertainty_ms=12)
    file = StateFile(tmp_path / "state.json")
    file.save(state)
    assert stat.S_IMODE((tmp_path / "state.json").stat().st_mode) == 0o600
    assert file.load("User:job") == state
    with pytest.raises(StateError, match="belongs to a job of User:job"):
        file.load("User:other")
    (tmp_path / "state.json").write_text('{"version": 1, "owner": "User:job", "current": {}}')
    with pytest.raises(StateError):
        file.load("User:job")


def test_a_closed_watcher_lets_go_of_its_clients(tmp_path) -> None:
    from tokensvc.agent.clients import CredentialsWatcher

    path = tmp_path / "creds.json"
    write_atomic(path, render(CREDS, "json", 1))
    applied: list[str] = []
    watcher = CredentialsWatcher(path, poll_interval_s=60).start()
    watcher.add_listener(lambda creds: applied.append(creds.token_id))
    write_atomic(path, render(Credentials("bmV4dA", "aG1hYw==", "User:etl-job", 1, 2, 3),
                              "json", 2))
    assert watcher.poll() and applied == ["bmV4dA"]
    watcher.close()
    # A closed watcher holds no listener (they hold the clients): a later token reaches none.
    write_atomic(path, render(Credentials("dGhpcmQ", "aG1hYw==", "User:etl-job", 1, 2, 3),
                              "json", 3))
    assert watcher.poll() and applied == ["bmV4dA"]
