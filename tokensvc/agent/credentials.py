"""The credentials-file contract: what the agent writes and running clients read.

Pure: bytes in, bytes out, no I/O, no clock (the caller passes ``written_at_ms``).
Three formats, chosen per file (``--format``), each holding one token:

* ``properties`` (the default) -- Kafka client properties: ``security.protocol``,
  ``sasl.mechanism``, ``sasl.username`` (the token id), ``sasl.password`` (the HMAC,
  standard base64 with padding), a ``sasl.jaas.config`` line with ``tokenauth=true`` for
  Java clients, and the tokensvc-only ``tokensvc.token.owner``, ``tokensvc.token.issue.ms``,
  ``tokensvc.token.expiry.ms``, ``tokensvc.token.max.ms``. A comment line on top names the
  token and its dates. Clients that reject unknown keys (librdkafka) take the subset their
  helper in :mod:`tokensvc.agent.clients` gives them;
* ``json`` -- one object: ``token_id``, ``hmac``, ``owner``, ``issue_timestamp_ms``,
  ``expiry_timestamp_ms``, ``max_timestamp_ms``, ``sasl_mechanism``, ``security_protocol``,
  ``labels`` (an object: the token's labels), ``written_at_ms``;
* ``env`` -- shell ``KEY=value`` lines (``KAFKA_SASL_USERNAME``, ``KAFKA_SASL_PASSWORD``,
  ``KAFKA_SASL_MECHANISM``, ``KAFKA_SECURITY_PROTOCOL``, ``TOKENSVC_TOKEN_OWNER``,
  ``TOKENSVC_TOKEN_ISSUE_MS``, ``TOKENSVC_TOKEN_EXPIRY_MS``, ``TOKENSVC_TOKEN_MAX_MS``),
  values single-quoted when they hold anything but ``[A-Za-z0-9_./:+=@-]``.

:func:`parse` reads any of them back (the format is recognised from the content) and
raises :class:`CredentialsError` for anything incomplete, so a reader never applies half a
token. The HMAC appears in these files by design -- they are secrets, written 0600 -- and
nowhere else: :class:`Credentials` keeps it out of its ``repr``.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

from tokensvc.properties import parse_properties, properties_text

FORMATS = ("properties", "json", "env")
JAAS_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
_SAFE = re.compile(r"^[A-Za-z0-9_./:+=@-]*$")
_PLAIN_PROPERTY = re.compile(r'^[!-~](?:[ -~]*[!-~])?$|^$')

# properties key -> Credentials field; env key -> Credentials field.
_PROPERTIES = {
    "sasl.username": "token_id",
    "sasl.password": "hmac_b64",
    "sasl.mechanism": "sasl_mechanism",
    "security.protocol": "security_protocol",
    "tokensvc.token.owner": "owner",
    "tokensvc.token.issue.ms": "issue_ms",
    "tokensvc.token.expiry.ms": "expiry_ms",
    "tokensvc.token.max.ms": "max_ms",
}
_ENV = {
    "KAFKA_SASL_USERNAME": "token_id",
    "KAFKA_SASL_PASSWORD": "hmac_b64",
    "KAFKA_SASL_MECHANISM": "sasl_mechanism",
    "KAFKA_SECURITY_PROTOCOL": "security_protocol",
    "TOKENSVC_TOKEN_OWNER": "owner",
    "TOKENSVC_TOKEN_ISSUE_MS": "issue_ms",
    "TOKENSVC_TOKEN_EXPIRY_MS": "expiry_ms",
    "TOKENSVC_TOKEN_MAX_MS": "max_ms",
}
_JSON = {
    "token_id": "token_id",
    "hmac": "hmac_b64",
    "sasl_mechanism": "sasl_mechanism",
    "security_protocol": "security_protocol",
    "owner": "owner",
    "issue_timestamp_ms": "issue_ms",
    "expiry_timestamp_ms": "expiry_ms",
    "max_timestamp_ms": "max_ms",
}
_INTS = ("issue_ms", "expiry_ms", "max_ms")


class CredentialsError(ValueError):
    """A credentials file that cannot be used (incomplete, malformed); never names a secret."""


@dataclass(frozen=True)
class Credentials:
    """One token as a client needs it: SCRAM user name (the token id) and password (HMAC)."""

    token_id: str
    hmac_b64: str = field(repr=False)
    owner: str
    issue_ms: int
    expiry_ms: int
    max_ms: int
    sasl_mechanism: str = "SCRAM-SHA-512"
    security_protocol: str = "SASL_PLAINTEXT"
    # The token's labels, sorted by key (only the json form carries them).
    labels: tuple[tuple[str, str], ...] = ()

    @property
    def jaas_config(self) -> str:
        """The ``sasl.jaas.config`` value a Java client takes (``tokenauth=true``)."""
        return (f'{JAAS_MODULE} required username="{self.token_id}" '
                f'password="{self.hmac_b64}" tokenauth=true;')


def _iso(epoch_ms: int) -> str:
    try:
        return datetime.fromtimestamp(epoch_ms / 1000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    except (ValueError, OverflowError, OSError):  # beyond the years datetime can show
        return f"{epoch_ms} ms"


def render(creds: Credentials, fmt: str, written_at_ms: int) -> bytes:
    """``creds`` in format ``fmt`` (one of :data:`FORMATS`), as the bytes of the file."""
    if fmt == "json":
        body = {key: getattr(creds, name) for key, name in _JSON.items()}
        body["labels"] = dict(creds.labels)
        body["written_at_ms"] = written_at_ms
        return (json.dumps(body, indent=2) + "\n").encode()
    if fmt == "env":
        lines = []
        for key, name in _ENV.items():
            value = str(getattr(creds, name))
            lines.append(f"{key}={value if _SAFE.match(value) else shlex.quote(value)}")
        return ("\n".join(lines) + "\n").encode()
    if fmt == "properties":
        props = {key: str(getattr(creds, name)) for key, name in _PROPERTIES.items()}
        props["sasl.jaas.config"] = creds.jaas_config
        header = (f"# tokensvc agent: token {creds.token_id}, "
                  f"expires {_iso(creds.expiry_ms)}, max {_iso(creds.max_ms)}")
        lines = [header]
        for key, value in props.items():
            # Plain ``key=value`` where Java reads it back unchanged (a ``=`` after the first
            # is part of the value), so a shell script's ``cut -d= -f2-`` works too.
            plain = _PLAIN_PROPERTY.match(value) and "\\" not in value
            lines.append(f"{key}={value}" if plain else properties_text({key: value}).strip())
        return ("\n".join(lines) + "\n").encode()
    raise ValueError(f"unknown credentials format {fmt!r} (use one of {', '.join(FORMATS)})")


def sniff(data: bytes) -> str:
    """The format of a credentials file's content."""
    text = data.lstrip()
    if text.startswith(b"{"):
        return "json"
    if re.search(rb"^KAFKA_SASL_USERNAME=", data, re.MULTILINE):
        return "env"
    return "properties"


