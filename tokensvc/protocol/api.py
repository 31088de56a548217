"""The Kafka APIs tokensvc speaks: keys, version ranges, flexibility, header versions.

This module is the one table of which API versions exist here. Everything that
depends on "is this version flexible?" or "which header does it use?" asks it.
It must not know field layouts (that is ``messages``) or bytes (that is ``codec``).
"""

from __future__ import annotations

from enum import IntEnum


class ApiKey(IntEnum):
    """Kafka's API keys for the requests tokensvc handles or sends."""

    METADATA = 3
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    DESCRIBE_ACLS = 29
    CREATE_ACLS = 30
    DELETE_ACLS = 31
    SASL_AUTHENTICATE = 36
    CREATE_DELEGATION_TOKEN = 38
    RENEW_DELEGATION_TOKEN = 39
    EXPIRE_DELEGATION_TOKEN = 40
    DESCRIBE_DELEGATION_TOKEN = 41
    DESCRIBE_CLIENT_QUOTAS = 48
    DESCRIBE_USER_SCRAM_CREDENTIALS = 50
    ALTER_USER_SCRAM_CREDENTIALS = 51
    ENVELOPE = 58
    DESCRIBE_CLUSTER = 60


# (min, max) supported versions, and the first flexible version (None: never).
_VERSIONS: dict[ApiKey, tuple[int, int, int | None]] = {
    ApiKey.METADATA: (0, 12, 9),
    ApiKey.SASL_HANDSHAKE: (0, 1, None),
    ApiKey.API_VERSIONS: (0, 4, 3),
    ApiKey.DESCRIBE_ACLS: (0, 3, 2),
    ApiKey.CREATE_ACLS: (0, 3, 2),
    ApiKey.DELETE_ACLS: (0, 3, 2),
    ApiKey.SASL_AUTHENTICATE: (0, 2, 2),
    ApiKey.CREATE_DELEGATION_TOKEN: (0, 3, 2),
    ApiKey.RENEW_DELEGATION_TOKEN: (0, 2, 2),
    ApiKey.EXPIRE_DELEGATION_TOKEN: (0, 2, 2),
    ApiKey.DESCRIBE_DELEGATION_TOKEN: (0, 3, 2),
    ApiKey.DESCRIBE_CLIENT_QUOTAS: (0, 1, 1),
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: (0, 0, 0),
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: (0, 0, 0),
    ApiKey.ENVELOPE: (0, 0, 0),
    ApiKey.DESCRIBE_CLUSTER: (0, 1, 0),
}

SUPPORTED: dict[ApiKey, tuple[int, int]] = {
    key: (lo, hi) for key, (lo, hi, _) in _VERSIONS.items()
}


# Precomputed answers for the per-request questions below: every request asks them, and
# building an IntEnum from an int (a ValueError for unknown keys) cost 2-3 % of a
# broker's CPU per token login.
_BY_VALUE: dict[int, ApiKey] = {int(key): key for key in ApiKey}
_FLEXIBLE: dict[tuple[int, int], bool] = {
    (int(key), version): first is not None and version >= first
    for key, (lo, hi, first) in _VERSIONS.items()
    for version in range(lo, hi + 1)
}


def api_key_of(value: int) -> ApiKey | None:
    """The ApiKey for a wire value, or None for a key tokensvc does not speak."""
    return _BY_VALUE.get(value)


def supports(api_key: int, api_version: int) -> bool:
    """True when ``api_key`` is known here and ``api_version`` is in its range."""
    return (api_key, api_version) in _FLEXIBLE


def flexible(api_key: int, api_version: int) -> bool:
    """True when this version uses compact types and tagged fields (KIP-482)."""
    known = _FLEXIBLE.get((api_key, api_version))
    if known is not None:
        return known
    key = api_key_of(api_key)
    if key is None:
        raise ValueError(f"unknown api key {api_key}")
    first = _VERSIONS[key][2]
    return first is not None and api_version >= first


def request_header_version(api_key: int, api_version: int) -> int:
    """Request header v2 (with tagged fields) for flexible versions, else v1."""
    return 2 if flexible(api_key, api_version) else 1


def response_header_version(api_key: int, api_version: int) -> int:
    """Response header v1 for flexible versions, else v0.

    ApiVersions is the exception: its response header is always v0, because a
    client must be able to read it before it knows which versions the broker has.
    """
    if api_key == ApiKey.API_VERSIONS:
        return 0
    return 1 if flexible(api_key, api_version) else 0
