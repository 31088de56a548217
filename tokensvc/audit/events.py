"""The audit event schema: one JSON object per line, schema version 1.

This module owns the names and shapes of every audit event the brokers emit:
one constructor per event type (keyword arguments only, fields not given are
``null``), the common fields every line carries, and the guard that keeps
secret material (HMACs, passwords, salts, keys) out of the log.

It does no I/O and knows nothing about files, queues or threads (that is
:mod:`tokensvc.audit.writer`) nor about Spark (:mod:`tokensvc.audit.report`).
A constructor raises :class:`AuditEventError` for an unknown field or a value
outside the schema's vocabulary: those are programming errors, and failing
loudly in tests is better than a log the report job cannot read.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

SCHEMA_VERSION = 1

COMMON_FIELDS = ("schema", "ts", "broker_id", "event_id", "type")

OUTCOMES = frozenset({"success", "failure"})
LOGIN_KINDS = frozenset({"user", "token", "oauth"})
TOKEN_ACTIONS = frozenset({"create", "renew", "expire", "describe", "revoke"})
# Why a token request was special: a revocation's reason, or the per-owner limit.
TOKEN_REASONS = frozenset({"revoked_by_id", "revoked_by_owner", "revoked_by_label",
                           "owner_deleted", "owner_limit", "owner_near_limit",
                           "invalid_labels", "clock_skew", "kraft_migration",
                           "oauth_policy"})
# Fields whose value is a token's labels or a label selector: a JSON object whose keys
# are label keys (tokensvc.core.labels), not field names, so the secret guard judges only
# their values (a label named "key-owner" is not a key).
LABEL_FIELDS = frozenset({"labels", "selector"})
SWEEP_REASONS = frozenset({"expired", "max_lifetime"})
ACL_ACTIONS = frozenset({"create", "delete"})
CREDENTIAL_ACTIONS = frozenset({"upsert", "delete"})
SESSION_ACTIONS = frozenset({"revoked", "reauthenticated", "expired", "refused"})

# The writer's own bookkeeping line ("audit" type): how many events it dropped.
WRITER_EVENT_TYPE = "audit"


class AuditEventError(ValueError):
    """An event does not fit the schema or carries secret-looking material."""


def _one_of(name: str, value: object, allowed: frozenset[str]) -> None:
    if value not in allowed:
        raise AuditEventError(f"{name}={value!r} is not one of {sorted(allowed)}")


def _outcome(outcome: str | None, error_code: int | None) -> None:
    _one_of("outcome", outcome, OUTCOMES)
    if error_code is not None and not isinstance(error_code, int):
        raise AuditEventError(f"error_code must be an int, got {error_code!r}")


def authentication_event(
    *,
    outcome: str,
    mechanism: str | None = None,
    kind: str = "user",
    implicit: bool = False,
    username: str | None = None,
    token_id: str | None = None,
    principal: str | None = None,
    client_host: str | None = None,
    client_port: int | None = None,
    listener: str | None = None,
    reason: str | None = None,
    client_id: str | None = None,
    oauth: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A SASL login attempt. For token logins ``username`` is the token id and
    ``principal`` the token's owner; ``principal`` is null on failure.
    ``implicit`` marks a token login without ``tokenauth=true`` (the user name
    was a token id). A name that is neither a user nor a token is written as
    its :func:`name_fingerprint`, never verbatim. An OAUTHBEARER login (``kind``
    ``oauth``) has ``oauth``: the JWT's ``issuer``, ``subject``, ``jti``,
    ``expiry_ms`` (as the token claimed them when it was refused) and the ``mapping``
    that matched -- never the JWT."""
    _outcome(outcome, None)
    _one_of("kind", kind, LOGIN_KINDS)
    extra = {"oauth": dict(oauth)} if oauth is not None else {}
    return {
        "type": "authentication",
        "outcome": outcome,
        "mechanism": mechanism,
        "kind": kind,
        "implicit": bool(implicit),
        "username": username,
        "token_id": token_id,
        "principal": principal,
        "client_host": client_host,
        "client_port": client_port,
        "listener": listener,
        "reason": reason,
        "client_id": client_id,
        **extra,
    }


