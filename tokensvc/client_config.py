"""Kafka client properties (``--command-config``) read into a typed :class:`ClientConfig`.

Owns the declared table of client keys (:data:`CLIENT_CONFIG`, checked key by key as
the broker's table is), Kafka's JAAS syntax of ``sasl.jaas.config`` (one login module,
a control flag, ``key=value`` options and a closing ``;``), and the PEM-only TLS keys
(``ssl.truststore.*``, ``ssl.keystore.*``, ``ssl.endpoint.identification.algorithm``).
The file is read by the project's one properties reader (:mod:`tokensvc.properties`);
relative paths resolve against the file's directory; keys it does not use get one
warning line (names only); a key close to a client key is an error naming it. It
reads the files the properties name (PEM files) and builds an ``ssl.SSLContext`` on
request, nothing more: it must not open sockets.

Every problem is a :class:`ClientConfigError` naming the key at fault (and the file,
when read from one). Messages never contain a password, a key password or the text
of ``sasl.jaas.config`` (which holds the password); :class:`ClientConfig` hides
secrets from its ``repr``.
"""

from __future__ import annotations

import logging
import os
import re
import ssl
import tempfile
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from tokensvc.core.configdef import (
    ConfigDef,
    ConfigError,
    ConfigKey,
    Importance,
    OneOf,
    PathKind,
    Type,
    Validator,
    at_least,
)
from tokensvc.core.kafka_keys import KAFKA_CLIENT_KEYS
from tokensvc.oauth.client import ClientCredentials
from tokensvc.oauth.jwks import JwksError, check_url
from tokensvc.properties import read_properties
from tokensvc.scram.formatter import ScramMechanism

log = logging.getLogger(__name__)

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SCRAM_LOGIN_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
CONTROL_FLAGS = ("required", "requisite", "sufficient", "optional")
DEFAULT_REQUEST_TIMEOUT_MS = 30_000

_PEM_BEGIN = "-----BEGIN"
_PEM_BLOCK = re.compile(r"-----BEGIN ([A-Z0-9 ]+)-----.*?-----END \1-----", re.DOTALL)


class ClientConfigError(ConfigError):
    """Client properties that cannot be used; the message names the key and never a secret."""


class _PemOnly(Validator):
    """``PEM`` in any case; anything else (JKS, PKCS12) asks for a conversion."""

    def __call__(self, key: str, value: object) -> None:
        if str(value).upper() != "PEM":
            raise ClientConfigError(
                key,
                f"{value} is not supported: tokensvc clients need PEM (convert the store "
                f"with keytool/openssl and set {key}=PEM)",
            )

    def describe(self) -> str:
        return "`PEM`"


