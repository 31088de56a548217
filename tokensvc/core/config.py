"""Broker configuration: a Kafka-style ``server.properties``, parsed and checked.

This module owns the list of broker keys, their types, defaults and the rules
between them (listener names and protocols, SSL material for SSL listeners,
token lifetimes, where the master key comes from). Every problem is a
:class:`ConfigError` naming the key and what is wrong, raised at start, never
later. The reference table is docs/broker.md.

It reads only what configuration points at (the properties file, the master
key file) and the environment mapping it is given. It never puts a secret (a
master key, a password, the ZooKeeper digest) in a repr or an error message.
"""

from __future__ import annotations

import difflib
import os
import re
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from tokensvc.core.keys import MasterKeys
from tokensvc.core.principal import KafkaPrincipal
from tokensvc.scram.formatter import ScramMechanism

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = tuple(m.mechanism_name for m in ScramMechanism)
AUTHORIZERS = ("kafka.security.authorizer.AclAuthorizer", "tokensvc.authz.AclAuthorizer")
SSL_CLIENT_AUTH = ("none", "requested", "required")
INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1

SECRET_KEY = "delegation.token.secret.key"
MASTER_KEY_ALIAS = "delegation.token.master.key"
SECRET_KEY_FILE = "delegation.token.secret.key.file"
SECRET_KEY_ENV = "delegation.token.secret.key.env"
SECRET_KEY_PREVIOUS = "delegation.token.secret.key.previous"

KNOWN_KEYS = frozenset(
    {
        "broker.id",
        "listeners",
        "listener.security.protocol.map",
        "advertised.listeners",
        "inter.broker.listener.name",
        "inter.broker.sasl.mechanism",
        "inter.broker.sasl.username",
        "inter.broker.sasl.password",
        "zookeeper.connect",
        "zookeeper.session.timeout.ms",
        "zookeeper.connection.timeout.ms",
        "zookeeper.digest",
        "sasl.enabled.mechanisms",
        "sasl.server.max.receive.size",
        "super.users",
        "allow.everyone.if.no.acl.found",
        "authorizer.class.name",
        "early.start.listeners",
        "ssl.keystore.type",
        "ssl.keystore.location",
        "ssl.key.password",
        "ssl.truststore.type",
        "ssl.truststore.location",
        "ssl.client.auth",
        SECRET_KEY,
        MASTER_KEY_ALIAS,
        SECRET_KEY_PREVIOUS,
        SECRET_KEY_FILE,
        SECRET_KEY_ENV,
        "delegation.token.max.lifetime.ms",
        "delegation.token.expiry.time.ms",
        "delegation.token.expiry.check.interval.ms",
        "delegation.token.implicit.login.enable",
        "delegation.token.session.alter.access.enable",
        "sasl.scram.accept.repeated.client.nonce",
        "audit.log.dir",
        "audit.queue.size",
        "audit.file.max.bytes",
        "audit.file.rotate.ms",
        "socket.request.max.bytes",
        "connections.max.idle.ms",
        "connection.failed.authentication.delay.ms",
        "connections.max.reauth.ms",
        "max.connections.per.ip",
        "request.timeout.ms",
        "metrics.listener",
        "cluster.id",
    }
)


class ConfigError(ValueError):
    """A configuration problem; ``key`` is the offending key (None for the file itself)."""

    def __init__(self, key: str | None, problem: str) -> None:
        self.key = key
        self.problem = problem
        super().__init__(f"{key}: {problem}" if key else problem)


@dataclass(frozen=True, slots=True)
class Listener:
    """One ``NAME://host:port`` endpoint; ``host`` "" means every interface."""

    name: str
    security_protocol: str
    host: str
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.name}://{host}:{self.port}"


