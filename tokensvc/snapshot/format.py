"""The token cache snapshot format: encode, decode, validate (pure: no I/O, no clock).

A snapshot is what a broker's token cache held, the change-notification sequence that
content reflects, and the identity of the ZooKeeper data it came from. A broker that
restarts loads it, checks it against ZooKeeper (:func:`identity_refusal`,
:func:`catch_up_refusal`, :func:`count_refusal`), then applies only the notifications
after its sequence, by reading those tokens from ZooKeeper again. Anything wrong means
the full load.

Layout (version 2; integers big-endian unless said otherwise)::

    8 bytes   magic b"TSVCSNAP"
    2 bytes   format version (2)
    4 bytes   header length H
    H bytes   header, ASCII JSON: sequence, identity, count N, written_ms,
              principals [[type, name, token flag], ...], renewer_sets [[i, ...], ...],
              key_ids [...], label_sets [[[key, value], ...], ...] (entry 0 is the empty
              set), ids_bytes L
    L bytes   the N token ids, UTF-8 (lone surrogates passed), joined by NUL (a znode
              name never holds one)
    N x 5 x 4 owner, requester, renewer set, key id and label set of each token: indexes
              into the header's tables, five columns of unsigned 32-bit little-endian
    N x 3 x 8 issue, expiry and max timestamps: three columns of signed 64-bit
              little-endian
    32 bytes  SHA-256 of everything before it

Columns, not records: decoding a million tokens is a split of the ids, eight
``array.frombytes`` and one ``map`` building the tokens, no Python loop per field.
Version 2 added the label sets (a token's labels, tokensvc.core.labels; the header's
JSON escapes any non-ASCII character). A version-1 file has no labels, so it is refused
(``version``): its tokens would come back without them, and the catch-up re-reads only
tokens changed since, so the full load must run once.

What it never holds: an HMAC, a SCRAM credential, a key. Tokens carry the public id of
the master key they were made under (``key_id``); their HMACs are computed again from
the broker's keys when the cache is filled, so the content does not depend on the key
and a snapshot stays valid across a key rotation.

Must not: read files or the clock (``written_ms`` is handed in), change anything but
its result (it pauses Python's cyclic garbage collector while it builds the tokens, and
restores it), or accept content it has not checked: every way a file can be wrong
raises :class:`SnapshotError` with a short reason (never a token id).
"""

from __future__ import annotations

import bisect
import hashlib
import json
import struct
import sys
from array import array
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tokensvc.core import collector
from tokensvc.core.labels import NO_LABELS, LabelError, Labels, validate
from tokensvc.core.principal import KafkaPrincipal
from tokensvc.core.token import TokenInformation

MAGIC = b"TSVCSNAP"
VERSION = 2
_PREFIX = struct.Struct(">8sHI")
_DIGEST = 32
_INDEX_COLUMNS = 5
_TIME_COLUMNS = 3
_BYTES_PER_TOKEN = _INDEX_COLUMNS * 4 + _TIME_COLUMNS * 8
_LITTLE = sys.byteorder == "little"

Identity = Mapping[str, "str | int"]


class SnapshotError(ValueError):
    """A snapshot that must not be used; ``reason`` is a short machine word for the
    metric (``empty``, ``truncated``, ``magic``, ``version``, ``checksum``,
    ``malformed``), the message says what exactly."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class Snapshot:
    """A decoded snapshot: ``tokens`` reflect every change notification up to and
    including ``sequence`` (-1: none) of the ZooKeeper data named by ``identity``."""

    sequence: int
    identity: dict[str, str | int]
    tokens: list[TokenInformation]
    written_ms: int


# Column values converted per this many: each conversion and copy is one C call.
_VALUES_PER_PART = 65536


def _column(values: array) -> list[bytes]:
    """A column's bytes (little-endian), as parts of at most ``_VALUES_PER_PART`` values."""
    parts = []
    for lo in range(0, len(values), _VALUES_PER_PART):
        col = values[lo : lo + _VALUES_PER_PART]  # (a slice is a new array)
        if not _LITTLE:
            col.byteswap()
        parts.append(col.tobytes())
    return parts


# Token ids joined per this many: one C call each, short enough that a writer thread
# gives the GIL back between them (the join of a million ids at once held it 67 ms).
_IDS_PER_PART = 8192