def token_event(
    *,
    action: str,
    outcome: str,
    error_code: int = 0,
    error: str | None = None,
    requester: str | None = None,
    token_authenticated: bool = False,
    owner: str | None = None,
    token_id: str | None = None,
    renewers: Iterable[str] | None = None,
    expiry_ms: int | None = None,
    max_ms: int | None = None,
    count: int | None = None,
    client_host: str | None = None,
    listener: str | None = None,
    forwarded: bool = False,
    client_id: str | None = None,
    reason: str | None = None,
    labels: Mapping[str, str] | None = None,
    selector: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A delegation token request (create, renew, expire, describe) and its result.
    ``revoke`` is one token expired without its HMAC (by id, by owner, by label, or because
    its owner was deleted: ``reason``); a create refused for, or close to, the per-owner
    limit has ``reason`` ``owner_limit`` or ``owner_near_limit``, one refused for its labels
    ``invalid_labels``; a write refused because the broker's clock is off, ``clock_skew``. ``labels`` (the token's, on a successful create and on each revoked
    token) and ``selector`` (the labels a describe or revocation selected by) are JSON
    objects; other events about a token carry its id only, and the lake resolves its
    labels from its create (docs/audit.md).
    ``client_id`` is the client's own (``tokensvc-agent`` for the token agent's requests),
    also for a request forwarded to the controller."""
    _one_of("action", action, TOKEN_ACTIONS)
    _outcome(outcome, error_code)
    if reason is not None:
        _one_of("reason", reason, TOKEN_REASONS)
    return {
        "type": "token",
        "action": action,
        "outcome": outcome,
        "error_code": error_code,
        "error": error,
        "requester": requester,
        "token_authenticated": bool(token_authenticated),
        "owner": owner,
        "token_id": token_id,
        "renewers": None if renewers is None else list(renewers),
        "expiry_ms": expiry_ms,
        "max_ms": max_ms,
        "count": count,
        "client_host": client_host,
        "listener": listener,
        "forwarded": bool(forwarded),
        "client_id": client_id,
        "reason": reason,
        "labels": None if labels is None else dict(labels),
        "selector": None if selector is None else dict(selector),
    }


def forward_event(
    *,
    api: str,
    outcome: str,
    client_id: str | None = None,
    principal: str | None = None,
    client_host: str | None = None,
    controller_id: int | None = None,
    error_code: int = 0,
    attempts: int = 1,
    latency_ms: float | None = None,
) -> dict[str, Any]:
    """A write request this broker forwarded to the controller inside an Envelope."""
    _outcome(outcome, error_code)
    return {
        "type": "forward",
        "api": api,
        "client_id": client_id,
        "principal": principal,
        "client_host": client_host,
        "controller_id": controller_id,
        "outcome": outcome,
        "error_code": error_code,
        "attempts": attempts,
        "latency_ms": latency_ms,
    }


def sweep_event(
    *,
    token_id: str,
    owner: str | None = None,
    expiry_ms: int | None = None,
    max_ms: int | None = None,
    reason: str = "expired",
) -> dict[str, Any]:
    """The controller's expiry sweep removed a token."""
    _one_of("reason", reason, SWEEP_REASONS)
    return {
        "type": "sweep",
        "token_id": token_id,
        "owner": owner,
        "expiry_ms": expiry_ms,
        "max_ms": max_ms,
        "reason": reason,
    }


