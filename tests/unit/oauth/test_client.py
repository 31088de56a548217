"""The client side's token sources: the cache of a client-credentials grant (its fetch
replaced: no network) and the token file."""

from __future__ import annotations

import pytest

from tokensvc.oauth.client import ClientCredentials, TokenUnavailable, read_token_file


def grant_with(answers: list[tuple[str, float]], now: list[float]) -> ClientCredentials:
    grant = ClientCredentials("https://idp.example/token", "etl", "s3cret", "kafka",
                              now=lambda: now[0])
    object.__setattr__(grant, "_fetch", lambda: answers.pop(0))
    return grant


def test_a_token_is_reused_until_80_percent_of_its_lifetime():
    now = [0.0]
    grant = grant_with([("t1", 100.0), ("t2", 100.0)], now)
    assert grant.token() == "t1"
    now[0] = 79.0
    assert grant.token() == "t1"
    now[0] = 80.0
    assert grant.token() == "t2"


def test_the_secret_is_not_in_the_repr():
    assert "s3cret" not in repr(grant_with([], [0.0]))


def test_a_token_file_is_read_fresh_each_time(tmp_path):
    path = tmp_path / "token"
    path.write_text("jwt-1\n")
    assert read_token_file(str(path)) == "jwt-1"
    path.write_text("jwt-2")
    assert read_token_file(str(path)) == "jwt-2"


@pytest.mark.parametrize("content", [None, "", "   \n"])
def test_a_missing_or_empty_token_file_is_unavailable(tmp_path, content):
    path = tmp_path / "token"
    if content is not None:
        path.write_text(content)
    with pytest.raises(TokenUnavailable, match=str(path)):
        read_token_file(str(path))
