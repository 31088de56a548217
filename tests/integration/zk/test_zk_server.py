"""The managed ZooKeeper: a real server on loopback, started and stopped by our code."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from tokensvc.jvm import free_port
from zk.server import (
    DEFAULT_HEAP_MB,
    MAX_VOTE_INTERVAL_MS,
    ManagedZooKeeper,
    ZooKeeperEnsemble,
    ZooKeeperStartError,
    four_letter_word,
    parse_heap_mb,
)


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


def test_a_node_without_security_keeps_its_open_plain_configuration(tmp_path):
    port = free_port()
    node = ManagedZooKeeper(tmp_path / "zk", port=port)
    command = node.command()
    data = tmp_path / "zk" / "data"
    assert (tmp_path / "zk" / "zoo.cfg").read_text().splitlines() == [
        "tickTime=500",
        "initLimit=20",
        "syncLimit=10",
        f"dataDir={data}",
        f"clientPort={port}",
        "clientPortAddress=127.0.0.1",
        "admin.enableServer=false",
        "4lw.commands.whitelist=ruok,srvr,stat,mntr,cons,conf",
        "maxClientCnxns=0",
        "minSessionTimeout=1000",
        "maxSessionTimeout=60000",
        "autopurge.snapRetainCount=3",
        "autopurge.purgeInterval=1",
    ]
    assert not [arg for arg in command if "login.config" in arg]
    assert not node.jaas_path.exists()
    # A node looking for a leader sends its vote again at least every 2 s (not 60 s).
    assert f"-Dzookeeper.fastleader.maxNotificationInterval={MAX_VOTE_INTERVAL_MS}" in command


def test_a_port_in_use_is_a_clear_error(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(ZooKeeperStartError, match=f"port 127.0.0.1:{port} is already in use"):
            ManagedZooKeeper(tmp_path / "zk", port=port).start()


def test_a_server_on_the_port_that_is_not_ours_does_not_pass_for_it(tmp_path):
    # Another ZooKeeper takes the port a node had chosen before the node binds it: the
    # other one answers srvr at once, but it is not the node. A node whose port was chosen
    # for it moves to another free port; one given a port is a clear error.
    other = ManagedZooKeeper(tmp_path / "other")
    other.start()
    try:
        assert other.is_ours()
        mine = ManagedZooKeeper(tmp_path / "mine")
        mine.client_port = other.client_port  # taken between the choice and the bind
        assert mine.serving() and not mine.is_ours()
        mine.start()
        try:
            assert mine.client_port != other.client_port
            assert mine.is_ours() and mine.mode() == "standalone"
        finally:
            mine.stop()
        fixed = ManagedZooKeeper(tmp_path / "fixed", port=other.client_port)
        with pytest.raises(ZooKeeperStartError, match="already in use"):
            fixed.start()
    finally:
        other.stop()


def test_missing_java_is_a_clear_start_error(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.delenv("JAVA_HOME", raising=False)
    with pytest.raises(ZooKeeperStartError, match="Java was not found"):
        ManagedZooKeeper(tmp_path / "zk").start()


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


def _jvm_max_heap_mb(pid: int) -> int:
    """The -Xmx the running JVM was started with, read from its command line."""
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        args = f.read().decode().split("\0")
    heaps = [a for a in args if a.startswith("-Xmx")]
    assert len(heaps) == 1, args
    assert heaps[0].endswith("m"), heaps[0]
    return int(heaps[0][4:-1])


def test_starts_with_the_heap_and_session_limits_it_was_given(tmp_path):
    server = ManagedZooKeeper(tmp_path / "zk", heap_mb=321, max_session_timeout_ms=45_000)
    server.start()
    try:
        assert server.pid is not None
        assert _jvm_max_heap_mb(server.pid) == 321
        # The session limit is granted: a client asking for 18 s (the brokers' default)
        # gets 18 s, not ZooKeeper's default cap of 20 ticks (10 s).
        client = KazooClient(hosts=server.connect, timeout=18)
        client.start(timeout=15)
        try:
            connections = four_letter_word(server.host, server.client_port, "cons")
        finally:
            client.stop()
            client.close()
        # `cons` lists each client connection with its negotiated timeout as "to=MS".
        timeouts = {int(part[3:]) for part in connections.replace(",", " ").split() if part.startswith("to=")}
        assert timeouts == {18_000}, connections
    finally:
        server.stop()


def test_default_heap_holds_a_million_tokens_and_purge_keeps_data_bounded(tmp_path):
    server = ManagedZooKeeper(tmp_path / "zk")
    server.start()
    try:
        assert server.pid is not None
        assert _jvm_max_heap_mb(server.pid) == DEFAULT_HEAP_MB >= 2048
        cfg = dict(
            line.split("=", 1) for line in (tmp_path / "zk" / "zoo.cfg").read_text().splitlines()
        )
        assert int(cfg["autopurge.purgeInterval"]) >= 1
        assert int(cfg["autopurge.snapRetainCount"]) == 3
        # Its collections are logged for the operator (it logs one line at start).
        assert "Using" in (tmp_path / "zk" / "gc.log").read_text()
    finally:
        server.stop()


@pytest.mark.parametrize(
    ("text", "mb"), [("2048", 2048), ("1536m", 1536), ("2g", 2048), ("4GiB", 4096), ("512MB", 512)]
)
def test_heap_sizes_parse(text, mb):
    assert parse_heap_mb(text) == mb


@pytest.mark.parametrize("text", ["", "lots", "2t", "-1g", "32m", "1.5g"])
def test_bad_heap_sizes_are_clear_errors(text):
    with pytest.raises(ValueError, match="heap"):
        parse_heap_mb(text)


def _thread_states(pid: int) -> set[str]:
    states = set()
    for task in (Path(f"/proc/{pid}/task")).iterdir():
        states.add((task / "stat").read_text().rsplit(")", 1)[1].split()[0])
    return states


def test_a_paused_server_has_every_thread_stopped_when_pause_returns(tmp_path):
    server = ManagedZooKeeper(tmp_path / "zk")
    server.start()
    try:
        for _ in range(5):
            server.pause()
            assert _thread_states(server.pid) <= {"T", "t"}
            assert not server.serving()  # silent, not gone
            server.resume()
            assert _write_and_read(server.connect) == b"hello"
    finally:
        server.resume()
        server.stop()
