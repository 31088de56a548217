"""Kafka client properties (``--command-config``) read into a typed :class:`ClientConfig`.

Owns three small parsers: the Java ``.properties`` text format, Kafka's JAAS syntax of
``sasl.jaas.config`` (one login module, a control flag, ``key=value`` options and a
closing ``;``), and the PEM-only TLS keys (``ssl.truststore.*``, ``ssl.keystore.*``,
``ssl.endpoint.identification.algorithm``). It reads the files the properties name
(the properties file itself and PEM files) and builds an ``ssl.SSLContext`` on request,
nothing more: it must not open sockets.

Every problem is a :class:`ClientConfigError` naming the key at fault. Messages never
contain a password, a key password or the text of ``sasl.jaas.config`` (which holds
the password); :class:`ClientConfig` hides secrets from its ``repr``.
"""

from __future__ import annotations

import os
import re
import ssl
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from tokensvc.scram.formatter import ScramMechanism

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SCRAM_LOGIN_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
CONTROL_FLAGS = ("required", "requisite", "sufficient", "optional")
DEFAULT_REQUEST_TIMEOUT_MS = 30_000

_PEM_BEGIN = "-----BEGIN"
_PEM_BLOCK = re.compile(r"-----BEGIN ([A-Z0-9 ]+)-----.*?-----END \1-----", re.DOTALL)


class ClientConfigError(ValueError):
    """Client properties that cannot be used; the message names the key and never a secret."""


# --- Java .properties ------------------------------------------------------------------

_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def parse_properties(text: str) -> dict[str, str]:
    """Parse Java ``.properties`` text: ``#``/``!`` comments, ``=``, ``:`` or blank as the
    separator, a trailing ``\\`` continues the line, ``\\t \\n \\uXXXX`` and ``\\c`` escapes."""
    props: dict[str, str] = {}
    for logical in _logical_lines(text):
        key, value = _split_key_value(logical)
        props[key] = value
    return props


def _logical_lines(text: str) -> list[str]:
    lines: list[str] = []
    pending: str | None = None
    for raw in text.splitlines():
        line = raw.lstrip(" \t\f")
        if pending is None and (not line or line[0] in "#!"):
            continue
        if pending is not None:
            line = pending + line
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2 == 1:
            pending = line[:-1]
            continue
        pending = None
        lines.append(line)
    if pending is not None:
        lines.append(pending)
    return lines


def _split_key_value(line: str) -> tuple[str, str]:
    i = 0
    key_chars: list[str] = []
    while i < len(line):
        ch = line[i]
        if ch == "\\" and i + 1 < len(line):
            key_chars.append(line[i : i + 2])
            i += 2
            continue
        if ch in "=: \t\f":
            break
        key_chars.append(ch)
        i += 1
    rest = line[i:].lstrip(" \t\f")
    if rest[:1] in ("=", ":"):
        rest = rest[1:].lstrip(" \t\f")
    return _unescape("".join(key_chars)), _unescape(rest)


