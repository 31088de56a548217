"""The JWT checks, case by case, on a fixed time (no clock read, no I/O)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json

import pytest
from joserfc import jwt
from joserfc.jwk import ECKey, OKPKey, RSAKey

from tokensvc.oauth.refusals import OAuthRefusal
from tokensvc.oauth.validator import MAX_JWT_BYTES, IssuerPolicy, inspect, verify

NOW_S = 1_800_000_000
NOW_MS = NOW_S * 1000
ISSUER = "https://issuer.example"
RSA = RSAKey.generate_key(2048, parameters={"kid": "r1"})
EC = ECKey.generate_key("P-256", parameters={"kid": "e1"})
POLICY = IssuerPolicy(ISSUER, ("tokensvc",))


def claims(**overrides: object) -> dict:
    base = {"iss": ISSUER, "sub": "svc", "aud": ["tokensvc"], "iat": NOW_S - 10,
            "exp": NOW_S + 600, "jti": "j-1", "scope": "kafka tokens"}
    for key, value in overrides.items():
        if value is None:
            base.pop(key)
        else:
            base[key] = value
    return base


def signed(key=RSA, alg: str = "RS256", **overrides: object) -> str:
    return jwt.encode({"alg": alg, "kid": str(key.kid)}, claims(**overrides), key, algorithms=[alg])


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def refusal(token: str, key=RSA, policy: IssuerPolicy = POLICY, now_ms: int = NOW_MS) -> OAuthRefusal:
    with pytest.raises(OAuthRefusal) as caught:
        verify(inspect(token), key, policy, now_ms)
    return caught.value


def test_a_good_token_gives_its_subject_scopes_expiry_and_jti():
    token = verify(inspect(signed()), RSA, POLICY, NOW_MS)
    assert (token.issuer, token.subject, token.jti, token.key_id) == (ISSUER, "svc", "j-1", "r1")
    assert token.scopes == frozenset({"kafka", "tokens"})
    assert token.expiry_ms == (NOW_S + 600) * 1000


@pytest.mark.parametrize("key,alg", [(EC, "ES256"), (OKPKey.generate_key("Ed25519"), "EdDSA")])
def test_ec_and_okp_signatures_verify(key, alg):
    assert verify(inspect(signed(key, alg)), key, POLICY, NOW_MS).subject == "svc"


def test_alg_none_is_refused_before_any_key_is_looked_up():
    token = f"{b64(json.dumps({'alg': 'none'}).encode())}.{b64(json.dumps(claims()).encode())}."
    with pytest.raises(OAuthRefusal) as caught:
        inspect(token)
    assert caught.value.reason == "alg_none"
    assert caught.value.facts.subject == "svc" and caught.value.facts.jti == "j-1"


def test_hmac_keyed_with_the_public_key_is_refused():
    head = f"{b64(json.dumps({'alg': 'HS256', 'kid': 'r1'}).encode())}.{b64(json.dumps(claims()).encode())}"
    pem = RSA.as_pem(private=False)
    token = f"{head}.{b64(hmac.new(pem, head.encode(), hashlib.sha256).digest())}"
    with pytest.raises(OAuthRefusal) as caught:
        inspect(token)
    assert caught.value.reason == "alg_hmac"


def test_an_unlisted_algorithm_is_refused():
    token = f"{b64(json.dumps({'alg': 'RSA1_5'}).encode())}.{b64(json.dumps(claims()).encode())}.AAAA"
    with pytest.raises(OAuthRefusal) as caught:
        inspect(token)
    assert caught.value.reason == "alg_not_allowed"


def test_an_algorithm_the_issuer_does_not_allow_is_refused():
    policy = IssuerPolicy(ISSUER, ("tokensvc",), algorithms=("ES256",))
    assert refusal(signed(), policy=policy).reason == "alg_not_allowed"


def test_an_oversized_token_is_refused_unread():
    with pytest.raises(OAuthRefusal) as caught:
        inspect("a" * (MAX_JWT_BYTES + 1))
    assert caught.value.reason == "oversized"
    assert caught.value.facts.issuer is None


@pytest.mark.parametrize("text", ["", "not-a-jwt", "a.b", "e30.bm90IGpzb24.AAAA", "é.é.é"])
def test_malformed_tokens_are_refused(text):
    with pytest.raises(OAuthRefusal) as caught:
        inspect(text)
    assert caught.value.reason == "malformed"


def test_expired_beyond_the_clock_skew_is_refused_within_it_accepted():
    token = signed(exp=NOW_S - 20)
    assert verify(inspect(token), RSA, POLICY, NOW_MS).subject == "svc"  # 30 s skew
    assert refusal(token, now_ms=NOW_MS + 11_000).reason == "expired"


@pytest.mark.parametrize("claim", ["nbf", "iat"])
def test_not_yet_valid_is_refused(claim):
    assert refusal(signed(**{claim: NOW_S + 120})).reason == "not_yet_valid"


def test_wrong_audience_and_missing_audience_are_refused():
    assert refusal(signed(aud="other")).reason == "wrong_audience"
    assert refusal(signed(aud=None)).reason == "wrong_audience"
    assert verify(inspect(signed(aud=None)), RSA, IssuerPolicy(ISSUER), NOW_MS).subject == "svc"


def test_wrong_issuer_is_refused():
    assert refusal(signed(iss="https://other.example")).reason == "wrong_issuer"


@pytest.mark.parametrize("claim", ["exp", "iat"])
def test_exp_and_iat_are_required_as_in_kafka(claim):
    found = refusal(signed(**{claim: None}))
    assert found.reason == "missing_claim" and claim in found.message


@pytest.mark.parametrize("sub", [None, "", "   ", 42])
def test_a_missing_or_empty_subject_is_refused(sub):
    token = signed(sub=sub) if sub is not None else signed(sub=None)
    assert refusal(token).reason in ("missing_subject", "malformed")
    if sub is None or isinstance(sub, str):
        assert refusal(token).reason == "missing_subject"


def test_the_subject_claim_name_is_configurable():
    policy = IssuerPolicy(ISSUER, ("tokensvc",), sub_claim="client_id")
    assert verify(inspect(signed(client_id="etl")), RSA, policy, NOW_MS).subject == "etl"
    assert refusal(signed(), policy=policy).reason == "missing_subject"


def test_a_bad_signature_is_refused():
    head, _, sig = signed().split(".")
    tampered = b64(json.dumps(claims(sub="admin")).encode())
    assert refusal(f"{head}.{tampered}.{sig}").reason == "bad_signature"
    assert refusal(signed(), key=RSAKey.generate_key(2048)).reason == "bad_signature"


def test_a_key_of_the_wrong_type_is_a_bad_signature():
    assert refusal(signed(), key=EC).reason == "bad_signature"


def test_scopes_as_a_list_and_an_empty_scope_refused():
    assert verify(inspect(signed(scope=["a", "b"])), RSA, POLICY, NOW_MS).scopes == {"a", "b"}
    assert refusal(signed(scope=["a", ""])).reason == "invalid_scope"


def test_a_refusal_message_names_issuer_and_subject_never_the_token():
    token = signed(aud="other")
    found = refusal(token)
    assert ISSUER in found.message and "'svc'" in found.message
    assert token not in found.message and token.split(".")[2] not in str(found)
