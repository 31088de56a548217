"""DescribeUserScramCredentials of every user on a broker holding thousands of users
does not hold the event loop: a login made meanwhile is answered before it ends.

A real broker (in-process, real sockets) starts on a real ZooKeeper into which 5,000
SCRAM users were written straight in Kafka's layout. A describe of every user is sent.
Its first credential lookup (a wrapper around ``UserCredentialCache.credentials``) holds
the describe until a SCRAM login on another connection has completed, or for 20 s. If the
describe ran on the event loop, the login could not complete while it is held: it would
complete only after the wrapper gave up and the describe ended, and the recorded order
would show no lookup after the login. No timing is measured, and the machine's load cannot
reorder the two; the describe must still list every user.
"""

from __future__ import annotations

import threading
import time

from bench import zkraw
from tests.support.client import WireClient
from tests.support.inproc import InProcessBroker, bootstrap_user, broker_properties
from tests.support.wait import poll_until
from tokensvc.core.config import BrokerConfig
from tokensvc.protocol.api import ApiKey
from tokensvc.scram.formatter import ScramMechanism, derive_credential
from zk.credential_store import USERS_PATH, encode_user_config

USERS = 5_000


def _write_users(connect: str, names: list[str]) -> None:
    """Every user with a SHA-256 credential (the same one: only the count matters)."""
    mechanism = ScramMechanism.SCRAM_SHA_256
    text = derive_credential("user-secret", mechanism, 4096).to_kafka_string()
    data = encode_user_config({mechanism.mechanism_name: text})
    with zkraw.client(connect) as zk:
        zk.ensure_path(USERS_PATH)
        for lo in range(0, len(names), 2_000):
            pending = [zk.create_async(f"{USERS_PATH}/{n}", data) for n in names[lo:lo + 2_000]]
            for result in pending:
                result.get(timeout=60)


def test_a_login_sent_during_a_describe_of_every_user_is_answered_before_it_ends(zookeeper):
    connect = f"{zookeeper.connect}/describe-users-{time.monotonic_ns()}"
    for user, password in [("admin", "admin-secret"), ("broker", "broker-secret")]:
        bootstrap_user(connect, user, password)
    _write_users(connect, [f"user-{i:06d}" for i in range(USERS)])
    broker = InProcessBroker(BrokerConfig.from_properties(broker_properties(1, connect))).start()
    try:
        users = broker.broker.local.users
        poll_until(lambda: len(users.users()) == USERS + 2, timeout=120)
        order: list[str] = []
        lookup = users.credentials
        started, logged_in = threading.Event(), threading.Event()

        def recording(name):
            order.append("user")
            if not started.is_set():
                started.set()
                logged_in.wait(20)
            return lookup(name)

        users.credentials = recording
        described: dict = {}
        with WireClient(broker.address(), "admin", "admin-secret", timeout=300) as admin:
            describing = threading.Thread(
                target=lambda: described.update(
                    admin.request(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, {"Users": None})
                )
            )
            describing.start()
            assert started.wait(60)
            with WireClient(broker.address(), "broker", "broker-secret", timeout=60):
                order.append("login")
            logged_in.set()
            describing.join(300)
        assert not describing.is_alive()
        assert described["ErrorCode"] == 0
        assert len(described["Results"]) == USERS + 2
        assert all(r["ErrorCode"] == 0 for r in described["Results"])
        login_at = order.index("login")
        assert "user" in order[login_at + 1:], "the describe had finished before the login"
    finally:
        broker.stop()
