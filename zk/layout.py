"""The znode layout tokensvc shares with Kafka (ZooKeeper mode), and its JSON codecs.

Owns: every path tokensvc reads or writes for tokens, the controller, the broker
registry and the brokers' clock probes (``/tokensvc/clock/<id>``, tokensvc's own), and
the exact bytes stored there. The token JSON is Kafka's
``DelegationTokenInfoZNode`` (version 3) in the order Kafka 3.9 writes its seven fields
and version (a Scala hash map's order, not the order of its source), plus two fields of
ours after them, each written only when it is not empty: ``keyId`` and ``labels`` (a JSON
object of the token's labels, sorted by key; Kafka's reader ignores fields it does not
know). A token without them is byte for byte what a Kafka broker writes. Their copy apart,
``/tokensvc/token_labels/<id>`` (:func:`encode_token_side`), is what a Kafka renewal --
which rewrites the token znode with its seven fields only -- does not touch. The
controller, controller epoch, broker and cluster id znodes are encoded as Kafka encodes
them, so Kafka's tools can read what tokensvc writes.

:func:`decode_tokens` is the cold-start path for many token znodes at once (one JSON
parse per batch, shared key ids and renewer lists); it pauses Python's cyclic garbage
collector while it runs and restores it, its only effect outside its arguments.

Must not: talk to ZooKeeper (this module is pure: bytes in, values out), read the clock
(timestamps are arguments), or ever encode an HMAC or a key. Malformed data raises
:class:`LayoutError` with a message naming what is wrong, never the data's secrets.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tokensvc.core import collector
from tokensvc.core.labels import NO_LABELS, LabelError, Labels, validate
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
# tokensvc's own root (Kafka has nothing there). /tokensvc/clock/<broker id>: the znode
# each broker writes to read ZooKeeper's time (its mtime) and report its clock offset.
TOKENSVC = "/tokensvc"
CLOCK = f"{TOKENSVC}/clock"
# /tokensvc/token_labels/<token id>: a token's key id and labels, kept where a Kafka
# broker's renewal (which rewrites the token znode with Kafka's seven fields) leaves them.
TOKEN_LABELS = f"{TOKENSVC}/token_labels"

# Kafka's coordination znodes. Beside a Kafka cluster (``kafka.zookeeper.shared=true``)
# tokensvc creates, writes and deletes none of them; it only reads /cluster/id.
KAFKA_COORDINATION_ROOTS = (
    CONTROLLER,
    CONTROLLER_EPOCH,
    BROKERS,
    CLUSTER,
    "/feature",
    "/admin",
    "/isr_change_notification",
    "/migration",
)
# A Kafka ZooKeeper-to-KRaft migration in progress (Kafka's MigrationZNode).
MIGRATION = "/migration"

TOKEN_VERSION = 3
CONTROLLER_VERSION = 1
BROKER_VERSION = 5
CLUSTER_ID_VERSION = "1"
CLOCK_VERSION = 1
TOKEN_SIDE_VERSION = 1

# Endpoint of a listener in a broker registration: (security protocol, host, port).
Endpoint = tuple[str, str, int]


class LayoutError(ValueError):
    """A znode's bytes do not decode to what its path promises."""


# A JSON escape of a UTF-16 surrogate: ``\ud800`` alone reads as a lone surrogate, which
# is no UTF-8 text (encoding it again, or logging it, would raise).
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


