"""Delegation tokens in ZooKeeper: the only code that reads or writes token znodes.

Owns: the token znodes under ``/delegation_token/tokens`` and their change
notifications under ``/delegation_token/token_changes``. Every write (create, update,
delete) is ONE ZooKeeper transaction that also creates the ``token_change_<seq>``
notification, so a change and its notification are visible together or not at all.

A write may carry a *guard* ``(path, version)``: a ``check`` operation in the same
transaction. The controller passes :meth:`zk.election.ControllerElection.guard`, the
``/controller_epoch`` version it set when it won; once another broker wins, that version
moves on and a write from the deposed controller fails with :class:`NotControllerError`
instead of landing.

Must not: keep state between calls (the cache is :class:`tokensvc.core.cache.TokenCache`,
fed by :mod:`zk.sync`), know token rules, or store or log an HMAC or key (it only ever
sees :class:`TokenInformation`). kazoo failures surface as :class:`StoreError`
subclasses, each carrying the Kafka error it maps to.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable, Sequence
from typing import TypeVar

from kazoo.client import KazooClient
from kazoo.exceptions import (
    EXCEPTIONS,
    BadVersionError,
    ConnectionLoss,
    KazooException,
    MarshallingError,
    NodeExistsError,
    NoNodeError,
    OperationTimeoutError,
    RolledBackError,
    SessionExpiredError,
    UnimplementedError,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import ZnodeStat

from tokensvc.core.errors import Errors, KafkaError
from tokensvc.core.token import TokenInformation
from zk import layout

log = logging.getLogger(__name__)

# (path, version) checked in the same transaction as a write.
Guard = tuple[str, int]

NOTIFICATION_RETENTION_MS = 15 * 60 * 1000
_PIPELINE_WINDOW = 5_000
_MULTI_READ_BATCH = 1_000

_MULTI_HEADER = struct.Struct("!iBi")
_INT = struct.Struct("!i")
_STAT = struct.Struct("!qqqqiiiqiiq")

T = TypeVar("T")


class StoreError(KafkaError):
    """ZooKeeper refused or failed an operation on the token store."""

    def __init__(self, message: str, error: Errors = Errors.UNKNOWN_SERVER_ERROR) -> None:
        super().__init__(error, message)


class StoreUnavailable(StoreError):
    """No connection or no quorum: retriable once ZooKeeper is back."""

    def __init__(self, message: str) -> None:
        super().__init__(message, Errors.REQUEST_TIMED_OUT)


class NotControllerError(StoreError):
    """The write's guard failed: this broker is no longer the controller."""

    def __init__(self, message: str) -> None:
        super().__init__(message, Errors.NOT_CONTROLLER)


class TokenExistsError(StoreError):
    """``create`` found a token znode with the same id."""


class TokenNotFoundError(StoreError):
    """``update`` found no token znode with that id."""

    def __init__(self, message: str) -> None:
        super().__init__(message, Errors.DELEGATION_TOKEN_NOT_FOUND)


