"""The broker's OAUTHBEARER authenticator: a JWT in, a mapped identity (or a refusal) out.

Owns the issuers a broker trusts and the mappings it follows:

- the issuer of Kafka's keys (``sasl.oauthbearer.jwks.endpoint.url`` with
  ``...expected.issuer``, ``...expected.audience``, ``...sub.claim.name``,
  ``...scope.claim.name``, ``...clock.skew.seconds``), when the URL is set;
- each ``[[issuer]]`` of the mappings file, with its own JWKS (file or URL), audience
  and claim names (the clock skew defaults to Kafka's key).

A JWT's ``iss`` chooses the issuer (unverified, only to choose keys: the signature and
then the ``iss`` claim are checked against that issuer). With Kafka's expected issuer
unset, any ``iss`` not declared in the mappings file goes to Kafka's keys, as Kafka
would accept it; the mappings then decide who it is.

The mappings file is read at start (an invalid file stops the start, naming the table
and key) and again when it changes (looked at no more than once a second, off the event
loop): a file that became invalid is logged and the last good mappings stay. An identity
removed from the file therefore fails its next login or re-authentication.

Time is the cluster's (the clock handed in). Runs on the broker's event loop: fetches
and file reads go to threads. Must not log or audit a JWT.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tokensvc.core.clock import Clock
from tokensvc.oauth import mappings as mapping_file
from tokensvc.oauth.jwks import FileJwks, HttpsJwks, JwksError, KeySource, key_source
from tokensvc.oauth.mappings import Identity, Mappings, MappingsError
from tokensvc.oauth.refusals import OAuthRefusal
from tokensvc.oauth.validator import IssuerPolicy, inspect, verify

if TYPE_CHECKING:
    from tokensvc.core.config import BrokerConfig

log = logging.getLogger("tokensvc.oauth")

MAPPINGS_CHECK_INTERVAL_S = 1.0


@dataclass(frozen=True)
class OAuthSettings:
    """The broker keys the authenticator reads (``sasl.oauthbearer.*``)."""

    mappings_file: str
    jwks_url: str | None = None
    expected_issuer: str | None = None
    expected_audiences: tuple[str, ...] = ()
    sub_claim: str = "sub"
    scope_claim: str = "scope"
    clock_skew_s: int = 30
    refresh_ms: int = 3_600_000
    backoff_ms: int = 100
    backoff_max_ms: int = 10_000
    ca_file: str | None = None

    @classmethod
    def from_config(cls, config: BrokerConfig) -> OAuthSettings:
        if config.sasl_oauthbearer_principal_mappings_file is None:
            raise OAuthConfigError("sasl.oauthbearer.principal.mappings.file is not set")
        return cls(
            mappings_file=config.sasl_oauthbearer_principal_mappings_file,
            jwks_url=config.sasl_oauthbearer_jwks_endpoint_url,
            expected_issuer=config.sasl_oauthbearer_expected_issuer,
            expected_audiences=config.sasl_oauthbearer_expected_audience,
            sub_claim=config.sasl_oauthbearer_sub_claim_name,
            scope_claim=config.sasl_oauthbearer_scope_claim_name,
            clock_skew_s=config.sasl_oauthbearer_clock_skew_seconds,
            refresh_ms=config.sasl_oauthbearer_jwks_endpoint_refresh_ms,
            backoff_ms=config.sasl_oauthbearer_jwks_endpoint_retry_backoff_ms,
            backoff_max_ms=config.sasl_oauthbearer_jwks_endpoint_retry_backoff_max_ms,
            ca_file=config.sasl_oauthbearer_jwks_endpoint_ca_location,
        )


class OAuthConfigError(ValueError):
    """The OAUTHBEARER set-up cannot start (the message names the key or table)."""


def read_mappings(path: str) -> tuple[Mappings, float]:
    """The mappings file parsed, and its modification time (blocking)."""
    try:
        with open(path, encoding="utf-8") as f:
            mtime = os.fstat(f.fileno()).st_mtime
            text = f.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise MappingsError(f"{path}: {getattr(exc, 'strerror', None) or exc}") from None
    return mapping_file.parse(text, path), mtime


class OAuthAuthenticator:
    """Checks a JWT and maps it (see the module's docstring)."""

    def __init__(self, settings: OAuthSettings, clock: Clock) -> None:
        self._settings = settings
        self._clock = clock
        try:
            self._mappings, self._mtime = read_mappings(settings.mappings_file)
        except MappingsError as exc:
            raise OAuthConfigError(f"{exc}") from None
        self._checked = time.monotonic()
        self._lock = asyncio.Lock()
        self._issuers: dict[str | None, tuple[IssuerPolicy, KeySource]] = {}
        try:
            self._build_issuers()
        except JwksError as exc:
            raise OAuthConfigError(str(exc)) from None
        if not self._issuers:
            raise OAuthConfigError(
                "OAUTHBEARER has no issuer: set sasl.oauthbearer.jwks.endpoint.url or "
                f"declare an [[issuer]] in {settings.mappings_file}")
        self._check_mapping_issuers(self._mappings)

    def _build_issuers(self) -> None:
        s = self._settings
        if s.jwks_url:
            policy = IssuerPolicy(s.expected_issuer, s.expected_audiences, s.sub_claim,
                                  s.scope_claim, s.clock_skew_s)
            source = key_source(s.jwks_url, refresh_ms=s.refresh_ms, backoff_ms=s.backoff_ms,
                                backoff_max_ms=s.backoff_max_ms, ca_file=s.ca_file)
            self._issuers[s.expected_issuer] = (policy, source)
        for spec in self._mappings.issuers:
            if spec.issuer in self._issuers:
                raise OAuthConfigError(f"issuer {spec.issuer} is declared twice (Kafka's keys "
                                       f"and {s.mappings_file})")
            policy = IssuerPolicy(spec.issuer, spec.audiences, spec.sub_claim, spec.scope_claim,
                                  s.clock_skew_s if spec.clock_skew_s is None else spec.clock_skew_s)
            source: KeySource
            if spec.jwks_file is not None:
                source = FileJwks(spec.jwks_file)
            else:
                assert spec.jwks_url is not None
                source = HttpsJwks(spec.jwks_url, refresh_ms=s.refresh_ms,
                                   backoff_ms=s.backoff_ms, backoff_max_ms=s.backoff_max_ms,
                                   ca_file=spec.ca_file)
            self._issuers[spec.issuer] = (policy, source)

    def _check_mapping_issuers(self, mappings: Mappings) -> None:
        """A mapping for an issuer no key set serves could never match: an error."""
        if None in self._issuers:
            return
        for m in mappings.mappings:
            if m.issuer not in self._issuers:
                raise OAuthConfigError(f"mapping {m.name!r} names issuer {m.issuer}, which is "
                                       "neither sasl.oauthbearer.expected.issuer nor an [[issuer]]")

    @property
    def mappings(self) -> Mappings:
        return self._mappings

    def start(self) -> None:
        """Start the JWKS refreshers (on the running loop)."""
        for _, source in self._issuers.values():
            source.start()

    async def close(self) -> None:
        for _, source in self._issuers.values():
            await source.close()

    async def authenticate(self, token: str) -> Identity:
        """The identity ``token`` proves; OAuthRefusal (with the token's facts) if none."""
        await self._reload_if_changed()
        unverified = inspect(token)
        chosen = self._issuers.get(unverified.issuer) or self._issuers.get(None)
        if chosen is None:
            raise OAuthRefusal("unknown_issuer", unverified.facts())
        policy, source = chosen
        facts = unverified.facts(policy.sub_claim)
        try:
            key = await source.key_for(unverified.key_id, unverified.algorithm)
        except OAuthRefusal as exc:
            raise exc.with_facts(facts) from None
        verified = verify(unverified, key, policy, self._clock.now_ms())
        return self._mappings.resolve(verified)

    async def _reload_if_changed(self) -> None:
        if time.monotonic() - self._checked < MAPPINGS_CHECK_INTERVAL_S:
            return
        async with self._lock:
            if time.monotonic() - self._checked < MAPPINGS_CHECK_INTERVAL_S:
                return
            self._checked = time.monotonic()
            path = self._settings.mappings_file
            try:
                mtime = (await asyncio.to_thread(os.stat, path)).st_mtime
                if mtime == self._mtime:
                    return
                mappings, mtime = await asyncio.to_thread(read_mappings, path)
                if mappings.issuers != self._mappings.issuers:
                    log.warning("%s: the [[issuer]] tables changed; restart the broker to "
                                "use them (the mappings are applied now)", path)
                    mappings = Mappings(self._mappings.issuers, mappings.mappings)
                self._check_mapping_issuers(mappings)
            except (OSError, MappingsError, OAuthConfigError) as exc:
                log.error("keeping the previous OAUTHBEARER mappings: %s", exc)
                return
            self._mappings, self._mtime = mappings, mtime
            log.info("%s read again: %d mapping(s)", path, len(mappings.mappings))
