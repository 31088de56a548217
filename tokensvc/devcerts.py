"""Development TLS material for a local cluster: a throw-away CA and the certificates it signs.

Owns: generating, with ``cryptography``, a self-signed CA, a broker certificate for the
loopback names (SAN ``127.0.0.1`` and ``localhost`` by default) and optionally a client
certificate for two-way TLS, and writing them as PEM files in the layout Kafka's PEM
key stores expect:

- ``ca.pem``: the CA certificate (the trust store of brokers and clients),
- ``ca-key.pem``: the CA private key (mode 0600; only needed to sign more certificates),
- ``broker.pem``: the broker's private key (unencrypted PKCS#8) followed by its certificate
  chain (broker certificate, then the CA), as ``ssl.keystore.location`` with
  ``ssl.keystore.type=PEM`` takes it (mode 0600),
- ``client.pem``: the same for a client, when asked for.

:func:`generate_zookeeper` writes the managed ZooKeeper's material in a directory of its
own, under a CA of its own (a Kafka client certificate signed by the brokers' CA must not
open ZooKeeper's TLS port):

- ``ca.pem`` / ``ca-key.pem``: ZooKeeper's CA (its trust store, and that of its clients),
- ``server.pem``: the ZooKeeper servers' key and chain, for the client port and for TLS
  between ensemble nodes (so it is valid for both server and client authentication), with
  SAN ``127.0.0.1``, ``localhost`` and any other address the nodes listen on,
- ``client.pem``: the one identity every broker and tool presents to ZooKeeper
  (``CN=tokensvc-broker``): ZooKeeper's x509 ACLs name the certificate's subject, so
  brokers with different subjects could not write each other's znodes.

It must not be used for anything but development and tests: the keys are written
unencrypted and the CA is trusted by nothing else. It never logs key material.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

DEFAULT_HOSTS = ("127.0.0.1", "localhost")
DEFAULT_VALIDITY_DAYS = 365
# The subject common name of the brokers' (and tools') ZooKeeper client certificate.
ZOOKEEPER_CLIENT_NAME = "tokensvc-broker"
ZOOKEEPER_SERVER_NAME = "tokensvc-zookeeper"


@dataclass(frozen=True)
class DevCertificates:
    """Paths of the PEM files written by :func:`generate`."""

    directory: Path
    ca: Path
    ca_key: Path
    broker: Path
    client: Path | None


@dataclass(frozen=True)
class ZkCertificates:
    """Paths of the PEM files written by :func:`generate_zookeeper`."""

    directory: Path
    ca: Path
    ca_key: Path
    server: Path
    client: Path


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _name(common_name: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "tokensvc development"),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )


def _subject_alt_names(hosts: Sequence[str]) -> x509.SubjectAlternativeName:
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    return x509.SubjectAlternativeName(names)


def _builder(
    subject: x509.Name, issuer: x509.Name, public_key: ec.EllipticCurvePublicKey,
    not_before: datetime.datetime, days: int,
) -> x509.CertificateBuilder:
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_before + datetime.timedelta(days=days))
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public_key), critical=False)
    )


def _make_ca(
    not_before: datetime.datetime, days: int, common_name: str = "tokensvc development CA"
) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = _new_key()
    name = _name(common_name)
    cert = (
        _builder(name, name, key.public_key(), not_before, days)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, content_commitment=False, key_encipherment=False,
                data_encipherment=False, key_agreement=False, key_cert_sign=True, crl_sign=True,
                encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .sign(key, hashes.SHA256())
    )
    return key, cert


def _make_leaf(
    ca_key: ec.EllipticCurvePrivateKey,
    ca_cert: x509.Certificate,
    common_name: str,
    usages: Sequence[x509.ObjectIdentifier],
    hosts: Sequence[str],
    not_before: datetime.datetime,
    days: int,
) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = _new_key()
    builder = (
        _builder(_name(common_name), ca_cert.subject, key.public_key(), not_before, days)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, content_commitment=False, key_encipherment=False,
                data_encipherment=False, key_agreement=True, key_cert_sign=False, crl_sign=False,
                encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage(list(usages)), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
    )
    if hosts:
        builder = builder.add_extension(_subject_alt_names(hosts), critical=False)
    return key, builder.sign(ca_key, hashes.SHA256())


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _cert_pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _write(path: Path, data: bytes, mode: int) -> None:
    """Create (or replace) ``path`` with ``mode`` from the start: keys never sit world-readable."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
    os.chmod(path, mode)