class _MultiGetData:
    """ZooKeeper's multi-read request (opcode 22, ZooKeeper 3.6+) of getData operations.

    One request and one response for many znodes; each read succeeds or fails on its
    own. Wire format (jute): per op a MultiHeader (int type, bool done, int err) and a
    GetDataRequest (string path, bool watch); then MultiHeader(-1, true, -1). The reply
    holds per op a MultiHeader and either a GetDataResponse (buffer data, Stat) or, for
    type -1, an ErrorResponse (int err). Results are ``(data, stat)`` or an error code.
    """

    type = 22
    _GET_DATA = 4
    _ERROR = -1

    def __init__(self, paths: list[str]) -> None:
        self.paths = paths

    def __repr__(self) -> str:
        return f"_MultiGetData({len(self.paths)} paths)"

    def serialize(self) -> bytes:
        out = bytearray()
        for path in self.paths:
            encoded = path.encode("utf-8")
            out += _MULTI_HEADER.pack(self._GET_DATA, 0, -1)
            out += _INT.pack(len(encoded)) + encoded + b"\x00"
        out += _MULTI_HEADER.pack(-1, 1, -1)
        return bytes(out)

    def deserialize(self, buffer: bytes, offset: int) -> list[tuple[bytes, ZnodeStat] | int]:
        results: list[tuple[bytes, ZnodeStat] | int] = []
        while True:
            op, done, _err = _MULTI_HEADER.unpack_from(buffer, offset)
            offset += _MULTI_HEADER.size
            if done:
                return results
            if op == self._GET_DATA:
                length = _INT.unpack_from(buffer, offset)[0]
                offset += _INT.size
                data = b"" if length < 0 else bytes(buffer[offset : offset + length])
                offset += max(length, 0)
                stat = ZnodeStat._make(_STAT.unpack_from(buffer, offset))
                offset += _STAT.size
                results.append((data, stat))
            elif op == self._ERROR:
                results.append(_INT.unpack_from(buffer, offset)[0])
                offset += _INT.size
            else:
                raise MarshallingError()


class _VersionMismatch(StoreError):
    """A conditional delete found a newer version of the token (internal to delete)."""


_UNAVAILABLE = (ConnectionLoss, SessionExpiredError, OperationTimeoutError, KazooTimeoutError)


def _translate(what: str, exc: KazooException) -> StoreError:
    if isinstance(exc, _UNAVAILABLE):
        return StoreUnavailable(f"{what}: ZooKeeper unavailable ({exc.__class__.__name__})")
    return StoreError(f"{what}: ZooKeeper error {exc.__class__.__name__}")


def zk_call(what: str, fn: Callable[[], T]) -> T:
    """Run one kazoo call, turning its failures into store errors (the kazoo exception
    is the ``__cause__``)."""
    try:
        return fn()
    except (KazooException, KazooTimeoutError) as exc:
        raise _translate(what, exc) from exc


