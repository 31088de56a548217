"""ZooKeeper session helpers shared by the integration tests: open clients that are
closed at teardown, and expire a session for real.

Owns only test-side session handling; the clients come from zk.client.open_client.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from kazoo.client import KazooClient, KazooState

from zk.client import ZkSettings, open_client


@contextmanager
def client_factory(zk_connect: str,
                   session_timeout_ms: int = 4000) -> Iterator[Callable[[], KazooClient]]:
    """A function opening a new client on ``zk_connect``; every client it opened is
    stopped and closed when the block ends."""
    made: list[KazooClient] = []

    def make() -> KazooClient:
        client = open_client(ZkSettings(zk_connect, session_timeout_ms=session_timeout_ms))
        made.append(client)
        return client

    yield make
    for client in made:
        client.stop()
        client.close()


def expire_session(client: KazooClient, attempts: int = 5, wait_s: float = 5.0) -> None:
    """Expire ``client``'s session for real: a second connection takes the session over
    and closes it, so the first one's reconnect is told the session expired (LOST)."""
    lost = threading.Event()

    def watch(state: str) -> None:
        if state == KazooState.LOST:
            lost.set()

    client.add_listener(watch)
    try:
        for _ in range(attempts):
            hosts = ",".join(f"{host}:{port}" for host, port in client.hosts)
            thief = KazooClient(hosts=hosts, client_id=client.client_id)
            thief.start(timeout=10)
            thief.stop()
            thief.close()
            if lost.wait(wait_s):
                return
        raise AssertionError("the session did not expire")
    finally:
        client.remove_listener(watch)
