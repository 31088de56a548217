"""The errors every ``zk`` store raises, and :func:`zk_call`, kazoo failures -> those errors.

Owns the mapping from kazoo's exceptions to store errors, each carrying the Kafka
error it maps to (StoreUnavailable: REQUEST_TIMED_OUT, retriable; NotControllerError:
NOT_CONTROLLER). Must not know any znode layout.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from kazoo.exceptions import (
    ConnectionLoss,
    KazooException,
    OperationTimeoutError,
    SessionExpiredError,
)
from kazoo.handlers.threading import KazooTimeoutError

from tokensvc.core.errors import Errors, KafkaError

T = TypeVar("T")


class StoreError(KafkaError):
    """ZooKeeper refused or failed an operation on the token store."""

    def __init__(self, message: str, error: Errors = Errors.UNKNOWN_SERVER_ERROR) -> None:
        super().__init__(error, message)


class StoreUnavailable(StoreError):
    """No connection or no quorum: retriable once ZooKeeper is back."""

    def __init__(self, message: str) -> None:
        super().__init__(message, Errors.REQUEST_TIMED_OUT)


class NotControllerError(StoreError):
    """The write's guard failed: this broker is no longer the controller."""

    def __init__(self, message: str) -> None:
        super().__init__(message, Errors.NOT_CONTROLLER)


UNAVAILABLE = (ConnectionLoss, SessionExpiredError, OperationTimeoutError, KazooTimeoutError)


def translate(what: str, exc: Exception) -> StoreError:
    if isinstance(exc, UNAVAILABLE):
        return StoreUnavailable(f"{what}: ZooKeeper unavailable ({exc.__class__.__name__})")
    return StoreError(f"{what}: ZooKeeper error {exc.__class__.__name__}")


def zk_call(what: str, fn: Callable[[], T]) -> T:
    """Run one kazoo call, turning its failures into store errors (the kazoo exception
    is the ``__cause__``)."""
    try:
        return fn()
    except (KazooException, KazooTimeoutError) as exc:
        raise translate(what, exc) from exc


