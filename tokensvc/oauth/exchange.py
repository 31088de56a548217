"""The OAUTHBEARER SASL exchange (RFC 7628) as Kafka runs it, both sides, without I/O.

Server states (:class:`OAuthBearerServer`), one table of transitions::

    INITIAL    --the client's first message--> RECEIVED    (parsed; the token is checked)
    RECEIVED   --token accepted             --> COMPLETE
    RECEIVED   --token refused              --> ERROR_SENT  (challenge: error JSON)
    ERROR_SENT --the client's %x01          --> FAILED      (SASL_AUTHENTICATION_FAILED)
    anything else                           --> FAILED

The client's first message is ``n,[a=<authzid>],\\x01auth=Bearer <jwt>\\x01[k=v\\x01...]\\x01``.
A refused token is answered, as Kafka's ``OAuthBearerSaslServer`` does, with a challenge
(not an error code) holding ``{"status":"invalid_token"}``; the client acknowledges with a
single ``\\x01`` and only then gets SASL_AUTHENTICATION_FAILED, with the reason. An
authorization id, if given, must equal the mapped principal's name. Extensions are
parsed and ignored (Kafka ignores those its validator does not check).

:func:`client_first_message` and :func:`client_reply` are the client's side (tokensvc's
admin client and agent). Must not log or keep the token beyond the exchange.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from enum import Enum, auto

from tokensvc.oauth.refusals import OAuthRefusal

MECHANISM = "OAUTHBEARER"
SEPARATOR = "\x01"
_KEY = r"[A-Za-z]+"
_VALUE = r"[\x21-\x7E \t\r\n]+"
_FIRST = re.compile(
    r"n,(?:a=(?P<authzid>(?:[^=,\x00]|=2C|=3D)+))?,\x01(?P<pairs>(?:" + _KEY + "=" + _VALUE
    + r"\x01)*)\x01", re.DOTALL)
_AUTH = re.compile(r"(?P<scheme>\w+) +(?P<token>[-_~+/.a-zA-Z0-9]+=*)")


class State(Enum):
    INITIAL = auto()
    RECEIVED = auto()
    ERROR_SENT = auto()
    COMPLETE = auto()
    FAILED = auto()


_TRANSITIONS = {
    (State.INITIAL, "first"): State.RECEIVED,
    (State.RECEIVED, "accepted"): State.COMPLETE,
    (State.RECEIVED, "refused"): State.ERROR_SENT,
    (State.ERROR_SENT, "acknowledged"): State.FAILED,
}


@dataclass(frozen=True)
class ClientFirst:
    authzid: str
    token: str = field(repr=False)
    extensions: dict[str, str] = field(default_factory=dict)


class OAuthAuthenticationFailed(Exception):
    """The exchange ends in SASL_AUTHENTICATION_FAILED with ``message``."""


def parse_client_first(data: bytes) -> ClientFirst:
    """Parse the client's first message; OAuthRefusal ``malformed`` if it is not one."""
    try:
        text = bytes(data).decode("utf-8")
    except UnicodeDecodeError:
        raise OAuthRefusal("malformed") from None
    match = _FIRST.fullmatch(text)
    if match is None:
        raise OAuthRefusal("malformed", detail="not an OAUTHBEARER client first message")
    pairs: dict[str, str] = {}
    for item in match["pairs"].split(SEPARATOR):
        if item:
            key, _, value = item.partition("=")
            pairs[key] = value
    auth = pairs.pop("auth", None)
    found = _AUTH.fullmatch(auth) if auth is not None else None
    if found is None or found["scheme"].lower() != "bearer":
        raise OAuthRefusal("malformed", detail="no auth=Bearer <token>")
    authzid = (match["authzid"] or "").replace("=2C", ",").replace("=3D", "=")
    return ClientFirst(authzid, found["token"], pairs)


def error_challenge(status: str = "invalid_token") -> bytes:
    """The server's error challenge (RFC 7628 section 3.2.2)."""
    return json.dumps({"status": status}, separators=(",", ":")).encode()


class OAuthBearerServer:
    """One OAUTHBEARER exchange on the server (see the module's docstring)."""

    mechanism = MECHANISM

    def __init__(self, max_message_bytes: int) -> None:
        self.state = State.INITIAL
        self._max = max_message_bytes
        self._message: str | None = None

    @property
    def complete(self) -> bool:
        return self.state is State.COMPLETE

    def _move(self, event: str) -> None:
        try:
            self.state = _TRANSITIONS[(self.state, event)]
        except KeyError:
            self.state = State.FAILED
            raise OAuthAuthenticationFailed(f"unexpected {event} in state {self.state.name}") from None

    def first(self, data: bytes) -> ClientFirst:
        """The client's first message, parsed (OAuthRefusal if malformed or too large)."""
        if self.state is not State.INITIAL:
            self.state = State.FAILED
            raise OAuthAuthenticationFailed("the OAUTHBEARER exchange has already begun")
        self._move("first")
        if len(data) > self._max:
            raise OAuthRefusal("oversized", detail=f"a {len(data)}-byte message")
        return parse_client_first(data)

    def refuse(self, refusal: OAuthRefusal) -> bytes:
        """The token was refused: remember why, answer the error challenge."""
        self._move("refused")
        self._message = f"Authentication failed: {refusal.message}"
        return error_challenge()

    def acknowledge(self, data: bytes) -> None:
        """The client's reply to the error challenge: always OAuthAuthenticationFailed,
        with the reason when it is the expected ``\\x01``."""
        if self.state is State.ERROR_SENT and bytes(data) == SEPARATOR.encode():
            self._move("acknowledged")
            raise OAuthAuthenticationFailed(self._message or "Authentication failed")
        self.state = State.FAILED
        raise OAuthAuthenticationFailed(
            "Authentication failed: expected the client's %x01 after the error challenge")

    def accept(self, first: ClientFirst, principal_name: str) -> None:
        """The token was accepted for ``principal_name``; the authzid must agree."""
        if first.authzid and first.authzid != principal_name:
            self.state = State.FAILED
            raise OAuthRefusal("authzid_mismatch",
                               detail=f"{first.authzid[:100]!r} is not {principal_name!r}")
        self._move("accepted")


def client_first_message(token: str, authzid: str = "", extensions: dict[str, str] | None = None) -> bytes:
    """The client's first message for ``token`` (tokensvc's admin client and agent)."""
    if "\x01" in token or not _AUTH.fullmatch(f"Bearer {token}"):
        raise ValueError("the token is not a bearer token (RFC 6750 characters)")
    gs2 = f"n,a={authzid.replace('=', '=3D').replace(',', '=2C')}," if authzid else "n,,"
    pairs = "".join(f"{k}={v}{SEPARATOR}" for k, v in (extensions or {}).items())
    return f"{gs2}{SEPARATOR}auth=Bearer {token}{SEPARATOR}{pairs}{SEPARATOR}".encode()


def client_reply(challenge: bytes) -> bytes | None:
    """The client's answer to a server challenge: None once the server accepted (empty
    challenge), else the ``\\x01`` acknowledging an error."""
    return None if not challenge else SEPARATOR.encode()
