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
