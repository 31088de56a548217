"""The audit event schema: constructors, the envelope, and the secret guard."""

from __future__ import annotations

import base64

import pytest

from tokensvc.audit.events import (
    COMMON_FIELDS,
    CONSTRUCTORS,
    AuditEventError,
    authentication_event,
    build_event,
    check_no_secrets,
    stamp,
    sweep_event,
    token_event,
)

HMAC_B64 = base64.b64encode(bytes(range(64))).decode()  # what a token's HMAC looks like


def test_authentication_event_has_exactly_the_schema_fields() -> None:
    event = authentication_event(
        outcome="failure", mechanism="SCRAM-SHA-256", kind="token", username="tok1",
        token_id="tok1", client_host="10.0.0.1", client_port=5555, listener="SASL_PLAINTEXT",
        reason="expired_token",
    )
    assert event == {
        "type": "authentication", "outcome": "failure", "mechanism": "SCRAM-SHA-256",
        "kind": "token", "implicit": False, "username": "tok1", "token_id": "tok1",
        "principal": None, "client_host": "10.0.0.1", "client_port": 5555,
        "listener": "SASL_PLAINTEXT", "reason": "expired_token", "client_id": None,
    }


def test_token_event_fields_not_given_are_null_and_renewers_become_a_list() -> None:
    event = token_event(action="create", outcome="success", requester="User:alice",
                        owner="User:alice", token_id="t", renewers=("User:bob",))
    assert event["renewers"] == ["User:bob"]
    assert event["expiry_ms"] is None and event["count"] is None
    assert event["token_authenticated"] is False and event["forwarded"] is False
    assert event["error_code"] == 0
    assert event["client_id"] is None


def test_token_event_carries_the_client_id_that_tells_agent_made_tokens() -> None:
    event = token_event(action="create", outcome="success", requester="User:svc",
                        owner="User:job", token_id="t", client_id="tokensvc-agent")
    assert event["client_id"] == "tokensvc-agent"


@pytest.mark.parametrize("event_type", sorted(CONSTRUCTORS))
def test_every_type_rejects_an_unknown_field(event_type: str) -> None:
    with pytest.raises(AuditEventError, match=event_type):
        build_event(event_type, {"no_such_field": 1})


def test_unknown_event_type_is_rejected() -> None:
    with pytest.raises(AuditEventError, match="unknown audit event type"):
        build_event("tokens", {})


@pytest.mark.parametrize(
    ("event_type", "fields"),
    [
        ("authentication", {"outcome": "ok"}),
        ("authentication", {"outcome": "success", "kind": "service"}),
        ("token", {"action": "delete", "outcome": "success"}),
        ("token", {"action": "renew", "outcome": "failure", "error_code": "62"}),
        ("sweep", {"token_id": "t", "reason": "because"}),
        ("session", {"action": "closed"}),
        ("acl", {"action": "update", "outcome": "success"}),
        ("credential", {"action": "create", "outcome": "success"}),
    ],
)
def test_values_outside_the_vocabulary_are_rejected(event_type: str, fields: dict) -> None:
    with pytest.raises(AuditEventError):
        build_event(event_type, fields)


def test_stamp_puts_the_common_fields_first() -> None:
    event = stamp(sweep_event(token_id="t", reason="max_lifetime"), ts=5, broker_id=2,
                  event_id="e" * 32)
    assert tuple(event)[:5] == COMMON_FIELDS
    assert event["schema"] == 1 and event["type"] == "sweep" and event["ts"] == 5


@pytest.mark.parametrize(
    "name", ["hmac", "HMAC", "password", "salt", "stored_key", "server_key", "master_key",
             "secret", "token_hmac", "key"],
)
def test_secret_looking_field_names_are_refused(name: str) -> None:
    with pytest.raises(AuditEventError, match=name):
        check_no_secrets({"type": "token", name: "x"})


def test_identifier_fields_named_like_keys_are_allowed() -> None:
    check_no_secrets({"token_id": "abc", "event_id": "0" * 32, "key_id": "k1"})


@pytest.mark.parametrize(
    "value",
    [
        HMAC_B64,  # standard base64 of 64 bytes, padded (88 chars)
        base64.urlsafe_b64encode(bytes(range(64))).decode().rstrip("="),  # 86 chars
        bytes(range(64)).hex(),  # hex of 64 bytes is base64-alphabet too
    ],
)
def test_values_that_look_like_64_byte_base64_are_refused(value: str) -> None:
    with pytest.raises(AuditEventError) as info:
        check_no_secrets({"detail": value})
    assert value not in str(info.value)  # the message never repeats the secret


def test_secrets_nested_in_lists_and_mappings_are_found() -> None:
    with pytest.raises(AuditEventError, match=r"renewers\[1\]"):
        check_no_secrets({"renewers": ["User:a", HMAC_B64]})
    with pytest.raises(AuditEventError, match="extra.password"):
        check_no_secrets({"extra": {"password": "pw"}})


def test_ordinary_values_pass_the_guard() -> None:
    token_id = base64.urlsafe_b64encode(bytes(16)).decode().rstrip("=")
    check_no_secrets({
        "token_id": token_id, "principal": "User:" + "a" * 200,
        "reason": "session lifetime over without re-authentication", "count": 3,
        "renewers": ["User:bob"],
    })


def test_build_event_refuses_an_hmac_passed_under_an_allowed_name() -> None:
    with pytest.raises(AuditEventError):
        build_event("token", {"action": "create", "outcome": "success", "owner": HMAC_B64})
