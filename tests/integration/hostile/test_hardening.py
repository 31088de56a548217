"""A broker process under hostile or careless clients: real sockets, real log file.

One single-broker local cluster is shared by the module, with small limits set
through overrides: ``connections.max.idle.ms``, ``request.timeout.ms`` (the
time a started request frame may take to arrive completely) and
``max.connections.per.ip``. The tests check that each limit cuts off exactly
the connection that breaks it, that a clear line in the broker log names the
limit, that other clients keep being served, and that requests pipelined on
one connection are answered in request order.
"""

from __future__ import annotations

import random
import socket
import struct
import time
from pathlib import Path

import pytest

from tests.support.client import WireClient, recv_exact
from tests.support.local_cluster import broker_address, broker_metric
from tokensvc.cluster import LocalCluster
from tokensvc.protocol import RequestHeader, decode_response, encode_request, frame
from tokensvc.protocol.api import ApiKey
from tokensvc.scram.client import ScramClient
from tokensvc.scram.formatter import ScramMechanism

IDLE_MS = 1500
REQUEST_TIMEOUT_MS = 300
MAX_PER_IP = 5


pytestmark = pytest.mark.cluster(brokers=1, overrides={
    "connections.max.idle.ms": str(IDLE_MS),
    "request.timeout.ms": str(REQUEST_TIMEOUT_MS),
    "max.connections.per.ip": str(MAX_PER_IP),
})


@pytest.fixture
def address(cluster: LocalCluster) -> tuple[str, int]:
    _wait_for_no_client_connections(cluster)
    return broker_address(cluster, 1)


def _broker_log(cluster: LocalCluster) -> str:
    return Path(cluster.broker_info(1)["log"]).read_text(errors="replace")


def _wait_for_no_client_connections(cluster: LocalCluster) -> None:
    """Tests share one broker: start each with no connection of an earlier test left."""
    deadline = time.monotonic() + 2 * IDLE_MS / 1000 + 2
    while broker_metric(cluster, 1, "tokensvc_active_connections") > 0:
        assert time.monotonic() < deadline, "connections of an earlier test stay open"
        time.sleep(0.05)


# -- raw wire helpers ----------------------------------------------------------------------


def _connect(address: tuple[str, int]) -> socket.socket:
    sock = socket.create_connection(address, timeout=10)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def _request_bytes(api_key: int, version: int, correlation_id: int, body: dict) -> bytes:
    return frame(encode_request(RequestHeader(api_key, version, correlation_id, "hardening"), body))


def _read_response(sock: socket.socket, api_key: int, version: int) -> tuple[int, dict]:
    size = struct.unpack(">i", recv_exact(sock, 4))[0]
    return decode_response(api_key, version, recv_exact(sock, size))


def _call(sock: socket.socket, api_key: int, version: int, body: dict, corr: int = 1) -> dict:
    sock.sendall(_request_bytes(api_key, version, corr, body))
    got, response = _read_response(sock, api_key, version)
    assert got == corr
    return response


def _closed_by_broker(sock: socket.socket, within: float) -> float:
    """Seconds until the broker closed ``sock`` (fails if it is still open after ``within``)."""
    started = time.monotonic()
    sock.settimeout(within)
    try:
        data = sock.recv(1)
    except (ConnectionResetError, BrokenPipeError):
        data = b""
    except TimeoutError:
        pytest.fail(f"the broker kept the connection open for {within}s")
    assert data == b""
    return time.monotonic() - started


def _login(sock: socket.socket, username: str, password: str) -> None:
    mechanism = ScramMechanism.SCRAM_SHA_512
    handshake = _call(sock, ApiKey.SASL_HANDSHAKE, 1, {"Mechanism": mechanism.mechanism_name})
    assert handshake["ErrorCode"] == 0
    client = ScramClient(mechanism, username, password)
    first = _call(sock, ApiKey.SASL_AUTHENTICATE, 2, {"AuthBytes": client.first_message()})
    final = _call(sock, ApiKey.SASL_AUTHENTICATE, 2, {
        "AuthBytes": client.final_message(first["AuthBytes"])
    })
    assert final["ErrorCode"] == 0
    client.verify_server_final(final["AuthBytes"])


def _admin(cluster: LocalCluster, address: tuple[str, int]) -> WireClient:
    return WireClient(address, "admin", cluster.info["admin"]["password"],
                      mechanism="SCRAM-SHA-512")


METADATA_ALL = {"Topics": None, "AllowAutoTopicCreation": False,
                "IncludeTopicAuthorizedOperations": False}


# -- idle connections ------------------------------------------------------------------------


def test_idle_connection_is_closed_after_connections_max_idle_ms(
    cluster: LocalCluster, address: tuple[str, int]
) -> None:
    with _connect(address) as idle:
        assert _call(idle, ApiKey.API_VERSIONS, 3, {})["ErrorCode"] == 0
        waited = _closed_by_broker(idle, within=IDLE_MS / 1000 * 4)
    assert waited >= IDLE_MS / 1000 * 0.8
    assert f"idle longer than connections.max.idle.ms={IDLE_MS}" in _broker_log(cluster)