def encode(sequence: int, identity: Identity, tokens: Sequence[TokenInformation],
           written_ms: int) -> bytes:
    """The snapshot file's bytes for ``tokens`` at ``sequence``."""
    return b"".join(encode_parts(sequence, identity, tokens, written_ms))


def _id_parts(tokens: Sequence[TokenInformation]) -> list[bytes]:
    """The ids joined by NUL, as parts whose concatenation is that one string."""
    parts = []
    for lo in range(0, len(tokens), _IDS_PER_PART):
        joined = "\x00".join(info.token_id for info in tokens[lo : lo + _IDS_PER_PART])
        parts.append(("\x00" + joined if lo else joined).encode("utf-8", "surrogatepass"))
    return parts


def encode_parts(sequence: int, identity: Identity, tokens: Sequence[TokenInformation],
                 written_ms: int) -> list[bytes]:
    """The snapshot file's bytes for ``tokens`` at ``sequence``, as parts to write one
    after the other (their concatenation is :func:`encode`'s bytes). No step copies the
    whole file or joins all the ids in one C call: a broker builds it on a thread of its
    own, and each such call would hold the GIL, and so its event loop, for tens of
    milliseconds at a million tokens (docs/performance.md, B13)."""
    principals: dict[KafkaPrincipal, int] = {}
    renewer_sets: dict[tuple[KafkaPrincipal, ...], int] = {}
    key_ids: dict[str, int] = {}
    label_sets: dict[Labels, int] = {NO_LABELS: 0}

    def principal(p: KafkaPrincipal) -> int:
        found = principals.get(p)
        if found is None:
            found = principals[p] = len(principals)
        return found

    # Columns are arrays, not lists: an array is not a container to the cyclic garbage
    # collector. A list of a million ints is, and a collection that the event loop's
    # allocations start while the lists grow walks every item (at 1M tokens, the eight
    # column lists and the cache's copy made one young collection hold the GIL for 53 ms;
    # 23 ms with arrays: docs/performance.md, B13).
    owners = array("I")
    requesters = array("I")
    renewers = array("I")
    keys = array("I")
    labels = array("I")
    for info in tokens:
        owners.append(principal(info.owner))
        requesters.append(principal(info.token_requester))
        found = renewer_sets.get(info.renewers)
        if found is None:
            found = renewer_sets[info.renewers] = len(renewer_sets)
        renewers.append(found)
        found = key_ids.get(info.key_id)
        if found is None:
            found = key_ids[info.key_id] = len(key_ids)
        keys.append(found)
        found = label_sets.get(info.labels)
        if found is None:
            found = label_sets[info.labels] = len(label_sets)
        labels.append(found)
    sets = [[principal(p) for p in members] for members in renewer_sets]
    ids = _id_parts(tokens)
    header = json.dumps({
        "sequence": int(sequence),
        "identity": dict(identity),
        "count": len(tokens),
        "written_ms": int(written_ms),
        "principals": [[p.principal_type, p.name, p.token_authenticated] for p in principals],
        "renewer_sets": sets,
        "key_ids": list(key_ids),
        "label_sets": [[list(pair) for pair in labelled] for labelled in label_sets],
        "ids_bytes": sum(len(part) for part in ids),
    }, separators=(",", ":")).encode("ascii")
    parts = [
        _PREFIX.pack(MAGIC, VERSION, len(header)),
        header,
        *ids,
        *_column(owners),
        *_column(requesters),
        *_column(renewers),
        *_column(keys),
        *_column(labels),
        *_column(array("q", (info.issue_timestamp for info in tokens))),
        *_column(array("q", (info.expiry_timestamp for info in tokens))),
        *_column(array("q", (info.max_timestamp for info in tokens))),
    ]
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part)  # (releases the GIL for large parts)
    parts.append(digest.digest())
    return parts


def _read_column(code: str, data: memoryview, start: int, count: int) -> array:
    col = array(code)
    col.frombytes(data[start:start + count * col.itemsize])
    if not _LITTLE:
        col.byteswap()
    return col


def _malformed(message: str) -> SnapshotError:
    return SnapshotError("malformed", message)


def _int(header: Mapping[str, object], key: str) -> int:
    value = header.get(key)
    if type(value) is not int:
        raise _malformed(f"header field {key!r} is not an integer")
    return value


