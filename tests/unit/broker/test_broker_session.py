"""The connection state machine, without sockets."""

from __future__ import annotations

import pytest

from tokensvc.broker.context import RequestContext
from tokensvc.broker.sessions.session import IllegalSaslState, Route, Session, State
from tokensvc.core.principal import KafkaPrincipal
from tokensvc.protocol.api import ApiKey

ALICE = KafkaPrincipal.user("alice")


def sasl_session() -> Session:
    return Session.for_listener("SASL_PLAINTEXT", "SASL_PLAINTEXT", "127.0.0.1", 5000)


def test_new_sasl_connection_allows_only_versions_and_handshake():
    s = sasl_session()
    assert s.state is State.EXPECT_HANDSHAKE
    assert s.allowed(18) and s.allowed(17)
    assert not s.allowed(36)
    assert not s.allowed(38)
    assert not s.allowed(3)


def test_handshake_v1_then_authenticate_then_everything():
    s = sasl_session()
    s.on_handshake(1)
    assert s.allowed(36) and not s.allowed(3)
    s.on_sasl_continue()
    s.on_sasl_success(ALICE, "SCRAM-SHA-256", None, 0, 1000)
    assert s.state is State.AUTHENTICATED
    assert s.allowed(3) and s.allowed(38)
    assert s.principal == ALICE


def test_handshake_v0_switches_to_raw_sasl_tokens():
    s = sasl_session()
    s.on_handshake(0)
    assert s.raw_sasl
    assert not s.allowed(36)
    s.on_sasl_continue()
    s.on_sasl_success(ALICE, "SCRAM-SHA-256", None, 0, 0)
    assert s.state is State.AUTHENTICATED and not s.raw_sasl


def _never() -> int:
    raise AssertionError("the clock was read where the lifetime does not matter")


def test_each_state_routes_the_login_apis_and_refuses_the_rest():
    s = sasl_session()
    assert s.route(ApiKey.API_VERSIONS, _never) is Route.API_VERSIONS
    assert s.route(ApiKey.SASL_HANDSHAKE, _never) is Route.HANDSHAKE
    assert s.route(ApiKey.SASL_AUTHENTICATE, _never) is Route.REFUSE
    assert s.route(ApiKey.CREATE_DELEGATION_TOKEN, _never) is Route.REFUSE
    s.on_handshake(1)
    assert s.route(ApiKey.API_VERSIONS, _never) is Route.API_VERSIONS
    assert s.route(ApiKey.SASL_AUTHENTICATE, _never) is Route.AUTHENTICATE
    assert s.route(ApiKey.SASL_HANDSHAKE, _never) is Route.REFUSE
    assert s.route(ApiKey.METADATA, _never) is Route.REFUSE
    s.on_sasl_success(ALICE, "SCRAM-SHA-256", None, 0, 0)
    now = lambda: 0  # no lifetime (expires_at_ms 0)
    assert s.route(ApiKey.METADATA, now) is Route.REQUEST
    assert s.route(ApiKey.ENVELOPE, now) is Route.REQUEST
    assert s.route(ApiKey.SASL_AUTHENTICATE, now) is Route.AUTHENTICATE
    assert s.route(ApiKey.SASL_HANDSHAKE, _never) is Route.HANDSHAKE
    s.on_handshake(1)
    assert s.route(ApiKey.SASL_AUTHENTICATE, _never) is Route.AUTHENTICATE
    assert s.route(ApiKey.API_VERSIONS, _never) is Route.REFUSE
    assert s.route(ApiKey.METADATA, _never) is Route.REFUSE
    s.close()
    assert s.route(ApiKey.API_VERSIONS, _never) is Route.REFUSE


def test_raw_sasl_frames_are_not_requests():
    s = sasl_session()
    s.on_handshake(0)
    assert s.raw_sasl
    for api in ApiKey:
        assert s.route(api, _never) is Route.REFUSE


