"""The managed ZooKeeper: a real server on loopback, started and stopped by our code."""

from __future__ import annotations

import socket

import pytest
from kazoo.client import KazooClient

from zk.server import ManagedZooKeeper, ZooKeeperEnsemble, ZooKeeperStartError, find_java


def _write_and_read(connect: str) -> bytes:
    client = KazooClient(hosts=connect, timeout=10)
    client.start(timeout=15)
    try:
        client.ensure_path("/probe")
        client.set("/probe", b"hello")
        return client.get("/probe")[0]
    finally:
        client.stop()
        client.close()


def test_standalone_serves_on_loopback_and_stops(tmp_path):
    server = ManagedZooKeeper(tmp_path / "zk")
    server.start()
    try:
        assert server.connect.startswith("127.0.0.1:")
        assert server.mode() == "standalone"
        assert _write_and_read(server.connect) == b"hello"
        pid = server.pid
        assert pid is not None
    finally:
        server.stop()
    assert server.pid is None
    assert not server.serving()


def test_a_port_in_use_is_a_clear_error(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(ZooKeeperStartError, match=f"port 127.0.0.1:{port} is already in use"):
            ManagedZooKeeper(tmp_path / "zk", port=port).start()


def test_missing_java_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.delenv("JAVA_HOME", raising=False)
    with pytest.raises(ZooKeeperStartError, match="Java was not found"):
        find_java()


def test_data_survives_a_restart_on_the_same_port(tmp_path):
    server = ManagedZooKeeper(tmp_path / "zk")
    server.start()
    try:
        _write_and_read(server.connect)
        server.stop()
        server.start()
        client = KazooClient(hosts=server.connect, timeout=10)
        client.start(timeout=15)
        try:
            assert client.get("/probe")[0] == b"hello"
        finally:
            client.stop()
            client.close()
    finally:
        server.stop()


def test_ensemble_of_three_keeps_serving_with_one_node_down(tmp_path):
    ensemble = ZooKeeperEnsemble(tmp_path / "ensemble", 3)
    ensemble.start()
    try:
        modes = sorted(node.mode() for node in ensemble.nodes)
        assert modes == ["follower", "follower", "leader"]
        leader = next(n for n in ensemble.nodes if n.mode() == "leader")
        leader.kill()
        survivors = ",".join(n.connect for n in ensemble.nodes if n is not leader)
        assert _write_and_read(survivors) == b"hello"
    finally:
        ensemble.stop()