def _start(days: int, not_before: datetime.datetime | None) -> datetime.datetime:
    if days <= 0:
        raise ValueError("certificate validity must be at least one day")
    # Back-date by an hour so a slightly skewed clock does not reject a fresh certificate.
    return not_before or datetime.datetime.now(datetime.UTC) - datetime.timedelta(hours=1)


def _chain_pem(key: ec.EllipticCurvePrivateKey, cert: x509.Certificate, ca: x509.Certificate) -> bytes:
    """A PEM key store: the private key, then the certificate chain ending with the CA."""
    return _key_pem(key) + _cert_pem(cert) + _cert_pem(ca)


def generate(
    directory: str | os.PathLike,
    *,
    hosts: Sequence[str] = DEFAULT_HOSTS,
    client_name: str | None = None,
    days: int = DEFAULT_VALIDITY_DAYS,
    not_before: datetime.datetime | None = None,
) -> DevCertificates:
    """Write a fresh CA, a broker certificate for ``hosts`` and, if ``client_name`` is
    given, a client certificate with that common name, all under ``directory``."""
    start = _start(days, not_before)
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    ca_key, ca_cert = _make_ca(start, days)
    broker_key, broker_cert = _make_leaf(
        ca_key, ca_cert, "tokensvc broker", [ExtendedKeyUsageOID.SERVER_AUTH], hosts, start, days
    )
    paths = DevCertificates(
        directory=out,
        ca=out / "ca.pem",
        ca_key=out / "ca-key.pem",
        broker=out / "broker.pem",
        client=out / "client.pem" if client_name else None,
    )
    _write(paths.ca, _cert_pem(ca_cert), 0o644)
    _write(paths.ca_key, _key_pem(ca_key), 0o600)
    _write(paths.broker, _chain_pem(broker_key, broker_cert, ca_cert), 0o600)
    if client_name and paths.client is not None:
        client_key, client_cert = _make_leaf(
            ca_key, ca_cert, client_name, [ExtendedKeyUsageOID.CLIENT_AUTH], (), start, days
        )
        _write(paths.client, _chain_pem(client_key, client_cert, ca_cert), 0o600)
    return paths


def generate_zookeeper(
    directory: str | os.PathLike,
    hosts: Sequence[str] = (),
    *,
    days: int = DEFAULT_VALIDITY_DAYS,
    not_before: datetime.datetime | None = None,
) -> ZkCertificates:
    """Write a fresh ZooKeeper CA, a server certificate for the loopback names plus
    ``hosts`` (the addresses ensemble nodes listen on elsewhere), and the brokers'
    client certificate, all under ``directory``."""
    start = _start(days, not_before)
    names = list(dict.fromkeys([*DEFAULT_HOSTS, *hosts]))
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    ca_key, ca_cert = _make_ca(start, days, "tokensvc development ZooKeeper CA")
    # Ensemble nodes present this certificate to each other in both roles.
    server_key, server_cert = _make_leaf(
        ca_key, ca_cert, ZOOKEEPER_SERVER_NAME,
        [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH], names, start, days,
    )
    client_key, client_cert = _make_leaf(
        ca_key, ca_cert, ZOOKEEPER_CLIENT_NAME, [ExtendedKeyUsageOID.CLIENT_AUTH], (), start, days
    )
    paths = ZkCertificates(
        directory=out,
        ca=out / "ca.pem",
        ca_key=out / "ca-key.pem",
        server=out / "server.pem",
        client=out / "client.pem",
    )
    _write(paths.ca, _cert_pem(ca_cert), 0o644)
    _write(paths.ca_key, _key_pem(ca_key), 0o600)
    _write(paths.server, _chain_pem(server_key, server_cert, ca_cert), 0o600)
    _write(paths.client, _chain_pem(client_key, client_cert, ca_cert), 0o600)
    return paths
