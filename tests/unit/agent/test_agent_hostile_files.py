"""Agent files another process or an operator wrote, found by tests/fuzz/agent: read as
the agent's declared errors; a token's far-future expiry is still written."""

from __future__ import annotations

import pytest

from tokensvc.agent.credentials import Credentials, CredentialsError, parse, render
from tokensvc.agent.state import StateError, StateFile


def test_credentials_with_an_expiry_beyond_year_9999_are_still_written():
    creds = Credentials("tid", "aG1hYw==", "User:alice", 1, 10**17, 10**18)
    text = render(creds, "properties", 0)
    assert parse(text, "properties") == creds


@pytest.mark.parametrize("data", [b"[" * 100_000, b'{"issue_timestamp_ms": ' + b"1" * 5000 + b"}"],
                         ids=["nested", "huge-int"])
def test_json_credentials_nested_too_deep_or_with_a_huge_integer_are_refused(data):
    with pytest.raises(CredentialsError):
        parse(data, "json")


@pytest.mark.parametrize("data", [b"[" * 100_000, b'{"version": ' + b"1" * 5000 + b"}"],
                         ids=["nested", "huge-int"])
def test_state_file_nested_too_deep_or_with_a_huge_integer_is_a_state_error(tmp_path, data):
    path = tmp_path / "state.json"
    path.write_bytes(data)
    with pytest.raises(StateError):
        StateFile(path).load("User:alice")


@pytest.mark.parametrize("field", ["period_ms", "create_started_ms"])
def test_state_file_with_an_infinite_number_is_a_state_error(tmp_path, field):
    path = tmp_path / "state.json"
    path.write_text(f'{{"version": 1, "owner": "User:alice", "{field}": Infinity}}')
    with pytest.raises(StateError):
        StateFile(path).load("User:alice")


def test_state_file_with_an_infinite_token_time_is_a_state_error(tmp_path):
    path = tmp_path / "state.json"
    path.write_text('{"version": 1, "owner": "User:alice", "current": {"hmac": "", '
                    '"token_id": "t", "issue_ms": Infinity, "expiry_ms": 1, "max_ms": 1}}')
    with pytest.raises(StateError):
        StateFile(path).load("User:alice")


def test_json_credentials_with_an_infinite_time_are_refused():
    data = (b'{"token_id": "t", "hmac": "aG1hYw==", "sasl_mechanism": "SCRAM-SHA-512", '
            b'"security_protocol": "SASL_PLAINTEXT", "owner": "User:a", '
            b'"issue_timestamp_ms": Infinity, "expiry_timestamp_ms": 1, "max_timestamp_ms": 1}')
    with pytest.raises(CredentialsError, match="issue_ms is not a number"):
        parse(data, "json")


@pytest.mark.parametrize("where", ["owner", "label"])
def test_json_credentials_with_a_lone_surrogate_are_refused(where):
    owner = "User:\\ud800" if where == "owner" else "User:a"
    labels = '{"job": "\\ud800"}' if where == "label" else "{}"
    data = (f'{{"token_id": "t", "hmac": "aG1hYw==", "sasl_mechanism": "SCRAM-SHA-512", '
            f'"security_protocol": "SASL_PLAINTEXT", "owner": "{owner}", "labels": {labels}, '
            f'"issue_timestamp_ms": 1, "expiry_timestamp_ms": 2, "max_timestamp_ms": 3}}')
    with pytest.raises(CredentialsError, match="not UTF-8"):
        parse(data.encode(), "json")


def test_properties_credentials_with_a_lone_surrogate_escape_are_refused():
    creds = Credentials("tid", "aG1hYw==", "User:alice", 1, 2, 3)
    text = render(creds, "properties", 0).replace(b"sasl.username=tid", b"sasl.username=\\uD800")
    with pytest.raises(CredentialsError, match="not UTF-8"):
        parse(text, "properties")
