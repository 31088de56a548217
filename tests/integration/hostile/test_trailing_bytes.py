"""Bytes after a complete request body are ignored by the broker, as Kafka's brokers do.

Issue #21 found that ApiVersions v0 and SaslHandshake requests with trailing bytes were
accepted while ``docs/protocol.md`` said they were refused; the doc now says what the
broker does ("Trailing bytes in client requests"), and these tests hold the broker to
it against a real broker process: the answer is the normal one, the extra bytes are not
read as a next request, and the connection goes on to log in.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterator

import pytest

from tests.support.client import recv_exact
from tokensvc.cluster import LocalCluster
from tokensvc.protocol import RequestHeader, decode_response, encode_request
from tokensvc.protocol.api import ApiKey
from tokensvc.scram.client import ScramClient
from tokensvc.scram.formatter import ScramMechanism

TRAILING = b"\x00\x01\x02\x03 trailing bytes \xff"


pytestmark = pytest.mark.cluster(brokers=1)


@pytest.fixture
def sock(cluster: LocalCluster) -> Iterator[socket.socket]:
    host, _, port = cluster.broker_info(1)["listeners"]["SASL_PLAINTEXT"].rpartition(":")
    with socket.create_connection((host, int(port)), timeout=10) as s:
        yield s


def _send(sock: socket.socket, api_key: int, version: int, corr: int, body: dict,
          extra: bytes = b"") -> None:
    payload = encode_request(RequestHeader(api_key, version, corr, "trailing"), body) + extra
    sock.sendall(struct.pack(">i", len(payload)) + payload)


def _receive(sock: socket.socket, api_key: int, version: int) -> tuple[int, dict]:
    size = struct.unpack(">i", recv_exact(sock, 4))[0]
    return decode_response(api_key, version, recv_exact(sock, size))


def _login(sock: socket.socket, cluster: LocalCluster) -> None:
    admin = cluster.info["admin"]
    client = ScramClient(ScramMechanism.SCRAM_SHA_512, admin["username"], admin["password"])
    _send(sock, ApiKey.SASL_AUTHENTICATE, 2, 11, {"AuthBytes": client.first_message()})
    first = _receive(sock, ApiKey.SASL_AUTHENTICATE, 2)[1]
    assert first["ErrorCode"] == 0
    _send(sock, ApiKey.SASL_AUTHENTICATE, 2, 12,
          {"AuthBytes": client.final_message(first["AuthBytes"])})
    final = _receive(sock, ApiKey.SASL_AUTHENTICATE, 2)[1]
    assert final["ErrorCode"] == 0
    client.verify_server_final(final["AuthBytes"])


def test_api_versions_v0_with_trailing_bytes_gets_the_normal_answer(
    sock: socket.socket, cluster: LocalCluster
) -> None:
    _send(sock, ApiKey.API_VERSIONS, 0, 5, {}, TRAILING)
    corr, body = _receive(sock, ApiKey.API_VERSIONS, 0)
    assert corr == 5
    assert body["ErrorCode"] == 0
    assert {k["ApiKey"] for k in body["ApiKeys"]} >= {ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE}
    # The trailing bytes were not taken for a next request: the connection logs in.
    _send(sock, ApiKey.SASL_HANDSHAKE, 1, 6, {"Mechanism": "SCRAM-SHA-512"})
    assert _receive(sock, ApiKey.SASL_HANDSHAKE, 1) == (6, {"ErrorCode": 0, "Mechanisms": [
        "SCRAM-SHA-256", "SCRAM-SHA-512"]})
    _login(sock, cluster)


@pytest.mark.parametrize("version", [0, 1])
def test_sasl_handshake_with_trailing_bytes_gets_the_normal_answer(
    sock: socket.socket, cluster: LocalCluster, version: int
) -> None:
    _send(sock, ApiKey.SASL_HANDSHAKE, version, 9, {"Mechanism": "SCRAM-SHA-512"}, TRAILING)
    corr, body = _receive(sock, ApiKey.SASL_HANDSHAKE, version)
    assert (corr, body["ErrorCode"]) == (9, 0)
    assert body["Mechanisms"] == ["SCRAM-SHA-256", "SCRAM-SHA-512"]
    if version == 1:
        _login(sock, cluster)
