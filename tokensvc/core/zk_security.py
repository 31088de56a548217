"""How a broker or a tool proves who it is to ZooKeeper, and whether its znodes get ACLs.

Owns the declared ``zookeeper.*`` security keys (Kafka's names: ``zookeeper.set.acl``,
KIP-515's ``zookeeper.ssl.*``; and, where Kafka uses JVM system properties, keys of the
same names: ``zookeeper.sasl.client``, ``zookeeper.sasl.clientconfig``, plus
``zookeeper.sasl.jaas.file`` for the file Kafka takes from
``-Djava.security.auth.login.config``), and :class:`ZkSecurity`, the checked result:
the client certificate and trust store (PEM), the SASL DIGEST-MD5 login read from the
JAAS file's client section, and the ACL decision.

The broker's table (:data:`tokensvc.core.config.BROKER_CONFIG`) includes these keys;
tools read the same keys from a properties file (``--zk-tls-config-file``) through
:data:`ZK_CLIENT_CONFIG`, so a broker's ``server.properties`` works as a tool's file.

The one rule across keys: ``zookeeper.set.acl=true`` needs an identity the ZooKeeper
"auth" ACL scheme can name (SASL, a client certificate, or the legacy digest); unset, it
is on exactly when the broker has SASL or a client certificate (secure when it can be:
Kafka's default is off).

It must not do I/O: the edge reads the JAAS file and hands its text in. It never puts a
password in a repr or an error message.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from tokensvc.core.configdef import (
    ConfigDef,
    ConfigError,
    ConfigKey,
    Importance,
    Matches,
    OneOf,
    PathKind,
    Type,
)

SET_ACL = "zookeeper.set.acl"
SSL_ENABLE = "zookeeper.ssl.client.enable"
KEYSTORE = "zookeeper.ssl.keystore.location"
KEYSTORE_PASSWORD = "zookeeper.ssl.keystore.password"
TRUSTSTORE = "zookeeper.ssl.truststore.location"
ENDPOINT_ID = "zookeeper.ssl.endpoint.identification.algorithm"
SASL_CLIENT = "zookeeper.sasl.client"
SASL_SECTION = "zookeeper.sasl.clientconfig"
JAAS_FILE = "zookeeper.sasl.jaas.file"
DIGEST = "zookeeper.digest"
NETTY_SOCKET = "org.apache.zookeeper.ClientCnxnSocketNetty"
DIGEST_LOGIN_MODULE = "org.apache.zookeeper.server.auth.DigestLoginModule"

_H, _M, _L = Importance.HIGH, Importance.MEDIUM, Importance.LOW
ZK_SECURITY_KEYS = [
    ConfigKey(DIGEST, Type.PASSWORD, None,
              Matches(r"[^:]+:.*", "user:password", secret=True), _M,
              "Digest credentials (`user:password`) added to the ZooKeeper session. Legacy: "
              "prefer SASL or a client certificate. With `zookeeper.set.acl=true` every "
              "broker must use the same identity."),
    ConfigKey(SET_ACL, Type.BOOLEAN, None, None, _H,
              "Create every znode with the ACL of the declared table (zk/znode_acls.py, "
              "[zookeeper.md](zookeeper.md#znode-acls)): writable only by the brokers' "
              "ZooKeeper identity, readable by anyone except the sensitive paths. `true` "
              f"without an identity (`{SSL_ENABLE}` with `{KEYSTORE}`, or `{JAAS_FILE}`) "
              "is a start-up error.",
              default_doc="`true` when the broker has SASL or a client certificate"),
    ConfigKey(SSL_ENABLE, Type.BOOLEAN, False, None, _H,
              "Connect to ZooKeeper over TLS (KIP-515)."),
    ConfigKey("zookeeper.clientCnxnSocket", Type.STRING, None, OneOf((NETTY_SOCKET,)), _L,
              "Accepted for Kafka configurations; tokensvc's client needs no socket class.",
              default_doc="unset"),
    ConfigKey(KEYSTORE, Type.STRING, None, None, _H,
              "PEM file with the client's private key and certificate chain: the broker's "
              "mTLS identity to ZooKeeper. Every broker must present the same subject (the "
              "x509 identity the ACLs name).", path=PathKind.FILE),
    ConfigKey(KEYSTORE_PASSWORD, Type.PASSWORD, None, None, _M,
              "Password of an encrypted private key in the key store."),
    ConfigKey("zookeeper.ssl.keystore.type", Type.STRING, "PEM", OneOf(("PEM",)), _M,
              "Only PEM is supported."),
    ConfigKey(TRUSTSTORE, Type.STRING, None, None, _H,
              "PEM bundle of the CAs that sign ZooKeeper's server certificates.",
              path=PathKind.FILE),
    ConfigKey("zookeeper.ssl.truststore.password", Type.PASSWORD, None, None, _L,
              "Accepted for Kafka configurations; a PEM trust store has no password."),
    ConfigKey("zookeeper.ssl.truststore.type", Type.STRING, "PEM", OneOf(("PEM",)), _M,
              "Only PEM is supported."),
    ConfigKey(ENDPOINT_ID, Type.STRING, "HTTPS", OneOf(("HTTPS", "https", "")), _M,
              "`HTTPS`: the server certificate must name the host connected to; empty: any "
              "certificate the trust store signs."),
    ConfigKey(SASL_CLIENT, Type.BOOLEAN, True, None, _L,
              f"Log in with SASL when `{JAAS_FILE}` is set (ZooKeeper's system property of "
              "the same name)."),
    ConfigKey(SASL_SECTION, Type.STRING, "Client", Matches(r"[A-Za-z0-9_.-]+", "a JAAS section name"),
              _L, "Section of the JAAS file that holds the ZooKeeper login."),
    ConfigKey(JAAS_FILE, Type.STRING, None, None, _H,
              "JAAS file with the ZooKeeper client login, as Kafka takes it from "
              "`-Djava.security.auth.login.config`: a section (`zookeeper.sasl.clientconfig`) "
              f"with `{DIGEST_LOGIN_MODULE} required username=\"...\" password=\"...\";` "
              "(SASL DIGEST-MD5). Keep it mode 0600.", path=PathKind.FILE),
]
ZK_KEY_NAMES = frozenset(key.name for key in ZK_SECURITY_KEYS)

_CONNECTION_KEYS = [
    ConfigKey("zookeeper.connect", Type.STRING, None, None, _H,
              "ZooKeeper ensemble; a tool's own option wins over it."),
    ConfigKey("zookeeper.session.timeout.ms", Type.INT, None, None, _L, "Session timeout."),
    ConfigKey("zookeeper.connection.timeout.ms", Type.INT, None, None, _L, "Connect timeout."),
]
ZK_CLIENT_CONFIG = ConfigDef([*_CONNECTION_KEYS, *ZK_SECURITY_KEYS])
"""What a tool reads from its ``--zk-tls-config-file``: the ZooKeeper keys of a broker's
``server.properties``; any other key of that file is ignored."""


@dataclass(frozen=True)
class ZkTlsFiles:
    """The client side of mutual TLS with ZooKeeper (paths of PEM files)."""

    keystore: str | None
    truststore: str | None
    key_password: str | None = field(default=None, repr=False)
    check_hostname: bool = True


@dataclass(frozen=True)
class ZkSaslLogin:
    """A SASL DIGEST-MD5 login to ZooKeeper."""

    username: str
    password: str = field(repr=False)
    mechanism: str = "DIGEST-MD5"


@dataclass(frozen=True)
class ZkSecurity:
    """How to authenticate to ZooKeeper and whether to set ACLs on created znodes."""

    set_acl: bool = False
    tls: ZkTlsFiles | None = None
    sasl: ZkSaslLogin | None = None
    digest: str | None = field(default=None, repr=False)

    @property
    def has_identity(self) -> bool:
        """Whether ZooKeeper's ``auth`` ACL scheme has an identity of ours to name."""
        return (
            self.sasl is not None
            or (self.tls is not None and self.tls.keystore is not None)
            or self.digest is not None
        )

    def describe(self) -> str:
        """One line for the log: what is used, never a secret."""
        parts = []
        if self.tls is not None:
            parts.append("TLS with a client certificate" if self.tls.keystore else "TLS")
        if self.sasl is not None:
            parts.append(f"SASL {self.sasl.mechanism} as {self.sasl.username!r}")
        if self.digest is not None:
            parts.append("digest")
        parts.append("ACLs on created znodes" if self.set_acl else "NO ACLs on created znodes")
        return ", ".join(parts) if len(parts) > 1 else parts[0]


