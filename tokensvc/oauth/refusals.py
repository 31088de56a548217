"""Why an OAUTHBEARER login is refused: the reasons, their messages, what is recorded.

Owns :class:`OAuthRefusal` and the one table from a reason (as the audit log names it)
to the sentence a client reads. A refusal carries what the audit may record of the JWT
-- issuer, subject, ``jti``, expiry and the signing key's id, as the token claimed them (unverified unless the
signature was checked) -- and never the JWT itself. Must not do I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

# reason -> what the client is told (the issuer and subject are added when known)
MESSAGES: dict[str, str] = {
    "malformed": "the client's first message or its JWT is malformed",
    "oversized": "the JWT is larger than the broker accepts",
    "alg_none": "the JWT is unsigned (alg=none)",
    "alg_hmac": "the JWT is signed with an HMAC algorithm; only an issuer's public keys are accepted",
    "alg_not_allowed": "the JWT's signature algorithm is not accepted",
    "unknown_issuer": "the JWT's issuer is not a configured issuer",
    "jwks_unavailable": "the issuer's JWKS could not be fetched",
    "unknown_key": "the JWT's key id is not in the issuer's JWKS, even after a refetch",
    "bad_signature": "the JWT's signature does not verify",
    "expired": "the JWT has expired",
    "not_yet_valid": "the JWT is not yet valid (nbf or iat in the future)",
    "wrong_audience": "the JWT is not for this audience",
    "wrong_issuer": "the JWT's issuer is not the expected issuer",
    "missing_claim": "the JWT lacks a required claim",
    "missing_subject": "the JWT has no subject claim",
    "invalid_scope": "the JWT's scope claim is malformed",
    "no_mapping": "no principal mapping matches this identity",
    "authzid_mismatch": "the authorization id differs from the mapped principal",
}


@dataclass(frozen=True)
class TokenFacts:
    """What a JWT says of itself that the audit may keep (no signature, no raw token)."""

    issuer: str | None = None
    subject: str | None = None
    jti: str | None = None
    expiry_ms: int | None = None
    key_id: str | None = None

    def audit_fields(self) -> dict:
        return {"issuer": self.issuer, "subject": self.subject, "jti": self.jti,
                "expiry_ms": self.expiry_ms, "kid": self.key_id}


class OAuthRefusal(Exception):
    """A JWT refused for ``reason`` (a key of :data:`MESSAGES`); ``detail`` adds a fact
    (the claim, the algorithm), never token material."""

    def __init__(self, reason: str, facts: TokenFacts | None = None, detail: str | None = None) -> None:
        if reason not in MESSAGES:
            raise ValueError(f"unknown refusal reason {reason!r}")
        self.reason = reason
        self.facts = facts or TokenFacts()
        self.detail = detail
        super().__init__(self.message)

    @property
    def message(self) -> str:
        text = MESSAGES[self.reason]
        if self.detail:
            text = f"{text} ({self.detail})"
        known = [f"issuer {_shown(self.facts.issuer)}" if self.facts.issuer else "",
                 f"subject {_shown(self.facts.subject)}" if self.facts.subject else ""]
        known = [k for k in known if k]
        return f"{text}: {', '.join(known)}" if known else text

    def with_facts(self, facts: TokenFacts) -> OAuthRefusal:
        return OAuthRefusal(self.reason, facts, self.detail)


def _shown(text: str, limit: int = 200) -> str:
    """A claim as a message may quote it: bounded, without control characters."""
    clean = "".join(ch if ch.isprintable() else "?" for ch in text[:limit])
    return repr(clean + ("..." if len(text) > limit else ""))