@dataclass(frozen=True)
class BrokerConfig:
    """A checked broker configuration (attribute = key in snake_case)."""

    broker_id: int
    listeners: list[Listener]
    zookeeper_connect: str
    master_keys: MasterKeys
    listener_security_protocol_map: dict[str, str] = field(default_factory=dict)
    advertised_listeners: list[Listener] | None = None
    inter_broker_listener_name: str | None = None
    inter_broker_sasl_mechanism: str = "SCRAM-SHA-512"
    inter_broker_sasl_username: str | None = None
    inter_broker_sasl_password: str | None = field(default=None, repr=False)
    zookeeper_session_timeout_ms: int = 18000
    zookeeper_connection_timeout_ms: int = 18000
    zookeeper_digest: str | None = field(default=None, repr=False)
    sasl_enabled_mechanisms: tuple[str, ...] = SASL_MECHANISMS
    sasl_server_max_receive_size: int = 524288
    super_users: frozenset[KafkaPrincipal] = frozenset()
    allow_everyone_if_no_acl_found: bool = False
    authorizer_class_name: str = ""
    early_start_listeners: tuple[str, ...] = ()
    ssl_keystore_type: str = "PEM"
    ssl_keystore_location: str | None = None
    ssl_key_password: str | None = field(default=None, repr=False)
    ssl_truststore_type: str = "PEM"
    ssl_truststore_location: str | None = None
    ssl_client_auth: str = "none"
    delegation_token_max_lifetime_ms: int = 604_800_000
    delegation_token_expiry_time_ms: int = 86_400_000
    delegation_token_expiry_check_interval_ms: int = 3_600_000
    delegation_token_implicit_login_enable: bool = True
    delegation_token_session_alter_access_enable: bool = False
    sasl_scram_accept_repeated_client_nonce: bool = False
    audit_log_dir: str | None = None
    audit_queue_size: int = 10_000
    audit_file_max_bytes: int = 67_108_864
    audit_file_rotate_ms: int = 3_600_000
    socket_request_max_bytes: int = 104_857_600
    connections_max_idle_ms: int = 600_000
    connection_failed_authentication_delay_ms: int = 100
    connections_max_reauth_ms: int = 0
    max_connections_per_ip: int = INT32_MAX
    request_timeout_ms: int = 30_000
    metrics_listener: tuple[str, int] | None = None
    cluster_id: str | None = None

    @property
    def inter_broker_listener(self) -> Listener | None:
        """The listener named by ``inter.broker.listener.name``."""
        return next((lst for lst in self.listeners if lst.name == self.inter_broker_listener_name), None)

    @property
    def sasl_max_message_bytes(self) -> int:
        """``sasl.server.max.receive.size``, under the name the SASL handler uses."""
        return self.sasl_server_max_receive_size

    @classmethod
    def load(cls, path: str | os.PathLike[str], env: Mapping[str, str] | None = None) -> BrokerConfig:
        """Read and check a ``server.properties`` file."""
        return cls.from_properties(load_properties(path), env)

    @classmethod
    def from_properties(
        cls, props: Mapping[str, str], env: Mapping[str, str] | None = None
    ) -> BrokerConfig:
        """Check ``props`` (key -> raw string); ``env`` (default os.environ) serves
        ``delegation.token.secret.key.env``."""
        return _build(_Props(props), os.environ if env is None else env)


# -- the properties file ----------------------------------------------------------

