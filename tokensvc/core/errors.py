"""Kafka error codes and the one exception type that carries them.

This module owns the mapping between tokensvc failures and Kafka's wire error
codes. Every layer raises :class:`KafkaError` (or a subclass) with the code it
maps to; handlers turn it into the response's ``ErrorCode`` in one place.
It must not import anything else from tokensvc.
"""

from __future__ import annotations

from enum import IntEnum


class Errors(IntEnum):
    """Kafka's error numbers used by tokensvc (names as in Kafka's ``Errors``)."""

    NONE = 0
    UNKNOWN_SERVER_ERROR = -1
    CORRUPT_MESSAGE = 2
    REQUEST_TIMED_OUT = 7
    NETWORK_EXCEPTION = 13
    COORDINATOR_LOAD_IN_PROGRESS = 14
    CLUSTER_AUTHORIZATION_FAILED = 31
    UNSUPPORTED_SASL_MECHANISM = 33
    ILLEGAL_SASL_STATE = 34
    UNSUPPORTED_VERSION = 35
    INVALID_CONFIG = 40
    NOT_CONTROLLER = 41
    INVALID_REQUEST = 42
    POLICY_VIOLATION = 44
    SECURITY_DISABLED = 54
    SASL_AUTHENTICATION_FAILED = 58
    DELEGATION_TOKEN_AUTH_DISABLED = 61
    DELEGATION_TOKEN_NOT_FOUND = 62
    DELEGATION_TOKEN_OWNER_MISMATCH = 63
    DELEGATION_TOKEN_REQUEST_NOT_ALLOWED = 64
    DELEGATION_TOKEN_AUTHORIZATION_FAILED = 65
    DELEGATION_TOKEN_EXPIRED = 66
    INVALID_PRINCIPAL_TYPE = 67
    RESOURCE_NOT_FOUND = 91
    DUPLICATE_RESOURCE = 92
    UNACCEPTABLE_CREDENTIAL = 93
    PRINCIPAL_DESERIALIZATION_FAILURE = 97

    @property
    def retriable(self) -> bool:
        return self in _RETRIABLE


# KIP-801's AUTHORIZER_NOT_READY has no wire code in Kafka. tokensvc answers it
# with COORDINATOR_LOAD_IN_PROGRESS (14): retriable in every Kafka client and
# already meaning "this broker is still loading state, try again shortly".
AUTHORIZER_NOT_READY = Errors.COORDINATOR_LOAD_IN_PROGRESS

_RETRIABLE = frozenset(
    {
        Errors.REQUEST_TIMED_OUT,
        Errors.NETWORK_EXCEPTION,
        Errors.COORDINATOR_LOAD_IN_PROGRESS,
        Errors.NOT_CONTROLLER,
    }
)

_MESSAGES = {
    Errors.NONE: "no error",
    Errors.UNKNOWN_SERVER_ERROR: "the server hit an unexpected error",
    Errors.CORRUPT_MESSAGE: "the request could not be parsed",
    Errors.REQUEST_TIMED_OUT: "the request timed out",
    Errors.NETWORK_EXCEPTION: "the connection was lost",
    Errors.COORDINATOR_LOAD_IN_PROGRESS: "the broker is still loading its state; retry",
    Errors.CLUSTER_AUTHORIZATION_FAILED: "not authorized for this cluster operation",
    Errors.UNSUPPORTED_SASL_MECHANISM: "the SASL mechanism is not enabled on this listener",
    Errors.ILLEGAL_SASL_STATE: "SASL request out of order",
    Errors.UNSUPPORTED_VERSION: "the API version is not supported",
    Errors.INVALID_CONFIG: "invalid configuration",
    Errors.NOT_CONTROLLER: "this broker is not the controller",
    Errors.INVALID_REQUEST: "the request is invalid",
    Errors.POLICY_VIOLATION: (
        "refused by a policy (delegation.token.max.per.owner, or beside Kafka: a "
        "ZooKeeper-to-KRaft migration has started and token writes have stopped)"
    ),
    Errors.SECURITY_DISABLED: "security features are disabled",
    Errors.SASL_AUTHENTICATION_FAILED: "authentication failed",
    Errors.DELEGATION_TOKEN_AUTH_DISABLED: "delegation tokens are disabled on this cluster",
    Errors.DELEGATION_TOKEN_NOT_FOUND: "token not found",
    Errors.DELEGATION_TOKEN_OWNER_MISMATCH: "not an owner or renewer of this token",
    Errors.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED: (
        "token requests are not allowed on a token-authenticated, PLAINTEXT or one-way SSL connection"
    ),
    Errors.DELEGATION_TOKEN_AUTHORIZATION_FAILED: "not authorized for this token operation",
    Errors.DELEGATION_TOKEN_EXPIRED: "token has expired",
    Errors.INVALID_PRINCIPAL_TYPE: "principal type must be User",
    Errors.RESOURCE_NOT_FOUND: "resource not found",
    Errors.DUPLICATE_RESOURCE: "duplicate resource in request",
    Errors.UNACCEPTABLE_CREDENTIAL: "credential not acceptable",
    Errors.PRINCIPAL_DESERIALIZATION_FAILURE: "the forwarded principal could not be read",
}


def describe(error: Errors | int) -> str:
    """A one-line message a person can act on, for an error code."""
    try:
        return _MESSAGES[Errors(error)]
    except ValueError:
        return f"unknown error code {error}"


class KafkaError(Exception):
    """A failure that maps to one Kafka error code.

    ``message`` is safe to show a client or log: it never contains secrets.
    """

    def __init__(self, error: Errors, message: str | None = None) -> None:
        self.error = Errors(error)
        self.message = message or describe(error)
        super().__init__(f"{self.error.name}: {self.message}")
