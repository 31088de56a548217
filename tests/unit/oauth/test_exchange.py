"""The RFC 7628 exchange, as bytes in and states out."""

from __future__ import annotations

import json

import pytest

from tokensvc.oauth.exchange import (
    OAuthAuthenticationFailed,
    OAuthBearerServer,
    State,
    client_first_message,
    client_reply,
    parse_client_first,
)
from tokensvc.oauth.refusals import OAuthRefusal

TOKEN = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ4In0.c2ln"


def test_client_first_message_is_kafkas_form():
    assert client_first_message(TOKEN) == f"n,,\x01auth=Bearer {TOKEN}\x01\x01".encode()
    assert client_first_message(TOKEN, "a,b=c", {"x": "1"}) == (
        f"n,a=a=2Cb=3Dc,\x01auth=Bearer {TOKEN}\x01x=1\x01\x01".encode())


def test_parse_reads_authzid_token_and_extensions():
    first = parse_client_first(client_first_message(TOKEN, "a,b=c", {"traceId": "t 1"}))
    assert (first.authzid, first.token, first.extensions) == ("a,b=c", TOKEN, {"traceId": "t 1"})


@pytest.mark.parametrize("data", [
    b"", b"n,,", f"n,,\x01auth=Basic {TOKEN}\x01\x01".encode(),
    f"y,,\x01auth=Bearer {TOKEN}\x01\x01".encode(), f"n,,\x01auth=Bearer {TOKEN}\x01".encode(),
    b"\xff\xfe", b"n,,\x01auth=Bearer a b\x01\x01",
])
def test_malformed_first_messages_are_refused(data):
    with pytest.raises(OAuthRefusal) as caught:
        parse_client_first(data)
    assert caught.value.reason == "malformed"


def test_an_accepted_token_completes_the_exchange():
    server = OAuthBearerServer(4096)
    first = server.first(client_first_message(TOKEN))
    server.accept(first, "etl")
    assert server.complete


def test_a_refused_token_gets_the_error_challenge_then_fails_on_the_clients_ack():
    server = OAuthBearerServer(4096)
    server.first(client_first_message(TOKEN))
    challenge = server.refuse(OAuthRefusal("expired"))
    assert json.loads(challenge) == {"status": "invalid_token"}
    assert server.state is State.ERROR_SENT
    assert client_reply(challenge) == b"\x01"
    with pytest.raises(OAuthAuthenticationFailed, match="Authentication failed: the JWT has expired"):
        server.acknowledge(b"\x01")
    assert server.state is State.FAILED


def test_anything_but_the_ack_after_the_error_fails_without_the_reason():
    server = OAuthBearerServer(4096)
    server.first(client_first_message(TOKEN))
    server.refuse(OAuthRefusal("expired"))
    with pytest.raises(OAuthAuthenticationFailed, match="expected the client's %x01"):
        server.acknowledge(client_first_message(TOKEN))


def test_a_second_first_message_fails():
    server = OAuthBearerServer(4096)
    server.first(client_first_message(TOKEN))
    with pytest.raises(OAuthAuthenticationFailed):
        server.first(client_first_message(TOKEN))


def test_an_authzid_other_than_the_principal_is_refused():
    server = OAuthBearerServer(4096)
    first = server.first(client_first_message(TOKEN, "admin"))
    with pytest.raises(OAuthRefusal) as caught:
        server.accept(first, "etl")
    assert caught.value.reason == "authzid_mismatch"
    assert not server.complete


def test_a_message_over_the_limit_is_refused_unread():
    with pytest.raises(OAuthRefusal) as caught:
        OAuthBearerServer(64).first(client_first_message(TOKEN * 3))
    assert caught.value.reason == "oversized"


def test_client_reply_to_success_is_none():
    assert client_reply(b"") is None


def test_a_token_with_control_characters_is_not_sent():
    with pytest.raises(ValueError):
        client_first_message("abc\x01def")
