"""A broker process holds bounded memory whatever logged-in users and open sockets send.

Issue #21 found that "four partial 95 MB frames from a user with no ACLs took a broker
from 63 MB to 435 MB RSS", and that the default cluster accepted 3,000 idle connections
from one address. Each test reproduces that against a real broker process (real
sockets, real ZooKeeper) and measures the broker's resident memory from ``/proc``:

- with the defaults, a 95 MB size prefix is refused from its four bytes
  (``socket.request.max.bytes`` is 1 MB) and the broker's memory does not move;
- with a larger ``socket.request.max.bytes``, ``queued.max.request.bytes`` caps what
  all connections together make the broker hold: connections beyond the cap are not
  read (nothing is closed or refused), logins on other connections go on, and a
  waiting connection proceeds when memory is freed;
- ``max.connections.per.ip`` defaults to 2,000: of 3,000 idle connections from one
  address, 1,000 are closed at accept.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.client import recv_exact
from tests.support.wait import poll_until, retry
from tokensvc.cluster import LocalCluster
from tokensvc.protocol import RequestHeader, decode_response, encode_request, frame
from tokensvc.protocol.api import ApiKey
from tokensvc.scram.client import ScramClient
from tokensvc.scram.formatter import ScramMechanism
from zk.credential_store import bootstrap_user

MB = 1024 * 1024
USER, PASSWORD = "no-acls", "no-acls-secret"
RECEIVE_BUFFER = 4096  # tokensvc.broker.network.receive.RECEIVE_BUFFER_BYTES


def _up(tmp_path_factory: pytest.TempPathFactory, zookeeper, name: str,
        overrides: dict[str, str]) -> LocalCluster:
    cluster = LocalCluster.up(
        tmp_path_factory.mktemp(name),
        brokers=1,
        zookeeper=f"{zookeeper.connect}/{name}-{time.monotonic_ns()}",
        overrides=overrides,
        die_with_parent=True,
    )
    bootstrap_user(cluster.zk_settings(), USER, PASSWORD,
                   iterations=4096)
    return cluster


@pytest.fixture(scope="module")
def defaults(tmp_path_factory: pytest.TempPathFactory, zookeeper) -> Iterator[LocalCluster]:
    with _up(tmp_path_factory, zookeeper, "membounds-defaults", {}) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def capped(tmp_path_factory: pytest.TempPathFactory, zookeeper) -> Iterator[LocalCluster]:
    overrides = {
        "socket.request.max.bytes": str(20 * MB),
        "queued.max.request.bytes": str(24 * MB),
    }
    with _up(tmp_path_factory, zookeeper, "membounds-capped", overrides) as cluster:
        yield cluster


# -- helpers ------------------------------------------------------------------------------


def _address(cluster: LocalCluster) -> tuple[str, int]:
    host, _, port = cluster.broker_info(1)["listeners"]["SASL_PLAINTEXT"].rpartition(":")
    return host, int(port)


def _rss(cluster: LocalCluster) -> int:
    status = Path(f"/proc/{cluster.broker_info(1)['pid']}/status").read_text()
    line = next(x for x in status.splitlines() if x.startswith("VmRSS:"))
    return int(line.split()[1]) * 1024


def _metric(cluster: LocalCluster, name: str) -> float:
    url = f"http://{cluster.broker_info(1)['metrics']}/metrics"
    with urllib.request.urlopen(url, timeout=5) as page:
        for line in page.read().decode().splitlines():
            if line.startswith((name + " ", name + "{")):
                return float(line.rsplit(" ", 1)[1])
    return 0.0


def _metric_line(cluster: LocalCluster, series: str) -> float:
    """The value of one exact series (name and labels) on the metrics page."""
    url = f"http://{cluster.broker_info(1)['metrics']}/metrics"
    with urllib.request.urlopen(url, timeout=5) as page:
        for line in page.read().decode().splitlines():
            if line.startswith(series + " "):
                return float(line.rsplit(" ", 1)[1])
    return 0.0


def _log(cluster: LocalCluster) -> str:
    return Path(cluster.broker_info(1)["log"]).read_text(errors="replace")


def _call(sock: socket.socket, api_key: int, version: int, body: dict) -> dict:
    sock.sendall(frame(encode_request(RequestHeader(api_key, version, 1, "membounds"), body)))
    size = struct.unpack(">i", recv_exact(sock, 4))[0]
    return decode_response(api_key, version, recv_exact(sock, size))[1]


def _logged_in(cluster: LocalCluster, user: str = USER, password: str = PASSWORD
               ) -> socket.socket:
    sock = socket.create_connection(_address(cluster), timeout=10)
    mechanism = ScramMechanism.SCRAM_SHA_512
    try:
        assert _call(sock, ApiKey.SASL_HANDSHAKE, 1,
                     {"Mechanism": mechanism.mechanism_name})["ErrorCode"] == 0
        client = ScramClient(mechanism, user, password)
        first = _call(sock, ApiKey.SASL_AUTHENTICATE, 2, {"AuthBytes": client.first_message()})
        assert first["ErrorCode"] == 0, first
        final = _call(sock, ApiKey.SASL_AUTHENTICATE, 2,
                      {"AuthBytes": client.final_message(first["AuthBytes"])})
        assert final["ErrorCode"] == 0, final
    except BaseException:
        sock.close()
        raise
    return sock


def _login_as_user_without_acls(cluster: LocalCluster) -> socket.socket:
    # The user was written to ZooKeeper after the broker started: wait until it follows.
    return retry(lambda: _logged_in(cluster), timeout=15,
                 errors=(AssertionError, ConnectionError, OSError))


def _closed_by_broker(sock: socket.socket, within: float) -> bool:
    sock.settimeout(within)
    try:
        while sock.recv(65536):
            pass
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False
    return True


def _still_open(sock: socket.socket) -> bool:
    """No data and no end of stream waiting on ``sock``."""
    sock.setblocking(False)  # a socket timeout would make recv wait for readability
    try:
        return sock.recv(1, socket.MSG_DONTWAIT | socket.MSG_PEEK) != b""
    except BlockingIOError:
        return True
    except OSError:
        return False


# -- the reproduction, with the defaults -------------------------------------------


def test_four_partial_95_mb_frames_from_a_user_without_acls_are_refused_from_the_prefix(
    defaults: LocalCluster,
) -> None:
    size = 95 * MB
    socks = [_login_as_user_without_acls(defaults) for _ in range(4)]
    before = _rss(defaults)
    try:
        for sock in socks:
            try:
                sock.sendall(struct.pack(">i", size) + b"\0" * MB)
            except (ConnectionResetError, BrokenPipeError):
                pass  # refused while still sending: what the test wants
        assert all(_closed_by_broker(sock, within=10) for sock in socks)
    finally:
        for sock in socks:
            sock.close()
    grown = _rss(defaults) - before
    assert grown < 8 * MB, f"the broker grew by {grown / MB:.1f} MB"
    assert f"frame of {size} bytes exceeds the maximum of {MB}" in _log(defaults)
    # Still serving.
    _logged_in(defaults).close()


# -- queued.max.request.bytes ----------------------------------------------------------------


def test_queued_request_bytes_cap_pauses_reading_and_bounds_broker_memory(
    capped: LocalCluster,
) -> None:
    frame_size, sent = 19 * MB, 18 * MB  # four partial frames: 72 MB without a cap
    reserved = frame_size + 4 - RECEIVE_BUFFER
    chunk = b"\xab" * MB
    socks = [_login_as_user_without_acls(capped) for _ in range(4)]
    before = _rss(capped)
    done = [threading.Event() for _ in socks]

    def send(i: int) -> None:
        try:
            socks[i].settimeout(None)
            socks[i].sendall(struct.pack(">i", frame_size))
            for _ in range(sent // MB):
                socks[i].sendall(chunk)
        except OSError:
            pass  # the test closes the socket under a blocked sender
        finally:
            done[i].set()

    threads = [threading.Thread(target=send, args=(i,), daemon=True) for i in range(4)]
    threads[0].start()
    try:
        # The first frame gets its memory and is read completely.
        assert done[0].wait(30)
        assert poll_until(lambda: _metric(capped, "tokensvc_request_memory_bytes") == reserved)
        for t in threads[1:]:
            t.start()
        # The other three do not fit under the 24 MB cap: they wait, unread.
        assert poll_until(lambda: _metric(capped, "tokensvc_request_memory_waiting") == 3,
                          timeout=15)
        samples = [_rss(capped) for _ in range(20)]
        grown = max(samples) - before
        assert grown < 24 * MB + 12 * MB, f"the broker grew by {grown / MB:.1f} MB"
        assert not any(d.is_set() for d in done[1:]), "a sender past the cap was fully read"
        assert all(_still_open(sock) for sock in socks), "the cap closed a connection"
        # Other clients are served meanwhile: a login's frames fit the connection's buffer.
        admin = capped.info["admin"]
        _logged_in(capped, admin["username"], admin["password"]).close()

        # Freeing memory lets the next waiting connection go on.
        socks[0].close()
        assert poll_until(lambda: _metric(capped, "tokensvc_request_memory_waiting") == 2,
                          timeout=15)
        assert _metric(capped, "tokensvc_request_memory_bytes") == reserved
    finally:
        for sock in socks:
            sock.close()
        for t in threads:
            if t.is_alive():
                t.join(10)
    assert poll_until(lambda: _metric(capped, "tokensvc_request_memory_bytes") == 0, timeout=15)
    assert _metric(capped, "tokensvc_request_memory_waiting") == 0


# -- max.connections.per.ip ------------------------------------------------------------------


def test_three_thousand_idle_connections_from_one_address_are_capped_at_2000(
    defaults: LocalCluster,
) -> None:
    address = _address(defaults)
    refused_before = _metric(defaults, "tokensvc_connections_refused_total")
    socks: list[socket.socket] = []
    try:
        for _ in range(3000):
            socks.append(socket.create_connection(address, timeout=30))
        assert poll_until(
            lambda: _metric(defaults, "tokensvc_connections_refused_total") - refused_before
            == 1000, timeout=60,
        )
        assert _metric(defaults, "tokensvc_active_connections") == 2000
        open_ = sum(_still_open(sock) for sock in socks)
        assert open_ == 2000
    finally:
        for sock in socks:
            sock.close()
    assert "max.connections.per.ip=2000 reached" in _log(defaults)
    assert poll_until(lambda: _metric(defaults, "tokensvc_active_connections") == 0, timeout=30)


# -- output back-pressure ------------------------------------------------------------------------


def test_client_that_does_not_read_its_responses_stops_being_read_and_is_served_in_order(
    defaults: LocalCluster,
) -> None:
    # 60,000 pipelined ApiVersions requests ask for about 20 MB of responses. A broker
    # that kept answering an unread connection would hold them; this one stops reading
    # it once 256 KB of responses wait (plus what the kernel's socket buffers take).
    count = 60_000
    requests = b"".join(
        frame(encode_request(RequestHeader(ApiKey.API_VERSIONS, 3, corr, "membounds"), {}))
        for corr in range(count)
    )
    sock = socket.socket()
    # A fixed receive buffer (no autotuning): the kernel holds little of what is unread.
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
    sock.settimeout(30)
    sock.connect(_address(defaults))
    before = _rss(defaults)
    sender = threading.Thread(target=lambda: sock.sendall(requests), daemon=True)
    sender.start()
    answered = _metric_line(defaults, 'tokensvc_requests_total{api="ApiVersions",error="NONE"}')
    try:
        # The broker stops answering (and reading) the connection that does not read: the
        # count of ApiVersions answered settles below what was sent. (The sender may still
        # finish: the kernel's receive buffer on the broker's side can hold the requests.)
        last = [-1.0]

        def settled() -> bool:
            now = _metric_line(
                defaults, 'tokensvc_requests_total{api="ApiVersions",error="NONE"}')
            done, last[0] = now == last[0], now
            return done

        assert poll_until(settled, timeout=60, interval=1.0)
        assert last[0] - answered < count
        response_size = len(frame(b"")) + struct.unpack(">i", recv_exact(sock, 4))[0]
        grown = max(_rss(defaults) for _ in range(10)) - before
        assert grown < response_size * count // 3, f"the broker grew by {grown / MB:.1f} MB"
        # Reading lets everything through, in request order.
        first = recv_exact(sock, response_size - 4)
        assert struct.unpack(">i", first[:4])[0] == 0
        for corr in range(1, count):
            size = struct.unpack(">i", recv_exact(sock, 4))[0]
            assert struct.unpack(">i", recv_exact(sock, size)[:4])[0] == corr
        sender.join(30)
        assert not sender.is_alive()
    finally:
        sock.close()