class TokenStore:
    """Token znodes and their change notifications, on a started kazoo client."""

    def __init__(self, client: KazooClient, *, multi_read: bool = True) -> None:
        self._client = client
        # Batch reads with ZooKeeper's multi-read (3.6+); falls back to pipelined gets
        # when the server says it does not implement it.
        self._multi_read = multi_read

    def ensure_paths(self) -> None:
        """Create ``/delegation_token/tokens`` and ``.../token_changes`` if missing."""
        for path in (layout.TOKENS, layout.TOKEN_CHANGES):
            zk_call(f"create {path}", lambda p=path: self._client.ensure_path(p))

    # --- writes ------------------------------------------------------------------------

    def create(self, info: TokenInformation, *, guard: Guard | None = None) -> None:
        """Create the token znode and its notification; TokenExistsError if the id is taken."""
        path = layout.token_path(info.token_id)
        self._commit(
            f"create token {info.token_id}",
            guard,
            lambda tx: tx.create(path, layout.encode_token(info)),
            info.token_id,
        )

    def update(self, info: TokenInformation, *, guard: Guard | None = None) -> None:
        """Overwrite an existing token znode (renew/expire) and notify; TokenNotFoundError
        if it is gone."""
        path = layout.token_path(info.token_id)
        self._commit(
            f"update token {info.token_id}",
            guard,
            lambda tx: tx.set_data(path, layout.encode_token(info)),
            info.token_id,
        )

    def delete(self, token_id: str, *, guard: Guard | None = None, version: int = -1) -> bool:
        """Delete the token znode and notify. False when it did not exist.

        ``version`` (from :meth:`get_versioned`) makes the delete conditional: a token
        rewritten since it was read is left alone and False is returned.
        """
        path = layout.token_path(token_id)
        try:
            self._commit(
                f"delete token {token_id}",
                guard,
                lambda tx: tx.delete(path, version),
                token_id,
            )
        except (TokenNotFoundError, _VersionMismatch):
            return False
        return True

    def _commit(
        self,
        what: str,
        guard: Guard | None,
        operation: Callable[[object], None],
        token_id: str,
    ) -> None:
        tx = self._client.transaction()
        if guard is not None:
            tx.check(guard[0], guard[1])
        operation(tx)
        tx.create(
            layout.token_change_create_path(),
            layout.encode_token_change(token_id),
            sequence=True,
        )
        results = zk_call(what, tx.commit)
        failures = [r for r in results if isinstance(r, Exception)]
        if not failures:
            return
        guard_failed = guard is not None and not isinstance(results[0], RolledBackError)
        if guard_failed:
            raise NotControllerError(
                f"{what}: guard {guard[0]} version {guard[1]} no longer holds; "
                "another broker is the controller"
            )
        cause = next(r for r in failures if not isinstance(r, RolledBackError))
        if isinstance(cause, NodeExistsError):
            raise TokenExistsError(f"{what}: a token with this id already exists")
        if isinstance(cause, NoNodeError):
            # Either the token is missing, or the notification parent is: say which.
            if self._client.exists(layout.TOKEN_CHANGES) is None:
                raise StoreError(f"{what}: {layout.TOKEN_CHANGES} is missing; run ensure_paths()")
            raise TokenNotFoundError(f"{what}: no such token")
        if isinstance(cause, BadVersionError):
            raise _VersionMismatch(f"{what}: the token changed since it was read")
        raise StoreError(f"{what}: ZooKeeper error {cause.__class__.__name__}")

    # --- reads -------------------------------------------------------------------------

    def get(self, token_id: str) -> TokenInformation | None:
        found = self.get_versioned(token_id)
        return found[0] if found else None

    def get_versioned(self, token_id: str) -> tuple[TokenInformation, int] | None:
        """The token and its znode version (for a conditional :meth:`delete`), or None."""
        path = layout.token_path(token_id)
        try:
            data, stat = zk_call(f"read token {token_id}", lambda: self._client.get(path))
        except StoreError as exc:
            if isinstance(exc.__cause__, NoNodeError):
                return None
            raise
        return layout.decode_token(data), stat.version

    def token_ids(self) -> list[str]:
        return zk_call("list tokens", lambda: self._client.get_children(layout.TOKENS))

    def load_all(self) -> list[TokenInformation]:
        """Every token, read with pipelined requests (not one round trip per token).

        A token deleted between the listing and its read is skipped; a token znode that
        does not decode is logged (id only) and skipped rather than failing the load.
        """
        ids = self.token_ids()
        tokens: list[TokenInformation] = []
        for data, _stat, token_id in self._pipelined_get(
            [layout.token_path(i) for i in ids], ids, "load tokens"
        ):
            try:
                tokens.append(layout.decode_token(data))
            except layout.LayoutError as exc:
                log.warning("skipping token znode %s: %s", token_id, exc)
        return tokens

    def get_many(self, token_ids: Sequence[str]) -> dict[str, TokenInformation | None]:
        """The current state of each token (None when deleted), read pipelined."""
        found: dict[str, TokenInformation | None] = dict.fromkeys(token_ids)
        paths = [layout.token_path(i) for i in token_ids]
        for data, _stat, token_id in self._pipelined_get(paths, token_ids, "read tokens"):
            found[token_id] = layout.decode_token(data)
        return found

    def notifications(self, watch: Callable[[object], None] | None = None) -> list[str]:
        """The names of the pending ``token_change_<seq>`` children, in sequence order.

        ``watch`` is armed as a one-shot children watch (kazoo calls it on its thread).
        """
        names = zk_call(
            "list token changes",
            lambda: self._client.get_children(layout.TOKEN_CHANGES, watch=watch),
        )
        return sorted(
            (n for n in names if layout.token_change_sequence(n) is not None),
            key=layout.token_change_sequence,
        )

    def read_notifications(self, names: Sequence[str]) -> list[tuple[str, str | None]]:
        """``(name, token id)`` for each notification, pipelined; None when it was purged."""
        paths = [f"{layout.TOKEN_CHANGES}/{n}" for n in names]
        found = {
            name: layout.decode_token_change(data)
            for data, _stat, name in self._pipelined_get(paths, names, "read token changes")
        }
        return [(name, found.get(name)) for name in names]

    def purge_notifications(
        self, now_ms: int, older_than_ms: int = NOTIFICATION_RETENTION_MS
    ) -> int:
        """Delete notifications created (znode ctime, ZooKeeper's clock) before
        ``now_ms - older_than_ms``. Returns how many were deleted."""
        names = self.notifications()
        paths = [f"{layout.TOKEN_CHANGES}/{n}" for n in names]
        cutoff = now_ms - older_than_ms
        stats = self._pipelined(paths, paths, "stat token changes", self._client.exists_async)
        old = [path for stat, path in stats if stat is not None and stat.ctime < cutoff]
        deleted = self._pipelined(old, old, "purge token changes", self._client.delete_async)
        return len(deleted)

    # --- pipelining --------------------------------------------------------------------

    def _pipelined_get(
        self, paths: Sequence[str], keys: Sequence[str], what: str
    ) -> list[tuple[bytes, ZnodeStat, str]]:
        """``(data, stat, key)`` for every path that exists, in order.

        With multi-read, each batch of ``_MULTI_READ_BATCH`` reads is one request (and
        the batches themselves are pipelined); otherwise one pipelined ``get`` per path.
        """
        if self._multi_read:
            try:
                return self._multi_read_get(paths, keys, what)
            except StoreError as exc:
                if not isinstance(exc.__cause__, (UnimplementedError, MarshallingError)):
                    raise
                log.warning("ZooKeeper does not support multi-read; using pipelined reads")
                self._multi_read = False
        return [
            (value[0], value[1], key)
            for value, key in self._pipelined(paths, keys, what, self._client.get_async)
        ]

    def _multi_read_get(
        self, paths: Sequence[str], keys: Sequence[str], what: str
    ) -> list[tuple[bytes, ZnodeStat, str]]:
        chroot = self._client.chroot or ""
        pending = []
        for lo in range(0, len(paths), _MULTI_READ_BATCH):
            batch = _MultiGetData([chroot + p for p in paths[lo : lo + _MULTI_READ_BATCH]])
            async_result = self._client.handler.async_result()
            self._client._call(batch, async_result)  # kazoo has no public multi-read call
            pending.append((lo, async_result))
        found: list[tuple[bytes, ZnodeStat, str]] = []
        for lo, async_result in pending:
            for i, result in enumerate(zk_call(what, async_result.get), start=lo):
                if isinstance(result, tuple):
                    found.append((result[0], result[1], keys[i]))
                elif result != NoNodeError.code:
                    error = EXCEPTIONS[result]()
                    raise _translate(what, error) from error
        return found

    def _pipelined(
        self,
        paths: Sequence[str],
        keys: Sequence[str],
        what: str,
        start: Callable[[str], object],
    ) -> list[tuple[object, str]]:
        """Issue up to ``_PIPELINE_WINDOW`` async requests, then collect them; repeat.

        Results for znodes that vanished meanwhile (NoNodeError) are left out.
        """
        results: list[tuple[object, str]] = []
        for lo in range(0, len(paths), _PIPELINE_WINDOW):
            window = range(lo, min(lo + _PIPELINE_WINDOW, len(paths)))
            pending = [(zk_call(what, lambda i=i: start(paths[i])), keys[i]) for i in window]
            for async_result, key in pending:
                try:
                    value = zk_call(what, async_result.get)
                except StoreError as exc:
                    if isinstance(exc.__cause__, NoNodeError):
                        continue
                    raise
                results.append((value, key))
        return results