def parse(data: bytes, fmt: str | None = None) -> Credentials:
    """The token in a credentials file's content (format recognised when ``fmt`` is None).

    Raises :class:`CredentialsError` when a field is missing or malformed -- e.g. a file
    written by something else, or cut short -- so a watcher keeps its current token.
    """
    fmt = fmt or sniff(data)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise CredentialsError("the credentials file is not UTF-8 text") from None
    if fmt == "json":
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as exc:
            raise CredentialsError(f"not JSON: {exc.msg} at line {exc.lineno}") from None
        except (ValueError, RecursionError):  # an integer of 4300+ digits, nesting too deep
            raise CredentialsError("not JSON a reader accepts") from None
        if not isinstance(raw, dict):
            raise CredentialsError("not a JSON object")
        values = {name: raw.get(key) for key, name in _JSON.items()}
        labels = raw.get("labels") or {}
        if not isinstance(labels, dict):
            raise CredentialsError("labels is not an object")
        return _utf8(replace(_credentials(values),
                             labels=tuple(sorted((str(k), str(v)) for k, v in labels.items()))))
    elif fmt == "env":
        values = {}
        for line in text.splitlines():
            key, sep, value = line.partition("=")
            if sep and key in _ENV:
                try:
                    parts = shlex.split(value)
                except ValueError:
                    raise CredentialsError(f"{key}: unterminated quote") from None
                values[_ENV[key]] = parts[0] if parts else ""
    elif fmt == "properties":
        try:
            props = parse_properties(text)
        except ValueError as exc:
            raise CredentialsError(str(exc)) from None
        values = {name: props.get(key) for key, name in _PROPERTIES.items()}
    else:
        raise CredentialsError(f"unknown credentials format {fmt!r}")
    return _utf8(_credentials(values))


def _utf8(creds: Credentials) -> Credentials:
    """``creds``, refused if a text holds a lone surrogate (JSON's ``\\ud800`` or the
    properties' ``\\uD800`` escape reads as one): no client could send it."""
    try:
        "".join([*(str(getattr(creds, name)) for name in _PROPERTIES.values()),
                 *(k + v for k, v in creds.labels)]).encode("utf-8")
    except UnicodeEncodeError:
        raise CredentialsError("a value is not UTF-8 text") from None
    return creds


def _credentials(values: dict[str, object]) -> Credentials:
    missing = [name for name in _PROPERTIES.values() if values.get(name) in (None, "")]
    if missing:
        raise CredentialsError(f"incomplete credentials: no {', '.join(sorted(missing))}")
    for name in _INTS:
        try:
            values[name] = int(values[name])  # type: ignore[arg-type]
        except (TypeError, ValueError, OverflowError):  # OverflowError: JSON's Infinity
            raise CredentialsError(f"{name} is not a number") from None
    return Credentials(**{k: (v if k in _INTS else str(v)) for k, v in values.items()})
