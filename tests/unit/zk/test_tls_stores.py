"""The ZooKeeper client's key and trust stores, read as ZooKeeper's client reads them:
JKS and PKCS12 stores written by keytool from the development CA and client
certificate, and the PEM files themselves. A wrong password, type or file is one line
naming the key and the file, never the password; the context trusts only the trust
store and leaves no file behind; a loopback handshake with a server that requires the
client certificate succeeds with each kind of store.
"""

from __future__ import annotations

import socket
import ssl
import threading
from pathlib import Path

import pytest
from cryptography import x509

from tests.support.java_stores import PASSWORD_VARIABLE, JavaStores, keytool, write_java_stores
from tokensvc.config_loader import load_zk_security
from tokensvc.core.configdef import ConfigError
from tokensvc.core.zk_security import ZkTlsFiles
from tokensvc.devcerts import ZOOKEEPER_CLIENT_NAME, ZkCertificates, generate_zookeeper
from tokensvc.keystores import read_key_store, read_trust_store
from zk.tls import check_stores, client_context

WRONG = "not-the-password"


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> ZkCertificates:
    return generate_zookeeper(tmp_path_factory.mktemp("zk-tls"))


@pytest.fixture(scope="module")
def stores(certs: ZkCertificates, tmp_path_factory: pytest.TempPathFactory) -> JavaStores:
    return write_java_stores(certs, tmp_path_factory.mktemp("java-stores"))


def _kinds(certs: ZkCertificates, stores: JavaStores) -> dict[str, tuple[Path, Path, str | None]]:
    """Per type: key store, trust store, password."""
    return {
        "JKS": (stores.client_jks, stores.truststore_jks, stores.password),
        "PKCS12": (stores.client_p12, stores.truststore_p12, stores.password),
        "PEM": (certs.client, certs.ca, None),
    }


def _files(certs: ZkCertificates, stores: JavaStores, kind: str, **changes: object) -> ZkTlsFiles:
    keystore, truststore, password = _kinds(certs, stores)[kind]
    fields: dict[str, object] = {
        "keystore": str(keystore), "truststore": str(truststore), "keystore_type": kind,
        "truststore_type": kind, "keystore_password": password, "truststore_password": password,
    }
    fields.update(changes)
    return ZkTlsFiles(**fields)


def _subject_cn(certificate: x509.Certificate) -> str:
    return certificate.subject.get_attributes_for_oid(x509.NameOID.COMMON_NAME)[0].value


@pytest.mark.parametrize("kind", ["JKS", "PKCS12", "PEM"])
def test_each_store_type_gives_the_client_identity_and_the_ca(
    certs: ZkCertificates, stores: JavaStores, kind: str
) -> None:
    keystore, truststore, password = _kinds(certs, stores)[kind]
    identity = read_key_store(str(keystore), kind, password)
    ca = x509.load_pem_x509_certificate(certs.ca.read_bytes())
    assert _subject_cn(identity.chain[0]) == ZOOKEEPER_CLIENT_NAME
    assert identity.chain[-1] == ca
    assert read_trust_store(str(truststore), kind, password) == (ca,)
    assert "PrivateKey" not in repr(identity)


def test_jks_and_pkcs12_stand_for_each_other_as_in_the_jvm(stores: JavaStores) -> None:
    as_pkcs12 = read_key_store(str(stores.client_jks), "PKCS12", stores.password)
    as_jks = read_key_store(str(stores.client_p12), "JKS", stores.password)
    assert as_pkcs12.chain == as_jks.chain


@pytest.mark.parametrize(("kind", "store"), [
    ("JKS", "keystore"), ("PKCS12", "keystore"), ("JKS", "truststore"), ("PKCS12", "truststore"),
])
def test_a_wrong_password_names_the_key_and_the_file_never_the_password(
    certs: ZkCertificates, stores: JavaStores, kind: str, store: str
) -> None:
    files = _files(certs, stores, kind, **{f"{store}_password": WRONG})
    with pytest.raises(ConfigError) as caught:
        check_stores(files)
    text = str(caught.value)
    assert text.startswith(f"zookeeper.ssl.{store}.location: {getattr(files, store)}: wrong "
                           "password")
    assert f"check zookeeper.ssl.{store}.password" in text
    assert WRONG not in text and stores.password not in text