_SCRAM_NAMES = tuple(m.mechanism_name for m in ScramMechanism)
OAUTHBEARER = "OAUTHBEARER"
OAUTH_LOGIN_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
_TOKEN_URL = "sasl.oauthbearer.token.endpoint.url"
H, M, L = Importance.HIGH, Importance.MEDIUM, Importance.LOW
CLIENT_CONFIG = ConfigDef(
    [
        ConfigKey("security.protocol", Type.STRING, "PLAINTEXT",
                  OneOf(SECURITY_PROTOCOLS, ignore_case=True), H,
                  "How to reach the brokers."),
        ConfigKey("sasl.mechanism", Type.STRING, None,
                  OneOf((*_SCRAM_NAMES, OAUTHBEARER), ignore_case=True), H,
                  "SCRAM mechanism, or `OAUTHBEARER` (a JWT from "
                  f"`{_TOKEN_URL}`); required with a SASL protocol."),
        ConfigKey(_TOKEN_URL, Type.STRING, None, None, M,
                  "With `OAUTHBEARER`: `file:/path` of a JWT (a projected service-account "
                  "token, read again at every login), or an OpenID provider's `https://` "
                  "token endpoint for a client-credentials grant, with `sasl.jaas.config="
                  f"{OAUTH_LOGIN_MODULE} required clientId=\"...\" clientSecret=\"...\" "
                  "[scope=\"...\"] [ssl.truststore.location=\"ca.pem\"];` (Kafka's forms)."),
        ConfigKey("sasl.jaas.config", Type.PASSWORD, None, None, H,
                  f"`{SCRAM_LOGIN_MODULE} required username=\"...\" password=\"...\" "
                  "[tokenauth=true];` (a token id and its HMAC with `tokenauth=true`)."),
        ConfigKey("ssl.truststore.type", Type.STRING, None, _PemOnly(), M,
                  "Only PEM is supported."),
        ConfigKey("ssl.truststore.location", Type.STRING, None, None, H,
                  "PEM bundle of the CAs to trust instead of the system's.", path=PathKind.FILE),
        ConfigKey("ssl.truststore.certificates", Type.PASSWORD, None, None, M,
                  "The same CAs inline (PEM text); not with `ssl.truststore.location`."),
        ConfigKey("ssl.keystore.type", Type.STRING, None, _PemOnly(), M, "Only PEM is supported."),
        ConfigKey("ssl.keystore.location", Type.STRING, None, None, H,
                  "PEM file with the client's private key and certificate chain (two-way TLS).",
                  path=PathKind.FILE),
        ConfigKey("ssl.keystore.certificate.chain", Type.PASSWORD, None, None, M,
                  "The client certificate chain inline (PEM); with `ssl.keystore.key`."),
        ConfigKey("ssl.keystore.key", Type.PASSWORD, None, None, M,
                  "The client private key inline (PEM); with `ssl.keystore.certificate.chain`."),
        ConfigKey("ssl.key.password", Type.PASSWORD, None, None, M,
                  "Password of an encrypted client private key."),
        ConfigKey("ssl.endpoint.identification.algorithm", Type.STRING, "https",
                  OneOf(("https",), ignore_case=True), M,
                  "`https` checks the broker's host name; an empty value turns the check off."),
        ConfigKey("request.timeout.ms", Type.INT, DEFAULT_REQUEST_TIMEOUT_MS, at_least(1), M,
                  "How long to wait for an answer."),
        ConfigKey("client.id", Type.STRING, None, None, L, "Client id sent with each request."),
    ],
    foreign=KAFKA_CLIENT_KEYS,
)
"""Every client key tokensvc reads, declared once."""


# --- JAAS ------------------------------------------------------------------------------

_JAAS = "sasl.jaas.config"
_JAAS_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


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
                out.append(_JAAS_ESCAPES.get(text[self.pos + 1], text[self.pos + 1]))
                self.pos += 2
                continue
            out.append(ch)
            self.pos += 1
        raise ClientConfigError(_JAAS, "has an unterminated quoted value")


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
            raise ClientConfigError(_JAAS, f"must start with a login module class name, found {kind!r}"
            )
        flag_token = scanner.next()
        if flag_token is None or flag_token[0] != "word" or (
            flag_token[1].lower() not in CONTROL_FLAGS
        ):
            raise ClientConfigError(_JAAS, f"login module {module} needs a control flag "
                f"({'/'.join(CONTROL_FLAGS)}) after its class name"
            )
        options: dict[str, str] = {}
        while True:
            token = scanner.next()
            if token is None:
                raise ClientConfigError(_JAAS, f"the entry for {module} must end with ';'"
                )
            if token[0] == ";":
                break
            if token[0] != "word":
                raise ClientConfigError(_JAAS, f"expected an option name in the entry for {module}"
                )
            name = token[1]
            if (eq := scanner.next()) is None or eq[0] != "=":
                raise ClientConfigError(_JAAS, f"option {name} needs '=' and a value")
            value = scanner.next()
            if value is None or value[0] not in ("word", "quoted"):
                raise ClientConfigError(_JAAS, f"option {name} has no value")
            options[name] = value[1]
        modules.append(JaasLoginModule(module, flag_token[1].lower(), options))
    if len(modules) != 1:
        raise ClientConfigError(_JAAS, f"must contain exactly one login module, found {len(modules)}"
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
    # OAUTHBEARER: the file holding the JWT, read again at every login; or the
    # client-credentials grant that gets one.
    oauth_token_file: str | None = None
    oauth_client: ClientCredentials | None = None

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
            "ssl.keystore.location",
            "the client certificate or its key could not be loaded "
            f"({exc.__class__.__name__}; check ssl.key.password)",
        ) from None


def load_client_config(path: str | os.PathLike[str],
                       overrides: Mapping[str, str] | None = None) -> ClientConfig:
    """Read a Kafka client properties file (``--command-config``), with ``overrides``
    (a command line's options) over its keys.

    Relative paths resolve against the file's directory; the keys it does not use are
    named in one warning line (never with their values)."""
    source = os.fspath(path)
    try:
        props = {**read_properties(path), **(overrides or {})}
        ignored = CLIENT_CONFIG.ignored_keys(props)
        base_dir = os.path.dirname(os.path.abspath(source))
        config = client_config_from_properties(CLIENT_CONFIG.resolve_paths(props, base_dir))
    except ConfigError as exc:
        raise ClientConfigError(exc.key, exc.problem, exc.source or source) from None
    if ignored:
        log.warning("%s: ignoring %d key(s) tokensvc does not use: %s",
                    source, len(ignored), ", ".join(ignored))
    return config