def has_lone_surrogate(data: bytes, value: object) -> bool:
    """True when ``value``, parsed from the JSON ``data``, holds a lone surrogate (checked
    only when ``data`` escapes a surrogate at all: a cheap scan in the common case)."""
    if not _SURROGATE_ESCAPE.search(data):
        return False
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _dumps(value: Mapping[str, Any]) -> bytes:
    # Jackson's compact form, as Kafka writes it: no spaces, UTF-8, '/' unescaped.
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def _loads_object(data: bytes | None, what: str) -> dict[str, Any]:
    if not data:
        raise LayoutError(f"{what} znode is empty")
    try:
        value = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        # ValueError: a JSONDecodeError, or an integer of more than 4300 digits;
        # RecursionError: arrays or objects nested deeper than the interpreter's stack.
        raise LayoutError(f"{what} znode is not UTF-8 JSON: {exc.__class__.__name__}") from None
    if not isinstance(value, dict):
        raise LayoutError(f"{what} znode is not a JSON object")
    if has_lone_surrogate(data, value):
        raise LayoutError(f"{what} znode holds a lone surrogate escape (not UTF-8 text)")
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


def token_side_path(token_id: str) -> str:
    """``/tokensvc/token_labels/<id>``: the token's key id and labels, apart."""
    return f"{TOKEN_LABELS}/{token_path(token_id).rsplit('/', 1)[1]}"


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
        and name.isascii()
        and name[len(TOKEN_CHANGE_PREFIX):].isdigit()
    )


_TOKEN_CHANGE_NAME_LEN = len(TOKEN_CHANGE_PREFIX) + 10


def token_change_sequence(name: str) -> int | None:
    """The sequence number of a ``token_change_<seq>`` child name, None for other names."""
    if not name.startswith(TOKEN_CHANGE_PREFIX):
        return None
    digits = name[len(TOKEN_CHANGE_PREFIX) :]
    if not (digits.isascii() and digits.isdigit()):  # '²' is a digit int() refuses
        return None
    return int(digits)


def broker_path(broker_id: int) -> str:
    return ALONE.broker_path(broker_id)


@dataclass(frozen=True)
class Coordination:
    """Where tokensvc's brokers elect their controller and register themselves.

    ``ALONE`` is Kafka's own layout (tokensvc has the ensemble to itself, and Kafka's tools
    read its controller and brokers); ``BESIDE_KAFKA`` moves all three under ``/tokensvc``
    so a Kafka cluster on the same ensemble and chroot never sees tokensvc's brokers as
    its own. ``cluster_id_writable``: whether tokensvc may create ``/cluster/id``."""

    controller: str
    controller_epoch: str
    broker_ids: str
    cluster_id_writable: bool

    def broker_path(self, broker_id: int) -> str:
        return f"{self.broker_ids}/{int(broker_id)}"


ALONE = Coordination(CONTROLLER, CONTROLLER_EPOCH, BROKER_IDS, cluster_id_writable=True)
BESIDE_KAFKA = Coordination(
    f"{TOKENSVC}/controller",
    f"{TOKENSVC}/controller_epoch",
    f"{TOKENSVC}/brokers/ids",
    cluster_id_writable=False,
)
# Beside Kafka, the cluster id tokensvc reports until a Kafka broker has written /cluster/id.
OWN_CLUSTER_ID = f"{TOKENSVC}/cluster/id"


def coordination(kafka_shared: bool) -> Coordination:
    """The coordination paths of a broker with ``kafka.zookeeper.shared`` as given."""
    return BESIDE_KAFKA if kafka_shared else ALONE


def clock_path(broker_id: int) -> str:
    """``/tokensvc/clock/<broker id>``: the broker's clock probe (see :mod:`zk.clock`)."""
    return f"{CLOCK}/{int(broker_id)}"


# --- tokens ----------------------------------------------------------------------------


def encode_token(info: TokenInformation) -> bytes:
    """Kafka's version-3 token JSON (principals sanitized), plus ``keyId`` when set.

    The HMAC is not part of :class:`TokenInformation`, so it can never reach ZooKeeper.
    """
    # Kafka 3.9 builds an immutable Scala Map of these eight keys and Jackson writes it
    # in the map's iteration order, which for these keys is always this one.
    value: dict[str, Any] = {
        "issueTimestamp": info.issue_timestamp,
        "renewers": [sanitize(str(r)) for r in info.renewers],
        "tokenRequester": sanitize(str(info.token_requester)),
        "tokenId": info.token_id,
        "owner": sanitize(str(info.owner)),
        "expiryTimestamp": info.expiry_timestamp,
        "maxTimestamp": info.max_timestamp,
        "version": TOKEN_VERSION,
    }
    if info.key_id:
        value["keyId"] = info.key_id
    if info.labels:
        value["labels"] = dict(info.labels)
    return _dumps(value)