def acl_event(
    *,
    action: str,
    outcome: str,
    error_code: int = 0,
    requester: str | None = None,
    resource_type: str | None = None,
    resource_name: str | None = None,
    pattern_type: str | None = None,
    acl_principal: str | None = None,
    host: str | None = None,
    operation: str | None = None,
    permission: str | None = None,
) -> dict[str, Any]:
    """An ACL binding created or deleted."""
    _one_of("action", action, ACL_ACTIONS)
    _outcome(outcome, error_code)
    return {
        "type": "acl",
        "action": action,
        "outcome": outcome,
        "error_code": error_code,
        "requester": requester,
        "resource_type": resource_type,
        "resource_name": resource_name,
        "pattern_type": pattern_type,
        "acl_principal": acl_principal,
        "host": host,
        "operation": operation,
        "permission": permission,
    }


def credential_event(
    *,
    action: str,
    outcome: str,
    error_code: int = 0,
    requester: str | None = None,
    user: str | None = None,
    mechanism: str | None = None,
    iterations: int | None = None,
) -> dict[str, Any]:
    """A SCRAM user credential upserted or deleted (never the credential itself)."""
    _one_of("action", action, CREDENTIAL_ACTIONS)
    _outcome(outcome, error_code)
    return {
        "type": "credential",
        "action": action,
        "outcome": outcome,
        "error_code": error_code,
        "requester": requester,
        "user": user,
        "mechanism": mechanism,
        "iterations": iterations,
    }


def session_event(
    *,
    action: str,
    principal: str | None = None,
    token_id: str | None = None,
    client_host: str | None = None,
    listener: str | None = None,
    reason: str | None = None,
) -> dict[str, Any]:
    """An authenticated connection revoked, re-authenticated or expired, or one of its
    requests refused (``refused``: reason ``stale_view``, bounded staleness)."""
    _one_of("action", action, SESSION_ACTIONS)
    return {
        "type": "session",
        "action": action,
        "principal": principal,
        "token_id": token_id,
        "client_host": client_host,
        "listener": listener,
        "reason": reason,
    }


def dropped_event(*, dropped: int, dropped_total: int) -> dict[str, Any]:
    """The writer's own line: ``dropped`` events were lost since the last such line."""
    return {
        "type": WRITER_EVENT_TYPE,
        "action": "dropped",
        "dropped": dropped,
        "dropped_total": dropped_total,
    }


CONSTRUCTORS: Mapping[str, Callable[..., dict[str, Any]]] = {
    "authentication": authentication_event,
    "token": token_event,
    "forward": forward_event,
    "sweep": sweep_event,
    "acl": acl_event,
    "credential": credential_event,
    "session": session_event,
}

EVENT_TYPES = frozenset(CONSTRUCTORS) | {WRITER_EVENT_TYPE}


def build_event(event_type: str, fields: Mapping[str, Any]) -> dict[str, Any]:
    """The body (``type`` plus the type's fields) of one event, checked for secrets.

    Raises :class:`AuditEventError` for an unknown type, an unknown or missing
    field, a value outside the vocabulary, or anything :func:`check_no_secrets`
    refuses.
    """
    constructor = CONSTRUCTORS.get(event_type)
    if constructor is None:
        raise AuditEventError(f"unknown audit event type {event_type!r}")
    check_no_secrets(fields)
    try:
        return constructor(**fields)
    except TypeError as exc:
        raise AuditEventError(f"{event_type} event: {exc}") from None


def stamp(body: Mapping[str, Any], *, ts: int, broker_id: int, event_id: str) -> dict[str, Any]:
    """A complete event: the common fields first, then ``body``."""
    event: dict[str, Any] = {
        "schema": SCHEMA_VERSION,
        "ts": ts,
        "broker_id": broker_id,
        "event_id": event_id,
    }
    event.update(body)
    return event


# --- names that may be secrets -------------------------------------------------

FINGERPRINT_PREFIX = "fp:"
_FINGERPRINT_HEX_CHARS = 16


def name_fingerprint(key: bytes, name: str) -> str:
    """``fp:`` and 16 hex characters of HMAC-SHA256(key, name).

    What the audit log shows instead of a login name that matches no user and
    no token (it may be a password typed in the wrong field). The same name
    gives the same fingerprint under the same key, so repeats and bursts still
    correlate; without the key a guess cannot be checked against it.
    """
    digest = hmac.new(key, name.encode("utf-8"), hashlib.sha256).hexdigest()
    return FINGERPRINT_PREFIX + digest[:_FINGERPRINT_HEX_CHARS]