def client_config_from_properties(props: Mapping[str, str]) -> ClientConfig:
    """Build a :class:`ClientConfig` from parsed properties, key by key as
    :data:`CLIENT_CONFIG` declares them. Keys it does not declare are ignored (Kafka
    clients only warn about them) unless they look like a typo of a client key; TLS
    keys are read only when the protocol uses TLS."""
    try:
        return _build(props)
    except ClientConfigError:
        raise
    except ConfigError as exc:
        raise ClientConfigError(exc.key, exc.problem, exc.source) from None


def _build(props: Mapping[str, str]) -> ClientConfig:
    CLIENT_CONFIG.ignored_keys(props)
    protocol = str(_value(props, "security.protocol")).upper()
    values: dict = {
        "security_protocol": protocol,
        "request_timeout_ms": _value(props, "request.timeout.ms"),
        "client_id": _value(props, "client.id"),
    }
    if protocol.startswith("SASL_"):
        values.update(_sasl(props))
    if protocol in ("SSL", "SASL_SSL"):
        values.update(_tls(props))
    return ClientConfig(**values)


def _value(props: Mapping[str, str], name: str) -> object:
    """The typed, checked value of the client key ``name``."""
    return CLIENT_CONFIG[name].parse(props.get(name))


def _sasl(props: Mapping[str, str]) -> dict:
    names = ", ".join((*_SCRAM_NAMES, OAUTHBEARER))
    raw = _value(props, "sasl.mechanism")
    if raw is None:
        raise ClientConfigError(
            "sasl.mechanism", f"is required for SASL protocols: use one of {names}"
        )
    if str(raw).upper() == OAUTHBEARER:
        return _oauth(props)
    mechanism = ScramMechanism.from_name(str(raw).upper())
    jaas_text = _value(props, "sasl.jaas.config")
    if jaas_text is None:
        raise ClientConfigError(
            _JAAS,
            f"is required for {mechanism.mechanism_name}: "
            f'{SCRAM_LOGIN_MODULE} required username="..." password="...";',
        )
    module = parse_jaas_config(str(jaas_text))
    if module.login_module != SCRAM_LOGIN_MODULE:
        raise ClientConfigError(
            _JAAS,
            f"uses login module {module.login_module}; "
            f"{mechanism.mechanism_name} needs {SCRAM_LOGIN_MODULE}",
        )
    username = module.options.get("username")
    password = module.options.get("password")
    if not username:
        raise ClientConfigError(_JAAS, "option username is missing or empty")
    if password is None:
        raise ClientConfigError(_JAAS, "option password is missing")
    tokenauth = module.options.get("tokenauth", "false").strip().lower() == "true"
    return {
        "sasl_mechanism": mechanism,
        "username": username,
        "password": password,
        "token_auth": tokenauth,
    }


def oauth_overrides(token_file: str) -> dict[str, str]:
    """The client keys that make a login OAUTHBEARER with the JWT in ``token_file``."""
    return {"sasl.mechanism": OAUTHBEARER,
            _TOKEN_URL: "file:" + urllib.parse.quote(os.path.abspath(token_file))}


def _oauth(props: Mapping[str, str]) -> dict:
    """OAUTHBEARER: a token file (``file:`` URL) or a client-credentials grant."""
    text = str(_value(props, _TOKEN_URL) or "")
    if text.startswith("file:"):
        path = urllib.parse.unquote(urllib.parse.urlsplit(text).path)
        if not path:
            raise ClientConfigError(_TOKEN_URL, f"{text!r} names no file")
        return {"oauth_token_file": path}
    if not text.startswith(("https://", "http://")):
        raise ClientConfigError(
            _TOKEN_URL, "OAUTHBEARER needs file:/path of a JWT or an https:// token endpoint "
            "(the agent also takes --oauthbearer-token-file)")
    try:
        check_url(text)
    except JwksError as exc:
        raise ClientConfigError(_TOKEN_URL, str(exc)) from None
    usage = f'{OAUTH_LOGIN_MODULE} required clientId="..." clientSecret="...";'
    jaas_text = _value(props, _JAAS)
    if jaas_text is None:
        raise ClientConfigError(_JAAS, f"is required with a token endpoint: {usage}")
    module = parse_jaas_config(str(jaas_text))
    if module.login_module != OAUTH_LOGIN_MODULE:
        raise ClientConfigError(_JAAS, f"uses login module {module.login_module}; a token "
                                f"endpoint needs {usage}")
    client_id, secret = module.options.get("clientId"), module.options.get("clientSecret")
    if not client_id or not secret:
        raise ClientConfigError(_JAAS, "options clientId and clientSecret are required")
    return {"oauth_client": ClientCredentials(
        text, client_id, secret, module.options.get("scope") or None,
        module.options.get("ssl.truststore.location") or None)}


