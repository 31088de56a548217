"""PBKDF2 never runs on a broker's event loop.

A real broker (in-process, real sockets, real ZooKeeper) with one token written in
Kafka's layout. Every PBKDF2 run in the process is recorded with the name of the thread
it ran on (a wrapper around ``hashlib.pbkdf2_hmac`` that only records). Then: the
token's first login (the broker derives its credential), a login with the token and a
wrong password, and a login as a name that exists nowhere (each failure spends one
derivation so that its duration tells nothing). The broker's three derivations must
have run in its ``scram-derive`` worker, and none on the thread that runs its event
loop; the test clients' own derivations run on their clients' threads.
"""

from __future__ import annotations

import base64
import hashlib
import threading
import time

import pytest

from bench import zkraw
from tests.support.client import WireClient
from tests.support.inproc import InProcessBroker, broker_properties, chroot_with_users
from tokensvc.broker.writes.channel import ChannelAuthError
from tokensvc.core.config import BrokerConfig
from tokensvc.core.keys import key_id, token_hmac
from tokensvc.core.principal import KafkaPrincipal
from tokensvc.core.token import TokenInformation

MASTER_KEY = "test-master-key"


def test_scram_derivations_run_in_the_worker_never_on_the_event_loop(zookeeper, monkeypatch):
    connect = chroot_with_users(zookeeper.connect, "derive-off-loop",
                                [("admin", "admin-secret"), ("broker", "broker-secret")])
    now = int(time.time() * 1000)
    owner = KafkaPrincipal.user("alice")
    token = TokenInformation("derive-me-0001", owner, owner, (), now, now + 3_600_000,
                             now + 7_200_000, key_id(MASTER_KEY))
    assert zkraw.write_tokens(connect, [token]) == 1
    password = base64.b64encode(token_hmac(MASTER_KEY, token.token_id)).decode()

    ran_on: list[str] = []
    real = hashlib.pbkdf2_hmac

    def recorded(*args, **kwargs):
        ran_on.append(threading.current_thread().name)
        return real(*args, **kwargs)

    broker = InProcessBroker(BrokerConfig.from_properties(broker_properties(1, connect))).start()
    try:
        monkeypatch.setattr(hashlib, "pbkdf2_hmac", recorded)
        with WireClient(broker.address(), token.token_id, password, token=True):
            pass
        with pytest.raises(ChannelAuthError):
            WireClient(broker.address(), token.token_id, "not-the-hmac", token=True)
        with pytest.raises(ChannelAuthError):
            WireClient(broker.address(), "nobody-anywhere", "some-password")
    finally:
        monkeypatch.undo()
        broker.stop()

    # The client's derivations run on its own loop thread (one per WireClient).
    assert broker.thread.name not in ran_on, ran_on
    # The first login's derivation and one spent by each of the two failures.
    assert [name for name in ran_on if name.startswith("scram-derive")] == ["scram-derive_0"] * 3
