"""In-process brokers for integration tests: real sockets, real ZooKeeper.

Each broker runs its own asyncio loop in a thread, so a test can start
several brokers against one ZooKeeper chroot, stop one to fail over, and talk
to them over loopback with real clients.
"""

from __future__ import annotations

import asyncio
import secrets
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support.broker_defaults import TEST_BROKER_DEFAULTS
from tokensvc.broker.broker import Broker
from tokensvc.broker.loop import eventloop
from tokensvc.core.config import BrokerConfig
from tokensvc.scram.formatter import ScramMechanism
from zk import credential_store
from zk.client import ZkSettings, open_client


def bootstrap_user(zk_connect: str, user: str, password: str) -> None:
    """``user``'s SCRAM credentials for every mechanism, 4096 iterations, written to ZooKeeper."""
    credential_store.bootstrap_user(ZkSettings(zk_connect), user, password, iterations=4096)


def add_user(brokers: Sequence[InProcessBroker], user: str, password: str,
             timeout: float = 15.0) -> None:
    """Write ``user``'s credentials to ZooKeeper while ``brokers`` run, then wait until
    every one of them has followed the change (a login may go to any broker next)."""
    bootstrap_user(brokers[0].config.zookeeper_connect, user, password)
    deadline = time.monotonic() + timeout
    for b in brokers:
        while len(b.broker.local.users.credentials(user)) < len(ScramMechanism):
            if time.monotonic() > deadline:
                raise AssertionError(f"broker {b.broker.broker_id} has no credentials for {user}")
            time.sleep(0.01)


@dataclass
class InProcessBroker:
    config: BrokerConfig
    broker: Broker | None = None
    loop: asyncio.AbstractEventLoop | None = None
    thread: threading.Thread | None = None
    _stop: asyncio.Event | None = None
    _started: threading.Event = field(default_factory=threading.Event)
    _error: BaseException | None = None
    # Called with the Broker object after it is built and before it starts (white-box
    # tests: a cache listener, a held snapshot load).
    prepare: Callable[[Broker], None] | None = None

    def start(self, timeout: float = 30.0) -> InProcessBroker:
        self.loop = eventloop.new_event_loop()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        if not self._started.wait(timeout):
            raise TimeoutError("broker did not start")
        if self._error:
            raise self._error
        return self

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_until_complete(self._main())

    async def _main(self) -> None:
        self._stop = asyncio.Event()
        self.broker = Broker(self.config)
        try:
            if self.prepare is not None:
                self.prepare(self.broker)
            await self.broker.start()
        except BaseException as exc:  # noqa: BLE001 - reported to the starting thread
            self._error = exc
            self._started.set()
            return
        self._started.set()
        await self._stop.wait()
        await self.broker.stop()

    def stop(self, timeout: float = 30.0) -> None:
        if self.loop is None or self._stop is None:
            return
        self.loop.call_soon_threadsafe(self._stop.set)
        self.thread.join(timeout)

    def address(self, listener: str = "SASL_PLAINTEXT") -> tuple[str, int]:
        return self.broker.parts.server.addresses[listener]

    def call(self, coro, timeout: float = 30.0):
        """Run a coroutine on this broker's loop (for white-box checks)."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)


def broker_properties(
    broker_id: int, zk_connect: str, *, master_key: str | None = "test-master-key", **extra: str
) -> dict[str, str]:
    props = {
        "broker.id": str(broker_id),
        "listeners": "SASL_PLAINTEXT://127.0.0.1:0,BROKER://127.0.0.1:0,PLAINTEXT://127.0.0.1:0",
        "listener.security.protocol.map": "SASL_PLAINTEXT:SASL_PLAINTEXT,BROKER:SASL_PLAINTEXT,"
        "PLAINTEXT:PLAINTEXT",
        "inter.broker.listener.name": "BROKER",
        "inter.broker.sasl.mechanism": "SCRAM-SHA-512",
        "inter.broker.sasl.username": "broker",
        "inter.broker.sasl.password": "broker-secret",
        "zookeeper.connect": zk_connect,
        "zookeeper.session.timeout.ms": "6000",
        "sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512",
        "super.users": "User:admin;User:broker",
        "authorizer.class.name": "tokensvc.authz.AclAuthorizer",
        "connection.failed.authentication.delay.ms": "50",
        **TEST_BROKER_DEFAULTS,
    }
    if master_key is not None:
        props["delegation.token.secret.key"] = master_key
    props.update({k.replace("_", "."): v for k, v in extra.items()})
    return props


def new_password() -> str:
    return secrets.token_urlsafe(12)


def wait_for_controller(brokers: list[InProcessBroker], timeout: float = 15.0) -> InProcessBroker:
    """The broker that won the election, once one has (fails the test after ``timeout``)."""
    deadline = time.monotonic() + timeout
    while True:
        for b in brokers:
            if b.broker.is_controller:
                return b
        assert time.monotonic() < deadline, "no controller was elected in time"
        time.sleep(0.05)


def controller(brokers: Sequence[InProcessBroker]) -> InProcessBroker:
    """The broker that is the controller now."""
    return next(b for b in brokers if b.broker.is_controller)


def followers(brokers: Sequence[InProcessBroker]) -> list[InProcessBroker]:
    """The brokers that are not the controller now."""
    return [b for b in brokers if not b.broker.is_controller]


def follower(brokers: Sequence[InProcessBroker]) -> InProcessBroker:
    """The first broker that is not the controller now."""
    return next(b for b in brokers if not b.broker.is_controller)


@contextmanager
def zk_client(zk_connect: str) -> Iterator[Any]:
    """A ZooKeeper client rooted at ``zk_connect`` for a test's own reads and writes;
    stopped and closed on exit."""
    client = open_client(ZkSettings(zk_connect))
    try:
        yield client
    finally:
        client.stop()
        client.close()


def chroot_with_users(zookeeper_connect: str, name: str,
                      users: Sequence[tuple[str, str]]) -> str:
    """A fresh chroot under ``zookeeper_connect`` holding a SCRAM credential per user."""
    connect = f"{zookeeper_connect}/{name}-{time.monotonic_ns()}"
    for user, password in users:
        bootstrap_user(connect, user, password)
    return connect


@contextmanager
def running_brokers(zk_connect: str, ids: Sequence[int], *, audit_root: Path | None = None,
                    **props: str) -> Iterator[list[InProcessBroker]]:
    """In-process brokers ``ids`` on ``zk_connect`` (with ``props`` overrides; with
    ``audit_root``, broker ``i`` audits to ``audit_root/i``), once a controller is
    elected; stopped on exit."""

    def properties(i: int) -> dict[str, str]:
        audit = {"audit_log_dir": str(audit_root / str(i))} if audit_root is not None else {}
        return broker_properties(i, zk_connect, **audit, **props)

    brokers = [InProcessBroker(BrokerConfig.from_properties(properties(i))).start() for i in ids]
    try:
        wait_for_controller(brokers)
        yield brokers
    finally:
        for b in brokers:
            b.stop()
