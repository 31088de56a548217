"""The znode layout tokensvc shares with Kafka (ZooKeeper mode), and its JSON codecs.

Owns: every path tokensvc reads or writes for tokens, the controller and the broker
registry, and the exact bytes stored there. The token JSON is Kafka's
``DelegationTokenInfoZNode`` (version 3) plus one field of ours, ``keyId``, written only
when it is not empty; the controller, controller epoch, broker and cluster id znodes are
encoded as Kafka encodes them, so Kafka's tools can read what tokensvc writes.

Must not: talk to ZooKeeper (this module is pure: bytes in, values out), read the clock
(timestamps are arguments), or ever encode an HMAC or a key. Malformed data raises
:class:`LayoutError` with a message naming what is wrong, never the data's secrets.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from typing import Any

from tokensvc.core.principal import KafkaPrincipal, desanitize, sanitize
from tokensvc.core.token import TokenInformation

DELEGATION_TOKEN = "/delegation_token"
TOKENS = f"{DELEGATION_TOKEN}/tokens"
TOKEN_CHANGES = f"{DELEGATION_TOKEN}/token_changes"
TOKEN_CHANGE_PREFIX = "token_change_"
CONTROLLER = "/controller"
CONTROLLER_EPOCH = "/controller_epoch"
BROKERS = "/brokers"
BROKER_IDS = f"{BROKERS}/ids"
CLUSTER = "/cluster"
CLUSTER_ID = f"{CLUSTER}/id"

TOKEN_VERSION = 3
CONTROLLER_VERSION = 1
BROKER_VERSION = 5
CLUSTER_ID_VERSION = "1"

# Endpoint of a listener in a broker registration: (security protocol, host, port).
Endpoint = tuple[str, str, int]


class LayoutError(ValueError):
    """A znode's bytes do not decode to what its path promises."""


def _dumps(value: Mapping[str, Any]) -> bytes:
    # Jackson's compact form, as Kafka writes it: no spaces, UTF-8, '/' unescaped.
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def _loads_object(data: bytes | None, what: str) -> dict[str, Any]:
    if not data:
        raise LayoutError(f"{what} znode is empty")
    try:
        value = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise LayoutError(f"{what} znode is not UTF-8 JSON: {exc.__class__.__name__}") from None
    if not isinstance(value, dict):
        raise LayoutError(f"{what} znode is not a JSON object")
    return value


_KIND_NAMES = {int: "an integer", str: "a string", list: "a list", dict: "an object"}


def _field(obj: Mapping[str, Any], key: str, kind: type, what: str) -> Any:
    if key not in obj:
        raise LayoutError(f"{what} znode has no {key!r}")
    value = obj[key]
    # bool is an int in Python; JSON true is never a valid timestamp or id.
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise LayoutError(f"{what} znode field {key!r} is not {_KIND_NAMES[kind]}")
    return value


@functools.lru_cache(maxsize=4096)
def _principal(text: str, what: str) -> KafkaPrincipal:
    # Memoized: owners and renewers repeat across many tokens, and a cold start decodes
    # every token (KafkaPrincipal is immutable, so sharing instances is safe).
    try:
        return KafkaPrincipal.parse(desanitize(text))
    except ValueError as exc:
        raise LayoutError(f"{what} znode: {exc}") from None


# --- paths -----------------------------------------------------------------------------


def token_path(token_id: str) -> str:
    """``/delegation_token/tokens/<id>``; refuses ids that are not a single path segment."""
    if not token_id or "/" in token_id or token_id in (".", "..") or "\x00" in token_id:
        raise ValueError(f"token id {token_id!r} cannot be a znode name")
    return f"{TOKENS}/{token_id}"


def token_change_create_path() -> str:
    """The path to create a sequential token change notification at (ZooKeeper appends
    the 10-digit sequence number)."""
    return f"{TOKEN_CHANGES}/{TOKEN_CHANGE_PREFIX}"


def token_change_name(sequence: int) -> str:
    """The child name ZooKeeper gives the notification with ``sequence`` (10 digits,
    zero-padded: names of valid notifications sort as their sequence numbers do)."""
    return f"{TOKEN_CHANGE_PREFIX}{sequence:010d}"


