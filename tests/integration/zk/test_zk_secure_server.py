"""The managed ZooKeeper secured: a TLS-only client port that needs a client certificate,
SASL enforced, TLS between ensemble nodes. Real servers (one standalone node, one 3-node
ensemble, each started once for the module) and real kazoo clients, each trying one way in;
and tokensvc's own client, with the JKS and PKCS12 stores of a Kafka client properties file.

Every refused attempt is bounded: a short connection timeout, no retries beyond it, and
an assertion on how long the refusal took.
"""

from __future__ import annotations

import contextlib
import datetime
import re
import socket
import ssl
import stat
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography import x509
from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (
    ConnectionClosedError,
    NoAuthError,
    NoNodeError,
    SessionClosedRequireSaslError,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.security import make_acl

from tests.support.java_stores import JavaStores, write_java_stores
from tokensvc.core.zk_security import jaas_client_section
from tokensvc.devcerts import ZkCertificates, generate_zookeeper
from zk.client import ZooKeeperUnavailable, open_client, settings_from_file
from zk.server import (
    ManagedZooKeeper,
    ZkServerSecurity,
    ZooKeeperEnsemble,
    ZooKeeperNode,
    ZooKeeperStartError,
    four_letter_word,
)

BROKER_USER = "tokensvc-broker"
# Quote, backslash and space: the JAAS file must carry them through unchanged.
BROKER_PASSWORD = 'broker "pass" \\ word'
TOOL_USER = "tokensvc.tool_2"
TOOL_PASSWORD = "tool-secret"
# How long any refused attempt may take (connect timeout 2 s, start timeout 3 s, slack).
REFUSAL_BOUND_S = 8.0
# A client expected to be refused: a short session (kazoo gives each host a third of it
# to connect) and one retry, so the refusal comes within the bound.
REFUSED = {"timeout": 2, "connection_retry": {"max_tries": 1, "delay": 0.1}}
HEAP_MB = 256


@pytest.fixture(scope="module")
def zk_certs(tmp_path_factory: pytest.TempPathFactory) -> ZkCertificates:
    return generate_zookeeper(tmp_path_factory.mktemp("zk-tls"))


@pytest.fixture(scope="module")
def security(zk_certs: ZkCertificates) -> ZkServerSecurity:
    return ZkServerSecurity(
        key_store=zk_certs.server,
        trust_store=zk_certs.ca,
        sasl_users={BROKER_USER: BROKER_PASSWORD, TOOL_USER: TOOL_PASSWORD},
    )


class Secured:
    """A running secured ZooKeeper (one node or an ensemble) under test."""

    def __init__(self, kind: str, connect: str, nodes: list[ZooKeeperNode]) -> None:
        self.kind = kind
        self.connect = connect
        self.nodes = nodes


@pytest.fixture(scope="module", params=["standalone", "ensemble"])
def secured(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
    security: ZkServerSecurity,
) -> Iterator[Secured]:
    base = tmp_path_factory.mktemp(f"zk-{request.param}")
    if request.param == "standalone":
        with ManagedZooKeeper(base, security=security, heap_mb=HEAP_MB) as node:
            yield Secured("standalone", node.connect, [node])
    else:
        ensemble = ZooKeeperEnsemble(base, 3, security=security)
        for node in ensemble.nodes:
            node.heap_mb = HEAP_MB
        with ensemble:
            yield Secured("ensemble", ensemble.connect, ensemble.nodes)


def _client(connect: str, certs: ZkCertificates | None, *, certificate: bool = True,
            user: str | None = None, password: str | None = None,
            tls: bool = True, **extra: object) -> KazooClient:
    options: dict[str, object] = {"timeout": 10}
    if tls:
        assert certs is not None
        # The server certificate names the loopback address the client dials.
        options.update(use_ssl=True, ca=str(certs.ca), check_hostname=True)
        if certificate:
            options.update(certfile=str(certs.client), keyfile=str(certs.client))
    if user is not None:
        options["sasl_options"] = {"mechanism": "DIGEST-MD5", "username": user, "password": password}
    options.update(extra)
    return KazooClient(hosts=connect, **options)


@contextlib.contextmanager
def _started(client: KazooClient) -> Iterator[KazooClient]:
    client.start(timeout=10)
    try:
        yield client
    finally:
        client.stop()
        client.close()


def _broker(secured: Secured, certs: ZkCertificates) -> KazooClient:
    return _client(secured.connect, certs, user=BROKER_USER, password=BROKER_PASSWORD)


def _node_name(prefix: str) -> str:
    return f"/{prefix}-{time.monotonic_ns()}"


# (a) The brokers' identity gets in.


@pytest.mark.parametrize(("user", "password"), [(BROKER_USER, BROKER_PASSWORD), (TOOL_USER, TOOL_PASSWORD)])
def test_tls_client_certificate_and_sasl_user_creates_and_reads(
    secured: Secured, zk_certs: ZkCertificates, user: str, password: str
) -> None:
    path = _node_name("probe")
    with _started(_client(secured.connect, zk_certs, user=user, password=password)) as client:
        client.create(path, b"hello")
        assert client.get(path)[0] == b"hello"


def test_sessions_carry_their_sasl_user_and_the_certificate_subject(
    secured: Secured, zk_certs: ZkCertificates
) -> None:
    subject = x509.load_pem_x509_certificates(zk_certs.client.read_bytes())[0].subject
    by_user = _node_name("by-user")
    by_certificate = _node_name("by-certificate")
    with _started(_broker(secured, zk_certs)) as broker:
        broker.create(by_user, b"u", acl=[make_acl("sasl", BROKER_USER, all=True)])
        broker.create(by_certificate, b"c", acl=[make_acl("x509", subject.rfc4514_string(), read=True)])
        assert broker.get(by_user)[0] == b"u"
    with _started(_client(secured.connect, zk_certs, user=TOOL_USER, password=TOOL_PASSWORD)) as tool:
        assert tool.get(by_certificate)[0] == b"c"
        with pytest.raises(NoAuthError):
            tool.get(by_user)


def test_every_node_serves_only_on_its_tls_port(secured: Secured) -> None:
    modes = sorted(node.mode() or "" for node in secured.nodes)
    expected = ["standalone"] if secured.kind == "standalone" else ["follower", "follower", "leader"]
    assert modes == expected
    for node in secured.nodes:
        cfg = node.data_dir.joinpath("zoo.cfg").read_text().splitlines()
        assert f"secureClientPort={node.client_port}" in cfg
        assert not [line for line in cfg if line.startswith("clientPort")]
        if secured.kind == "ensemble":
            assert "sslQuorum=true" in cfg
            assert "ssl.quorum.hostnameVerification=true" in cfg


def test_no_super_user_and_no_password_outside_the_owner_only_jaas_file(secured: Secured) -> None:
    for node in secured.nodes:
        cfg = node.data_dir.joinpath("zoo.cfg").read_text()
        assert "superDigest" not in cfg
        assert "superUser" not in cfg
        assert BROKER_PASSWORD not in cfg and TOOL_PASSWORD not in cfg
        assert stat.S_IMODE(node.jaas_path.stat().st_mode) == 0o600
        jaas = node.jaas_path.read_text()
        assert "org.apache.zookeeper.server.auth.DigestLoginModule required" in jaas
        assert f'user_{TOOL_USER}="{TOOL_PASSWORD}"' in jaas
        for log in (node.log_path, node.data_dir / "zookeeper.out"):
            if log.exists():
                text = log.read_text()
                assert BROKER_PASSWORD not in text and TOOL_PASSWORD not in text


# (b) Plain TCP gets no session.


def test_plain_tcp_to_the_secure_port_gets_no_session(secured: Secured) -> None:
    client = _client(secured.connect, None, tls=False, **REFUSED)
    began = time.monotonic()
    with pytest.raises(KazooTimeoutError):
        client.start(timeout=3)
    assert time.monotonic() - began < REFUSAL_BOUND_S
    client.close()


def test_plain_four_letter_words_get_no_answer(secured: Secured) -> None:
    node = secured.nodes[0]
    # Four plain bytes are less than a TLS record header: the port waits for the rest.
    with pytest.raises(TimeoutError):
        four_letter_word(node.host, node.client_port, "srvr", timeout=2)


# (c) TLS without a client certificate is refused.


def test_tls_without_a_client_certificate_gets_no_session(
    secured: Secured, zk_certs: ZkCertificates
) -> None:
    client = _client(secured.connect, zk_certs, certificate=False, user=BROKER_USER,
                     password=BROKER_PASSWORD, **REFUSED)
    began = time.monotonic()
    with pytest.raises(KazooTimeoutError):
        client.start(timeout=3)
    assert time.monotonic() - began < REFUSAL_BOUND_S
    client.close()


def test_tls_handshake_without_a_client_certificate_is_refused(
    secured: Secured, zk_certs: ZkCertificates
) -> None:
    node = secured.nodes[0]
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.load_verify_locations(zk_certs.ca)
    # TLS 1.3 reports the refusal on the first read after the handshake.
    with pytest.raises(ssl.SSLError, match=re.compile("certificate", re.IGNORECASE)):
        four_letter_word(node.host, node.client_port, "srvr", timeout=3, tls=context)


# (d) A certificate without SASL (or with a digest identity of its own) can do nothing.


@pytest.mark.parametrize("auth_data", [None, [("digest", "eve:eve-password")]], ids=["no-auth", "digest"])
@pytest.mark.parametrize("operation", ["read", "create"])
def test_certificate_without_sasl_cannot_read_or_create(
    secured: Secured, zk_certs: ZkCertificates, auth_data: list | None, operation: str
) -> None:
    path = _node_name("eve")
    extra = {"auth_data": auth_data} if auth_data else {}
    with _started(_client(secured.connect, zk_certs, **extra)) as client:
        began = time.monotonic()
        with pytest.raises(SessionClosedRequireSaslError):
            if operation == "read":
                client.get("/")
            else:
                client.create(path, b"owned")
        assert time.monotonic() - began < REFUSAL_BOUND_S
    with _started(_broker(secured, zk_certs)) as broker, pytest.raises(NoNodeError):
        broker.get(path)


# (e) SASL with a wrong password (or an unknown user) gets no session.


# kazoo's connection thread ends on the server's refusal (SessionClosedRequireSaslError
# escapes its loop); the client is then closed, which is what this test asserts.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
@pytest.mark.parametrize(("user", "password"), [(BROKER_USER, "guessed"), ("eve", BROKER_PASSWORD)],
                         ids=["wrong-password", "unknown-user"])
def test_sasl_with_wrong_credentials_gets_no_session(
    secured: Secured, zk_certs: ZkCertificates, user: str, password: str
) -> None:
    client = _client(secured.connect, zk_certs, user=user, password=password, **REFUSED)
    lost = threading.Event()
    client.add_listener(lambda state: lost.set() if state == KazooState.LOST else None)
    began = time.monotonic()
    # kazoo reports the session before its SASL login ends: start() may return, or time
    # out if the refusal closed the connection first. Either way the client ends LOST.
    with contextlib.suppress(KazooTimeoutError):
        client.start(timeout=3)
    assert lost.wait(REFUSAL_BOUND_S)
    with pytest.raises(ConnectionClosedError):
        client.get("/")
    assert time.monotonic() - began < REFUSAL_BOUND_S
    client.stop()  # joins the connection thread, so its end is reported within this test
    client.close()
    logs = "".join(node.log_path.read_text() for node in secured.nodes)
    assert "failed to SASL authenticate" in logs


# The start fails fast, with the cause, when a store cannot serve.


# (f) tokensvc's own client with the stores Kafka operators have: one Kafka-style client
# properties file naming JKS or PKCS12 stores written by keytool, read as a broker or a
# tool reads its file. The certificate's subject is the session's x509 identity.


@pytest.fixture(scope="module")
def java_stores(zk_certs: ZkCertificates, tmp_path_factory: pytest.TempPathFactory) -> JavaStores:
    return write_java_stores(zk_certs, tmp_path_factory.mktemp("java-stores"))


def _kafka_client_properties(directory: Path, connect: str, stores: JavaStores, kind: str) -> Path:
    jaas = directory / "zk-client.jaas"
    jaas.write_text(jaas_client_section(BROKER_USER, BROKER_PASSWORD))
    jaas.chmod(0o600)
    keystore, truststore = ((stores.client_jks, stores.truststore_jks) if kind == "JKS"
                            else (stores.client_p12, stores.truststore_p12))
    lines = [
        f"zookeeper.connect={connect}/kafka-stores",
        "zookeeper.ssl.client.enable=true",
        "zookeeper.clientCnxnSocket=org.apache.zookeeper.ClientCnxnSocketNetty",
        f"zookeeper.ssl.keystore.location={keystore}",
        f"zookeeper.ssl.keystore.password={stores.password}",
        f"zookeeper.ssl.truststore.location={truststore}",
        f"zookeeper.ssl.truststore.password={stores.password}",
        f"zookeeper.sasl.jaas.file={jaas}",
    ]
    if kind == "PKCS12":  # JKS: the type follows the .jks names, as in ZooKeeper's client
        lines += ["zookeeper.ssl.keystore.type=PKCS12", "zookeeper.ssl.truststore.type=PKCS12",
                  "zookeeper.ssl.enabled.protocols=TLSv1.2,TLSv1.3"]
    path = directory / "zk-client.properties"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("secured", ["standalone"], indirect=True)
@pytest.mark.parametrize("kind", ["JKS", "PKCS12"])
def test_tokensvc_client_logs_in_with_java_key_and_trust_stores(
    secured: Secured, zk_certs: ZkCertificates, java_stores: JavaStores, tmp_path: Path,
    kind: str,
) -> None:
    settings = settings_from_file(None, str(_kafka_client_properties(
        tmp_path, secured.connect, java_stores, kind)))
    assert settings.security.tls is not None and settings.security.tls.keystore_type == kind
    subject = x509.load_pem_x509_certificates(zk_certs.client.read_bytes())[0].subject
    path = _node_name(f"by-{kind.lower()}-certificate")
    client = open_client(settings)
    try:
        client.create(path, kind.encode(), acl=[make_acl("x509", subject.rfc4514_string(), all=True)])
        assert client.get(path)[0] == kind.encode()
        assert client.client_state == KazooState.CONNECTED
    finally:
        client.stop()
        client.close()


@pytest.mark.parametrize("secured", ["standalone"], indirect=True)
def test_a_trust_store_without_zookeepers_ca_is_refused_in_one_line(
    secured: Secured, java_stores: JavaStores, tmp_path: Path,
) -> None:
    props = _kafka_client_properties(tmp_path, secured.connect, java_stores, "JKS")
    other = generate_zookeeper(tmp_path / "other-ca")
    props.write_text(props.read_text().replace(
        f"zookeeper.ssl.truststore.location={java_stores.truststore_jks}",
        f"zookeeper.ssl.truststore.location={other.ca}"))
    settings = settings_from_file(None, str(props), connection_timeout_ms=5000)
    began = time.monotonic()
    with pytest.raises(ZooKeeperUnavailable, match="refused the TLS connection: .*its certificate "
                                                   "is not signed by the trust store"):
        open_client(settings)
    assert time.monotonic() - began < REFUSAL_BOUND_S


@pytest.fixture
def bad_pem(tmp_path: Path) -> Path:
    path = tmp_path / "bad.pem"
    path.write_text("not a PEM file\n")
    return path


@pytest.mark.parametrize("which", ["key_store", "trust_store"])
def test_unusable_stores_fail_the_start_at_once(
    tmp_path: Path, zk_certs: ZkCertificates, bad_pem: Path, which: str
) -> None:
    stores = {"key_store": zk_certs.server, "trust_store": zk_certs.ca, which: bad_pem}
    security = ZkServerSecurity(**stores, sasl_users={BROKER_USER: "x"})
    node = ManagedZooKeeper(tmp_path / "zk", security=security, heap_mb=HEAP_MB)
    began = time.monotonic()
    with pytest.raises(ZooKeeperStartError, match=f"its {which.replace('_', ' ')} {bad_pem}"):
        node.start()
    assert time.monotonic() - began < 5
    assert node.pid is None


def test_a_missing_store_fails_the_start_at_once(tmp_path: Path, zk_certs: ZkCertificates) -> None:
    missing = tmp_path / "nowhere.pem"
    security = ZkServerSecurity(key_store=missing, trust_store=zk_certs.ca,
                                sasl_users={BROKER_USER: "x"})
    with pytest.raises(ZooKeeperStartError, match=f"key store {missing} does not exist"):
        ManagedZooKeeper(tmp_path / "zk", security=security).start()


def test_an_expired_certificate_fails_the_start_at_once(tmp_path: Path) -> None:
    old = generate_zookeeper(tmp_path / "old", days=1, not_before=datetime.datetime(2020, 1, 1,
                                                                                     tzinfo=datetime.UTC))
    security = ZkServerSecurity(key_store=old.server, trust_store=old.ca,
                                sasl_users={BROKER_USER: "x"})
    with pytest.raises(ZooKeeperStartError, match="valid only from 2020-01-01 00:00 to 2020-01-02"):
        ManagedZooKeeper(tmp_path / "zk", security=security).start()


def test_a_port_in_use_is_still_a_clear_error(tmp_path: Path, security: ZkServerSecurity) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(ZooKeeperStartError, match=f"port 127.0.0.1:{port} is already in use"):
            ManagedZooKeeper(tmp_path / "zk", port=port, security=security).start()


# ZkServerSecurity refuses what the JAAS file could not carry.


@pytest.mark.parametrize(
    ("users", "message"),
    [
        ({}, "at least one SASL user"),
        ({"eve smith": "pw"}, "SASL user name"),
        ({'eve"': "pw"}, "SASL user name"),
        ({"eve": ""}, "printable ASCII and not empty"),
        ({"eve": "line\nbreak"}, "printable ASCII and not empty"),
        ({"eve": "pässword"}, "printable ASCII and not empty"),
    ],
)
def test_sasl_users_the_jaas_file_cannot_hold_are_refused(
    zk_certs: ZkCertificates, users: dict[str, str], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        ZkServerSecurity(key_store=zk_certs.server, trust_store=zk_certs.ca, sasl_users=users)


def test_security_settings_never_show_passwords(security: ZkServerSecurity) -> None:
    assert BROKER_PASSWORD not in repr(security)
    assert TOOL_PASSWORD not in repr(security)
