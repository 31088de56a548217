"""Request records: the exactly-once ledger of forwarded and direct writes, in ZooKeeper.

Owns ``/delegation_token/requests/<key>``: one znode per write request the controller
applied, created in the SAME transaction as the change it records (the stores take a
:class:`RecordOp` and add it to their transaction), so a change and its record are
visible together or not at all. Data: ``{"api": <api key>, "outcome": <json>}`` where
the outcome is what a retry must be answered with (for a create, the token id only:
the HMAC is recomputed, never stored). A record is written alone (no change) when a
request changed nothing (e.g. an ACL that already existed).

Keys are 1-64 characters of ``[A-Za-z0-9_-]``; the controller purges records older than
the retention (a retry comes within the request timeout, long before).

Must not: store an HMAC, a password or credential material; decide what an outcome means.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from kazoo.client import KazooClient

from zk import layout
from zk.errors import StoreError, ZnodeExists, ZnodeMissing, zk_call
from zk.writes import WINDOW, created_before, delete_all

REQUESTS = f"{layout.DELEGATION_TOKEN}/requests"
RETENTION_MS = 15 * 60 * 1000
_KEY = re.compile(r"[A-Za-z0-9_-]{1,64}")


def valid_request_key(key: str | None) -> bool:
    return bool(key) and _KEY.fullmatch(key) is not None


def request_key_path(key: str) -> str:
    """``/delegation_token/requests/<key>``; ValueError for a key that is not 1-64 of
    ``[A-Za-z0-9_-]``."""
    if not valid_request_key(key):
        raise ValueError("a request key is 1-64 characters of [A-Za-z0-9_-]")
    return f"{REQUESTS}/{key}"


@dataclass(frozen=True)
class RecordOp:
    """The ``create`` a store adds to its transaction to record a request."""

    path: str
    data: bytes


def record_op(key: str, api: int, outcome: Any) -> RecordOp:
    body = {"api": int(api), "outcome": outcome}
    return RecordOp(request_key_path(key), json.dumps(body, separators=(",", ":")).encode())


@dataclass(frozen=True)
class Record:
    api: int
    outcome: Any


def decode_record(key: str, data: bytes | None) -> Record:
    """The record a request record znode holds; StoreError for anything else."""
    try:
        body = json.loads((data or b"").decode("utf-8"))
        return Record(int(body["api"]), body.get("outcome"))
    except (ValueError, KeyError, TypeError, UnicodeDecodeError, AttributeError,
            OverflowError, RecursionError):
        raise StoreError(f"request record {key} does not decode") from None


class RequestKeyExistsError(StoreError):
    """A write found its request key already recorded: an earlier attempt of the same
    client request was applied; nothing was written."""


class RequestRecords:
    """Reads, writes alone and purges request records. Every call on the request path is
    bounded by ``request_timeout_s`` (StoreUnavailable past it), as the stores' are."""

    def __init__(self, client: KazooClient, *, request_timeout_s: float = 10.0) -> None:
        self._client = client
        self._timeout_s = request_timeout_s

    @staticmethod
    def op(key: str, api: int, outcome: Any) -> RecordOp:
        """The record of request ``key`` (see :func:`record_op`)."""
        return record_op(key, api, outcome)

    def ensure_paths(self) -> None:
        zk_call("create request records", lambda: self._client.ensure_path(REQUESTS))

    def get(self, key: str) -> Record | None:
        path = request_key_path(key)
        try:
            data, _ = zk_call("read request record",
                              lambda: self._client.get_async(path).get(timeout=self._timeout_s))
        except ZnodeMissing:
            return None
        return decode_record(key, data)

    def put(self, op: RecordOp) -> None:
        """Record a request that changed nothing; RequestKeyExistsError if recorded."""
        try:
            zk_call("record request", lambda: self._client.create_async(op.path, op.data).get(
                timeout=self._timeout_s))
        except ZnodeExists:
            raise RequestKeyExistsError("request key already recorded") from None

    def purge(self, now_ms: int, older_than_ms: int = RETENTION_MS) -> int:
        """Delete records created (znode ctime) before ``now_ms - older_than_ms``."""
        try:
            keys = zk_call("list request records", lambda: self._client.get_children(REQUESTS))
        except ZnodeMissing:
            return 0
        old, _ = created_before(self._client, [f"{REQUESTS}/{k}" for k in keys],
                                now_ms - older_than_ms, "stat request records",
                                timeout_s=self._timeout_s, window=WINDOW)
        return delete_all(self._client, old, "purge request records", timeout_s=self._timeout_s)