def is_token_change_name(name: str) -> bool:
    """True for ``token_change_<10 digits>``: cheaper than parsing, for long listings."""
    return (
        len(name) == _TOKEN_CHANGE_NAME_LEN
        and name.startswith(TOKEN_CHANGE_PREFIX)
        and name[len(TOKEN_CHANGE_PREFIX):].isdigit()
    )


_TOKEN_CHANGE_NAME_LEN = len(TOKEN_CHANGE_PREFIX) + 10


def token_change_sequence(name: str) -> int | None:
    """The sequence number of a ``token_change_<seq>`` child name, None for other names."""
    if not name.startswith(TOKEN_CHANGE_PREFIX):
        return None
    digits = name[len(TOKEN_CHANGE_PREFIX) :]
    if not digits.isdigit():
        return None
    return int(digits)


def broker_path(broker_id: int) -> str:
    return f"{BROKER_IDS}/{int(broker_id)}"


# --- tokens ----------------------------------------------------------------------------


def encode_token(info: TokenInformation) -> bytes:
    """Kafka's version-3 token JSON (principals sanitized), plus ``keyId`` when set.

    The HMAC is not part of :class:`TokenInformation`, so it can never reach ZooKeeper.
    """
    value: dict[str, Any] = {
        "version": TOKEN_VERSION,
        "owner": sanitize(str(info.owner)),
        "tokenRequester": sanitize(str(info.token_requester)),
        "renewers": [sanitize(str(r)) for r in info.renewers],
        "issueTimestamp": info.issue_timestamp,
        "maxTimestamp": info.max_timestamp,
        "expiryTimestamp": info.expiry_timestamp,
        "tokenId": info.token_id,
    }
    if info.key_id:
        value["keyId"] = info.key_id
    return _dumps(value)


def decode_token(data: bytes | None) -> TokenInformation:
    """Read a token znode written by Kafka (versions 1 to 3) or by tokensvc.

    Versions before 3 have no ``tokenRequester``: the owner requested the token.
    """
    what = "delegation token"
    obj = _loads_object(data, what)
    version = _field(obj, "version", int, what)
    if not 1 <= version <= TOKEN_VERSION:
        raise LayoutError(f"{what} znode has unsupported version {version}")
    owner = _principal(_field(obj, "owner", str, what), what)
    requester = owner
    if version >= 3:
        requester = _principal(_field(obj, "tokenRequester", str, what), what)
    renewers = _field(obj, "renewers", list, what)
    if not all(isinstance(r, str) for r in renewers):
        raise LayoutError(f"{what} znode field 'renewers' is not a list of strings")
    key_id = obj.get("keyId", "")
    if not isinstance(key_id, str):
        raise LayoutError(f"{what} znode field 'keyId' is not a string")
    token_id = _field(obj, "tokenId", str, what)
    if not token_id:
        raise LayoutError(f"{what} znode has an empty 'tokenId'")
    return TokenInformation(
        token_id=token_id,
        owner=owner,
        token_requester=requester,
        renewers=tuple(_principal(r, what) for r in renewers),
        issue_timestamp=_field(obj, "issueTimestamp", int, what),
        expiry_timestamp=_field(obj, "expiryTimestamp", int, what),
        max_timestamp=_field(obj, "maxTimestamp", int, what),
        key_id=key_id,
    )


def encode_token_change(token_id: str) -> bytes:
    """A change notification's payload: the token id, UTF-8."""
    return token_id.encode("utf-8")


def decode_token_change(data: bytes | None) -> str:
    if not data:
        raise LayoutError("token change notification is empty")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise LayoutError("token change notification is not UTF-8") from None


# --- controller ------------------------------------------------------------------------


def encode_controller(broker_id: int, timestamp_ms: int) -> bytes:
    """``{"version":1,"brokerid":N,"timestamp":"<ms>"}`` (the timestamp is a string)."""
    return _dumps(
        {"version": CONTROLLER_VERSION, "brokerid": int(broker_id), "timestamp": str(timestamp_ms)}
    )


def decode_controller(data: bytes | None) -> int:
    """The controller's broker id."""
    return _field(_loads_object(data, "controller"), "brokerid", int, "controller")


