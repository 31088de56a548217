"""Java key and trust stores of the ZooKeeper development certificates, written by the
JDK's keytool as an operator's would be: the brokers' client identity (``client.pem``)
as ``client.jks`` and ``client.p12``, ZooKeeper's CA (``ca.pem``) as ``truststore.jks``
and ``truststore.p12``, all under one store password.

keytool cannot import a PEM key, so the identity goes through a PKCS12 seed written
with ``cryptography``, which keytool then rewrites in each format (the files the tests
read are keytool's own). Four keytool runs, about a second each: build once per module.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.serialization import pkcs12

from tokensvc.devcerts import ZkCertificates
from tokensvc.keystores import find_keytool

STORE_PASSWORD = "store-secret-1"
PASSWORD_VARIABLE = "TEST_STORE_PASSWORD"


@dataclass(frozen=True)
class JavaStores:
    client_jks: Path
    client_p12: Path
    truststore_jks: Path
    truststore_p12: Path
    password: str = STORE_PASSWORD


def keytool(*args: str) -> None:
    """Run keytool; ``-...pass:env TEST_STORE_PASSWORD`` gives it the store password."""
    environment = {**os.environ, PASSWORD_VARIABLE: STORE_PASSWORD}
    subprocess.run([find_keytool(), "-J-XX:TieredStopAtLevel=1", "-J-XX:+UseSerialGC", *args],
                   env=environment, stdin=subprocess.DEVNULL, capture_output=True,
                   check=True, timeout=120)


def write_java_stores(certs: ZkCertificates, directory: Path,
                      kinds: tuple[str, ...] = ("JKS", "PKCS12")) -> JavaStores:
    """The stores of ``certs`` in ``directory`` (created), of the ``kinds`` asked (the
    paths of the others are named but not written)."""
    directory.mkdir(parents=True, exist_ok=True)
    pem = certs.client.read_bytes()
    chain = x509.load_pem_x509_certificates(pem)
    key = serialization.load_pem_private_key(pem, None)
    seed = directory / "seed.p12"
    seed.write_bytes(pkcs12.serialize_key_and_certificates(
        b"client", key, chain[0], chain[1:],
        serialization.BestAvailableEncryption(STORE_PASSWORD.encode())))
    stores = JavaStores(directory / "client.jks", directory / "client.p12",
                        directory / "truststore.jks", directory / "truststore.p12")
    for target, kind in ((stores.client_jks, "JKS"), (stores.client_p12, "PKCS12")):
        if kind not in kinds:
            continue
        keytool("-importkeystore", "-noprompt", "-srckeystore", str(seed),
                 "-srcstoretype", "PKCS12", "-srcstorepass:env", PASSWORD_VARIABLE,
                 "-destkeystore", str(target), "-deststoretype", kind,
                 "-deststorepass:env", PASSWORD_VARIABLE)
    for target, kind in ((stores.truststore_jks, "JKS"), (stores.truststore_p12, "PKCS12")):
        if kind not in kinds:
            continue
        keytool("-importcert", "-noprompt", "-alias", "zookeeper-ca", "-file", str(certs.ca),
                 "-keystore", str(target), "-storetype", kind,
                 "-storepass:env", PASSWORD_VARIABLE)
    seed.unlink()
    return stores
