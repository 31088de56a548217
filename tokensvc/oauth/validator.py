"""The checks a JWT passes before an OAUTHBEARER login: Kafka's (KIP-768), with joserfc.

Two steps, so that the edge can fetch a key in between:

- :func:`inspect` reads the JWT without trusting it: its size, its form, its algorithm
  (``none``, HMAC and anything off the list are refused before any key is looked up),
  its key id and its issuer (to choose the issuer's keys);
- :func:`verify` checks the signature with the key the edge found, then the claims as
  Kafka's ``ValidatorAccessTokenValidator`` does: ``exp`` and ``iat`` required, ``nbf``
  honoured, the expected issuer and audience when configured, the clock skew, a
  non-empty subject claim (``sasl.oauthbearer.sub.claim.name``), the scope claim
  (``sasl.oauthbearer.scope.claim.name``: a space-separated string or a list).

Why joserfc: its keys are typed (an RSA or EC key can never act as an HMAC secret, so
the "HMAC keyed with the public key" confusion has no code path), ``none`` is not an
algorithm it knows, it checks claims against a time handed in (the cluster's clock, not
the host's), it is typed and maintained, and it builds on ``cryptography``, which
tokensvc already depends on. PyJWT reads the host's clock for ``exp``; jwcrypto's key
and claim API is older and untyped.

Pure: no I/O, no clock (``now_ms`` is an argument). Never logs; a refusal carries the
token's claimed issuer, subject, ``jti`` and expiry, never the token.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from joserfc import jws, jwt
from joserfc.errors import (
    BadSignatureError,
    ClaimError,
    ExpiredTokenError,
    JoseError,
    MissingClaimError,
)
from joserfc.jwk import ECKey, OKPKey, RSAKey
from joserfc.jwt import JWTClaimsRegistry

from tokensvc.oauth.refusals import OAuthRefusal, TokenFacts

# Asymmetric algorithms only: a JWKS publishes public keys.
ALLOWED_ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512",
                      "ES256", "ES384", "ES512", "EdDSA")
# A Kubernetes service-account token is about 1 KB, an OpenID provider's access token
# 1-2 KB; 16 KB leaves room for large claim sets and bounds what is parsed before the
# signature is checked.
MAX_JWT_BYTES = 16_384

PublicKey = RSAKey | ECKey | OKPKey


@dataclass(frozen=True)
class IssuerPolicy:
    """The checks of one issuer (Kafka's keys for the first; the mappings file's for more).

    ``issuer`` None: any ``iss`` (Kafka's unset ``sasl.oauthbearer.expected.issuer``).
    ``audiences`` empty: the audience is not checked."""

    issuer: str | None
    audiences: tuple[str, ...] = ()
    sub_claim: str = "sub"
    scope_claim: str = "scope"
    clock_skew_s: int = 30
    algorithms: tuple[str, ...] = ALLOWED_ALGORITHMS


@dataclass(frozen=True)
class Unverified:
    """A JWT read but not yet trusted."""

    token: str = field(repr=False)
    algorithm: str
    key_id: str | None
    issuer: str | None
    claims: Mapping[str, Any] = field(repr=False)

    def facts(self, sub_claim: str = "sub") -> TokenFacts:
        return replace(facts_of(self.claims, sub_claim), key_id=self.key_id)


@dataclass(frozen=True)
class VerifiedToken:
    """A JWT whose signature and claims passed: what a login keeps of it."""

    issuer: str | None
    subject: str
    scopes: frozenset[str]
    expiry_ms: int
    issued_at_ms: int
    jti: str | None
    key_id: str | None
    claims: Mapping[str, Any] = field(repr=False)

    @property
    def facts(self) -> TokenFacts:
        return TokenFacts(self.issuer, self.subject, self.jti, self.expiry_ms, self.key_id)


def facts_of(claims: Mapping[str, Any], sub_claim: str = "sub") -> TokenFacts:
    """The audit's view of ``claims`` (values of the wrong type are left out)."""
    def text(name: str) -> str | None:
        value = claims.get(name)
        return value if isinstance(value, str) else None

    exp = claims.get("exp")
    expiry = int(exp * 1000) if isinstance(exp, int | float) and not isinstance(exp, bool) \
        and abs(exp) < 1e13 else None
    return TokenFacts(text("iss"), text(sub_claim), text("jti"), expiry)


def inspect(token: str) -> Unverified:
    """Read ``token`` untrusted; OAuthRefusal for a size, form or algorithm refused outright."""
    if len(token) > MAX_JWT_BYTES:
        raise OAuthRefusal("oversized", detail=f"{len(token)} bytes, at most {MAX_JWT_BYTES}")
    try:
        compact = jws.extract_compact(token.encode("ascii"))
        header = compact.headers()
        claims = json.loads(compact.payload)
    except (JoseError, ValueError, UnicodeError, TypeError):
        raise OAuthRefusal("malformed") from None
    if not isinstance(claims, dict):
        raise OAuthRefusal("malformed", detail="the payload is not a JSON object")
    kid = header.get("kid")
    facts = replace(facts_of(claims), key_id=kid[:200] if isinstance(kid, str) else None)
    algorithm = header.get("alg")
    if not isinstance(algorithm, str):
        raise OAuthRefusal("malformed", facts, "no alg header")
    if algorithm.lower() == "none":
        raise OAuthRefusal("alg_none", facts)
    if algorithm.upper().startswith("HS"):
        raise OAuthRefusal("alg_hmac", facts, f"alg {algorithm[:16]}")
    if algorithm not in ALLOWED_ALGORITHMS:
        raise OAuthRefusal("alg_not_allowed", facts, f"alg {algorithm[:16]!r}")
    if kid is not None and not isinstance(kid, str):
        raise OAuthRefusal("malformed", facts, "kid is not a string")
    issuer = claims.get("iss")
    return Unverified(token, algorithm, kid, issuer if isinstance(issuer, str) else None, claims)


def verify(unverified: Unverified, key: PublicKey, policy: IssuerPolicy, now_ms: int) -> VerifiedToken:
    """Check the signature with ``key`` and the claims at ``now_ms`` under ``policy``."""
    facts = unverified.facts(policy.sub_claim)
    if unverified.algorithm not in policy.algorithms:
        raise OAuthRefusal("alg_not_allowed", facts, f"alg {unverified.algorithm}")
    try:
        decoded = jwt.decode(unverified.token, key, algorithms=[unverified.algorithm])
    except BadSignatureError:
        raise OAuthRefusal("bad_signature", facts) from None
    except JoseError as exc:  # a key that does not fit the algorithm, a bad header
        raise OAuthRefusal("bad_signature", facts, exc.error) from None
    claims = decoded.claims
    options: dict[str, Any] = {"exp": {"essential": True}, "iat": {"essential": True}}
    if policy.issuer is not None:
        options["iss"] = {"essential": True, "value": policy.issuer}
    if policy.audiences:
        options["aud"] = {"essential": True, "values": list(policy.audiences)}
    registry = JWTClaimsRegistry(now=now_ms // 1000, leeway=policy.clock_skew_s, **options)
    try:
        registry.validate(claims)
    except ExpiredTokenError:
        raise OAuthRefusal("expired", facts) from None
    except ClaimError as exc:
        raise _claim_refusal(exc, facts) from None
    subject = claims.get(policy.sub_claim)
    if not isinstance(subject, str) or not subject.strip():
        raise OAuthRefusal("missing_subject", facts, f"claim {policy.sub_claim!r}")
    scopes = _scopes(claims.get(policy.scope_claim), facts, policy.scope_claim)
    jti = claims.get("jti")
    return VerifiedToken(
        issuer=claims.get("iss") if isinstance(claims.get("iss"), str) else None,
        subject=subject.strip(),
        scopes=scopes,
        expiry_ms=int(claims["exp"] * 1000),
        issued_at_ms=int(claims["iat"] * 1000),
        jti=jti if isinstance(jti, str) else None,
        key_id=unverified.key_id,
        claims=claims,
    )


def _claim_refusal(exc: ClaimError, facts: TokenFacts) -> OAuthRefusal:
    claim = exc.claim
    if claim in ("nbf", "iat") and not isinstance(exc, MissingClaimError):
        description = str(exc.description)
        if "future" in description or "not yet" in description:
            return OAuthRefusal("not_yet_valid", facts, f"claim {claim!r}")
        return OAuthRefusal("malformed", facts, f"claim {claim!r}")
    if claim == "aud":
        return OAuthRefusal("wrong_audience", facts)
    if claim == "iss":
        return OAuthRefusal("wrong_issuer", facts)
    if isinstance(exc, MissingClaimError):
        return OAuthRefusal("missing_claim", facts, f"claim {claim!r}")
    return OAuthRefusal("malformed", facts, f"claim {claim!r}")


def _scopes(raw: object, facts: TokenFacts, name: str) -> frozenset[str]:
    """Kafka's reading of the scope claim: a string of space-separated scopes or a list
    of strings; absent or another type: no scopes; an empty scope is refused."""
    if isinstance(raw, str):
        items: list[object] = raw.split(" ") if raw else []
    elif isinstance(raw, list):
        items = list(raw)
    else:
        return frozenset()
    scopes = set()
    for item in items:
        if not isinstance(item, str) or not item.strip():
            raise OAuthRefusal("invalid_scope", facts, f"claim {name!r}")
        scopes.add(item.strip())
    return frozenset(scopes)