def has_side_fields(info: TokenInformation) -> bool:
    """Whether the token carries a field of ours (key id, labels) a Kafka renewal drops."""
    return bool(info.key_id or info.labels)


def encode_token_side(info: TokenInformation) -> bytes:
    """``/tokensvc/token_labels/<id>``: ``{"version":1,"keyId":...,"labels":{...}}`` (the
    fields of ours the token znode carries; never an HMAC or a key)."""
    return _dumps({"version": TOKEN_SIDE_VERSION, "keyId": info.key_id,
                   "labels": dict(info.labels)})


def decode_token_side(data: bytes | None) -> tuple[str, Labels]:
    """The key id and labels a side znode keeps."""
    what = "token labels"
    obj = _loads_object(data, what)
    version = _field(obj, "version", int, what)
    if version != TOKEN_SIDE_VERSION:
        raise LayoutError(f"{what} znode has unsupported version {version}")
    key_id = _field(obj, "keyId", str, what)
    return key_id, _labels(_field(obj, "labels", dict, what), what)


def restore_side_fields(info: TokenInformation, side: bytes | None) -> TokenInformation:
    """``info`` with the key id and labels of its side znode's bytes (``side``), when it
    lost them (a Kafka renewal rewrote it) and they decode; else ``info`` itself."""
    if side is None or has_side_fields(info):
        return info
    key_id, labels = decode_token_side(side)
    return dataclasses.replace(info, key_id=key_id, labels=labels)


def _labels(raw: object, what: str) -> Labels:
    """A znode's ``labels`` object as a label set (the rules of tokensvc.core.labels)."""
    if not isinstance(raw, dict):
        raise LayoutError(f"{what} znode field 'labels' is not an object")
    try:
        return validate(raw.items())
    except LabelError as exc:
        raise LayoutError(f"{what} znode field 'labels': {exc.message}") from None


def decode_token(data: bytes | None) -> TokenInformation:
    """Read a token znode written by Kafka (versions 1 to 3) or by tokensvc.

    Versions before 3 have no ``tokenRequester``: the owner requested the token.
    """
    return _token_from_object(_loads_object(data, "delegation token"), None)


def _token_from_object(obj: dict[str, Any], shared: _Shared | None) -> TokenInformation:
    """The token an already parsed znode object describes, with every check of
    :func:`decode_token`; ``shared`` makes equal key ids and renewer lists one object."""
    what = "delegation token"
    version = _field(obj, "version", int, what)
    if not 1 <= version <= TOKEN_VERSION:
        raise LayoutError(f"{what} znode has unsupported version {version}")
    owner = _principal(_field(obj, "owner", str, what), what)
    requester = owner
    if version >= 3:
        requester = _principal(_field(obj, "tokenRequester", str, what), what)
    renewer_names = _field(obj, "renewers", list, what)
    if not all(isinstance(r, str) for r in renewer_names):
        raise LayoutError(f"{what} znode field 'renewers' is not a list of strings")
    key_id = obj.get("keyId", "")
    if not isinstance(key_id, str):
        raise LayoutError(f"{what} znode field 'keyId' is not a string")
    token_id = _field(obj, "tokenId", str, what)
    if not token_id:
        raise LayoutError(f"{what} znode has an empty 'tokenId'")
    raw_labels = obj.get("labels")
    if shared is None:
        renewers = tuple(_principal(r, what) for r in renewer_names)
        labels = NO_LABELS if raw_labels is None else _labels(raw_labels, what)
    else:
        renewers = shared.renewers(renewer_names, what)
        key_id = shared.key_ids.setdefault(key_id, key_id)
        labels = NO_LABELS if raw_labels is None else shared.labels(raw_labels, what)
    return TokenInformation(
        token_id=token_id,
        owner=owner,
        token_requester=requester,
        renewers=renewers,
        issue_timestamp=_field(obj, "issueTimestamp", int, what),
        expiry_timestamp=_field(obj, "expiryTimestamp", int, what),
        max_timestamp=_field(obj, "maxTimestamp", int, what),
        key_id=key_id,
        labels=labels,
    )