def zk_security_from_values(values: Mapping[str, object], jaas_text: str | None) -> ZkSecurity:
    """The checked security of parsed ``values`` (a table's typed values; the keys of
    :data:`ZK_SECURITY_KEYS`). ``jaas_text`` is the content of ``zookeeper.sasl.jaas.file``
    as the edge read it (None when the key is unset)."""
    tls = None
    if values[SSL_ENABLE]:
        if values[TRUSTSTORE] is None:
            raise ConfigError(TRUSTSTORE, f"is required by {SSL_ENABLE}=true")
        tls = ZkTlsFiles(
            keystore=values[KEYSTORE],
            truststore=values[TRUSTSTORE],
            key_password=values[KEYSTORE_PASSWORD],
            check_hostname=str(values[ENDPOINT_ID]).upper() == "HTTPS",
        )
    elif values[KEYSTORE] is not None:
        raise ConfigError(KEYSTORE, f"is set but {SSL_ENABLE} is false")
    sasl = None
    if values[JAAS_FILE] is not None and values[SASL_CLIENT]:
        sasl = parse_jaas_client_login(jaas_text or "", str(values[SASL_SECTION]))
    security = ZkSecurity(tls=tls, sasl=sasl, digest=values[DIGEST])
    set_acl = values[SET_ACL]
    if set_acl is None:
        set_acl = security.sasl is not None or (tls is not None and tls.keystore is not None)
    elif set_acl and not security.has_identity:
        raise ConfigError(
            SET_ACL,
            f"is true but the broker has no ZooKeeper identity: set {JAAS_FILE} (SASL) or "
            f"{SSL_ENABLE}=true with {KEYSTORE} (mTLS)",
        )
    return ZkSecurity(set_acl=bool(set_acl), tls=tls, sasl=sasl, digest=values[DIGEST])