_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def load_properties(path: str | os.PathLike[str]) -> dict[str, str]:
    """Read a Java properties file (UTF-8): ``#``/``!`` comments, ``key=value``,
    ``key: value`` or ``key value``, keys and values trimmed, a trailing backslash
    continues the line, ``\\t \\n \\r \\f \\uXXXX`` escapes. A later key wins."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(None, f"cannot read {os.fspath(path)}: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(None, f"{os.fspath(path)} is not UTF-8") from exc
    return parse_properties(text)


def parse_properties(text: str) -> dict[str, str]:
    """Parse the text of a properties file (see :func:`load_properties`)."""
    props: dict[str, str] = {}
    for line in _logical_lines(text):
        key, value = _split_entry(line)
        props[_unescape(key).strip()] = _unescape(value).strip()
    return props


def _logical_lines(text: str):
    pending: str | None = None
    for raw in text.splitlines():
        line = raw.lstrip()
        if pending is None and (not line or line[0] in "#!"):
            continue
        if pending is not None:
            line = pending + line
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2 == 1:
            pending = line[:-1]
            continue
        pending = None
        yield line
    if pending is not None:
        yield pending


def _split_entry(line: str) -> tuple[str, str]:
    i = 0
    while i < len(line):
        ch = line[i]
        if ch == "\\":
            i += 2
            continue
        if ch in "=: \t\f":
            break
        i += 1
    key = line[:i]
    rest = line[i:].lstrip(" \t\f")
    if rest[:1] in ("=", ":"):
        rest = rest[1:]
    return key, rest


def _unescape(text: str) -> str:
    if "\\" not in text:
        return text
    out = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch != "\\" or i + 1 == len(text):
            out.append(ch)
            i += 1
            continue
        nxt = text[i + 1]
        if nxt == "u" and re.fullmatch(r"[0-9a-fA-F]{4}", text[i + 2 : i + 6]):
            out.append(chr(int(text[i + 2 : i + 6], 16)))
            i += 6
            continue
        out.append(_ESCAPES.get(nxt, nxt))
        i += 2
    return "".join(out)


# -- typed access ---------------------------------------------------------------------

_INT = re.compile(r"[+-]?\d+")
_LISTENER = re.compile(r"(?P<name>[A-Za-z0-9_.-]+)://(?P<host>\[[^\]]*\]|[^:/\[\]]*):(?P<port>\d+)")
_HOST_PORT = re.compile(r"(?P<host>\[[^\]]*\]|[^:/\[\]]+):(?P<port>\d+)")


class _Props:
    """Raw properties with typed, checked getters. Empty values count as unset."""

    def __init__(self, props: Mapping[str, str]) -> None:
        self.raw = {str(k).strip(): str(v).strip() for k, v in props.items()}
        unknown = sorted(set(self.raw) - KNOWN_KEYS)
        if unknown:
            key = unknown[0]
            hint = difflib.get_close_matches(key, KNOWN_KEYS, n=1)
            extra = f" (did you mean {hint[0]}?)" if hint else ""
            raise ConfigError(key, f"unknown configuration key{extra}")

    def given(self, key: str) -> bool:
        return bool(self.raw.get(key))

    def text(self, key: str, default: str | None = None) -> str | None:
        return self.raw.get(key) or default

    def required(self, key: str) -> str:
        value = self.raw.get(key)
        if not value:
            raise ConfigError(key, "is required")
        return value

    def integer(self, key: str, default: int, *, minimum: int = 0, maximum: int = INT64_MAX) -> int:
        text = self.raw.get(key)
        if not text:
            return default
        if not _INT.fullmatch(text):
            raise ConfigError(key, f"{text!r} is not an integer")
        value = int(text)
        if value < minimum:
            raise ConfigError(key, f"must be >= {minimum}, got {value}")
        if value > maximum:
            raise ConfigError(key, f"must be <= {maximum}, got {value}")
        return value

    def boolean(self, key: str, default: bool) -> bool:
        text = self.raw.get(key)
        if not text:
            return default
        lowered = text.lower()
        if lowered not in ("true", "false"):
            raise ConfigError(key, f"{text!r} is not true or false")
        return lowered == "true"

    def choice(self, key: str, default: str, choices: tuple[str, ...]) -> str:
        value = self.raw.get(key) or default
        if value not in choices:
            raise ConfigError(key, f"{value!r} is not one of {', '.join(choices)}")
        return value

    def items(self, key: str, sep: str = ",") -> list[str] | None:
        """Items of a separated list, blanks dropped; None when the key is unset."""
        if key not in self.raw:
            return None
        return [item.strip() for item in self.raw[key].split(sep) if item.strip()]


def _build(p: _Props, env: Mapping[str, str]) -> BrokerConfig:
    protocol_map = _protocol_map(p)
    listeners = _listeners(p, "listeners", protocol_map, required=True)
    names = [lst.name for lst in listeners]
    advertised = None
    if p.given("advertised.listeners"):
        advertised = _listeners(p, "advertised.listeners", protocol_map, required=True)
        for lst in advertised:
            if lst.name not in names:
                raise ConfigError("advertised.listeners", f"listener {lst.name} is not in listeners")
            if lst.host in ("", "0.0.0.0", "::"):
                raise ConfigError("advertised.listeners", f"{lst} does not name a reachable host")

    mechanisms = p.items("sasl.enabled.mechanisms")
    if mechanisms is None:
        mechanisms = list(SASL_MECHANISMS)
    for mech in mechanisms:
        if mech not in SASL_MECHANISMS:
            raise ConfigError(
                "sasl.enabled.mechanisms", f"{mech!r} is not one of {', '.join(SASL_MECHANISMS)}"
            )
    sasl_listeners = [lst for lst in listeners if lst.security_protocol.startswith("SASL_")]
    if sasl_listeners and not mechanisms:
        raise ConfigError("sasl.enabled.mechanisms", "is empty but SASL listeners are configured")

    inter_name = p.text("inter.broker.listener.name")
    if inter_name is not None:
        inter_name = inter_name.upper()
        if inter_name not in names:
            raise ConfigError("inter.broker.listener.name", f"listener {inter_name} is not in listeners")
    else:
        inter_name = (sasl_listeners or listeners)[0].name

    early = p.items("early.start.listeners") or []
    early = [name.upper() for name in early]
    for name in early:
        if name not in names:
            raise ConfigError("early.start.listeners", f"listener {name} is not in listeners")

    keystore = p.text("ssl.keystore.location")
    truststore = p.text("ssl.truststore.location")
    ssl_listeners = [lst for lst in listeners if lst.security_protocol in ("SSL", "SASL_SSL")]
    if ssl_listeners and keystore is None:
        raise ConfigError(
            "ssl.keystore.location", f"is required by the {ssl_listeners[0].name} listener"
        )
    for key, location in (("ssl.keystore.location", keystore), ("ssl.truststore.location", truststore)):
        if location is not None and not os.path.isfile(location):
            raise ConfigError(key, f"{location} is not a readable file")

    session_timeout = p.integer("zookeeper.session.timeout.ms", 18000, minimum=1, maximum=INT32_MAX)
    max_lifetime = p.integer("delegation.token.max.lifetime.ms", 604_800_000, minimum=1)
    expiry_time = p.integer("delegation.token.expiry.time.ms", 86_400_000, minimum=1)
    if expiry_time > max_lifetime:
        raise ConfigError(
            "delegation.token.expiry.time.ms",
            f"{expiry_time} exceeds delegation.token.max.lifetime.ms ({max_lifetime})",
        )

    return BrokerConfig(
        broker_id=_broker_id(p),
        listeners=listeners,
        listener_security_protocol_map=protocol_map,
        advertised_listeners=advertised,
        inter_broker_listener_name=inter_name,
        inter_broker_sasl_mechanism=p.choice(
            "inter.broker.sasl.mechanism", "SCRAM-SHA-512", SASL_MECHANISMS
        ),
        inter_broker_sasl_username=p.text("inter.broker.sasl.username"),
        inter_broker_sasl_password=p.text("inter.broker.sasl.password"),
        zookeeper_connect=p.required("zookeeper.connect"),
        zookeeper_session_timeout_ms=session_timeout,
        zookeeper_connection_timeout_ms=p.integer(
            "zookeeper.connection.timeout.ms", session_timeout, minimum=1, maximum=INT32_MAX
        ),
        zookeeper_digest=_zookeeper_digest(p),
        sasl_enabled_mechanisms=tuple(mechanisms),
        sasl_server_max_receive_size=p.integer(
            "sasl.server.max.receive.size", 524288, minimum=1, maximum=INT32_MAX
        ),
        super_users=_super_users(p),
        allow_everyone_if_no_acl_found=p.boolean("allow.everyone.if.no.acl.found", False),
        authorizer_class_name=p.choice("authorizer.class.name", "", ("", *AUTHORIZERS)),
        early_start_listeners=tuple(early),
        ssl_keystore_type=p.choice("ssl.keystore.type", "PEM", ("PEM",)),
        ssl_keystore_location=keystore,
        ssl_key_password=p.text("ssl.key.password"),
        ssl_truststore_type=p.choice("ssl.truststore.type", "PEM", ("PEM",)),
        ssl_truststore_location=truststore,
        ssl_client_auth=p.choice("ssl.client.auth", "none", SSL_CLIENT_AUTH),
        master_keys=_master_keys(p, env),
        delegation_token_max_lifetime_ms=max_lifetime,
        delegation_token_expiry_time_ms=expiry_time,
        delegation_token_expiry_check_interval_ms=p.integer(
            "delegation.token.expiry.check.interval.ms", 3_600_000, minimum=1
        ),
        delegation_token_implicit_login_enable=p.boolean(
            "delegation.token.implicit.login.enable", True
        ),
        delegation_token_session_alter_access_enable=p.boolean(
            "delegation.token.session.alter.access.enable", False
        ),
        sasl_scram_accept_repeated_client_nonce=p.boolean(
            "sasl.scram.accept.repeated.client.nonce", False
        ),
        audit_log_dir=p.text("audit.log.dir"),
        audit_queue_size=p.integer("audit.queue.size", 10_000, minimum=1, maximum=INT32_MAX),
        audit_file_max_bytes=p.integer("audit.file.max.bytes", 67_108_864, minimum=1),
        audit_file_rotate_ms=p.integer("audit.file.rotate.ms", 3_600_000, minimum=1),
        socket_request_max_bytes=p.integer(
            "socket.request.max.bytes", 104_857_600, minimum=1, maximum=INT32_MAX
        ),
        connections_max_idle_ms=p.integer("connections.max.idle.ms", 600_000, minimum=1),
        connection_failed_authentication_delay_ms=p.integer(
            "connection.failed.authentication.delay.ms", 100, minimum=0, maximum=INT32_MAX
        ),
        connections_max_reauth_ms=p.integer("connections.max.reauth.ms", 0, minimum=0),
        max_connections_per_ip=p.integer("max.connections.per.ip", INT32_MAX, maximum=INT32_MAX),
        request_timeout_ms=p.integer("request.timeout.ms", 30_000, minimum=1, maximum=INT32_MAX),
        metrics_listener=_host_port(p, "metrics.listener"),
        cluster_id=p.text("cluster.id"),
    )


def _broker_id(p: _Props) -> int:
    p.required("broker.id")
    return p.integer("broker.id", 0, minimum=0, maximum=INT32_MAX)


def _protocol_map(p: _Props) -> dict[str, str]:
    key = "listener.security.protocol.map"
    items = p.items(key)
    if not items:
        return {proto: proto for proto in SECURITY_PROTOCOLS}
    mapping: dict[str, str] = {}
    for item in items:
        name, sep, proto = item.partition(":")
        name, proto = name.strip().upper(), proto.strip().upper()
        if not sep or not name:
            raise ConfigError(key, f"{item!r} is not of the form NAME:PROTOCOL")
        if proto not in SECURITY_PROTOCOLS:
            raise ConfigError(
                key, f"{proto!r} is not a security protocol ({', '.join(SECURITY_PROTOCOLS)})"
            )
        if name in mapping:
            raise ConfigError(key, f"listener name {name} is mapped twice")
        mapping[name] = proto
    return mapping


def _listeners(
    p: _Props, key: str, protocol_map: Mapping[str, str], *, required: bool
) -> list[Listener]:
    if required:
        p.required(key)
    result: list[Listener] = []
    for item in p.items(key) or []:
        match = _LISTENER.fullmatch(item)
        if not match:
            raise ConfigError(key, f"{item!r} is not of the form NAME://host:port")
        name = match["name"].upper()
        protocol = protocol_map.get(name) or (name if name in SECURITY_PROTOCOLS else None)
        if protocol is None:
            raise ConfigError(
                key,
                f"listener name {name} is neither a security protocol nor mapped by "
                "listener.security.protocol.map",
            )
        port = int(match["port"])
        if port > 65535:
            raise ConfigError(key, f"port {port} of {item!r} is out of range")
        if any(lst.name == name for lst in result):
            raise ConfigError(key, f"listener name {name} is used twice")
        result.append(Listener(name, protocol, match["host"].strip("[]"), port))
    return result


def _host_port(p: _Props, key: str) -> tuple[str, int] | None:
    text = p.text(key)
    if text is None:
        return None
    match = _HOST_PORT.fullmatch(text)
    if not match or int(match["port"]) > 65535:
        raise ConfigError(key, f"{text!r} is not of the form host:port")
    return match["host"].strip("[]"), int(match["port"])


def _zookeeper_digest(p: _Props) -> str | None:
    value = p.text("zookeeper.digest")
    if value is not None:
        user, sep, _ = value.partition(":")
        if not sep or not user:
            # The value holds a password: describe the form, never echo it.
            raise ConfigError("zookeeper.digest", "must be of the form user:password")
    return value


def _super_users(p: _Props) -> frozenset[KafkaPrincipal]:
    users = set()
    for item in p.items("super.users", ";") or []:
        try:
            users.add(KafkaPrincipal.parse(item))
        except ValueError as exc:
            raise ConfigError("super.users", str(exc)) from exc
    return frozenset(users)


def _master_keys(p: _Props, env: Mapping[str, str]) -> MasterKeys:
    sources = []
    direct = p.raw.get(SECRET_KEY)
    alias = p.raw.get(MASTER_KEY_ALIAS)
    if direct is not None and alias is not None and direct != alias:
        raise ConfigError(MASTER_KEY_ALIAS, f"conflicts with {SECRET_KEY}: give only one of them")
    inline = direct if direct is not None else alias
    if inline:
        sources.append(SECRET_KEY if direct is not None else MASTER_KEY_ALIAS)
    if p.given(SECRET_KEY_FILE):
        sources.append(SECRET_KEY_FILE)
    if p.given(SECRET_KEY_ENV):
        sources.append(SECRET_KEY_ENV)
    if len(sources) > 1:
        raise ConfigError(sources[1], f"conflicts with {sources[0]}: give one source for the key")

    current = inline or ""
    if p.given(SECRET_KEY_FILE):
        current = _key_from_file(p.raw[SECRET_KEY_FILE])
    elif p.given(SECRET_KEY_ENV):
        variable = p.raw[SECRET_KEY_ENV]
        current = env.get(variable, "")
        if not current:
            raise ConfigError(SECRET_KEY_ENV, f"environment variable {variable} is unset or empty")

    previous = p.items(SECRET_KEY_PREVIOUS) or []
    if previous and not current:
        raise ConfigError(SECRET_KEY_PREVIOUS, "needs a current key (tokens are disabled)")
    return MasterKeys(current, previous)


def _key_from_file(location: str) -> str:
    key = SECRET_KEY_FILE
    try:
        mode = stat.S_IMODE(os.stat(location).st_mode)
        if mode & 0o077:
            raise ConfigError(
                key,
                f"{location} has mode {mode:04o}: it must not be readable or writable "
                "by group or others (chmod 600)",
            )
        text = Path(location).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(key, f"cannot read {location}: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(key, f"{location} is not UTF-8") from exc
    current = text.strip()
    if not current:
        raise ConfigError(key, f"{location} is empty")
    return current
