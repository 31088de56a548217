"""SCRAM messages (RFC 5802 section 7): one class per message, each with parse and format.

Owns the text grammar of the four SCRAM messages, Kafka's multi-letter
extensions (``tokenauth=true``), saslname escaping, and the one failure type
of the SCRAM layer, :class:`ScramAuthenticationError`. Parsing is strict: a
message is accepted only if formatting the parsed value gives back the same
text, so the AuthMessage can be rebuilt from parsed fields byte for byte.

It must not do crypto (see ``formatter``), keep state (see ``server`` and
``client``), or touch I/O. Parse errors are ``ScramAuthenticationError`` with
reason ``malformed`` (or ``channel_binding`` for a client asking for it).
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from tokensvc.core.errors import Errors, KafkaError

GS2_NO_CHANNEL_BINDING = "n"
RESERVED_MANDATORY_EXTENSION = "m"
TOKEN_AUTH_EXTENSION = "tokenauth"

# RFC 5802 "printable": %x21-2B / %x2D-7E (visible ASCII except ',').
PRINTABLE = re.compile(r"[\x21-\x2b\x2d-\x7e]+")
# Kafka accepts multi-letter extension keys (RFC 5802 has single ALPHA).
_EXTENSION_KEY = re.compile(r"[A-Za-z]+")
_DIGITS = re.compile(r"[0-9]{1,9}")
_ESCAPES = {"=2C": ",", "=3D": "="}


class FailureReason(StrEnum):
    """Short reason classes for audit; never secret material."""

    UNKNOWN_USER = "unknown_user"
    UNKNOWN_TOKEN = "unknown_token"
    EXPIRED_TOKEN = "expired_token"
    BAD_PROOF = "bad_proof"
    NONCE_MISMATCH = "nonce_mismatch"
    # client-final's nonce was the client nonce followed by the whole server-first
    # nonce (librdkafka < 2.6.1), refused: sasl.scram.accept.repeated.client.nonce=false.
    REPEATED_CLIENT_NONCE = "repeated_client_nonce"
    AUTHZID_MISMATCH = "authzid_mismatch"
    ITERATIONS = "iterations"
    MALFORMED = "malformed"
    BAD_STATE = "bad_state"
    CHANNEL_BINDING = "channel_binding"
    # Client side only.
    SERVER_ERROR = "server_error"
    BAD_SERVER_SIGNATURE = "bad_server_signature"


class ScramAuthenticationError(KafkaError):
    """A SCRAM exchange failed; maps to SASL_AUTHENTICATION_FAILED.

    ``reason`` is a :class:`FailureReason` value for audit and metrics. The
    message (and so ``str()``) is the same for every reason, so a caller that
    echoes it to a client cannot reveal whether a user or token exists.
    """

    def __init__(self, reason: str) -> None:
        self.reason = str(reason)
        super().__init__(Errors.SASL_AUTHENTICATION_FAILED, "SCRAM authentication failed")

    def __repr__(self) -> str:
        return f"ScramAuthenticationError(reason={self.reason!r})"


def _malformed() -> ScramAuthenticationError:
    return ScramAuthenticationError(FailureReason.MALFORMED)


def escape_saslname(name: str) -> str:
    """RFC 5802 saslname encoding: '=' as '=3D', ',' as '=2C'."""
    return name.replace("=", "=3D").replace(",", "=2C")


def unescape_saslname(text: str) -> str:
    """Decode a saslname; '=' must start '=2C' or '=3D' and the name is not empty."""
    if not text:
        raise _malformed()
    out: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "=":
            decoded = _ESCAPES.get(text[i : i + 3])
            if decoded is None:
                raise _malformed()
            out.append(decoded)
            i += 3
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def b64_encode(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def b64_decode(text: str) -> bytes:
    """Strict, canonical standard base64 (so re-encoding gives the same text)."""
    try:
        data = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise _malformed() from None
    if b64_encode(data) != text:
        raise _malformed()
    return data


def _printable(text: str) -> str:
    if not PRINTABLE.fullmatch(text):
        raise _malformed()
    return text


def _attribute(part: str, key: str) -> str:
    if not part.startswith(key + "="):
        raise _malformed()
    return part[len(key) + 1 :]


def validate_extensions(extensions: Mapping[str, str]) -> dict[str, str]:
    """Check extension keys and values; raise ValueError naming the bad key."""
    for key, value in extensions.items():
        if not _EXTENSION_KEY.fullmatch(key) or key == RESERVED_MANDATORY_EXTENSION:
            raise ValueError(f"invalid SCRAM extension key {key!r}")
        if not value or "," in value or "\x00" in value:
            raise ValueError(f"invalid value for SCRAM extension {key!r}")
    return dict(extensions)


def _parse_extensions(parts: list[str]) -> dict[str, str]:
    extensions: dict[str, str] = {}
    for part in parts:
        key, sep, value = part.partition("=")
        if not sep or key in extensions:
            raise _malformed()
        extensions[key] = value
    try:
        return validate_extensions(extensions)
    except ValueError:
        raise _malformed() from None


def _format_extensions(extensions: Mapping[str, str]) -> str:
    return "".join(f",{key}={value}" for key, value in extensions.items())


def _split(text: str, minimum: int) -> list[str]:
    if "\x00" in text:
        raise _malformed()
    parts = text.split(",")
    if len(parts) < minimum:
        raise _malformed()
    return parts


@dataclass(frozen=True, slots=True)
class ClientFirstMessage:
    """``gs2-header client-first-message-bare``: ``n,[a=authzid],n=user,r=nonce[,ext...]``."""

    username: str
    nonce: str
    authzid: str | None = None
    extensions: dict[str, str] = field(default_factory=dict)

    @property
    def gs2_header(self) -> str:
        authzid = "" if self.authzid is None else "a=" + escape_saslname(self.authzid)
        return f"{GS2_NO_CHANNEL_BINDING},{authzid},"

    @property
    def bare(self) -> str:
        """client-first-message-bare, extensions included (part of the AuthMessage)."""
        return f"n={escape_saslname(self.username)},r={self.nonce}" + _format_extensions(
            self.extensions
        )

    @property
    def token_authentication(self) -> bool:
        """Kafka's ``tokenauth`` extension, read as Java's Boolean.parseBoolean does."""
        return self.extensions.get(TOKEN_AUTH_EXTENSION, "").lower() == "true"

    def to_text(self) -> str:
        return self.gs2_header + self.bare

    @classmethod
    def parse(cls, text: str) -> ClientFirstMessage:
        parts = _split(text, 4)
        flag, authz = parts[0], parts[1]
        if flag == "y" or flag.startswith("p="):
            raise ScramAuthenticationError(FailureReason.CHANNEL_BINDING)
        if flag != GS2_NO_CHANNEL_BINDING:
            raise _malformed()
        authzid = unescape_saslname(_attribute(authz, "a")) if authz else None
        username = unescape_saslname(_attribute(parts[2], "n"))
        nonce = _printable(_attribute(parts[3], "r"))
        message = cls(username, nonce, authzid, _parse_extensions(parts[4:]))
        if message.to_text() != text:
            raise _malformed()
        return message


@dataclass(frozen=True, slots=True)
class ServerFirstMessage:
    """``r=<client+server nonce>,s=<b64 salt>,i=<iterations>[,ext...]``."""

    nonce: str
    salt: bytes
    iterations: int
    extensions: dict[str, str] = field(default_factory=dict)

    def to_text(self) -> str:
        return f"r={self.nonce},s={b64_encode(self.salt)},i={self.iterations}" + _format_extensions(
            self.extensions
        )

    @classmethod
    def parse(cls, text: str) -> ServerFirstMessage:
        parts = _split(text, 3)
        nonce = _printable(_attribute(parts[0], "r"))
        salt = b64_decode(_attribute(parts[1], "s"))
        iterations_text = _attribute(parts[2], "i")
        if not _DIGITS.fullmatch(iterations_text) or not salt:
            raise _malformed()
        message = cls(nonce, salt, int(iterations_text), _parse_extensions(parts[3:]))
        if message.to_text() != text:
            raise _malformed()
        return message


@dataclass(frozen=True, slots=True)
class ClientFinalMessage:
    """``c=<b64 gs2 header>,r=<nonce>[,ext...],p=<b64 proof>``."""

    channel_binding: bytes
    nonce: str
    proof: bytes
    extensions: dict[str, str] = field(default_factory=dict)

    @property
    def without_proof(self) -> str:
        """client-final-message-without-proof (part of the AuthMessage)."""
        return f"c={b64_encode(self.channel_binding)},r={self.nonce}" + _format_extensions(
            self.extensions
        )

    def to_text(self) -> str:
        return f"{self.without_proof},p={b64_encode(self.proof)}"

    @classmethod
    def parse(cls, text: str) -> ClientFinalMessage:
        parts = _split(text, 3)
        channel_binding = b64_decode(_attribute(parts[0], "c"))
        nonce = _printable(_attribute(parts[1], "r"))
        proof = b64_decode(_attribute(parts[-1], "p"))
        if not proof:
            raise _malformed()
        message = cls(channel_binding, nonce, proof, _parse_extensions(parts[2:-1]))
        if message.to_text() != text:
            raise _malformed()
        return message


@dataclass(frozen=True, slots=True)
class ServerFinalMessage:
    """``v=<b64 server signature>[,ext...]`` or ``e=<server error value>``."""

    verifier: bytes | None = None
    error: str | None = None
    extensions: dict[str, str] = field(default_factory=dict)

    def to_text(self) -> str:
        if self.error is not None:
            return f"e={self.error}"
        assert self.verifier is not None
        return f"v={b64_encode(self.verifier)}" + _format_extensions(self.extensions)

    @classmethod
    def parse(cls, text: str) -> ServerFinalMessage:
        parts = _split(text, 1)
        if parts[0].startswith("e="):
            error = parts[0][2:]
            if not error:
                raise _malformed()
            return cls(error=error)
        verifier = b64_decode(_attribute(parts[0], "v"))
        if not verifier:
            raise _malformed()
        message = cls(verifier=verifier, extensions=_parse_extensions(parts[1:]))
        if message.to_text() != text:
            raise _malformed()
        return message


def auth_message(
    first: ClientFirstMessage, server_first: ServerFirstMessage, final: ClientFinalMessage
) -> bytes:
    """RFC 5802 AuthMessage: client-first-bare (with extensions), server-first, final sans proof."""
    return f"{first.bare},{server_first.to_text()},{final.without_proof}".encode()
