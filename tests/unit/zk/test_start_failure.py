"""zk.client._start: a refused SASL login is said as one, even when kazoo's start() wakes
after the refusal and raises its connection time-out (kazoo reports CONNECTED before the
SASL exchange, then AUTH_FAILED). Pure: a stand-in client with kazoo's surface, no I/O."""

from __future__ import annotations

import pytest
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import KeeperState

from tokensvc.core.zk_security import ZkSaslLogin, ZkSecurity
from zk.client import ZkSettings, ZooKeeperUnavailable, _start


class _Client:
    """start() fails as kazoo's does when its wait ends on a client no longer connected."""

    def __init__(self, state: KeeperState) -> None:
        self.client_state = state
        self.stopped = self.closed = False

    def start(self, timeout: float) -> None:
        raise KazooTimeoutError("Connection time-out")

    def stop(self) -> None:
        self.stopped = True

    def close(self) -> None:
        self.closed = True


SETTINGS = ZkSettings("127.0.0.1:2181", security=ZkSecurity(
    sasl=ZkSaslLogin("tokensvc", "secret-password")))


def test_a_start_that_wakes_after_auth_failed_names_the_refused_login() -> None:
    client = _Client(KeeperState.AUTH_FAILED)
    with pytest.raises(ZooKeeperUnavailable) as raised:
        _start(client, SETTINGS, "127.0.0.1:2181", 45.0)
    assert "refused the SASL DIGEST-MD5 login of user 'tokensvc'" in str(raised.value)
    assert "secret-password" not in str(raised.value)
    assert client.stopped and client.closed


def test_a_real_time_out_is_still_a_time_out() -> None:
    client = _Client(KeeperState.CONNECTING)
    with pytest.raises(ZooKeeperUnavailable) as raised:
        _start(client, SETTINGS, "127.0.0.1:2181", 45.0)
    assert "could not connect to ZooKeeper at 127.0.0.1:2181 within 45s" in str(raised.value)
