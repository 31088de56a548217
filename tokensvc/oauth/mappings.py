"""The mappings file: from a verified identity (issuer, claims) to a Kafka principal and
the token policy of that identity. Named by ``sasl.oauthbearer.principal.mappings.file``.

The file is TOML (Python's own ``tomllib``), two kinds of tables::

    [[issuer]]                 # issuers beyond the one of Kafka's keys (optional)
    issuer = "https://kubernetes.default.svc"
    jwks_file = "/var/run/tokensvc/k8s-jwks.json"   # or jwks_url = "https://.../jwks"
    audience = ["tokensvc"]     # optional; sub_claim, scope_claim, clock_skew_seconds,
                                # ca_file (for jwks_url) are optional too

    [[mapping]]
    name = "payments-etl"                            # optional, for the audit
    issuer = "https://kubernetes.default.svc"
    subject = "system:serviceaccount:payments:etl"   # or subject_pattern (a regex)
    scopes = ["kafka"]                               # optional: all must be granted
    claims = { "azp" = "etl" }                       # optional: claim equals value
    principal = "User:payments-etl"                  # {group} of subject_pattern allowed
    max_token_lifetime_ms = 86400000                 # optional: cap of its tokens
    labels = { namespace = "payments" }              # optional: added to its tokens
    create_for_other_owners = false                  # default false

The first mapping (in file order) whose issuer, subject, scopes and claims match wins.
``subject_pattern`` must match the whole subject; its named groups may be used as
``{name}`` in ``principal`` and in label values. No match: the login is refused, naming
the issuer and subject.

Owns parsing (every error names the table and key), matching and
:meth:`TokenPolicy.apply`. Pure: the text comes in (the edge reads the file).
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping as MappingType
from dataclasses import dataclass, field
from typing import Any

from tokensvc.core.errors import Errors
from tokensvc.core.labels import NO_LABELS, LabelError, Labels, validate
from tokensvc.core.principal import KafkaPrincipal
from tokensvc.oauth.refusals import OAuthRefusal
from tokensvc.oauth.validator import VerifiedToken

_ISSUER_KEYS = {"issuer", "jwks_file", "jwks_url", "audience", "sub_claim", "scope_claim",
                "clock_skew_seconds", "ca_file"}
_MAPPING_KEYS = {"name", "issuer", "subject", "subject_pattern", "scopes", "claims",
                 "principal", "max_token_lifetime_ms", "labels", "create_for_other_owners"}
_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


class MappingsError(ValueError):
    """The mappings file is not valid; the message names the table and key."""


@dataclass(frozen=True)
class IssuerSpec:
    """An issuer declared in the mappings file."""

    issuer: str
    jwks_file: str | None = None
    jwks_url: str | None = None
    audiences: tuple[str, ...] = ()
    sub_claim: str = "sub"
    scope_claim: str = "scope"
    clock_skew_s: int | None = None
    ca_file: str | None = None


@dataclass(frozen=True)
class TokenPolicy:
    """What a mapped identity may do with delegation tokens."""

    max_lifetime_ms: int | None = None
    labels: Labels = NO_LABELS
    create_for_other_owners: bool = False

    def apply(self, requester: KafkaPrincipal, owner: KafkaPrincipal, requested_max_ms: int,
              requested: Labels) -> tuple[int, Labels]:
        """The max lifetime and labels a create by this identity gets, or PolicyRefused.

        The lifetime is capped (a request for the server default, <= 0, gets the cap);
        the mapping's labels are added to the request's, and win over a request label of
        the same key: they describe the identity, which the client must not disguise."""
        if owner != requester and not self.create_for_other_owners:
            raise PolicyRefused(Errors.DELEGATION_TOKEN_AUTHORIZATION_FAILED,
                                f"the mapping of {requester} does not allow tokens for "
                                f"other owners ({owner})")
        lifetime = requested_max_ms
        if self.max_lifetime_ms is not None and (lifetime <= 0 or lifetime > self.max_lifetime_ms):
            lifetime = self.max_lifetime_ms
        if not self.labels:
            return lifetime, requested
        merged = dict(requested)
        merged.update(dict(self.labels))
        try:
            return lifetime, validate(merged)
        except LabelError as exc:
            raise PolicyRefused(exc.error, exc.message) from None


class PolicyRefused(Exception):
    """A token request the identity's mapping does not allow."""

    def __init__(self, error: Errors, message: str) -> None:
        super().__init__(message)
        self.error = error
        self.message = message


