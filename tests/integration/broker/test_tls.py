"""SSL listeners (no SASL): who the client is, and whether it may ask for tokens.

Two in-process brokers on real sockets, each the only broker of its own
ZooKeeper chroot: one requires client certificates (``ssl.client.auth=required``,
two-way TLS), one does not ask for them (``ssl.client.auth=none``, one-way TLS).
With two-way TLS the principal is ``User:`` + the certificate subject in RFC 2253
order, as Kafka's default principal builder makes it, and token requests are
allowed; on one-way TLS the client is ANONYMOUS and every token request gets
DELEGATION_TOKEN_REQUEST_NOT_ALLOWED, as in Kafka.
"""

from __future__ import annotations

import socket
import ssl
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.client import WireClient
from tests.support.inproc import InProcessBroker, broker_properties
from tokensvc import devcerts
from tokensvc.core.config import BrokerConfig
from tokensvc.core.errors import Errors
from tokensvc.protocol import RequestHeader, encode_request, frame
from tokensvc.protocol.api import ApiKey

CLIENT_SUBJECT = "CN=alice,O=tokensvc development"


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> devcerts.DevCertificates:
    return devcerts.generate(tmp_path_factory.mktemp("tls"), client_name="alice")


def _ssl_broker(zookeeper, certs: devcerts.DevCertificates, client_auth: str) -> InProcessBroker:
    connect = f"{zookeeper.connect}/tls-{client_auth}-{time.monotonic_ns()}"
    props = broker_properties(
        1,
        connect,
        listeners="SASL_PLAINTEXT://127.0.0.1:0,BROKER://127.0.0.1:0,SSL://127.0.0.1:0",
        listener_security_protocol_map="SASL_PLAINTEXT:SASL_PLAINTEXT,"
        "BROKER:SASL_PLAINTEXT,SSL:SSL",
        ssl_keystore_location=str(certs.broker),
        ssl_truststore_location=str(certs.ca),
        ssl_client_auth=client_auth,
    )
    broker = InProcessBroker(BrokerConfig.from_properties(props)).start()
    deadline = time.monotonic() + 15
    while not broker.broker.is_controller:
        assert time.monotonic() < deadline, "the only broker did not become controller"
        time.sleep(0.02)
    return broker


@pytest.fixture(scope="module")
def two_way(zookeeper, certs: devcerts.DevCertificates) -> Iterator[InProcessBroker]:
    broker = _ssl_broker(zookeeper, certs, "required")
    yield broker
    broker.stop()


@pytest.fixture(scope="module")
def one_way(zookeeper, certs: devcerts.DevCertificates) -> Iterator[InProcessBroker]:
    broker = _ssl_broker(zookeeper, certs, "none")
    yield broker
    broker.stop()


def _context(certs: devcerts.DevCertificates, client_cert: Path | None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(certs.ca))
    if client_cert is not None:
        ctx.load_cert_chain(str(client_cert))
    return ctx


def _ssl_client(
    broker: InProcessBroker, certs: devcerts.DevCertificates, client_cert: Path | None
) -> WireClient:
    return WireClient(
        broker.address("SSL"), security_protocol="SSL", ssl_context=_context(certs, client_cert),
        timeout=5.0,
    )


def _create(client: WireClient) -> dict:
    return client.request(ApiKey.CREATE_DELEGATION_TOKEN, 3, {"Renewers": [], "MaxLifetimeMs": -1})


def test_two_way_tls_principal_is_the_client_certificate_subject(
    two_way: InProcessBroker, certs: devcerts.DevCertificates
) -> None:
    with _ssl_client(two_way, certs, certs.client) as alice:
        created = _create(alice)
        described = alice.request(ApiKey.DESCRIBE_DELEGATION_TOKEN, 3, {"Owners": None})
    assert created["ErrorCode"] == 0
    assert (created["PrincipalType"], created["PrincipalName"]) == ("User", CLIENT_SUBJECT)
    assert created["TokenRequesterPrincipalName"] == CLIENT_SUBJECT
    assert described["ErrorCode"] == 0
    owners = {(t["PrincipalType"], t["PrincipalName"]) for t in described["Tokens"]}
    assert owners == {("User", CLIENT_SUBJECT)}


def test_two_way_tls_refuses_a_client_without_a_certificate(
    two_way: InProcessBroker, certs: devcerts.DevCertificates
) -> None:
    api_versions = frame(encode_request(RequestHeader(ApiKey.API_VERSIONS, 3, 1, "tls-test"), {}))
    raw = socket.create_connection(two_way.address("SSL"), timeout=5)
    with _context(certs, None).wrap_socket(raw, server_hostname="127.0.0.1") as tls:
        # With TLS 1.3 the client's handshake completes before the broker checks for a
        # certificate: the refusal shows as a connection that ends without an answer.
        try:
            tls.sendall(api_versions)
            answer = tls.recv(4)
        except (ssl.SSLError, ConnectionError):
            answer = b""
    assert answer == b""
    # The refused handshake hurt no one else.
    with _ssl_client(two_way, certs, certs.client) as alice:
        assert _create(alice)["ErrorCode"] == 0


@pytest.mark.parametrize("with_certificate", [False, True], ids=["no-cert", "unrequested-cert"])
def test_one_way_tls_gets_request_not_allowed_for_every_token_request(
    one_way: InProcessBroker, certs: devcerts.DevCertificates, with_certificate: bool
) -> None:
    client_cert = certs.client if with_certificate else None
    with _ssl_client(one_way, certs, client_cert) as anonymous:
        created = _create(anonymous)
        renewed = anonymous.request(ApiKey.RENEW_DELEGATION_TOKEN, 2,
                                    {"Hmac": b"\x00" * 64, "RenewPeriodMs": -1})
        expired = anonymous.request(ApiKey.EXPIRE_DELEGATION_TOKEN, 2,
                                    {"Hmac": b"\x00" * 64, "ExpiryTimePeriodMs": -1})
        described = anonymous.request(ApiKey.DESCRIBE_DELEGATION_TOKEN, 3, {"Owners": None})
    not_allowed = Errors.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED
    assert created["ErrorCode"] == not_allowed
    assert renewed["ErrorCode"] == not_allowed
    assert expired["ErrorCode"] == not_allowed
    assert described["ErrorCode"] == not_allowed
