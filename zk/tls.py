"""TLS for tokensvc's ZooKeeper clients: the stores, the context, the connections.

Owns, for the ``zookeeper.ssl.*`` settings (:class:`tokensvc.core.zk_security.ZkTlsFiles`):

- reading the key store and trust store as ZooKeeper's client reads them (JKS, PKCS12,
  PEM: :mod:`tokensvc.keystores`), each failure one :class:`ConfigError` naming the key
  and the file (the type key when the file is of another type, the password key when
  the password is the likely cause); :func:`check_stores` is the broker's and the
  tools' check at start;
- :func:`client_context`, the ``ssl.SSLContext`` of a client: only the trust store's CAs
  are trusted (not the system's), the host name checked unless turned off, the TLS
  versions of ``zookeeper.ssl.protocol`` / ``zookeeper.ssl.enabled.protocols``;
- :class:`TlsPollHandler`, the kazoo handler that opens each connection of a client
  with that context (kazoo's own TLS path would build a context from PEM files at every
  connect, and trusts the system's CAs besides).

A JKS store costs a keytool run once per process (:mod:`tokensvc.keystores` keeps the
conversion): the check at start and the clients opened after it share it.

It must not log or raise with a password or key, nor leave key material on disk: the
context loads the client key from a file that holds it encrypted under a one-time
password held only in memory, in a private directory (0700, file 0600) removed at once.
"""

from __future__ import annotations

import os
import secrets
import ssl
import tempfile
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import serialization

from tokensvc.core.configdef import ConfigError
from tokensvc.core.zk_security import (
    KEYSTORE,
    KEYSTORE_PASSWORD,
    KEYSTORE_TYPE,
    TRUSTSTORE,
    TRUSTSTORE_PASSWORD,
    TRUSTSTORE_TYPE,
    ZkTlsFiles,
)
from tokensvc.keystores import ClientIdentity, StoreError, read_key_store, read_trust_store
from zk.poll_handler import PollHandler

_VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}


def check_stores(tls: ZkTlsFiles) -> None:
    """Read both stores now, so that a wrong password, type or file stops the start in
    one line naming the key and the file."""
    _stores(tls)


def client_context(tls: ZkTlsFiles) -> ssl.SSLContext:
    """The TLS context of a ZooKeeper client with these settings."""
    trusted, identity = _stores(tls)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = tls.check_hostname
    enabled = [_VERSIONS[name] for name in tls.protocols] or list(_VERSIONS.values())
    context.minimum_version = min(enabled)
    context.maximum_version = max(enabled)
    context.load_verify_locations(cadata="".join(
        c.public_bytes(serialization.Encoding.PEM).decode("ascii") for c in trusted))
    if identity is not None:
        _load_identity(context, identity)
    return context


class TlsPollHandler(PollHandler):
    """:class:`PollHandler` whose TLS connections use one prepared context: kazoo asks
    its handler for every connection (the session's and its four-letter words), and this
    one opens a TCP connection as kazoo does and wraps it, handshake included, within
    the same timeout. The TLS options kazoo passes are ignored: the context has them."""

    def __init__(self, context: ssl.SSLContext) -> None:
        super().__init__()
        self.context = context

    def create_connection(self, address: Any, hostname: str | None = None,
                          timeout: float | None = None, use_ssl: bool = False,
                          **_tls_files: Any) -> Any:
        sock = super().create_connection(address, timeout=timeout)
        if not use_ssl:
            return sock
        try:
            return self.context.wrap_socket(sock, server_hostname=hostname)
        except BaseException:
            sock.close()
            raise


def _stores(tls: ZkTlsFiles) -> tuple[tuple[x509.Certificate, ...], ClientIdentity | None]:
    assert tls.truststore is not None
    try:
        trusted = read_trust_store(tls.truststore, tls.truststore_type, tls.truststore_password)
    except StoreError as exc:
        raise _config_error(exc, TRUSTSTORE, TRUSTSTORE_TYPE, TRUSTSTORE_PASSWORD) from None
    identity = None
    if tls.keystore is not None:
        try:
            identity = read_key_store(tls.keystore, tls.keystore_type, tls.keystore_password)
        except StoreError as exc:
            raise _config_error(exc, KEYSTORE, KEYSTORE_TYPE, KEYSTORE_PASSWORD) from None
    return trusted, identity


def _config_error(exc: StoreError, location_key: str, type_key: str, password_key: str) -> ConfigError:
    hint = {"type": f" (check {type_key})", "password": f" (check {password_key})"}
    return ConfigError(location_key, f"{exc}{hint.get(exc.field or '', '')}")


def _load_identity(context: ssl.SSLContext, identity: ClientIdentity) -> None:
    """``load_cert_chain`` reads only files: give it the key encrypted under a one-time
    password, in a private file removed before returning."""
    password = secrets.token_urlsafe(32).encode("ascii")
    with tempfile.TemporaryDirectory(prefix="tokensvc-zk-tls-") as directory:
        path = os.path.join(directory, "client.pem")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(identity.encrypted_pem(password))
        context.load_cert_chain(path, password=password)
