"""Dev TLS material: the files load into ssl contexts and a real loopback handshake
succeeds with the dev CA (one-way and two-way) and fails without it."""

from __future__ import annotations

import socket
import ssl
import stat
import threading
from pathlib import Path

import pytest
from cryptography import x509

from tokensvc.devcerts import DevCertificates, generate


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