def _pem_from(props: Mapping[str, str], inline_key: str, location_key: str) -> str | None:
    inline = _value(props, inline_key)
    location = _value(props, location_key)
    if inline is not None and location is not None:
        raise ClientConfigError(inline_key, f"set either {inline_key} or {location_key}, not both")
    if inline is not None:
        return str(inline)
    if location is not None:
        return _read_store(location_key, str(location))
    return None


def _read_store(key: str, location: str) -> str:
    """The text of a store file; "" for binary content (a JKS or PKCS12 store)."""
    try:
        return Path(location).read_text(encoding="utf-8")
    except UnicodeDecodeError:
        return ""
    except OSError as exc:
        raise ClientConfigError(key, f"cannot read {location}: {exc.strerror}") from None


def _require_pem(text: str, type_key: str, key: str, what: str, store_type: object) -> None:
    if _PEM_BEGIN not in text:
        kind = store_type or "JKS or PKCS12"
        raise ClientConfigError(
            key,
            f"{what} is not PEM (it looks like {kind}); tokensvc clients need PEM: "
            f"convert it (keytool -exportcert -rfc / openssl) and set {type_key}=PEM",
        )


def _tls(props: Mapping[str, str]) -> dict:
    values: dict = {}
    truststore_type = _value(props, "ssl.truststore.type")
    ca = _pem_from(props, "ssl.truststore.certificates", "ssl.truststore.location")
    if ca is not None:
        where = "ssl.truststore.location" if props.get("ssl.truststore.location") else (
            "ssl.truststore.certificates")
        _require_pem(ca, "ssl.truststore.type", where, "the truststore", truststore_type)
        values["ca_pem"] = ca
    algorithm_key = "ssl.endpoint.identification.algorithm"
    # Blank turns hostname checks off (Kafka's meaning), so it is not "unset" here.
    blank = algorithm_key in props and not props[algorithm_key].strip()
    values["check_hostname"] = not blank and bool(_value(props, algorithm_key))

    keystore_type = _value(props, "ssl.keystore.type")
    chain = _value(props, "ssl.keystore.certificate.chain")
    key = _value(props, "ssl.keystore.key")
    location = _value(props, "ssl.keystore.location")
    if chain is not None or key is not None:
        if chain is None or key is None:
            raise ClientConfigError(
                "ssl.keystore.key",
                "ssl.keystore.certificate.chain and ssl.keystore.key must be set together",
            )
        _require_pem(str(chain), "ssl.keystore.type", "ssl.keystore.certificate.chain",
                     "the certificate chain", keystore_type)
        _require_pem(str(key), "ssl.keystore.type", "ssl.keystore.key", "the key", keystore_type)
        values["cert_chain_pem"] = chain
        values["private_key_pem"] = key
    elif location is not None:
        text = _read_store("ssl.keystore.location", str(location))
        _require_pem(text, "ssl.keystore.type", "ssl.keystore.location", "the keystore",
                     keystore_type)
        blocks = [m.group(0) for m in _PEM_BLOCK.finditer(text)]
        keys = [b for b in blocks if "PRIVATE KEY-----" in b.partition("\n")[0]]
        chain_blocks = [b for b in blocks if b.startswith("-----BEGIN CERTIFICATE-----")]
        if len(keys) != 1 or not chain_blocks:
            raise ClientConfigError(
                "ssl.keystore.location",
                "must hold the private key and its certificate chain (PEM)",
            )
        values["keystore_location"] = str(location)
    key_password = _value(props, "ssl.key.password")
    if key_password is not None:
        values["private_key_password"] = key_password
    return values