class _Shared:
    """Values many tokens of one bulk decode have in common, kept once."""

    __slots__ = ("_labels", "_renewers", "key_ids")

    def __init__(self) -> None:
        self.key_ids: dict[str, str] = {}
        self._renewers: dict[tuple[str, ...], tuple[KafkaPrincipal, ...]] = {}
        self._labels: dict[tuple[tuple[object, object], ...], Labels] = {}

    def renewers(self, names: list[str], what: str) -> tuple[KafkaPrincipal, ...]:
        key = tuple(names)
        found = self._renewers.get(key)
        if found is None:
            found = self._renewers[key] = tuple(_principal(r, what) for r in names)
        return found

    def labels(self, raw: object, what: str) -> Labels:
        """The label set of a znode's ``labels`` object, checked once per distinct set."""
        if not isinstance(raw, dict):
            raise LayoutError(f"{what} znode field 'labels' is not an object")
        key = tuple(raw.items())
        try:
            found = self._labels.get(key)
        except TypeError:  # a value that is no text (a list, an object): refused by the rules
            return _labels(raw, what)
        if found is None:
            found = self._labels[key] = _labels(raw, what)
        return found


BULK_BATCH = 4096


def decode_tokens(
    znodes: Sequence[tuple[str, bytes | None]],
) -> tuple[list[TokenInformation], list[tuple[str, str]]]:
    """Decode many token znodes ``(token id, data)`` at once: the cold-start path.

    Returns the tokens, in order, and ``(token id, reason)`` for each znode that does
    not decode (the caller skips and logs those). The result is exactly what
    :func:`decode_token` gives znode by znode, made cheaper for a million tokens:

    * each batch of :data:`BULK_BATCH` znodes is parsed by one ``json.loads`` of the
      batch joined as a JSON array, not one call per znode; the batch is taken only
      when it parses to exactly one object per znode and every object names its own
      znode's token id, otherwise that batch is decoded znode by znode;
    * equal key ids and renewer lists become one shared object (principals already are);
    * the cyclic garbage collector is paused while a batch is decoded: every object
      made here lives on in the cache, so collecting would only walk them again and
      again (collections grew faster than the data at a million tokens).
    """
    shared = _Shared()
    tokens: list[TokenInformation] = []
    failed: list[tuple[str, str]] = []
    with collector.paused():
        for lo in range(0, len(znodes), BULK_BATCH):
            batch = znodes[lo : lo + BULK_BATCH]
            decoded = _decode_batch(batch, shared)
            if decoded is not None:
                tokens.extend(decoded)
                continue
            for token_id, data in batch:
                try:
                    tokens.append(_token_from_object(_loads_object(data, "delegation token"), shared))
                except LayoutError as exc:
                    failed.append((token_id, str(exc)))
    return tokens, failed


def _decode_batch(
    batch: Sequence[tuple[str, bytes | None]], shared: _Shared
) -> list[TokenInformation] | None:
    """The batch's tokens from one parse, or None when any znode needs a closer look."""
    datas = [data for _, data in batch]
    if not all(datas):
        return None
    joined = b"[" + b",".join(datas) + b"]"  # type: ignore[arg-type]
    if _SURROGATE_ESCAPE.search(joined):
        return None  # each znode then checked on its own
    try:
        objects = json.loads(joined)
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None
    if len(objects) != len(batch):
        return None
    out = []
    for (token_id, _), obj in zip(batch, objects, strict=True):
        if type(obj) is not dict or obj.get("tokenId") != token_id:
            return None
        token = _plain_token(obj, token_id, shared)
        if token is None:
            try:
                token = _token_from_object(obj, shared)
            except LayoutError:
                return None
        out.append(token)
    return out


