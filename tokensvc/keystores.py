"""Java key stores and trust stores read into memory: PEM, PKCS12 and JKS.

Owns reading one store file of a declared type the way the JVM's TLS does for Kafka and
ZooKeeper, into certificates and a private key held in memory:

- PEM: a private key (PKCS#8 or the traditional form, encrypted or not) and certificates;
- PKCS12: with ``cryptography``;
- JKS: the JDK's own ``keytool`` converts it to PKCS12 in a private temporary directory
  (mode 0700, removed before the call returns), read as PKCS12; the converted bytes,
  under a one-time password, are kept in memory per file version, so a process runs
  keytool once per store. keytool is the reference
  reader of the format, and Java 17 is already needed for ZooKeeper; the Python JKS
  readers are unmaintained. Its passwords reach keytool through its environment
  (``-storepass:env``), never its command line, where any local user could read them.

As the JVM's keystore does since Java 9, a store declared JKS may be a PKCS12 file and
the other way round; a store of another kind than declared (a PEM file declared PKCS12,
a JKS file declared PEM) is refused naming what the file is.

Every failure is one :class:`StoreError` line: the file and the problem, with ``field``
saying whether the type or the password is the likely cause, so the caller can name its
key. It must not log, put a password or key in a message or repr, or leave a file behind.
"""

from __future__ import annotations

import functools
import os
import secrets
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes
from cryptography.hazmat.primitives.serialization import pkcs12

_JKS_MAGIC = b"\xfe\xed\xfe\xed"
_JCEKS_MAGIC = b"\xce\xce\xce\xce"
_KEYTOOL_TIMEOUT_S = 60.0
# keytool reads its passwords from these variables of its own environment.
_SOURCE_PASSWORD = "TOKENSVC_KEYSTORE_PASSWORD"
_TARGET_PASSWORD = "TOKENSVC_KEYSTORE_COPY_PASSWORD"
# keytool runs briefly: the client compiler and the serial collector start it fastest.
_KEYTOOL_JVM = ("-J-XX:TieredStopAtLevel=1", "-J-XX:+UseSerialGC", "-J-Duser.language=en")


class StoreError(ValueError):
    """A store that cannot be used. ``field`` is ``"type"`` or ``"password"`` when the
    declared type or the password is the likely cause, else None."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class ClientIdentity:
    """A key store's private key and its certificate chain (leaf first)."""

    chain: tuple[x509.Certificate, ...]
    key: PrivateKeyTypes = field(repr=False)

    def encrypted_pem(self, password: bytes) -> bytes:
        """The key, encrypted under ``password`` (PKCS#8), followed by the chain: what
        ``ssl.SSLContext.load_cert_chain`` reads with that password."""
        key = self.key.private_bytes(serialization.Encoding.PEM,
                                     serialization.PrivateFormat.PKCS8,
                                     serialization.BestAvailableEncryption(password))
        return key + b"".join(c.public_bytes(serialization.Encoding.PEM) for c in self.chain)


def read_key_store(location: str, store_type: str, password: str | None) -> ClientIdentity:
    """The private key and chain of the key store at ``location``; ``password`` is the
    store's and its key's (for PEM, the key's, None for a key in the clear)."""
    data = _read(location)
    if _kind(data, store_type, location) == "PEM":
        return _pem_identity(data, location, password)
    bundle = _pkcs12(data, location, password)
    if bundle.key is None or bundle.cert is None:
        raise StoreError(f"{location} holds no private key entry")
    chain = (bundle.cert.certificate, *(c.certificate for c in bundle.additional_certs))
    return _checked(ClientIdentity(chain, bundle.key), location)


def read_trust_store(location: str, store_type: str, password: str | None) -> tuple[x509.Certificate, ...]:
    """The certificates of the trust store at ``location`` (a PEM one has no password)."""
    data = _read(location)
    if _kind(data, store_type, location) == "PEM":
        certificates = _pem_certificates(data, location)
    else:
        bundle = _pkcs12(data, location, password)
        found = [bundle.cert] if bundle.cert is not None else []
        certificates = tuple(c.certificate for c in [*found, *bundle.additional_certs])
    if not certificates:
        raise StoreError(f"{location} holds no certificate")
    return certificates


def find_keytool() -> str:
    """The JDK's keytool: on PATH, else in ``JAVA_HOME``, else beside the ``java`` on PATH."""
    found = shutil.which("keytool")
    if found:
        return found
    candidates = []
    if os.environ.get("JAVA_HOME"):
        candidates.append(Path(os.environ["JAVA_HOME"]) / "bin" / "keytool")
    java = shutil.which("java")
    if java:
        candidates.append(Path(java).resolve().parent / "keytool")
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    raise StoreError("reading a JKS store needs the JDK's keytool (Java 17 or newer), found "
                     "neither on PATH nor in JAVA_HOME")


def _read(location: str) -> bytes:
    try:
        data = Path(location).read_bytes()
    except OSError as exc:
        raise StoreError(f"cannot read {location}: {exc.strerror or exc}") from None
    if not data.strip():
        raise StoreError(f"{location} is empty")
    return data


def _sniff(data: bytes) -> str | None:
    """What the bytes are: JKS, JCEKS, PKCS12 (a DER sequence), PEM, or None."""
    if data.startswith(_JKS_MAGIC):
        return "JKS"
    if data.startswith(_JCEKS_MAGIC):
        return "JCEKS"
    if b"-----BEGIN " in data:
        return "PEM"
    if data[:1] == b"\x30":
        return "PKCS12"
    return None


