"""How a broker or a tool proves who it is to ZooKeeper, and whether its znodes get ACLs.

Owns the declared ``zookeeper.*`` security keys (Kafka's names: ``zookeeper.set.acl``,
KIP-515's ``zookeeper.ssl.*``; and, where Kafka uses JVM system properties, keys of the
same names: ``zookeeper.sasl.client``, ``zookeeper.sasl.clientconfig``, plus
``zookeeper.sasl.jaas.file`` for the file Kafka takes from
``-Djava.security.auth.login.config``), and :class:`ZkSecurity`, the checked result:
the client's key store and trust store (their files, types -- JKS, PKCS12 or PEM, as
ZooKeeper's client reads them -- and passwords) and TLS versions, the SASL DIGEST-MD5
login read from the JAAS file's client section, and the ACL decision.

Every ``zookeeper.ssl.*`` key Kafka 3.9 declares is declared here with Kafka's meaning, so
one file serves a Kafka broker and tokensvc alike. A store's type, when unset, follows
the file name as ZooKeeper's ``KeyStoreFileType`` does (``.jks``, ``.p12``, ``.pem``;
any other name is PEM, tokensvc's type before it read the others, where Kafka would stop).
What tokensvc does not do -- BCFKS stores, ``zookeeper.ssl.cipher.suites``, revocation
checks -- is refused at start, never ignored. The stores themselves are read at the edge
(:mod:`zk.tls`).

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

import posixpath
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
    Validator,
)

SET_ACL = "zookeeper.set.acl"
SSL_ENABLE = "zookeeper.ssl.client.enable"
KEYSTORE = "zookeeper.ssl.keystore.location"
KEYSTORE_PASSWORD = "zookeeper.ssl.keystore.password"
KEYSTORE_TYPE = "zookeeper.ssl.keystore.type"
TRUSTSTORE = "zookeeper.ssl.truststore.location"
TRUSTSTORE_PASSWORD = "zookeeper.ssl.truststore.password"
TRUSTSTORE_TYPE = "zookeeper.ssl.truststore.type"
PROTOCOL = "zookeeper.ssl.protocol"
ENABLED_PROTOCOLS = "zookeeper.ssl.enabled.protocols"
CIPHER_SUITES = "zookeeper.ssl.cipher.suites"
CRL = "zookeeper.ssl.crl.enable"
OCSP = "zookeeper.ssl.ocsp.enable"
ENDPOINT_ID = "zookeeper.ssl.endpoint.identification.algorithm"
SASL_CLIENT = "zookeeper.sasl.client"
SASL_SECTION = "zookeeper.sasl.clientconfig"
JAAS_FILE = "zookeeper.sasl.jaas.file"
DIGEST = "zookeeper.digest"
NETTY_SOCKET = "org.apache.zookeeper.ClientCnxnSocketNetty"
DIGEST_LOGIN_MODULE = "org.apache.zookeeper.server.auth.DigestLoginModule"

STORE_TYPES = ("JKS", "PKCS12", "PEM")
# ZooKeeper's KeyStoreFileType: the type a file name implies when no type is set
# (case-sensitive, as there). BCFKS is recognised so that it is refused by name.
_TYPE_BY_EXTENSION = {".jks": "JKS", ".p12": "PKCS12", ".pem": "PEM", ".bcfks": "BCFKS"}
TLS_VERSIONS = ("TLSv1.2", "TLSv1.3")


class _Unsupported(Validator):
    """A Kafka key tokensvc accepts only at its default (false, or unset): any other
    value is refused with ``reason`` rather than silently ignored."""

    def __init__(self, reason: str, allowed: str) -> None:
        self.reason = reason
        self.allowed = allowed

    def __call__(self, key: str, value: object) -> None:
        if value:
            raise ConfigError(key, f"is not supported by tokensvc: {self.reason}")

    def describe(self) -> str:
        return self.allowed

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
              "The client's key store: its private key and certificate chain, the broker's "
              "mTLS identity to ZooKeeper. Every broker must present the same subject (the "
              f"x509 identity the ACLs name). Its type is `{KEYSTORE_TYPE}`.",
              path=PathKind.FILE),
    ConfigKey(KEYSTORE_PASSWORD, Type.PASSWORD, None, None, _M,
              "Password of a JKS or PKCS12 key store (required), which is also its key's "
              "password (ZooKeeper takes one password for both); for PEM, the password of "
              "an encrypted private key (optional)."),
    ConfigKey(KEYSTORE_TYPE, Type.STRING, None, OneOf(STORE_TYPES, ignore_case=True), _M,
              "`JKS`, `PKCS12` or `PEM` (any case). PEM: the private key (PKCS#8 for Kafka's "
              "reader; tokensvc also takes the traditional form) followed by the chain. "
              "BCFKS is not supported.",
              default_doc="from the file name as ZooKeeper's: `.jks`, `.p12`, `.pem`; "
                          "other names PEM (Kafka: an error)"),
    ConfigKey(TRUSTSTORE, Type.STRING, None, None, _H,
              "The CAs that sign ZooKeeper's server certificates; only they are trusted. Its "
              f"type is `{TRUSTSTORE_TYPE}`.", path=PathKind.FILE),
    ConfigKey(TRUSTSTORE_PASSWORD, Type.PASSWORD, None, None, _M,
              "Password of a JKS or PKCS12 trust store (required); a PEM trust store has "
              "none and ignores it."),
    ConfigKey(TRUSTSTORE_TYPE, Type.STRING, None, OneOf(STORE_TYPES, ignore_case=True), _M,
              "`JKS`, `PKCS12` or `PEM` (any case): PEM is a bundle of CA certificates.",
              default_doc="from the file name, as the key store's"),
    ConfigKey(PROTOCOL, Type.STRING, None, OneOf(TLS_VERSIONS), _L,
              f"The TLS version to use when `{ENABLED_PROTOCOLS}` is unset (then the only one "
              "enabled, as in ZooKeeper's client).",
              default_doc="unset: TLSv1.2 or TLSv1.3, the highest both sides speak "
                          "(Kafka: TLSv1.2 only)"),
    ConfigKey(ENABLED_PROTOCOLS, Type.LIST, (), OneOf(TLS_VERSIONS), _L,
              f"The TLS versions enabled (comma-separated); it wins over `{PROTOCOL}`.",
              default_doc="unset"),
    ConfigKey(CIPHER_SUITES, Type.LIST, (),
              _Unsupported("Python's TLS cannot take the JVM's cipher suite names; remove it "
                           "(the defaults are the TLS library's secure suites)", "unset"), _L,
              "Not supported: any value is refused at start.", default_doc="unset"),
    ConfigKey(ENDPOINT_ID, Type.STRING, "HTTPS", OneOf(("HTTPS", ""), ignore_case=True), _M,
              "`HTTPS` (any case): the server certificate must name the host connected to; "
              "explicitly empty: any certificate the trust store signs (tests only).",
              blank_is_value=True),
    ConfigKey(CRL, Type.BOOLEAN, False,
              _Unsupported("certificate revocation lists are not checked; remove it or set "
                           "false", "`false`"), _L,
              "Only `false`: tokensvc does not check revocation lists."),
    ConfigKey(OCSP, Type.BOOLEAN, False,
              _Unsupported("OCSP is not checked; remove it or set false", "`false`"), _L,
              "Only `false`: tokensvc does not check OCSP."),
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
    """The client side of TLS with ZooKeeper: the key store (None: no client certificate)
    and trust store files with their resolved types (``STORE_TYPES``) and passwords, and
    the enabled TLS versions (empty: TLSv1.2 and TLSv1.3)."""

    keystore: str | None
    truststore: str | None
    keystore_password: str | None = field(default=None, repr=False)
    check_hostname: bool = True
    keystore_type: str = "PEM"
    truststore_type: str = "PEM"
    truststore_password: str | None = field(default=None, repr=False)
    protocols: tuple[str, ...] = ()


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
            stores = (f"{self.tls.keystore_type} key store, " if self.tls.keystore else "") + (
                f"{self.tls.truststore_type} trust store")
            parts.append(("TLS with a client certificate" if self.tls.keystore else "TLS")
                         + f" ({stores})")
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
        keystore = values[KEYSTORE]
        keystore_type = "PEM"
        if keystore is not None:
            keystore_type = store_type(values[KEYSTORE_TYPE], keystore, KEYSTORE, KEYSTORE_TYPE)
            _password_for(keystore_type, values[KEYSTORE_PASSWORD], KEYSTORE_PASSWORD, "key")
        truststore = str(values[TRUSTSTORE])
        truststore_type = store_type(values[TRUSTSTORE_TYPE], truststore, TRUSTSTORE,
                                     TRUSTSTORE_TYPE)
        _password_for(truststore_type, values[TRUSTSTORE_PASSWORD], TRUSTSTORE_PASSWORD, "trust")
        enabled = values[ENABLED_PROTOCOLS] or ((values[PROTOCOL],) if values[PROTOCOL] else ())
        tls = ZkTlsFiles(
            keystore=keystore,
            truststore=truststore,
            keystore_password=values[KEYSTORE_PASSWORD],
            check_hostname=str(values[ENDPOINT_ID]).upper() == "HTTPS",
            keystore_type=keystore_type,
            truststore_type=truststore_type,
            truststore_password=values[TRUSTSTORE_PASSWORD],
            protocols=tuple(sorted(set(enabled))),
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


def store_type(declared: object, location: str, location_key: str, type_key: str) -> str:
    """A store's type: ``declared`` (any case) or, unset, the one its file name implies
    as in ZooKeeper's ``KeyStoreFileType.fromFilename``; PEM for any other name."""
    if declared:
        return str(declared).upper()
    found = _TYPE_BY_EXTENSION.get(posixpath.splitext(location)[1], "PEM")
    if found not in STORE_TYPES:
        raise ConfigError(location_key, f"{location} is a {found} store by its name; tokensvc "
                                        f"reads {', '.join(STORE_TYPES)} (set {type_key})")
    return found


def _password_for(kind: str, password: object, key: str, store: str) -> None:
    """A JKS or PKCS12 store needs its password (ZooKeeper would open it with an empty
    one, and fail); PEM does not."""
    if kind != "PEM" and not password:
        raise ConfigError(key, f"is required for a {kind} {store} store")


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