@dataclass(frozen=True)
class Mapping:
    name: str
    issuer: str
    subject: str | None
    subject_pattern: re.Pattern[str] | None
    scopes: frozenset[str]
    claims: MappingType[str, Any]
    principal: str
    max_lifetime_ms: int | None
    labels: MappingType[str, str]
    create_for_other_owners: bool

    def groups(self, token: VerifiedToken) -> dict[str, str] | None:
        """The pattern's named groups when this mapping matches ``token``, else None."""
        if token.issuer != self.issuer:
            return None
        groups: dict[str, str] = {}
        if self.subject is not None and token.subject != self.subject:
            return None
        if self.subject_pattern is not None:
            found = self.subject_pattern.fullmatch(token.subject)
            if found is None:
                return None
            groups = {k: v for k, v in found.groupdict().items() if v is not None}
        if not self.scopes <= token.scopes:
            return None
        for name, wanted in self.claims.items():
            value = token.claims.get(name)
            if value != wanted and not (isinstance(value, list) and wanted in value):
                return None
        return groups


@dataclass(frozen=True)
class Identity:
    """A login's identity once mapped: who, from which mapping, with which policy."""

    principal: KafkaPrincipal
    mapping: str
    policy: TokenPolicy
    token: VerifiedToken = field(repr=False)


@dataclass(frozen=True)
class Mappings:
    issuers: tuple[IssuerSpec, ...]
    mappings: tuple[Mapping, ...]

    def resolve(self, token: VerifiedToken) -> Identity:
        """The identity ``token`` maps to; OAuthRefusal ``no_mapping`` when none matches."""
        for mapping in self.mappings:
            groups = mapping.groups(token)
            if groups is None:
                continue
            try:
                principal = KafkaPrincipal.parse(_fill(mapping.principal, groups))
                labels = validate({k: _fill(v, groups) for k, v in mapping.labels.items()})
            except (ValueError, KeyError) as exc:
                raise OAuthRefusal("no_mapping", token.facts,
                                   f"mapping {mapping.name!r} gives no valid principal: {exc}") from None
            if not principal.is_user:
                raise OAuthRefusal("no_mapping", token.facts,
                                   f"mapping {mapping.name!r} gives a non-User principal")
            policy = TokenPolicy(mapping.max_lifetime_ms, labels, mapping.create_for_other_owners)
            return Identity(principal, mapping.name, policy, token)
        raise OAuthRefusal("no_mapping", token.facts)


def _fill(template: str, groups: MappingType[str, str]) -> str:
    return _PLACEHOLDER.sub(lambda m: groups[m.group(1)], template)


def parse(text: str, source: str = "mappings file") -> Mappings:
    """Parse the mappings file; MappingsError naming the table and key on any problem."""
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise MappingsError(f"{source}: not valid TOML: {exc}") from None
    unknown = set(document) - {"issuer", "mapping"}
    if unknown:
        raise MappingsError(f"{source}: unknown table(s) {', '.join(sorted(unknown))} "
                            "(expected [[issuer]] and [[mapping]])")
    issuers = tuple(_issuer(entry, f"{source}: [[issuer]] #{i + 1}")
                    for i, entry in enumerate(_tables(document, "issuer", source)))
    names = [spec.issuer for spec in issuers]
    if len(set(names)) != len(names):
        raise MappingsError(f"{source}: an issuer is declared twice")
    mappings = tuple(_mapping(entry, f"{source}: [[mapping]] #{i + 1}", i)
                     for i, entry in enumerate(_tables(document, "mapping", source)))
    return Mappings(issuers, mappings)


def _tables(document: dict, name: str, source: str) -> list[dict]:
    tables = document.get(name, [])
    if not isinstance(tables, list) or not all(isinstance(t, dict) for t in tables):
        raise MappingsError(f"{source}: {name} must be an array of tables ([[{name}]])")
    return tables


def _check_keys(entry: dict, allowed: set[str], where: str) -> None:
    unknown = set(entry) - allowed
    if unknown:
        raise MappingsError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}")


