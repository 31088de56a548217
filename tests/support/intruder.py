"""What a ZooKeeper client that is not the brokers' managed to do.

Owns the one loop the ZooKeeper security tests share: run each attempt (a read of a
secret, a write) on a started kazoo client and list those that did not raise a kazoo
error, then close the client. The tests say which attempts, on which paths, with which
identity; a secure store lets none through.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from kazoo.exceptions import KazooException


def attempts_that_succeeded(client: Any, attempts: Mapping[str, Callable[[], Any]]) -> list[str]:
    """The names of ``attempts`` that ran without a kazoo error; stops ``client`` after."""
    managed = []
    try:
        for name, attempt in attempts.items():
            try:
                attempt()
            except KazooException:
                continue
            managed.append(name)
    finally:
        client.stop()
        client.close()
    return managed
