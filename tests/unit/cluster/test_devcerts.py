"""Dev TLS material: the files load into ssl contexts and a real loopback handshake
succeeds with the dev CA (one-way and two-way) and fails without it; ZooKeeper's
material has a CA of its own that refuses the brokers' client certificates."""

from __future__ import annotations

import socket
import ssl
import stat
import threading
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from tokensvc.devcerts import (
    ZOOKEEPER_CLIENT_NAME,
    DevCertificates,
    ZkCertificates,
    generate,
    generate_zookeeper,
)


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> DevCertificates:
    return generate(tmp_path_factory.mktemp("tls"), client_name="alice")


class _TlsServer:
    """A one-connection TLS server on a loopback socket, run in a thread."""

    def __init__(self, context: ssl.SSLContext) -> None:
        self._context = context
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self.error: Exception | None = None
        self.peer_subject: tuple | None = None
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        self._listener.settimeout(10)
        conn, _ = self._listener.accept()
        try:
            with self._context.wrap_socket(conn, server_side=True) as tls:
                cert = tls.getpeercert()
                self.peer_subject = cert.get("subject") if cert else None
                tls.sendall(tls.recv(16))
        except (ssl.SSLError, OSError) as exc:
            self.error = exc
        finally:
            self._listener.close()

    def join(self) -> None:
        self._thread.join(10)


def _server_context(certs: DevCertificates, require_client: bool = False) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(certs.broker)
    if require_client:
        ctx.verify_mode = ssl.CERT_REQUIRED
        ctx.load_verify_locations(certs.ca)
    return ctx


def _client_context(cafile: Path | None, client_pem: Path | None = None) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    if cafile is not None:
        ctx.load_verify_locations(cafile)
    if client_pem is not None:
        ctx.load_cert_chain(client_pem)
    return ctx


def _exchange(client_ctx: ssl.SSLContext, port: int, server_hostname: str) -> bytes:
    with (
        socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
        client_ctx.wrap_socket(raw, server_hostname=server_hostname) as tls,
    ):
        tls.sendall(b"ping")
        return tls.recv(16)


@pytest.mark.parametrize("hostname", ["127.0.0.1", "localhost"])
def test_handshake_with_dev_ca_succeeds_for_loopback_names(
    certs: DevCertificates, hostname: str
) -> None:
    server = _TlsServer(_server_context(certs))
    assert _exchange(_client_context(certs.ca), server.port, hostname) == b"ping"
    server.join()
    assert server.error is None


def test_handshake_without_dev_ca_fails_verification(certs: DevCertificates) -> None:
    server = _TlsServer(_server_context(certs))
    with pytest.raises(ssl.SSLCertVerificationError):
        _exchange(_client_context(None), server.port, "127.0.0.1")
    server.join()
    assert server.error is not None


def test_handshake_with_another_ca_fails_verification(
    certs: DevCertificates, tmp_path: Path
) -> None:
    other = generate(tmp_path / "other")
    server = _TlsServer(_server_context(certs))
    with pytest.raises(ssl.SSLCertVerificationError):
        _exchange(_client_context(other.ca), server.port, "127.0.0.1")
    server.join()


def test_two_way_tls_accepts_the_dev_client_certificate(certs: DevCertificates) -> None:
    assert certs.client is not None
    server = _TlsServer(_server_context(certs, require_client=True))
    assert _exchange(_client_context(certs.ca, certs.client), server.port, "localhost") == b"ping"
    server.join()
    assert server.error is None
    assert server.peer_subject is not None
    assert (("commonName", "alice"),) in server.peer_subject


def test_two_way_tls_refuses_a_client_without_certificate(certs: DevCertificates) -> None:
    server = _TlsServer(_server_context(certs, require_client=True))
    with pytest.raises((ssl.SSLError, ConnectionError)):
        # TLS 1.3 reports the refusal on the first read after the handshake.
        _exchange(_client_context(certs.ca), server.port, "localhost")
    server.join()
    assert server.error is not None


def test_broker_pem_holds_key_then_chain_ending_with_the_ca(certs: DevCertificates) -> None:
    text = certs.broker.read_text()
    assert text.startswith("-----BEGIN PRIVATE KEY-----")
    chain = x509.load_pem_x509_certificates(certs.broker.read_bytes())
    ca = x509.load_pem_x509_certificate(certs.ca.read_bytes())
    assert len(chain) == 2
    assert chain[0].issuer == ca.subject
    assert chain[1] == ca