def _text(entry: dict, key: str, where: str, *, required: bool = False) -> str | None:
    value = entry.get(key)
    if value is None:
        if required:
            raise MappingsError(f"{where}: {key} is required")
        return None
    if not isinstance(value, str) or not value:
        raise MappingsError(f"{where}: {key} must be a non-empty string")
    return value


def _strings(entry: dict, key: str, where: str) -> tuple[str, ...]:
    value = entry.get(key, [])
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise MappingsError(f"{where}: {key} must be a string or a list of strings")
    return tuple(value)


def _issuer(entry: dict, where: str) -> IssuerSpec:
    _check_keys(entry, _ISSUER_KEYS, where)
    issuer = _text(entry, "issuer", where, required=True)
    jwks_file, jwks_url = _text(entry, "jwks_file", where), _text(entry, "jwks_url", where)
    if (jwks_file is None) == (jwks_url is None):
        raise MappingsError(f"{where}: give exactly one of jwks_file and jwks_url")
    skew = entry.get("clock_skew_seconds")
    if skew is not None and (not isinstance(skew, int) or isinstance(skew, bool) or skew < 0):
        raise MappingsError(f"{where}: clock_skew_seconds must be an integer >= 0")
    assert issuer is not None
    return IssuerSpec(issuer, jwks_file, jwks_url, _strings(entry, "audience", where),
                      _text(entry, "sub_claim", where) or "sub",
                      _text(entry, "scope_claim", where) or "scope", skew,
                      _text(entry, "ca_file", where))


def _mapping(entry: dict, where: str, index: int) -> Mapping:
    _check_keys(entry, _MAPPING_KEYS, where)
    issuer = _text(entry, "issuer", where, required=True)
    subject, pattern_text = _text(entry, "subject", where), _text(entry, "subject_pattern", where)
    if (subject is None) == (pattern_text is None):
        raise MappingsError(f"{where}: give exactly one of subject and subject_pattern")
    pattern = None
    if pattern_text is not None:
        try:
            pattern = re.compile(pattern_text)
        except re.error as exc:
            raise MappingsError(f"{where}: subject_pattern is not a regular expression: {exc}") from None
    groups = set(pattern.groupindex) if pattern is not None else set()
    principal = _text(entry, "principal", where, required=True)
    assert principal is not None and issuer is not None
    _placeholders(principal, groups, f"{where}: principal")
    if "{" not in principal:
        try:
            parsed = KafkaPrincipal.parse(principal)
        except ValueError as exc:
            raise MappingsError(f"{where}: {exc}") from None
        if not parsed.is_user:
            raise MappingsError(f"{where}: principal must be a User: principal (tokens are owned by users)")
    claims = entry.get("claims", {})
    if not isinstance(claims, dict):
        raise MappingsError(f"{where}: claims must be a table of claim = value")
    labels = entry.get("labels", {})
    if not isinstance(labels, dict) or not all(isinstance(v, str) for v in labels.values()):
        raise MappingsError(f"{where}: labels must be a table of key = \"value\"")
    for key, value in labels.items():
        _placeholders(value, groups, f"{where}: labels.{key}")
    try:
        validate({k: _PLACEHOLDER.sub("x", v) for k, v in labels.items()})
    except LabelError as exc:
        raise MappingsError(f"{where}: {exc.message}") from None
    lifetime = entry.get("max_token_lifetime_ms")
    if lifetime is not None and (not isinstance(lifetime, int) or isinstance(lifetime, bool)
                                 or lifetime < 1):
        raise MappingsError(f"{where}: max_token_lifetime_ms must be an integer >= 1")
    others = entry.get("create_for_other_owners", False)
    if not isinstance(others, bool):
        raise MappingsError(f"{where}: create_for_other_owners must be true or false")
    return Mapping(
        name=_text(entry, "name", where) or f"mapping-{index + 1}",
        issuer=issuer, subject=subject, subject_pattern=pattern,
        scopes=frozenset(_strings(entry, "scopes", where)), claims=claims,
        principal=principal, max_lifetime_ms=lifetime, labels=labels,
        create_for_other_owners=others,
    )


def _placeholders(template: str, groups: set[str], where: str) -> None:
    missing = {m.group(1) for m in _PLACEHOLDER.finditer(template)} - groups
    if missing:
        raise MappingsError(f"{where}: {{{min(missing)}}} is not a named group of subject_pattern")