def _kind(data: bytes, store_type: str, location: str) -> str:
    """How to read a store declared ``store_type``: PEM, PKCS12 or JKS (a JKS and a
    PKCS12 store each stand for the other, as in the JVM)."""
    found = _sniff(data)
    if store_type == "PEM" and found == "PEM":
        return found
    if store_type != "PEM" and found in ("JKS", "PKCS12"):
        return found
    if found is None:
        raise StoreError(f"{location} is neither PEM, PKCS12 nor JKS", "type")
    what = "PEM text" if found == "PEM" else f"a {found} store"
    raise StoreError(f"{location} is {what}, not a {store_type} store", "type")


def _pkcs12(data: bytes, location: str, password: str | None) -> pkcs12.PKCS12KeyAndCertificates:
    secret = None if password is None else password.encode("utf-8")
    if data.startswith(_JKS_MAGIC):
        data, secret = _jks_as_pkcs12(location, password or "", _version(location))
    try:
        return pkcs12.load_pkcs12(data, secret)
    except ValueError:
        raise StoreError(f"{location}: wrong password, or a damaged store", "password") from None


def _version(location: str) -> tuple[int, int, int]:
    """What tells one version of a file from the next (a re-issued store is re-read)."""
    found = os.stat(location)
    return found.st_ino, found.st_size, found.st_mtime_ns


@functools.lru_cache(maxsize=16)
def _jks_as_pkcs12(location: str, password: str, version: tuple[int, int, int]) -> tuple[bytes, bytes]:
    """The JKS store at ``location`` as PKCS12 bytes, and the one-time password they are
    under (keytool's copy, in a private directory removed on return). Kept per file
    ``version`` and password: a broker's check at start and its clients share one run."""
    keytool = find_keytool()
    copy_password = secrets.token_urlsafe(24)
    environment = {**os.environ, _SOURCE_PASSWORD: password, _TARGET_PASSWORD: copy_password}
    with tempfile.TemporaryDirectory(prefix="tokensvc-keystore-") as directory:
        target = os.path.join(directory, "store.p12")
        command = [keytool, *_KEYTOOL_JVM, "-importkeystore", "-noprompt",
                   "-srckeystore", location, "-srcstoretype", "JKS",
                   "-srcstorepass:env", _SOURCE_PASSWORD,
                   "-destkeystore", target, "-deststoretype", "PKCS12",
                   "-deststorepass:env", _TARGET_PASSWORD]
        try:
            done = subprocess.run(command, env=environment, stdin=subprocess.DEVNULL,
                                  capture_output=True, text=True, timeout=_KEYTOOL_TIMEOUT_S,
                                  check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise StoreError(f"{location}: keytool could not run: {exc}") from None
        if done.returncode != 0 or not os.path.isfile(target):
            raise _keytool_refusal(location, done.stdout + done.stderr)
        return Path(target).read_bytes(), copy_password.encode("ascii")


def _keytool_refusal(location: str, output: str) -> StoreError:
    if "password was incorrect" in output or "password verification failed" in output:
        return StoreError(f"{location}: wrong password, or a damaged store", "password")
    if "Enter key password" in output:
        return StoreError(f"{location}: a key's password is not the store's (ZooKeeper and "
                          "tokensvc take one password for both)", "password")
    if "Invalid keystore format" in output or "Unrecognized keystore format" in output:
        return StoreError(f"{location} is not a JKS store", "type")
    lines = [line.removeprefix("keytool error: ") for line in output.splitlines()
             if line.startswith("keytool error")]
    return StoreError(f"{location}: keytool could not read it: "
                      f"{lines[0] if lines else 'exit without a message'}")


def _pem_certificates(data: bytes, location: str) -> tuple[x509.Certificate, ...]:
    if b"-----BEGIN CERTIFICATE-----" not in data:
        return ()
    try:
        return tuple(x509.load_pem_x509_certificates(data))
    except ValueError:
        raise StoreError(f"{location} holds a certificate that cannot be parsed") from None


def _pem_identity(data: bytes, location: str, password: str | None) -> ClientIdentity:
    if b"PRIVATE KEY-----" not in data:
        raise StoreError(f"{location} holds no private key (a PEM key store is the key "
                         "followed by its certificate chain)")
    chain = _pem_certificates(data, location)
    if not chain:
        raise StoreError(f"{location} holds a key but no certificate")
    try:
        key = serialization.load_pem_private_key(data, password.encode("utf-8") if password else None)
    except TypeError:
        if password:
            raise StoreError(f"{location}: its key is not encrypted, yet a password is set",
                             "password") from None
        raise StoreError(f"{location}: its key is encrypted and no password is set",
                         "password") from None
    except ValueError:
        raise StoreError(f"{location}: wrong password for its key, or a damaged key",
                         "password") from None
    except Exception:  # noqa: BLE001 - an unsupported key algorithm, in one line
        raise StoreError(f"{location}: its private key cannot be read") from None
    return _checked(ClientIdentity(chain, key), location)


def _checked(identity: ClientIdentity, location: str) -> ClientIdentity:
    """The key belongs to the first certificate of the chain."""
    spki = serialization.PublicFormat.SubjectPublicKeyInfo
    mine = identity.key.public_key().public_bytes(serialization.Encoding.DER, spki)
    leaf = identity.chain[0].public_key().public_bytes(serialization.Encoding.DER, spki)
    if mine != leaf:
        raise StoreError(f"{location}: its private key does not match its first certificate")
    return identity
