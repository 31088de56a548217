"""The errors every ``zk`` store raises, and the one table from kazoo failures to them.

Owns :class:`StoreError` and its subclasses, each carrying the Kafka error it maps to,
and :data:`KAZOO_ERRORS`, the one mapping from kazoo's exceptions to store errors
(:func:`translate`; :func:`zk_call` runs a kazoo call through it). Every store, the
pipelined reader (:mod:`zk.reads`) and the other ``zk`` users turn kazoo failures into
store errors here and nowhere else; the kazoo exception stays the ``__cause__``.

- :class:`StoreUnavailable`: no connection, no quorum, or no answer within the cap
  (REQUEST_TIMED_OUT, retriable once ZooKeeper is back);
- :class:`ZnodeMissing` / :class:`ZnodeExists`: the znode read or written is gone /
  already there (UNKNOWN_SERVER_ERROR when nobody expected it; a store that expects
  it catches it);
- :class:`NotControllerError`: a write's guard failed (NOT_CONTROLLER), raised by the
  stores from a transaction's results;
- anything else from kazoo: :class:`StoreError` (UNKNOWN_SERVER_ERROR).

Must not: know any znode layout, or decide what a failure means for a store (a store
reads a transaction's per-operation results itself).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from kazoo.exceptions import (
    ConnectionLoss,
    KazooException,
    NodeExistsError,
    NoNodeError,
    OperationTimeoutError,
    SessionExpiredError,
)
from kazoo.handlers.threading import KazooTimeoutError

from tokensvc.core.errors import Errors, KafkaError

T = TypeVar("T")


class StoreError(KafkaError):
    """ZooKeeper refused or failed an operation of a ``zk`` store."""

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


class ZnodeMissing(StoreError):
    """The znode read or written does not exist (kazoo's NoNodeError)."""


class ZnodeExists(StoreError):
    """The znode created exists already (kazoo's NodeExistsError)."""


# kazoo's failures that mean "ZooKeeper cannot answer now", not "it refused".
UNAVAILABLE = (ConnectionLoss, SessionExpiredError, OperationTimeoutError, KazooTimeoutError)

# The one table: kazoo's exceptions -> the store error each becomes, with its message
# (``what`` is the operation, ``name`` kazoo's class name). The first row that matches
# wins; anything else is a StoreError.
KAZOO_ERRORS: tuple[tuple[tuple[type[BaseException], ...], type[StoreError], str], ...] = (
    (UNAVAILABLE, StoreUnavailable, "{what}: ZooKeeper unavailable ({name})"),
    ((NoNodeError,), ZnodeMissing, "{what}: ZooKeeper error {name}"),
    ((NodeExistsError,), ZnodeExists, "{what}: ZooKeeper error {name}"),
)
_OTHER = "{what}: ZooKeeper error {name}"


def translate(what: str, exc: BaseException) -> StoreError:
    """The store error a kazoo failure of operation ``what`` is (see :data:`KAZOO_ERRORS`)."""
    name = exc.__class__.__name__
    for kinds, error, message in KAZOO_ERRORS:
        if isinstance(exc, kinds):
            return error(message.format(what=what, name=name))
    return StoreError(_OTHER.format(what=what, name=name))


def zk_call(what: str, fn: Callable[[], T]) -> T:
    """Run one kazoo call, turning its failures into store errors (the kazoo exception
    is the ``__cause__``)."""
    try:
        return fn()
    except (KazooException, KazooTimeoutError) as exc:
        raise translate(what, exc) from exc
