"""The OAUTHBEARER steps and the token policy against fake services and a fake clock: no
broker, no socket, no key fetch (the authenticator is a fake that answers per token)."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace

import pytest

from tests.unit.broker.test_handlers_with_fakes import FakeTokens
from tokensvc.broker.context import RequestContext
from tokensvc.broker.handlers.oauthbearer import OAuthReauthenticationRefused
from tokensvc.broker.handlers.sasl import begin_handshake, evaluate
from tokensvc.broker.handlers.tokens import handle_create, precheck_create
from tokensvc.broker.sessions.session import Session, State
from tokensvc.core.clock import FakeClock
from tokensvc.core.errors import Errors
from tokensvc.core.keys import MasterKeys
from tokensvc.core.principal import KafkaPrincipal
from tokensvc.oauth.exchange import OAuthAuthenticationFailed, client_first_message
from tokensvc.oauth.mappings import Identity, TokenPolicy
from tokensvc.oauth.refusals import OAuthRefusal, TokenFacts
from tokensvc.oauth.validator import VerifiedToken
from tokensvc.protocol import RequestHeader, decode_request

NOW = 1_800_000_000_000
ETL = KafkaPrincipal.user("payments-etl")
ISSUER = "https://k8s.example"


def identity(principal: KafkaPrincipal = ETL, exp_ms: int = NOW + 600_000,
             policy: TokenPolicy | None = None) -> Identity:
    token = VerifiedToken(ISSUER, "system:serviceaccount:payments:etl", frozenset(), exp_ms,
                          NOW, "jti-1", "k1", {})
    return Identity(principal, "payments-etl", policy or TokenPolicy(), token)


class FakeAuthenticator:
    """Answers each JWT from a table: an Identity, or an OAuthRefusal to raise."""

    def __init__(self, answers: dict) -> None:
        self.answers = answers

    async def authenticate(self, token: str) -> Identity:
        answer = self.answers[token]
        if isinstance(answer, OAuthRefusal):
            raise answer
        return answer


def services(answers: dict, *, reauth_ms: int = 0):
    events: list[dict] = []
    logins: list[tuple] = []
    return SimpleNamespace(
        config=SimpleNamespace(sasl_enabled_mechanisms=("SCRAM-SHA-512", "OAUTHBEARER"),
                               sasl_max_message_bytes=65_536,
                               connections_max_reauth_ms=reauth_ms,
                               connection_failed_authentication_delay_ms=0,
                               request_timeout_ms=1000, master_keys=MasterKeys("k"),
                               delegation_token_max_per_owner=0),
        clock=FakeClock(NOW),
        audit=SimpleNamespace(required=False, refusal=lambda: None, events=events,
                              emit=lambda event_type, **f: events.append({"type": event_type, **f})),
        metrics=SimpleNamespace(login=lambda *a: logins.append(a),
                                reauthentication=lambda *a: logins.append(("reauth", *a)),
                                token_request=lambda *a, **k: None),
        auth=SimpleNamespace(oauth=FakeAuthenticator(answers), clock_gate=None,
                             sessions=SimpleNamespace(bind=lambda session: None)),
        authz=SimpleNamespace(authorize=lambda *a: True),
        tokens=FakeTokens(FakeClock(NOW)),
        logins=logins,
    )


def new_session() -> Session:
    return Session.for_listener("SASL_PLAINTEXT", "SASL_PLAINTEXT", "10.0.0.7", 5555)


def login(s, session: Session, token: str) -> tuple[bytes, int]:
    assert begin_handshake(s, session, "OAUTHBEARER", 1) == Errors.NONE
    return asyncio.run(evaluate(s, session, client_first_message(token)))


def test_an_accepted_jwt_authenticates_the_mapped_principal_until_its_exp():
    s = services({"good": identity()})
    session = new_session()
    challenge, lifetime = login(s, session, "good")
    assert (challenge, lifetime) == (b"", 600_000)
    assert session.state is State.AUTHENTICATED and session.principal == ETL
    assert session.expires_at_ms == NOW + 600_000
    assert session.identity.mapping == "payments-etl"
    event = s.audit.events[-1]
    assert (event["outcome"], event["kind"], event["principal"]) == ("success", "oauth",
                                                                     "User:payments-etl")
    assert event["oauth"] == {"issuer": ISSUER, "subject": "system:serviceaccount:payments:etl",
                              "jti": "jti-1", "expiry_ms": NOW + 600_000, "kid": "k1",
                              "mapping": "payments-etl"}


def test_connections_max_reauth_ms_caps_the_session_below_the_exp():
    s = services({"good": identity()}, reauth_ms=60_000)
    session = new_session()
    assert login(s, session, "good")[1] == 60_000
    assert session.expires_at_ms == NOW + 60_000


def test_a_refused_jwt_gets_the_error_challenge_then_fails_on_the_ack():
    facts = TokenFacts(ISSUER, "system:serviceaccount:payments:etl", "jti-9", NOW - 1000, "k1")
    s = services({"old": OAuthRefusal("expired", facts)})
    session = new_session()
    challenge, lifetime = login(s, session, "old")
    assert json.loads(challenge) == {"status": "invalid_token"} and lifetime == 0
    assert session.state is State.EXPECT_AUTHENTICATE
    event = s.audit.events[-1]
    assert (event["outcome"], event["reason"], event["principal"]) == ("failure", "expired", None)
    assert event["oauth"]["jti"] == "jti-9" and event["oauth"]["issuer"] == ISSUER
    with pytest.raises(OAuthAuthenticationFailed, match="the JWT has expired"):
        asyncio.run(evaluate(s, session, b"\x01"))
    assert session.state is State.CLOSED
    assert len(s.audit.events) == 1  # audited once, at the refusal


def test_a_malformed_first_message_fails_at_once_and_is_audited():
    s = services({})
    session = new_session()
    assert begin_handshake(s, session, "OAUTHBEARER", 1) == Errors.NONE
    with pytest.raises(OAuthAuthenticationFailed, match="malformed"):
        asyncio.run(evaluate(s, session, b"n,,\x01auth=Basic abc\x01\x01"))
    assert session.state is State.CLOSED
    assert s.audit.events[-1]["reason"] == "malformed"


def test_a_reauthentication_must_keep_the_principal():
    s = services({"etl": identity(), "other": identity(KafkaPrincipal.user("someone"))})
    session = new_session()
    login(s, session, "etl")
    assert login(s, session, "etl")[0] == b""  # the same principal: fine
    assert s.audit.events[-1]["reason"] == "reauthenticated"
    with pytest.raises(OAuthReauthenticationRefused, match="Cannot change principals"):
        login(s, session, "other")
    assert session.state is State.CLOSED


def test_the_mechanism_of_the_first_login_is_kept():
    s = services({"etl": identity()})
    session = new_session()
    login(s, session, "etl")
    assert begin_handshake(s, session, "SCRAM-SHA-512", 1) == Errors.UNSUPPORTED_SASL_MECHANISM


# -- the token policy on the create path ---------------------------------------------------


def ctx_for(s, session: Session, version: int = 3, body: dict | None = None) -> RequestContext:
    header = RequestHeader(38, version, 7, "c")
    return RequestContext(header, session.principal, "SASL_PLAINTEXT", "SASL_PLAINTEXT",
                          "10.0.0.7", 5555, b"", session=session)


def create_body(**fields) -> dict:
    return {"OwnerPrincipalType": None, "OwnerPrincipalName": None, "Renewers": [],
            "MaxLifetimeMs": -1, "Labels": [], **fields}


def test_a_create_gets_the_mappings_lifetime_cap_and_labels():
    policy = TokenPolicy(3_600_000, (("namespace", "payments"),))
    s = services({"etl": identity(policy=policy)})
    session = new_session()
    login(s, session, "etl")
    created = asyncio.run(handle_create(s, ctx_for(s, session), create_body(
        MaxLifetimeMs=86_400_000, Labels=[{"Key": "namespace", "Value": "spoof"},
                                          {"Key": "job", "Value": "x"}])))
    assert created["ErrorCode"] == 0
    assert created["MaxTimestampMs"] - created["IssueTimestampMs"] == 3_600_000
    assert {lb["Key"]: lb["Value"] for lb in created["Labels"]} == {"namespace": "payments",
                                                                   "job": "x"}


def test_a_forwarding_broker_forwards_the_rewritten_request():
    policy = TokenPolicy(3_600_000, (("namespace", "payments"),))
    s = services({"etl": identity(policy=policy)})
    session = new_session()
    login(s, session, "etl")
    ctx = ctx_for(s, session)
    assert precheck_create(s, ctx, create_body()) is None
    _, forwarded = decode_request(ctx.payload)
    assert forwarded["MaxLifetimeMs"] == 3_600_000
    assert forwarded["Labels"] == [{"Key": "namespace", "Value": "payments"}]


def test_a_create_for_another_owner_is_refused_unless_the_mapping_allows_it():
    s = services({"etl": identity()})
    session = new_session()
    login(s, session, "etl")
    body = create_body(OwnerPrincipalType="User", OwnerPrincipalName="boss")
    refused = asyncio.run(handle_create(s, ctx_for(s, session), body))
    assert refused["ErrorCode"] == Errors.DELEGATION_TOKEN_AUTHORIZATION_FAILED
    assert s.tokens.writes == []
    assert s.audit.events[-1]["reason"] == "oauth_policy"
    allowed = services({"etl": identity(policy=TokenPolicy(create_for_other_owners=True))})
    session = new_session()
    login(allowed, session, "etl")
    body = create_body(OwnerPrincipalType="User", OwnerPrincipalName="boss")
    assert asyncio.run(handle_create(allowed, ctx_for(allowed, session), body))["ErrorCode"] == 0


def test_a_labelling_mapping_refuses_a_create_too_old_to_carry_labels():
    s = services({"etl": identity(policy=TokenPolicy(labels=(("namespace", "payments"),)))})
    session = new_session()
    login(s, session, "etl")
    body = {"Renewers": [], "MaxLifetimeMs": -1}
    refused = asyncio.run(handle_create(s, ctx_for(s, session, version=1), body))
    assert refused["ErrorCode"] == Errors.INVALID_REQUEST
    assert s.tokens.writes == []