def _plain_token(obj: dict[str, Any], token_id: str, shared: _Shared) -> TokenInformation | None:
    """The token of a version-3 object whose every field has the right type, checked
    inline (the common case, a third of the cost of :func:`_token_from_object`); None
    for anything else, which :func:`_token_from_object` then decodes or refuses."""
    get = obj.get
    owner = get("owner")
    requester = get("tokenRequester")
    renewer_names = get("renewers")
    issue = get("issueTimestamp")
    expiry = get("expiryTimestamp")
    max_ts = get("maxTimestamp")
    key_id = get("keyId", "")
    raw_labels = get("labels")
    version = get("version")
    if not (
        type(version) is int
        and version == TOKEN_VERSION
        and type(owner) is str
        and type(requester) is str
        and type(renewer_names) is list
        and type(issue) is int
        and type(expiry) is int
        and type(max_ts) is int
        and type(key_id) is str
        and token_id
    ):
        return None
    what = "delegation token"
    if renewer_names:
        if not all(type(r) is str for r in renewer_names):
            return None
        renewers = shared.renewers(renewer_names, what)
    else:
        renewers = ()
    try:
        owner_p = _principal(owner, what)
        requester_p = owner_p if requester == owner else _principal(requester, what)
        labels = NO_LABELS if raw_labels is None else shared.labels(raw_labels, what)
    except LayoutError:
        return None
    return TokenInformation(
        token_id, owner_p, requester_p, renewers, issue, expiry, max_ts,
        shared.key_ids.setdefault(key_id, key_id), labels,
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


# The characters Kafka's EndPoint takes in a host (an IPv6 address in brackets or not).
_ENDPOINT_HOST = re.compile(r"[0-9A-Za-z\-%._:]*")


def _parse_endpoint(text: str) -> tuple[str, str, int]:
    name, sep, address = text.partition("://")
    host, colon, port = address.rpartition(":")
    if not sep or not name or not colon or not (port.isascii() and port.isdigit()):
        raise LayoutError(f"broker endpoint {text!r} is not NAME://host:port")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not _ENDPOINT_HOST.fullmatch(host):
        raise LayoutError(f"broker endpoint {text!r} names no host Kafka would take")
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
    except (TypeError, ValueError, OverflowError):  # OverflowError: JSON's Infinity
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


# --- clock probes (tokensvc's own) -----------------------------------------------------


def encode_clock_report(
    broker_id: int, offset_ms: float | None, uncertainty_ms: float | None
) -> bytes:
    """``{"version":1,"brokerid":N,"offsetMs":O,"uncertaintyMs":U}``: the offset of the
    broker's wall clock from the cluster's time as it last estimated it (null before the
    first estimate). Rewritten by each probe; the znode's mtime is what the probe reads."""
    def whole(value: float | None) -> int | None:
        return None if value is None else round(value)

    return _dumps({"version": CLOCK_VERSION, "brokerid": int(broker_id),
                   "offsetMs": whole(offset_ms), "uncertaintyMs": whole(uncertainty_ms)})


def decode_clock_report(data: bytes | None) -> dict[str, Any]:
    """The report as written: ``brokerid``, ``offsetMs`` and ``uncertaintyMs`` (ints or
    None)."""
    obj = _loads_object(data, "clock")
    report: dict[str, Any] = {"brokerid": _field(obj, "brokerid", int, "clock")}
    for key in ("offsetMs", "uncertaintyMs"):
        value = obj.get(key)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
            raise LayoutError(f"clock znode field {key!r} is not an integer")
        report[key] = value
    return report