def test_connection_that_keeps_sending_requests_is_not_idle(
    cluster: LocalCluster, address: tuple[str, int]
) -> None:
    with _admin(cluster, address) as admin:
        deadline = time.monotonic() + 2 * IDLE_MS / 1000
        answered = 0
        while time.monotonic() < deadline:
            assert admin.request(ApiKey.METADATA, 12, METADATA_ALL)["Brokers"]
            answered += 1
            time.sleep(IDLE_MS / 1000 / 4)
    assert answered >= 6


# -- stalled frames ----------------------------------------------------------------------------


def test_partial_frame_that_stalls_is_cut_off_while_other_clients_are_served(
    cluster: LocalCluster, address: tuple[str, int]
) -> None:
    with _admin(cluster, address) as other, _connect(address) as stalled:
        request = _request_bytes(ApiKey.API_VERSIONS, 3, 1, {})
        stalled.sendall(request[: len(request) // 2])
        waited = _closed_by_broker(stalled, within=IDLE_MS / 1000)
        assert other.request(ApiKey.METADATA, 12, METADATA_ALL)["Brokers"]
    assert waited < IDLE_MS / 1000  # cut by request.timeout.ms, not by the idle timeout
    assert f"request frame not complete within request.timeout.ms={REQUEST_TIMEOUT_MS}" in (
        _broker_log(cluster)
    )


def test_frame_trickled_byte_by_byte_is_cut_off_after_request_timeout(
    address: tuple[str, int],
) -> None:
    request = _request_bytes(ApiKey.METADATA, 12, 1, METADATA_ALL)
    delay = REQUEST_TIMEOUT_MS / 1000 / 3
    started = time.monotonic()
    with _connect(address) as slow:
        sent = 0
        try:
            for byte in request[:-1]:
                slow.sendall(bytes([byte]))
                sent += 1
                time.sleep(delay)
        except (ConnectionResetError, BrokenPipeError):
            pass
        _closed_by_broker(slow, within=IDLE_MS / 1000)
    assert sent < len(request) - 1, "the broker waited for the whole trickled frame"
    assert time.monotonic() - started < len(request) * delay


# -- max.connections.per.ip ----------------------------------------------------------------------


def test_connection_beyond_max_connections_per_ip_is_closed_and_logged(
    cluster: LocalCluster, address: tuple[str, int]
) -> None:
    allowed = [_connect(address) for _ in range(MAX_PER_IP)]
    try:
        for i, sock in enumerate(allowed):
            assert _call(sock, ApiKey.API_VERSIONS, 3, {}, corr=i + 1)["ErrorCode"] == 0
        with _connect(address) as refused:
            try:
                refused.sendall(_request_bytes(ApiKey.API_VERSIONS, 3, 99, {}))
            except (ConnectionResetError, BrokenPipeError):
                pass
            _closed_by_broker(refused, within=5)
        # The connections within the limit are still served.
        assert _call(allowed[0], ApiKey.API_VERSIONS, 3, {}, corr=7)["ErrorCode"] == 0
    finally:
        for sock in allowed:
            sock.close()
    assert f"max.connections.per.ip={MAX_PER_IP} reached" in _broker_log(cluster)

    _wait_for_no_client_connections(cluster)
    with _connect(address) as again:
        assert _call(again, ApiKey.API_VERSIONS, 3, {})["ErrorCode"] == 0


# -- ordering ------------------------------------------------------------------------------------


def test_fifty_pipelined_requests_are_answered_in_request_order(
    cluster: LocalCluster, address: tuple[str, int]
) -> None:
    # Slow writes (token creates go through ZooKeeper) are mixed with fast reads, and the
    # correlation ids are shuffled so that "in order" cannot mean "sorted".
    kinds = [
        (ApiKey.CREATE_DELEGATION_TOKEN, 3, {"Renewers": [], "MaxLifetimeMs": -1}),
        (ApiKey.API_VERSIONS, 3, {}),
        (ApiKey.METADATA, 12, METADATA_ALL),
        (ApiKey.DESCRIBE_CLUSTER, 1, {"IncludeClusterAuthorizedOperations": True}),
        (ApiKey.DESCRIBE_DELEGATION_TOKEN, 3, {"Owners": None}),
        (ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, {"Users": None}),
        (ApiKey.DESCRIBE_CLIENT_QUOTAS, 1, {"Components": [], "Strict": False}),
    ]
    correlation_ids = random.Random(3).sample(range(1, 1_000_000), 50)
    sent = [(corr, *kinds[i % len(kinds)]) for i, corr in enumerate(correlation_ids)]
    with _connect(address) as sock:
        _login(sock, "admin", cluster.info["admin"]["password"])
        sock.sendall(b"".join(_request_bytes(k, v, c, body) for c, k, v, body in sent))
        answers = [_read_response(sock, k, v) for _, k, v, _ in sent]
    assert [corr for corr, _ in answers] == correlation_ids
    assert all(body.get("ErrorCode", 0) == 0 for _, body in answers)
    created = [body["TokenId"] for (_, body), (_, k, _, _) in zip(answers, sent, strict=True)
               if k == ApiKey.CREATE_DELEGATION_TOKEN]
    assert len(set(created)) == len(created) == 8