def test_broker_certificate_names_loopback_in_subject_alt_names(certs: DevCertificates) -> None:
    leaf = x509.load_pem_x509_certificates(certs.broker.read_bytes())[0]
    san = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert [str(ip) for ip in san.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    assert san.get_values_for_type(x509.DNSName) == ["localhost"]


def test_private_key_files_are_owner_only(certs: DevCertificates) -> None:
    for path in (certs.broker, certs.ca_key, certs.client):
        assert path is not None
        assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_client_certificate_is_only_written_when_asked(tmp_path: Path) -> None:
    paths = generate(tmp_path)
    assert paths.client is None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["broker.pem", "ca-key.pem", "ca.pem"]


# ZooKeeper's material: its own CA, a server certificate for every node address (used in
# both roles between ensemble nodes) and the one client identity of brokers and tools.


@pytest.fixture(scope="module")
def zk_certs(tmp_path_factory: pytest.TempPathFactory) -> ZkCertificates:
    return generate_zookeeper(tmp_path_factory.mktemp("zk-tls"), hosts=["10.77.0.2", "zk2.test"])


def _zk_server_context(certs: ZkCertificates) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(certs.server)
    ctx.verify_mode = ssl.CERT_REQUIRED
    ctx.load_verify_locations(certs.ca)
    return ctx


def _leaf(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificates(path.read_bytes())[0]


def test_zookeeper_files_hold_key_then_chain_under_their_own_ca(zk_certs: ZkCertificates) -> None:
    ca = x509.load_pem_x509_certificate(zk_certs.ca.read_bytes())
    for path in (zk_certs.server, zk_certs.client):
        assert path.read_text().startswith("-----BEGIN PRIVATE KEY-----")
        chain = x509.load_pem_x509_certificates(path.read_bytes())
        assert [c.issuer for c in chain] == [ca.subject, ca.subject]
        assert chain[1] == ca
    assert sorted(p.name for p in zk_certs.directory.iterdir()) == [
        "ca-key.pem", "ca.pem", "client.pem", "server.pem"]


def test_zookeeper_keys_are_owner_only_and_the_ca_is_readable(zk_certs: ZkCertificates) -> None:
    for path in (zk_certs.server, zk_certs.client, zk_certs.ca_key):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(zk_certs.ca.stat().st_mode) == 0o644


def test_zookeeper_server_names_loopback_and_the_extra_hosts_once(tmp_path: Path) -> None:
    certs = generate_zookeeper(tmp_path, hosts=["127.0.0.1", "10.77.0.2", "zk2.test"])
    san = _leaf(certs.server).extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert [str(ip) for ip in san.get_values_for_type(x509.IPAddress)] == ["127.0.0.1", "10.77.0.2"]
    assert san.get_values_for_type(x509.DNSName) == ["localhost", "zk2.test"]


def test_zookeeper_server_certificate_serves_both_roles_and_the_client_one(
    zk_certs: ZkCertificates,
) -> None:
    def usages(path: Path) -> set[x509.ObjectIdentifier]:
        return set(_leaf(path).extensions.get_extension_for_class(x509.ExtendedKeyUsage).value)

    assert usages(zk_certs.server) == {ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH}
    assert usages(zk_certs.client) == {ExtendedKeyUsageOID.CLIENT_AUTH}


def test_every_broker_shares_the_one_zookeeper_client_identity(tmp_path: Path) -> None:
    first = generate_zookeeper(tmp_path / "a")
    second = generate_zookeeper(tmp_path / "b")
    subjects = {_leaf(c.client).subject.rfc4514_string() for c in (first, second)}
    assert subjects == {"CN=tokensvc-broker,O=tokensvc development"}
    assert _leaf(first.client).subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == (
        ZOOKEEPER_CLIENT_NAME)


@pytest.mark.parametrize("hostname", ["127.0.0.1", "localhost", "10.77.0.2"])
def test_zookeeper_accepts_the_broker_client_certificate(
    zk_certs: ZkCertificates, hostname: str
) -> None:
    server = _TlsServer(_zk_server_context(zk_certs))
    # The server's certificate names `hostname`; the connection itself is on loopback.
    assert _exchange(_client_context(zk_certs.ca, zk_certs.client), server.port, hostname) == b"ping"
    server.join()
    assert server.error is None
    assert server.peer_subject is not None
    assert (("commonName", ZOOKEEPER_CLIENT_NAME),) in server.peer_subject


def test_ensemble_nodes_authenticate_each_other_with_the_server_certificate(
    zk_certs: ZkCertificates,
) -> None:
    server = _TlsServer(_zk_server_context(zk_certs))
    assert _exchange(_client_context(zk_certs.ca, zk_certs.server), server.port, "127.0.0.1") == b"ping"
    server.join()
    assert server.error is None


def test_zookeeper_refuses_a_client_certificate_of_the_brokers_ca(
    zk_certs: ZkCertificates, certs: DevCertificates
) -> None:
    # A Kafka client's certificate (signed by the brokers' CA) opens no ZooKeeper port.
    assert certs.client is not None
    server = _TlsServer(_zk_server_context(zk_certs))
    with pytest.raises((ssl.SSLError, ConnectionError)):
        _exchange(_client_context(zk_certs.ca, certs.client), server.port, "127.0.0.1")
    server.join()
    assert isinstance(server.error, ssl.SSLError)


def test_zookeeper_validity_must_be_positive(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="at least one day"):
        generate_zookeeper(tmp_path, days=0)
    assert not tmp_path.joinpath("ca.pem").exists()