# --- the secret guard ---------------------------------------------------------

_ALLOWED_KEYS = frozenset({"token_id", "event_id", "key_id"})
_SECRET_KEY_PARTS = ("hmac", "password", "passwd", "salt", "secret", "key")
# Base64 (standard or URL-safe, padded or not) long enough to hold 64 bytes:
# an HMAC-SHA512 is exactly that, and so is anything derived from a key.
_LONG_BASE64 = re.compile(r"[A-Za-z0-9+/_-]{86,}={0,2}")


@functools.lru_cache(maxsize=4096)
def _secret_key(name: str) -> bool:
    # Field names come from the code, a few dozen in all: each is judged once.
    lowered = name.lower()
    if lowered in _ALLOWED_KEYS:
        return False
    return any(part in lowered for part in _SECRET_KEY_PARTS)


def _check_value(path: str, value: object) -> None:
    if isinstance(value, str):
        if len(value) >= 86 and _LONG_BASE64.fullmatch(value):
            raise AuditEventError(f"{path} looks like base64 of 64+ bytes; not written")
    elif isinstance(value, Mapping):
        check_no_secrets(value, _prefix=f"{path}.")
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            _check_value(f"{path}[{i}]", item)


# Written instead of a value that looks like base64 of 64+ bytes (see redact_secret_values).
REDACTED = "[redacted: base64 of 64+ bytes]"


def _redact(value: object) -> object:
    if isinstance(value, str):
        return REDACTED if len(value) >= 86 and _LONG_BASE64.fullmatch(value) else value
    if isinstance(value, Mapping):
        return {name: _redact(item) for name, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_redact(item) for item in value]
    return value


def redact_text(text: str) -> str:
    """``text`` with every run that :func:`check_no_secrets` would refuse as base64 of 64+
    bytes replaced by :data:`REDACTED` (for free text such as a log message)."""
    return _LONG_BASE64.sub(REDACTED, text) if len(text) >= 86 else text


def redact_secret_values(fields: Mapping[str, Any]) -> dict[str, Any]:
    """``fields`` with every string value that :func:`check_no_secrets` would refuse as
    base64 of 64+ bytes replaced by :data:`REDACTED`, nested lists and mappings included.

    Many values come from clients (a SCRAM user name, a principal, a resource name). A
    client must not be able to make an event fail by choosing such a value: the request
    emitting it would fail, and a failed login would skip its delay and its audit line.
    Field names are left alone: a secret-looking name is a programming error, refused.
    """
    return {name: _redact(value) for name, value in fields.items()}


def check_no_secrets(event: Mapping[str, Any], *, _prefix: str = "") -> None:
    """Refuse an event whose field names or values look like secret material.

    Field names containing ``hmac``, ``password``, ``salt``, ``secret`` or
    ``key`` (``stored_key``, ``server_key``, ``master_key``...) are refused,
    except ``token_id``, ``event_id`` and ``key_id``; so is any string value
    that is base64 of 64 bytes or more. Nested mappings and lists are checked
    too. The message names the field, never the value.
    """
    for name, value in event.items():
        if not _prefix and name in LABEL_FIELDS and isinstance(value, Mapping):
            for label, text in value.items():
                _check_value(f"{name}[{label!r}]", text)
            continue
        if _secret_key(str(name)):
            path = f"{_prefix}{name}"
            raise AuditEventError(f"field {path!r} may hold secret material; not written")
        if isinstance(value, str):
            # The common case, checked here so that no path string is built for it.
            if len(value) >= 86 and _LONG_BASE64.fullmatch(value):
                raise AuditEventError(f"{_prefix}{name} looks like base64 of 64+ bytes; "
                                      "not written")
        elif value is not None:
            _check_value(f"{_prefix}{name}", value)