def _unescape(text: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch != "\\" or i + 1 >= len(text):
            out.append(ch)
            i += 1
            continue
        nxt = text[i + 1]
        if nxt == "u" and i + 6 <= len(text):
            try:
                out.append(chr(int(text[i + 2 : i + 6], 16)))
                i += 6
                continue
            except ValueError:
                raise ClientConfigError(
                    "malformed \\uXXXX escape in client properties"
                ) from None
        out.append(_ESCAPES.get(nxt, nxt))
        i += 2
    return "".join(out)


# --- JAAS ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class JaasLoginModule:
    """One ``LoginModule flag key=value ...;`` entry of a JAAS configuration."""

    login_module: str
    control_flag: str
    options: Mapping[str, str] = field(repr=False)


class _JaasScanner:
    """Tokens of Kafka's JAAS syntax: words, quoted strings (with escapes), '=' and ';'."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def next(self) -> tuple[str, str] | None:
        """(kind, value) with kind in word, quoted, '=', ';'; None at the end."""
        text = self.text
        while self.pos < len(text) and text[self.pos].isspace():
            self.pos += 1
        if self.pos >= len(text):
            return None
        ch = text[self.pos]
        if ch in "=;":
            self.pos += 1
            return ch, ch
        if ch == '"':
            return "quoted", self._quoted()
        start = self.pos
        while self.pos < len(text) and not (text[self.pos].isspace() or text[self.pos] in '=;"'):
            self.pos += 1
        return "word", text[start : self.pos]

    def _quoted(self) -> str:
        text = self.text
        self.pos += 1
        out: list[str] = []
        while self.pos < len(text):
            ch = text[self.pos]
            if ch == '"':
                self.pos += 1
                return "".join(out)
            if ch == "\\" and self.pos + 1 < len(text):
                out.append(_ESCAPES.get(text[self.pos + 1], text[self.pos + 1]))
                self.pos += 2
                continue
            out.append(ch)
            self.pos += 1
        raise ClientConfigError("sasl.jaas.config has an unterminated quoted value")


def parse_jaas_config(text: str) -> JaasLoginModule:
    """Parse a ``sasl.jaas.config`` value holding exactly one login module.

    Option values may be quoted (``\\"`` and ``\\\\`` escapes) or bare words; the
    control flag is case-insensitive; the entry must end with ``;``. Errors describe
    the position and never quote option values.
    """
    scanner = _JaasScanner(text)
    modules: list[JaasLoginModule] = []
    while (token := scanner.next()) is not None:
        kind, module = token
        if kind != "word":
            raise ClientConfigError(
                f"sasl.jaas.config must start with a login module class name, found {kind!r}"
            )
        flag_token = scanner.next()
        if flag_token is None or flag_token[0] != "word" or (
            flag_token[1].lower() not in CONTROL_FLAGS
        ):
            raise ClientConfigError(
                f"sasl.jaas.config: login module {module} needs a control flag "
                f"({'/'.join(CONTROL_FLAGS)}) after its class name"
            )
        options: dict[str, str] = {}
        while True:
            token = scanner.next()
            if token is None:
                raise ClientConfigError(
                    f"sasl.jaas.config: the entry for {module} must end with ';'"
                )
            if token[0] == ";":
                break
            if token[0] != "word":
                raise ClientConfigError(
                    f"sasl.jaas.config: expected an option name in the entry for {module}"
                )
            name = token[1]
            if (eq := scanner.next()) is None or eq[0] != "=":
                raise ClientConfigError(f"sasl.jaas.config: option {name} needs '=' and a value")
            value = scanner.next()
            if value is None or value[0] not in ("word", "quoted"):
                raise ClientConfigError(f"sasl.jaas.config: option {name} has no value")
            options[name] = value[1]
        modules.append(JaasLoginModule(module, flag_token[1].lower(), options))
    if len(modules) != 1:
        raise ClientConfigError(
            f"sasl.jaas.config must contain exactly one login module, found {len(modules)}"
        )
    return modules[0]


# --- the typed result ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ClientConfig:
    """How to reach and log in to brokers: what a Kafka client's properties say.

    ``ca_pem`` (PEM text) replaces the system trust store when given. The client
    certificate for two-way TLS is either ``keystore_location`` (a PEM file holding the
    key and its chain) or the inline ``cert_chain_pem`` and ``private_key_pem``.
    """

    security_protocol: str = "PLAINTEXT"
    sasl_mechanism: ScramMechanism | None = None
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    token_auth: bool = False
    ca_pem: str | None = field(default=None, repr=False)
    check_hostname: bool = True
    keystore_location: str | None = None
    cert_chain_pem: str | None = field(default=None, repr=False)
    private_key_pem: str | None = field(default=None, repr=False)
    private_key_password: str | None = field(default=None, repr=False)
    request_timeout_ms: int = DEFAULT_REQUEST_TIMEOUT_MS
    client_id: str | None = None

    @property
    def uses_tls(self) -> bool:
        return self.security_protocol in ("SSL", "SASL_SSL")

    @property
    def uses_sasl(self) -> bool:
        return self.security_protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    def ssl_context(self) -> ssl.SSLContext:
        """A client TLS context: the configured CA (else the system's), hostname checks
        unless disabled, and the client certificate when one is configured."""
        if self.ca_pem is not None:
            ctx = ssl.create_default_context(cadata=self.ca_pem)
        else:
            ctx = ssl.create_default_context()
        ctx.check_hostname = self.check_hostname
        if self.keystore_location is not None:
            _load_cert_chain(ctx, self.keystore_location, self.private_key_password)
        elif self.cert_chain_pem is not None and self.private_key_pem is not None:
            # ssl loads certificates only from files: inline PEM goes through a private
            # (0600) temporary file that is removed at once.
            fd, name = tempfile.mkstemp(prefix="tokensvc-client-", suffix=".pem")
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as out:
                    out.write(self.private_key_pem.strip() + "\n" + self.cert_chain_pem.strip() + "\n")
                _load_cert_chain(ctx, name, self.private_key_password)
            finally:
                os.unlink(name)
        return ctx


def _load_cert_chain(ctx: ssl.SSLContext, path: str, password: str | None) -> None:
    try:
        ctx.load_cert_chain(path, password=password)
    except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError
        raise ClientConfigError(
            "ssl.keystore: the client certificate or its key could not be loaded "
            f"({exc.__class__.__name__}; check ssl.key.password)"
        ) from None


def load_client_config(path: str | os.PathLike) -> ClientConfig:
    """Read a Kafka client properties file (``--command-config``)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ClientConfigError(f"cannot read client properties {path}: {exc.strerror}") from None
    return client_config_from_properties(parse_properties(text))


def client_config_from_properties(props: Mapping[str, str]) -> ClientConfig:
    """Build a :class:`ClientConfig` from parsed properties; unknown keys are ignored,
    as Kafka clients ignore (and only warn about) keys they do not use."""
    protocol = props.get("security.protocol", "PLAINTEXT").strip().upper()
    if protocol not in SECURITY_PROTOCOLS:
        raise ClientConfigError(
            f"security.protocol must be one of {', '.join(SECURITY_PROTOCOLS)}, got {protocol!r}"
        )
    values: dict = {
        "security_protocol": protocol,
        "request_timeout_ms": _positive_int(props, "request.timeout.ms", DEFAULT_REQUEST_TIMEOUT_MS),
        "client_id": props.get("client.id") or None,
    }
    if protocol.startswith("SASL_"):
        values.update(_sasl(props))
    if protocol in ("SSL", "SASL_SSL"):
        values.update(_tls(props))
    return ClientConfig(**values)


def _positive_int(props: Mapping[str, str], key: str, default: int) -> int:
    raw = props.get(key)
    if raw is None or not raw.strip():
        return default
    try:
        value = int(raw.strip())
    except ValueError:
        raise ClientConfigError(f"{key} must be an integer, got {raw!r}") from None
    if value <= 0:
        raise ClientConfigError(f"{key} must be positive, got {value}")
    return value


def _sasl(props: Mapping[str, str]) -> dict:
    names = ", ".join(m.mechanism_name for m in ScramMechanism)
    raw = props.get("sasl.mechanism")
    if raw is None or not raw.strip():
        raise ClientConfigError(f"sasl.mechanism is required for SASL protocols: use one of {names}")
    try:
        mechanism = ScramMechanism.from_name(raw.strip().upper())
    except ValueError:
        raise ClientConfigError(
            f"sasl.mechanism {raw.strip()!r} is not supported: use one of {names}"
        ) from None
    jaas_text = props.get("sasl.jaas.config")
    if jaas_text is None or not jaas_text.strip():
        raise ClientConfigError(
            f"sasl.jaas.config is required for {mechanism.mechanism_name}: "
            f'{SCRAM_LOGIN_MODULE} required username="..." password="...";'
        )
    module = parse_jaas_config(jaas_text)
    if module.login_module != SCRAM_LOGIN_MODULE:
        raise ClientConfigError(
            f"sasl.jaas.config uses login module {module.login_module}; "
            f"{mechanism.mechanism_name} needs {SCRAM_LOGIN_MODULE}"
        )
    username = module.options.get("username")
    password = module.options.get("password")
    if not username:
        raise ClientConfigError("sasl.jaas.config: option username is missing or empty")
    if password is None:
        raise ClientConfigError("sasl.jaas.config: option password is missing")
    tokenauth = module.options.get("tokenauth", "false").strip().lower() == "true"
    return {
        "sasl_mechanism": mechanism,
        "username": username,
        "password": password,
        "token_auth": tokenauth,
    }


def _pem_from(props: Mapping[str, str], inline_key: str, location_key: str) -> str | None:
    inline = props.get(inline_key)
    location = props.get(location_key)
    if inline and inline.strip() and location and location.strip():
        raise ClientConfigError(f"set either {inline_key} or {location_key}, not both")
    if inline and inline.strip():
        return inline
    if location and location.strip():
        return _read_store(location_key, location.strip())
    return None


def _read_store(key: str, location: str) -> str:
    """The text of a store file; "" for binary content (a JKS or PKCS12 store)."""
    try:
        return Path(location).read_text(encoding="utf-8")
    except UnicodeDecodeError:
        return ""
    except OSError as exc:
        raise ClientConfigError(f"{key}: cannot read {location}: {exc.strerror}") from None


def _require_pem(text: str, type_key: str, what: str, store_type: str | None) -> None:
    if _PEM_BEGIN not in text:
        kind = store_type or "JKS or PKCS12"
        raise ClientConfigError(
            f"{what} is not PEM (it looks like {kind}); tokensvc clients need PEM: "
            f"convert it (keytool -exportcert -rfc / openssl) and set {type_key}=PEM"
        )


def _store_type(props: Mapping[str, str], key: str) -> str | None:
    raw = props.get(key)
    if raw is None or not raw.strip():
        return None
    value = raw.strip().upper()
    if value != "PEM":
        raise ClientConfigError(
            f"{key}={raw.strip()} is not supported: tokensvc clients need PEM "
            f"(convert the store with keytool/openssl and set {key}=PEM)"
        )
    return value


def _tls(props: Mapping[str, str]) -> dict:
    values: dict = {}
    truststore_type = _store_type(props, "ssl.truststore.type")
    ca = _pem_from(props, "ssl.truststore.certificates", "ssl.truststore.location")
    if ca is not None:
        _require_pem(ca, "ssl.truststore.type", "the truststore", truststore_type)
        values["ca_pem"] = ca
    algorithm = props.get("ssl.endpoint.identification.algorithm", "https").strip()
    if algorithm.lower() not in ("", "https"):
        raise ClientConfigError(
            "ssl.endpoint.identification.algorithm must be https or empty (no hostname check), "
            f"got {algorithm!r}"
        )
    values["check_hostname"] = algorithm != ""

    keystore_type = _store_type(props, "ssl.keystore.type")
    chain = props.get("ssl.keystore.certificate.chain")
    key = props.get("ssl.keystore.key")
    location = props.get("ssl.keystore.location")
    if (chain and chain.strip()) or (key and key.strip()):
        if not (chain and chain.strip() and key and key.strip()):
            raise ClientConfigError(
                "ssl.keystore.certificate.chain and ssl.keystore.key must be set together"
            )
        _require_pem(chain, "ssl.keystore.type", "ssl.keystore.certificate.chain", keystore_type)
        _require_pem(key, "ssl.keystore.type", "ssl.keystore.key", keystore_type)
        values["cert_chain_pem"] = chain
        values["private_key_pem"] = key
    elif location and location.strip():
        text = _read_store("ssl.keystore.location", location.strip())
        _require_pem(text, "ssl.keystore.type", "the keystore", keystore_type)
        blocks = [m.group(0) for m in _PEM_BLOCK.finditer(text)]
        keys = [b for b in blocks if "PRIVATE KEY-----" in b.partition("\n")[0]]
        chain = [b for b in blocks if b.startswith("-----BEGIN CERTIFICATE-----")]
        if len(keys) != 1 or not chain:
            raise ClientConfigError(
                "ssl.keystore.location must hold the private key and its certificate chain (PEM)"
            )
        values["keystore_location"] = location.strip()
    key_password = props.get("ssl.key.password")
    if key_password:
        values["private_key_password"] = key_password
    return values