_SECTION = re.compile(r"(?ms)^\s*([A-Za-z0-9_.-]+)\s*\{(.*?)\}\s*;")
_OPTION = re.compile(r'([A-Za-z0-9_.-]+)\s*=\s*"((?:[^"\\]|\\.)*)"')


def parse_jaas_client_login(text: str, section: str) -> ZkSaslLogin:
    """The DIGEST-MD5 login of JAAS section ``section``. Errors name the key and the
    section, never a value."""
    sections = {m.group(1): m.group(2) for m in _SECTION.finditer(text)}
    if section not in sections:
        found = ", ".join(sorted(sections)) or "none"
        raise ConfigError(JAAS_FILE, f"has no section {section!r} (sections: {found})")
    body = sections[section].strip()
    module, _, rest = body.partition(" ")
    if module != DIGEST_LOGIN_MODULE:
        raise ConfigError(
            JAAS_FILE, f"section {section!r} must use {DIGEST_LOGIN_MODULE} (SASL DIGEST-MD5)"
        )
    options = {k: re.sub(r"\\(.)", r"\1", v) for k, v in _OPTION.findall(rest)}
    missing = [name for name in ("username", "password") if not options.get(name)]
    if missing:
        raise ConfigError(JAAS_FILE, f"section {section!r} has no {' or '.join(missing)}")
    return ZkSaslLogin(username=options["username"], password=options["password"])


def jaas_client_section(username: str, password: str, section: str = "Client") -> str:
    """The text of a JAAS file with one DIGEST-MD5 client login (for generated files)."""

    def quoted(value: str) -> str:
        return value.replace("\\", "\\\\").replace('"', '\\"')

    return (
        f"{section} {{\n  {DIGEST_LOGIN_MODULE} required\n"
        f'  username="{quoted(username)}"\n  password="{quoted(password)}";\n}};\n'
    )