def test_a_wrong_password_for_an_encrypted_pem_key_is_refused(
    certs: ZkCertificates, tmp_path: Path
) -> None:
    encrypted = tmp_path / "client.pem"
    identity = read_key_store(str(certs.client), "PEM", None)
    encrypted.write_bytes(identity.encrypted_pem(b"key-secret"))
    assert read_key_store(str(encrypted), "PEM", "key-secret").chain == identity.chain
    files = ZkTlsFiles(keystore=str(encrypted), truststore=str(certs.ca))
    with pytest.raises(ConfigError, match="its key is encrypted and no password is set "
                                          r"\(check zookeeper.ssl.keystore.password\)"):
        check_stores(files)
    with pytest.raises(ConfigError, match="wrong password for its key"):
        check_stores(ZkTlsFiles(keystore=str(encrypted), truststore=str(certs.ca),
                                keystore_password=WRONG))


def test_a_jks_key_whose_password_is_not_the_stores_is_refused_as_in_zookeeper(
    stores: JavaStores, certs: ZkCertificates, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    odd = tmp_path / "odd-key.jks"
    monkeypatch.setenv("TEST_KEY_PASSWORD", "another-key-secret")
    keytool("-importkeystore", "-noprompt", "-srckeystore", str(stores.client_jks),
            "-srcstoretype", "JKS", "-srcstorepass:env", PASSWORD_VARIABLE,
            "-destkeystore", str(odd), "-deststoretype", "JKS",
            "-deststorepass:env", PASSWORD_VARIABLE, "-destkeypass:env", "TEST_KEY_PASSWORD")
    files = ZkTlsFiles(keystore=str(odd), truststore=str(certs.ca), keystore_type="JKS",
                       keystore_password=stores.password)
    with pytest.raises(ConfigError) as caught:
        check_stores(files)
    assert str(caught.value) == (
        f"zookeeper.ssl.keystore.location: {odd}: a key's password is not the store's "
        "(ZooKeeper and tokensvc take one password for both) (check "
        "zookeeper.ssl.keystore.password)")


@pytest.mark.parametrize(("declared", "file_kind", "what"), [
    ("PEM", "JKS", "is a JKS store, not a PEM store"),
    ("PEM", "PKCS12", "is a PKCS12 store, not a PEM store"),
    ("PKCS12", "PEM", "is PEM text, not a PKCS12 store"),
    ("JKS", "PEM", "is PEM text, not a JKS store"),
])
def test_a_store_of_another_type_names_the_type_key(
    certs: ZkCertificates, stores: JavaStores, declared: str, file_kind: str, what: str
) -> None:
    keystore, _, password = _kinds(certs, stores)[file_kind]
    files = ZkTlsFiles(keystore=str(keystore), truststore=str(certs.ca), keystore_type=declared,
                       keystore_password=password or "any")
    with pytest.raises(ConfigError) as caught:
        check_stores(files)
    assert str(caught.value) == (f"zookeeper.ssl.keystore.location: {keystore} {what} "
                                 "(check zookeeper.ssl.keystore.type)")


def test_a_trust_store_given_as_key_store_has_no_key(stores: JavaStores, certs: ZkCertificates) -> None:
    files = ZkTlsFiles(keystore=str(stores.truststore_jks), truststore=str(certs.ca),
                       keystore_type="JKS", keystore_password=stores.password)
    with pytest.raises(ConfigError, match="zookeeper.ssl.keystore.location: .* holds no private key"):
        check_stores(files)


def test_an_unreadable_store_names_the_key_and_the_file(certs: ZkCertificates, tmp_path: Path) -> None:
    missing = tmp_path / "gone.p12"
    files = ZkTlsFiles(keystore=str(certs.client), truststore=str(missing),
                       truststore_type="PKCS12", truststore_password="x")
    with pytest.raises(ConfigError, match=f"zookeeper.ssl.truststore.location: cannot read "
                                          f"{missing}: No such file"):
        check_stores(files)


@pytest.mark.parametrize("kind", ["JKS", "PKCS12", "PEM"])
def test_the_context_trusts_only_the_trust_store_and_leaves_no_file(
    certs: ZkCertificates, stores: JavaStores, kind: str, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    context = client_context(_files(certs, stores, kind, protocols=("TLSv1.3",)))
    assert [c["subject"] for c in context.get_ca_certs()] == [
        ((("organizationName", "tokensvc development"),),
         (("commonName", "tokensvc development ZooKeeper CA"),))]
    assert context.minimum_version == context.maximum_version == ssl.TLSVersion.TLSv1_3
    assert context.check_hostname and context.verify_mode == ssl.CERT_REQUIRED
    assert list(tmp_path.iterdir()) == []


def _serve_once(certs: ZkCertificates) -> tuple[int, threading.Thread, list]:
    """A TLS server with ZooKeeper's certificate that requires a client certificate of
    ZooKeeper's CA; the client's subject common name lands in the returned list."""
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(certs.server)
    server.load_verify_locations(certs.ca)
    server.verify_mode = ssl.CERT_REQUIRED
    listener = socket.create_server(("127.0.0.1", 0))
    seen: list = []

    def serve() -> None:
        with listener:
            conn, _ = listener.accept()
            conn.settimeout(10)
            with server.wrap_socket(conn, server_side=True) as tls:
                subject = dict(part[0] for part in tls.getpeercert()["subject"])
                seen.append(subject["commonName"])
                tls.sendall(b"ok")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return listener.getsockname()[1], thread, seen


@pytest.mark.parametrize("kind", ["JKS", "PKCS12", "PEM"])
def test_a_handshake_presents_the_client_certificate_of_each_store_type(
    certs: ZkCertificates, stores: JavaStores, kind: str
) -> None:
    port, thread, seen = _serve_once(certs)
    context = client_context(_files(certs, stores, kind))
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw, \
            context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
        assert tls.recv(2) == b"ok"
    thread.join(10)
    assert seen == [ZOOKEEPER_CLIENT_NAME]


def test_one_kafka_properties_file_with_jks_stores_loads(
    stores: JavaStores, tmp_path: Path
) -> None:
    path = tmp_path / "zk-client.properties"
    path.write_text(
        "zookeeper.connect=127.0.0.1:2182/kafka\n"
        "zookeeper.ssl.client.enable=true\n"
        "zookeeper.clientCnxnSocket=org.apache.zookeeper.ClientCnxnSocketNetty\n"
        f"zookeeper.ssl.keystore.location={stores.client_jks}\n"
        f"zookeeper.ssl.keystore.password={stores.password}\n"
        f"zookeeper.ssl.truststore.location={stores.truststore_p12}\n"
        f"zookeeper.ssl.truststore.password={stores.password}\n"
        "zookeeper.ssl.truststore.type=PKCS12\n"
        "zookeeper.ssl.protocol=TLSv1.2\n"
    )
    values, security = load_zk_security(path)
    assert values["zookeeper.connect"] == "127.0.0.1:2182/kafka"
    assert (security.tls.keystore_type, security.tls.truststore_type) == ("JKS", "PKCS12")
    assert security.tls.protocols == ("TLSv1.2",) and security.set_acl is True
    path.write_text(path.read_text().replace(f"keystore.password={stores.password}",
                                             f"keystore.password={WRONG}"))
    with pytest.raises(ConfigError) as caught:
        load_zk_security(path)
    assert str(caught.value) == (
        f"{path}: zookeeper.ssl.keystore.location: {stores.client_jks}: wrong password, or a "
        "damaged store (check zookeeper.ssl.keystore.password)")