def decode(data: bytes) -> Snapshot:
    """Check and decode a snapshot file's bytes; :class:`SnapshotError` if anything
    is wrong (checked in this order: size, magic, version, checksum, header, lengths,
    table indexes)."""
    if not data:
        raise SnapshotError("empty", "the snapshot file is empty")
    if len(data) < _PREFIX.size + _DIGEST:
        raise SnapshotError("truncated", f"the snapshot file is {len(data)} bytes, "
                            f"shorter than any snapshot")
    magic, version, header_len = _PREFIX.unpack_from(data, 0)
    if magic != MAGIC:
        raise SnapshotError("magic", "not a token cache snapshot (wrong magic bytes)")
    if version != VERSION:
        raise SnapshotError("version", f"snapshot format version {version}, this broker "
                            f"reads version {VERSION}")
    view = memoryview(data)
    body_end = len(data) - _DIGEST
    if hashlib.sha256(view[:body_end]).digest() != bytes(view[body_end:]):
        raise SnapshotError("checksum", "the snapshot's SHA-256 does not match its content "
                            "(truncated or corrupted)")
    start = _PREFIX.size
    if start + header_len > body_end:
        raise _malformed("the header runs past the end of the file")
    try:
        header = json.loads(bytes(view[start:start + header_len]).decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise _malformed("the header is not UTF-8 JSON") from None
    if type(header) is not dict:
        raise _malformed("the header is not a JSON object")
    sequence = _int(header, "sequence")
    count = _int(header, "count")
    ids_bytes = _int(header, "ids_bytes")
    written_ms = _int(header, "written_ms")
    identity = header.get("identity")
    if type(identity) is not dict or not all(
            type(k) is str and type(v) in (str, int) for k, v in identity.items()):
        raise _malformed("header field 'identity' is not an object of strings and integers")
    if count < 0 or ids_bytes < 0 or sequence < -1:
        raise _malformed("negative count, size or sequence")
    start += header_len
    if start + ids_bytes + count * _BYTES_PER_TOKEN != body_end:
        raise _malformed(f"{body_end - start} bytes of tokens where {count} tokens with "
                         f"{ids_bytes} bytes of ids take {ids_bytes + count * _BYTES_PER_TOKEN}")
    principals, renewer_sets, key_ids = _tables(header)
    label_sets = _label_sets(header)
    try:
        text = bytes(view[start:start + ids_bytes]).decode("utf-8", "surrogatepass")
        ids = text.split("\x00") if count else []
    except UnicodeDecodeError:
        raise _malformed("the token ids are not UTF-8") from None
    if len(ids) != count or (count and not all(ids)):
        raise _malformed(f"{len(ids)} token ids (some empty?) where the header says {count}")
    start += ids_bytes
    columns = []
    for code, limit in (("I", len(principals)), ("I", len(principals)),
                        ("I", len(renewer_sets)), ("I", len(key_ids)),
                        ("I", len(label_sets))):
        col = _read_column(code, view, start, count)
        if count and max(col) >= limit:
            raise _malformed("a token names a table entry that does not exist")
        columns.append(col)
        start += count * 4
    for _ in range(_TIME_COLUMNS):
        columns.append(_read_column("q", view, start, count))
        start += count * 8
    owners, requesters, renewers, keys, labelled, issued, expiring, maxes = columns
    # Every token made here lives on in the cache: a collection meanwhile would only
    # walk them again and again (as zk.layout.decode_tokens, the collector is paused).
    with collector.paused():
        tokens = list(map(
            TokenInformation, ids,
            map(principals.__getitem__, owners), map(principals.__getitem__, requesters),
            map(renewer_sets.__getitem__, renewers), issued, expiring, maxes,
            map(key_ids.__getitem__, keys), map(label_sets.__getitem__, labelled),
        ))
    return Snapshot(sequence, dict(identity), tokens, written_ms)


def _tables(header: Mapping[str, object]) -> tuple[
        list[KafkaPrincipal], list[tuple[KafkaPrincipal, ...]], list[str]]:
    raw_principals = header.get("principals")
    raw_sets = header.get("renewer_sets")
    raw_keys = header.get("key_ids")
    if type(raw_principals) is not list or type(raw_sets) is not list or type(raw_keys) is not list:
        raise _malformed("the header's tables are not lists")
    principals = []
    for item in raw_principals:
        if not (type(item) is list and len(item) == 3 and type(item[0]) is str and item[0]
                and ":" not in item[0] and type(item[1]) is str and item[1]
                and type(item[2]) is bool):
            raise _malformed("a principal is not [type, name, token flag]")
        principals.append(KafkaPrincipal(item[0], item[1], item[2]))
    renewer_sets = []
    for members in raw_sets:
        if type(members) is not list or not all(
                type(i) is int and 0 <= i < len(principals) for i in members):
            raise _malformed("a renewer set names a principal that does not exist")
        renewer_sets.append(tuple(principals[i] for i in members))
    if not all(type(k) is str for k in raw_keys):
        raise _malformed("a key id is not a string")
    return principals, renewer_sets, list(raw_keys)


def _label_sets(header: Mapping[str, object]) -> list[Labels]:
    raw = header.get("label_sets")
    if type(raw) is not list or not raw or raw[0] != []:
        raise _malformed("the header's label sets are not a list starting with the empty set")
    sets: list[Labels] = []
    for members in raw:
        if type(members) is not list or not all(
                type(p) is list and len(p) == 2 for p in members):
            raise _malformed("a label set is not a list of [key, value]")
        try:
            sets.append(validate((p[0], p[1]) for p in members))
        except LabelError as exc:
            raise _malformed(f"a label set breaks the label rules ({exc.message})") from None
    return sets


# --- may this snapshot be used? ------------------------------------------------------


def identity_refusal(snapshot_identity: Identity, current: Identity) -> str | None:
    """Why a snapshot of ``snapshot_identity`` must not be used with the ZooKeeper data
    named by ``current`` (None: it may). Every field must be present and equal: a
    snapshot from another ensemble, cluster, chroot, or from before the roots were
    created again, is refused."""
    if dict(snapshot_identity) == dict(current):
        return None
    differ = sorted(k for k in set(snapshot_identity) | set(current)
                    if snapshot_identity.get(k) != current.get(k))
    return f"it came from other ZooKeeper data ({', '.join(differ)} differ)"


def catch_up_refusal(sequence: int, purge_mark: int, listed: Sequence[int],
                     cversion: int) -> str | None:
    """Why the notifications after ``sequence`` cannot all be read any more (None: they
    can, and applying them brings the snapshot up to date).

    ``purge_mark`` is the root's ``purged_through`` (-1: never purged), ``listed`` the
    sequences of the notifications listed now (ascending), ``cversion`` the root's child
    version at that listing. The rules:

    * the purge mark must be at most ``sequence``: else notifications after it were
      deleted (and their changes cannot be found);
    * ``sequence`` must not be ahead of ZooKeeper: creating notification S makes the
      root's cversion at least S + 1 (a snapshot of data ZooKeeper lost, e.g. a restore
      of an older backup of it, is refused);
    * the listing must continue from ``sequence``: notification ``sequence`` itself is
      still listed, or the purge mark is exactly ``sequence`` (our purge deleted it and
      nothing after it). A deletion that left no mark (another purger, by hand) removes
      the oldest first, so it would have taken ``sequence`` too.
    """
    if purge_mark > sequence:
        return (f"notifications after its sequence {sequence} were purged (purged through "
                f"{purge_mark})")
    if sequence >= 0 and cversion <= sequence:
        return (f"its sequence {sequence} is ahead of ZooKeeper's notifications (child "
                f"version {cversion})")
    if sequence >= 0 and purge_mark != sequence and not _holds(listed, sequence):
        return (f"notification {sequence} is gone without a purge mark covering it "
                f"(oldest listed: {listed[0] if listed else 'none'})")
    return None


def count_refusal(held: int, znodes: int, quiet: bool) -> str | None:
    """Why a caught-up snapshot of ``held`` tokens must not be used when ZooKeeper holds
    ``znodes`` token znodes (None: it may). Only decided when ``quiet``: no change
    notification was created or deleted while the count was read, so no token was
    created or deleted meanwhile by a writer that writes its notification. A difference
    then means a token znode created or deleted without one (by hand, a bulk import, a
    writer that died between its two writes): the snapshot cannot know it."""
    if not quiet or held == znodes:
        return None
    return (f"ZooKeeper holds {znodes} token znodes where the snapshot, caught up, holds "
            f"{held}: tokens were created or deleted without a change notification")


def _holds(listed: Sequence[int], sequence: int) -> bool:
    i = bisect.bisect_left(listed, sequence)
    return i < len(listed) and listed[i] == sequence
