"""Polling helpers shared by the integration tests: wait for a condition that another
thread, broker or ZooKeeper watch makes true.

Owns only waiting; it must not know about brokers, clients or ZooKeeper.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def poll_until(predicate: Callable[[], bool], timeout: float = 10.0,
               interval: float = 0.01) -> bool:
    """True as soon as ``predicate()`` is; after ``timeout`` seconds, its last answer."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()


def retry(check: Callable[[], T], timeout: float = 5.0, *,
          errors: tuple[type[BaseException], ...] = (AssertionError, ConnectionError),
          interval: float = 0.05) -> T:
    """``check()``'s value once it stops raising one of ``errors``; after ``timeout``
    seconds, its last error."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return check()
        except errors:
            if time.monotonic() > deadline:
                raise
            time.sleep(interval)


def wait_for(fn: Callable[[], T], timeout: float, what: str) -> T:
    """``fn()``'s first truthy value; AssertionError naming ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = fn()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"no {what} within {timeout:.0f}s")


def raising(fn: Callable[[], object], error: type[BaseException] = ConnectionError,
            match: str | None = None) -> BaseException:
    """The ``error`` that ``fn()`` raises; AssertionError when it returns instead.

    For use inside the retry loops above: ``pytest.raises`` reports "did not raise" with
    pytest's own BaseException, which a loop catching Exception would not retry.
    """
    try:
        value = fn()
    except error as exc:
        if match is not None:
            assert match in str(exc), f"{exc!r} does not mention {match!r}"
        return exc
    close = getattr(value, "close", None)
    if callable(close):
        close()
    raise AssertionError(f"expected {error.__name__}, got {value!r}")
