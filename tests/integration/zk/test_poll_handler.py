"""The kazoo handler's one-poll ``select`` (zk/poll_handler.py) on real sockets, and
every tokensvc client using it against the session ZooKeeper."""

from __future__ import annotations

import socket
import time
import uuid

import pytest

from zk.client import ZkSettings, open_client
from zk.poll_handler import PollHandler, poll_select


@pytest.fixture
def pair():
    a, b = socket.socketpair()
    yield a, b
    a.close()
    b.close()


def test_an_idle_socket_is_writable_and_not_readable(pair) -> None:
    a, _ = pair
    assert poll_select([a], [a], [a], 0) == ([], [a], [])


def test_a_wait_with_nothing_ready_lasts_its_timeout(pair) -> None:
    a, _ = pair
    began = time.monotonic()
    assert poll_select([a], [], [], 0.05) == ([], [], [])
    assert time.monotonic() - began >= 0.05


def test_data_makes_the_socket_readable_and_descriptors_work_too(pair) -> None:
    a, b = pair
    b.sendall(b"x")
    assert poll_select([a, b], [], [], None) == ([a], [], [])
    assert poll_select([a.fileno()], [], [], 1) == ([a.fileno()], [], [])


def test_a_hang_up_wakes_a_reader(pair) -> None:
    a, b = pair
    b.close()
    readable, _, _ = poll_select([a], [], [], 1)
    assert readable == [a]
    assert a.recv(1) == b""


def test_bad_arguments_are_refused_as_select_refuses_them(pair) -> None:
    a, _ = pair
    with pytest.raises(ValueError):
        poll_select([a], [], [], -1)
    closed = socket.socket()
    closed.close()
    with pytest.raises(ValueError):
        poll_select([closed], [], [], 0)


def test_tokensvc_clients_talk_to_zookeeper_through_it(zookeeper) -> None:
    client = open_client(ZkSettings(f"{zookeeper.connect}/poll-handler"))
    try:
        assert isinstance(client.handler, PollHandler)
        path = f"/x-{uuid.uuid4().hex}"
        client.create(path, b"v" * 100_000)  # a large answer: several reads
        assert client.get(path)[0] == b"v" * 100_000
        assert client.get_children("/") == [path[1:]]
    finally:
        client.stop()
        client.close()