def encode_controller_epoch(epoch: int) -> bytes:
    """The epoch as decimal text, as Kafka writes ``/controller_epoch``."""
    return str(int(epoch)).encode("ascii")


def decode_controller_epoch(data: bytes | None) -> int:
    try:
        return int((data or b"").decode("ascii"))
    except (UnicodeDecodeError, ValueError):
        raise LayoutError("controller epoch znode is not a decimal integer") from None


# --- brokers ---------------------------------------------------------------------------


def _format_endpoint(name: str, host: str, port: int) -> str:
    shown = f"[{host}]" if ":" in host else host
    return f"{name}://{shown}:{int(port)}"


def _parse_endpoint(text: str) -> tuple[str, str, int]:
    name, sep, address = text.partition("://")
    host, colon, port = address.rpartition(":")
    if not sep or not name or not colon or not port.isdigit():
        raise LayoutError(f"broker endpoint {text!r} is not NAME://host:port")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return name, host, int(port)


def encode_broker(
    endpoints: Mapping[str, Endpoint],
    timestamp_ms: int,
    *,
    rack: str | None = None,
    jmx_port: int = -1,
) -> bytes:
    """Kafka's version-5 broker registration.

    ``endpoints`` maps a listener name to (security protocol, host, port). As in Kafka,
    the top-level ``host``/``port`` name the first PLAINTEXT listener (null and -1 when
    there is none; old clients only speak PLAINTEXT). ``rack`` is always written.
    """
    if not endpoints:
        raise ValueError("a broker registration needs at least one endpoint")
    plaintext = next((e for e in endpoints.values() if e[0] == "PLAINTEXT"), None)
    value = {
        "version": BROKER_VERSION,
        "listener_security_protocol_map": {name: e[0] for name, e in endpoints.items()},
        "endpoints": [_format_endpoint(name, e[1], e[2]) for name, e in endpoints.items()],
        "host": plaintext[1] if plaintext else None,
        "port": int(plaintext[2]) if plaintext else -1,
        "jmx_port": jmx_port,
        "timestamp": str(timestamp_ms),
        "features": {},
        "rack": rack,
    }
    return _dumps(value)


def decode_broker(broker_id: int, data: bytes | None) -> dict[str, Any]:
    """A registration (any Kafka version from 1) as
    ``{"id", "version", "endpoints": {name: (protocol, host, port)}, "rack", "timestamp"}``.
    """
    what = f"broker {broker_id}"
    obj = _loads_object(data, what)
    version = _field(obj, "version", int, what)
    endpoints: dict[str, Endpoint] = {}
    if version < 1:
        raise LayoutError(f"{what} znode has unsupported version {version}")
    if version == 1:
        endpoints["PLAINTEXT"] = (
            "PLAINTEXT",
            _field(obj, "host", str, what),
            _field(obj, "port", int, what),
        )
    else:
        protocols = obj.get("listener_security_protocol_map") or {}
        if not isinstance(protocols, dict):
            raise LayoutError(f"{what} znode field 'listener_security_protocol_map' is not a map")
        for text in _field(obj, "endpoints", list, what):
            if not isinstance(text, str):
                raise LayoutError(f"{what} znode field 'endpoints' is not a list of strings")
            name, host, port = _parse_endpoint(text)
            endpoints[name] = (str(protocols.get(name, name)), host, port)
    rack = obj.get("rack")
    timestamp = obj.get("timestamp", "-1")
    try:
        timestamp_ms = int(timestamp)
    except (TypeError, ValueError):
        raise LayoutError(f"{what} znode field 'timestamp' is not a number") from None
    return {
        "id": int(broker_id),
        "version": version,
        "endpoints": endpoints,
        "rack": rack if isinstance(rack, str) else None,
        "timestamp": timestamp_ms,
    }


# --- cluster id ------------------------------------------------------------------------


def encode_cluster_id(cluster_id: str) -> bytes:
    """``{"version":"1","id":"<id>"}`` (Kafka writes the version as a string here)."""
    return _dumps({"version": CLUSTER_ID_VERSION, "id": cluster_id})


def decode_cluster_id(data: bytes | None) -> str:
    return _field(_loads_object(data, "cluster id"), "id", str, "cluster id")