def test_after_its_lifetime_a_session_may_only_begin_a_reauthentication():
    s = sasl_session()
    s.on_handshake(1)
    s.on_sasl_success(ALICE, "SCRAM-SHA-256", None, 5_000, 0)
    assert s.route(ApiKey.METADATA, lambda: 5_000) is Route.EXPIRED
    assert s.route(ApiKey.API_VERSIONS, lambda: 5_000) is Route.EXPIRED
    assert s.route(ApiKey.SASL_AUTHENTICATE, lambda: 5_000) is Route.EXPIRED
    assert s.route(ApiKey.SASL_HANDSHAKE, _never) is Route.HANDSHAKE
    assert s.route(ApiKey.METADATA, lambda: 4_999) is Route.REQUEST


def test_plaintext_is_authenticated_from_the_start():
    s = Session.for_listener("PLAINTEXT", "PLAINTEXT", "127.0.0.1", 5000)
    assert s.route(ApiKey.CREATE_DELEGATION_TOKEN, lambda: 0) is Route.REQUEST
    assert not s.raw_sasl


def test_authenticate_before_handshake_is_illegal_and_closes():
    s = sasl_session()
    with pytest.raises(IllegalSaslState):
        s.on_sasl_continue()
    assert s.state is State.CLOSED


def test_reauthentication_must_keep_the_principal():
    s = sasl_session()
    s.on_handshake(1)
    s.on_sasl_success(ALICE, "SCRAM-SHA-256", None, 0, 0)
    s.on_handshake(1)
    assert s.state is State.REAUTHENTICATING
    assert not s.allowed(3)
    with pytest.raises(IllegalSaslState):
        s.on_sasl_success(KafkaPrincipal.user("bob"), "SCRAM-SHA-256", None, 0, 0)
    assert s.state is State.CLOSED


def test_reauthentication_with_the_same_principal_moves_the_lifetime():
    s = sasl_session()
    s.on_handshake(1)
    token_alice = KafkaPrincipal("User", "alice", token_authenticated=True)
    s.on_sasl_success(token_alice, "SCRAM-SHA-256", "tok", 5_000, 1_000)
    assert s.expired(5_000) and not s.expired(4_999)
    s.on_handshake(1)
    s.on_sasl_success(token_alice, "SCRAM-SHA-256", "tok", 9_000, 4_000)
    assert not s.expired(5_000)
    assert s.authenticated_at_ms == 4_000


def test_reauthentication_needs_handshake_v1():
    s = sasl_session()
    s.on_handshake(1)
    s.on_sasl_success(ALICE, "SCRAM-SHA-256", None, 0, 0)
    with pytest.raises(IllegalSaslState):
        s.on_handshake(0)


def test_plaintext_and_ssl_sessions_start_authenticated_as_anonymous():
    plain = Session.for_listener("PLAINTEXT", "PLAINTEXT", "127.0.0.1", 1)
    assert plain.state is State.AUTHENTICATED
    assert plain.principal == KafkaPrincipal("User", "ANONYMOUS")
    cert = KafkaPrincipal("User", "CN=client")
    two_way = Session.for_listener("SSL", "SSL", "127.0.0.1", 1, ssl_principal=cert)
    assert two_way.principal == cert


def _ctx(principal: KafkaPrincipal, protocol: str) -> RequestContext:
    return RequestContext(
        header=None, principal=principal, listener=protocol, security_protocol=protocol,
        client_host="127.0.0.1", client_port=1, payload=b"",
    )


@pytest.mark.parametrize(
    ("principal", "protocol", "allowed"),
    [
        (ALICE, "SASL_PLAINTEXT", True),
        (ALICE, "SASL_SSL", True),
        (KafkaPrincipal("User", "alice", token_authenticated=True), "SASL_SSL", False),
        (KafkaPrincipal("User", "ANONYMOUS"), "PLAINTEXT", False),
        (KafkaPrincipal("User", "ANONYMOUS"), "SSL", False),
        (KafkaPrincipal("User", "CN=client"), "SSL", True),
    ],
)
def test_token_requests_allowed_follows_kafka(principal, protocol, allowed):
    assert _ctx(principal, protocol).token_requests_allowed is allowed
