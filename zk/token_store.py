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

Every write returns the sequence number of the notification it committed: the version
(``"tokens"``, seq) the controller reports so brokers can wait until their cache has it
(:mod:`zk.notifications`). A write may carry a :class:`zk.requests.RecordOp`, created in
the same transaction (exactly-once writes); a record already there fails that write
with :class:`zk.requests.RequestKeyExistsError` (nothing of it written).

Group commit: :meth:`TokenStore.commit_many` commits many writes (:class:`TokenWrite`)
in ONE transaction -- one guard check, then each write's operation, record and
notification -- and reports each write's own outcome; a write that fails is taken out
and the others are committed again without it. ``create``, ``update`` and ``delete``
are a batch of one.

Reads of many tokens go through the one pipelined reader, :mod:`zk.reads` (multi-read
batches when enabled). It also holds :func:`delete_own_ephemeral`. Notifications are
followed and purged by :class:`zk.token_sync.TokenSync` (the token store and sync are
filed as the credential and ACL ones are: ``<kind>_store`` and ``<kind>_sync``);
request records by :class:`zk.requests.RequestRecords`.

Must not: keep state between calls (the cache is :class:`tokensvc.core.cache.TokenCache`,
fed by :mod:`zk.token_sync`), know token rules, or store or log an HMAC or key (it only ever
sees :class:`TokenInformation`). kazoo failures surface as :class:`StoreError`
subclasses (:mod:`zk.errors`), each carrying the Kafka error it maps to.
"""

from __future__ import annotations

import bisect
import logging
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import (
    BadVersionError,
    KazooException,
    NodeExistsError,
    NoNodeError,
    RolledBackError,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.interfaces import IAsyncResult
from kazoo.protocol.states import ZnodeStat

from tokensvc.core.errors import Errors
from tokensvc.core.token import TokenInformation
from zk import layout
from zk.errors import (
    NotControllerError,
    StoreError,
    StoreUnavailable,
    ZnodeMissing,
    translate,
)
from zk.reads import ZnodeReads
from zk.requests import REQUESTS, RecordOp, RequestKeyExistsError
from zk.writes import WINDOW, commit_all, delete_all

log = logging.getLogger(__name__)

_KEY_ID = operator.attrgetter("key_id")

# (path, version) checked in the same transaction as a write.
Guard = tuple[str, int]

# Tokens deleted (with their notifications) per transaction by delete_many: the
# transaction stays far below jute.maxbuffer (about 200 bytes per token).
_DELETE_GROUP = 100
# Bytes a write adds to a transaction beyond its data, record and token id: op headers,
# paths, the notification.
_WRITE_OVERHEAD = 160


# ZooKeeper's Java client refuses a response over jute.maxbuffer: 1 MB by default, 4 MB
# in Kafka's ZooKeeper client. kazoo reads any size, but Kafka brokers or tools sharing
# this ZooKeeper could not list the tokens node past these sizes.
LISTING_LIMITS = ((4 * 1024 * 1024, "Kafka's ZooKeeper client (4 MB)"),
                  (1024 * 1024, "ZooKeeper's Java client default (1 MB)"))


def listing_bytes(token_ids: Sequence[str]) -> int:
    """The size of a getChildren response listing these ids (4-byte length + name each)."""
    return 4 + sum(4 + len(token_id) for token_id in token_ids)


def _warn_listing_size(token_ids: Sequence[str]) -> None:
    size = listing_bytes(token_ids)
    for limit, client in LISTING_LIMITS:
        if size > limit:
            log.warning(
                "the listing of %s is %d bytes (%d tokens), over the jute.maxbuffer of %s: "
                "Kafka tools sharing this ZooKeeper must raise jute.maxbuffer "
                "(see docs/operations.md)", layout.TOKENS, size, len(token_ids), client,
            )
            return


class TokenExistsError(StoreError):
    """``create`` found a token znode with the same id."""


class TokenNotFoundError(StoreError):
    """``update`` found no token znode with that id."""

    def __init__(self, message: str) -> None:
        super().__init__(message, Errors.DELEGATION_TOKEN_NOT_FOUND)


class _VersionMismatch(StoreError):
    """A conditional delete found a newer version of the token (internal to delete)."""


@dataclass(frozen=True)
class TokenWrite:
    """One token write of a group commit (:meth:`TokenStore.commit_many`): ``kind`` is
    ``create``, ``update`` or ``delete``; ``data`` the encoded token (empty for a delete);
    ``version`` makes a delete conditional (-1: any); ``side`` the token's key id and
    labels apart (:func:`zk.layout.encode_token_side`; a create's, empty when it has
    none). Built by :func:`create_write`, :func:`update_write` and :func:`delete_write`."""

    kind: str
    token_id: str
    data: bytes
    record: RecordOp | None = None
    version: int = -1
    side: bytes = b""

    @property
    def size(self) -> int:
        """About the bytes it adds to a transaction request (for the batch's size bound)."""
        record = 0 if self.record is None else len(self.record.path) + len(self.record.data)
        side = len(self.side) + len(self.token_id) + 40 if self.side else 0
        return len(self.data) + record + side + 2 * len(self.token_id) + _WRITE_OVERHEAD


def create_write(info: TokenInformation, record: RecordOp | None = None) -> TokenWrite:
    side = layout.encode_token_side(info) if layout.has_side_fields(info) else b""
    return TokenWrite("create", info.token_id, layout.encode_token(info), record, side=side)


def update_write(info: TokenInformation, record: RecordOp | None = None) -> TokenWrite:
    return TokenWrite("update", info.token_id, layout.encode_token(info), record)


def delete_write(token_id: str, record: RecordOp | None = None, version: int = -1) -> TokenWrite:
    return TokenWrite("delete", token_id, b"", record, version)


def _add_operations(tx: Any, write: TokenWrite, side: bool) -> list[str]:
    """Add a write's operations to ``tx``: the token's, its side znode's (a create beside
    Kafka), its request record's, its notification's (always last: its result is the
    created path). Returns what each operation is, in order."""
    path = layout.token_path(write.token_id)
    ops = ["token"]
    if write.kind == "create":
        tx.create(path, write.data)
        if side and write.side:
            tx.create(layout.token_side_path(write.token_id), write.side)
            ops.append("side")
    elif write.kind == "update":
        tx.set_data(path, write.data)
    else:
        tx.delete(path, write.version)
    if write.record is not None:
        tx.create(write.record.path, write.record.data)
        ops.append("record")
    tx.create(layout.token_change_create_path(), layout.encode_token_change(write.token_id),
              sequence=True)
    ops.append("note")
    return ops


def _describe(writes: Sequence[TokenWrite], indexes: Sequence[int]) -> str:
    if len(indexes) == 1:
        write = writes[indexes[0]]
        return f"{write.kind} token {write.token_id}"
    return f"{len(indexes)} token writes"


def _copy_error(exc: StoreError) -> StoreError:
    """A store error of the same class and message for each write (each waiter raises
    its own)."""
    copy = (StoreUnavailable(exc.message) if isinstance(exc, StoreUnavailable)
            else StoreError(exc.message, exc.error))
    copy.__cause__ = exc.__cause__
    return copy


class _BatchFailure(str):
    """A failure that is not one write's own (a parent znode is missing): all fail."""


def _write_failure(
    write: TokenWrite, op: str, error: Exception
) -> StoreError | None | _BatchFailure:
    """What the failure of a write's operation ``op`` (token, side, record, note) means
    for that write."""
    what = f"{write.kind} token {write.token_id}"
    if op == "note":
        if isinstance(error, NoNodeError):
            return _BatchFailure(f"{what}: {layout.TOKEN_CHANGES} is missing; run ensure_paths()")
        return _BatchFailure(f"{what}: ZooKeeper error {error.__class__.__name__}")
    if op == "side":
        if isinstance(error, NodeExistsError):
            return TokenExistsError(f"{what}: its labels are already kept apart (a token "
                                    "with this id existed)")
        return _BatchFailure(f"{what}: {layout.TOKEN_LABELS} is missing; run ensure_paths()")
    if op == "record":
        if isinstance(error, NodeExistsError):
            return RequestKeyExistsError(f"{what}: request key already recorded")
        return _BatchFailure(f"{what}: the request record failed ({error.__class__.__name__}); "
                             "run ensure_paths()")
    if write.kind == "create" and isinstance(error, NodeExistsError):
        return TokenExistsError(f"{what}: a token with this id already exists")
    if write.kind == "create" and isinstance(error, NoNodeError):
        return _BatchFailure(f"{what}: {layout.TOKENS} is missing; run ensure_paths()")
    if write.kind == "delete" and isinstance(error, (NoNodeError, BadVersionError)):
        return None  # gone, or rewritten since it was read: left alone
    if isinstance(error, NoNodeError):
        return TokenNotFoundError(f"{what}: no such token")
    return translate(what, error)


def delete_own_ephemeral(client: KazooClient, path: str, timeout_s: float = 2.0) -> bool:
    """Delete ``path`` if it is an ephemeral znode of this client's session (resigning
    on close). Best effort and bounded in time: False when it was not ours, is gone, or
    ZooKeeper did not answer -- the session's end removes it anyway."""
    if not client.connected:
        return False
    try:
        stat = client.exists_async(path).get(timeout=timeout_s)
        session = client.client_id[0] if client.client_id else None
        if stat is None or stat.ephemeralOwner != session:
            return False
        client.delete_async(path, version=stat.version).get(timeout=timeout_s)
    except (KazooException, KazooTimeoutError) as exc:
        log.info("could not delete %s: %s", path, exc.__class__.__name__)
        return False
    return True


class TokenStore:
    """Token znodes and their change notifications, on a started kazoo client.

    The shape of every store: ``(client, *, request_timeout_s=10.0, multi_read=True)``,
    the client as :attr:`client`. Construction does no I/O.

    ``beside_kafka`` (its own key, for a ZooKeeper shared with Kafka brokers): a create
    also writes the token's key id and labels to ``/tokensvc/token_labels/<id>`` in the
    same transaction; a delete removes that znode after its commit (one left behind --
    its token deleted by a Kafka broker's expiry, or a crash between the two -- is
    removed by :meth:`remove_orphan_sides`); and a token read without them (a Kafka
    broker renewed it, rewriting its znode with Kafka's seven fields) gets them back from
    there. Only those tokens pay that extra read."""

    def __init__(
        self,
        client: KazooClient,
        *,
        request_timeout_s: float = 10.0,
        multi_read: bool = True,
        beside_kafka: bool = False,
    ) -> None:
        self._client = client
        self._beside_kafka = beside_kafka
        # kazoo queues requests while it reconnects and would wait for ever without a
        # quorum; past this timeout a call fails with StoreUnavailable (retriable).
        # Batch reads with ZooKeeper's multi-read (3.6+); falls back to pipelined gets
        # when the server says it does not implement it.
        self._reads = ZnodeReads(client, request_timeout_s, multi_read=multi_read)

    @property
    def client(self) -> KazooClient:
        return self._client

    def _wait(self, what: str, async_result: IAsyncResult) -> Any:
        return self._reads.wait(what, async_result)

    @property
    def beside_kafka(self) -> bool:
        return self._beside_kafka

    def ensure_paths(self) -> None:
        """Create ``/delegation_token/tokens``, ``.../token_changes`` and ``.../requests``
        (and beside Kafka ``/tokensvc/token_labels``) if missing."""
        paths = [layout.TOKENS, layout.TOKEN_CHANGES, REQUESTS]
        if self._beside_kafka:
            paths.append(layout.TOKEN_LABELS)
        for path in paths:
            self._wait(f"create {path}", self._client.ensure_path_async(path))

    # --- the key id and labels apart (beside Kafka) --------------------------------------

    def _drop_sides(self, token_ids: Sequence[str]) -> None:
        """Delete the side znodes of deleted tokens (beside Kafka; one already gone, or
        never written, is no error)."""
        if self._beside_kafka and token_ids:
            delete_all(self._client, [layout.token_side_path(t) for t in token_ids],
                       "delete token labels", timeout_s=self._reads.timeout_s)

    def _restore_sides(self, infos: list[TokenInformation]) -> list[TokenInformation]:
        """``infos`` with the key id and labels of the tokens that lost them (a Kafka
        renewal) restored from their side znodes, read in one batch; only those tokens
        are read, and only beside Kafka. A side znode that does not decode is logged and
        left out (the token is served without its labels)."""
        # A cold start of a million tokens tokensvc wrote: every one has a key id, which
        # one pass in C finds (a Python-level check of each cost a second at 1M tokens).
        if not self._beside_kafka or all(map(_KEY_ID, infos)):
            return infos
        bare = [n for n, info in enumerate(infos) if not (info.key_id or info.labels)]
        if not bare:
            return infos
        sides = self._reads.get_many([layout.token_side_path(infos[n].token_id) for n in bare],
                                     "read token labels", with_stat=False)
        out = list(infos)
        for n, side in zip(bare, sides):
            try:
                out[n] = layout.restore_side_fields(infos[n], side)  # type: ignore[arg-type]
            except layout.LayoutError as exc:
                log.warning("token %s: its labels apart do not decode: %s", infos[n].token_id, exc)
        return out

    def remove_orphan_sides(self, held: Callable[[str], bool]) -> int:
        """Delete the side znodes whose token is gone (deleted by a Kafka broker's expiry,
        or a crash between a delete and its side's); ``held(token_id)``: the cache holds
        the token (it is not looked up in ZooKeeper). How many were deleted. The
        controller runs it with its purge."""
        if not self._beside_kafka:
            return 0
        try:
            ids = self._wait("list token labels",
                             self._client.get_children_async(layout.TOKEN_LABELS))
        except ZnodeMissing:
            return 0
        unknown = [t for t in ids if not held(t)]
        exists = self._reads.pipelined(self._client.exists_async,
                                       [layout.token_path(t) for t in unknown], "read tokens")
        orphans = [layout.token_side_path(t) for t, stat in zip(unknown, exists) if stat is None]
        return delete_all(self._client, orphans, "delete orphan token labels",
                          timeout_s=self._reads.timeout_s)

    # --- writes ------------------------------------------------------------------------

    def create(
        self,
        info: TokenInformation,
        *,
        guard: Guard | None = None,
        record: RecordOp | None = None,
    ) -> int:
        """Create the token znode and its notification; returns the notification's
        sequence number. TokenExistsError if the id is taken; with ``record``, the request
        record is created in the same transaction and RequestKeyExistsError (nothing
        written) says it was already there."""
        return self._commit_one(create_write(info, record), guard)

    def update(
        self, info: TokenInformation, *, guard: Guard | None = None, record: RecordOp | None = None
    ) -> int:
        """Overwrite an existing token znode (renew/expire) and notify; returns the
        notification's sequence number. TokenNotFoundError if it is gone."""
        return self._commit_one(update_write(info, record), guard)

    def delete(
        self,
        token_id: str,
        *,
        guard: Guard | None = None,
        version: int = -1,
        record: RecordOp | None = None,
    ) -> int | None:
        """Delete the token znode and notify; returns the notification's sequence
        number, None when the token did not exist.

        ``version`` (from :meth:`get_versioned`) makes the delete conditional: a token
        rewritten since it was read is left alone and None is returned.
        """
        return self._commit_one(delete_write(token_id, record, version), guard)

    # The writes a group commit collects (see :meth:`commit_many`).
    create_write = staticmethod(create_write)
    update_write = staticmethod(update_write)
    delete_write = staticmethod(delete_write)

    def _commit_one(self, write: TokenWrite, guard: Guard | None) -> int | None:
        outcome = self.commit_many([write], guard=guard)[0]
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    def commit_many(
        self, writes: Sequence[TokenWrite], *, guard: Guard | None = None
    ) -> list[int | None | StoreError]:
        """Commit ``writes`` together in ONE ZooKeeper transaction (group commit): the
        guard's check once, then per write its operation, its request record and its
        change notification. Returns each write's own outcome, in order: the sequence
        number of its notification, None for a delete that found no token (or a newer
        version), or the StoreError it failed with (TokenExistsError,
        TokenNotFoundError, RequestKeyExistsError).

        A multi-transaction is all-or-nothing: when one write fails, ZooKeeper's result
        for its failing operation is its error and every other result is a roll-back
        marker. That write gets its outcome and the others are committed again, without
        it, in a new transaction (so N writes take at most 1 + failures round trips).
        A failed guard gives every write not yet committed NotControllerError; a
        ZooKeeper failure (connection loss, timeout: outcome unknown) gives each of them
        its StoreUnavailable; a missing parent znode fails them all alike.
        """
        outcomes: list[int | None | StoreError] = [None] * len(writes)
        pending = list(range(len(writes)))
        while pending:
            tx = self._client.transaction()
            if guard is not None:
                tx.check(guard[0], guard[1])
            # Per pending write: (index of its first op, what each of its ops is).
            spans: list[tuple[int, list[str]]] = []
            at = 0 if guard is None else 1
            for i in pending:
                ops = _add_operations(tx, writes[i], self._beside_kafka)
                spans.append((at, ops))
                at += len(ops)
            what = f"{_describe(writes, pending)}"
            try:
                results = self._wait(what, tx.commit_async())
            except StoreError as exc:
                for i in pending:
                    outcomes[i] = _copy_error(exc)
                return outcomes
            failed = next((n for n, r in enumerate(results)
                           if isinstance(r, Exception) and not isinstance(r, RolledBackError)),
                          None)
            if failed is None:
                for i, (first, ops) in zip(pending, spans):
                    outcomes[i] = int(results[first + len(ops) - 1][-10:])
                self._drop_sides([writes[i].token_id for i in pending
                                  if writes[i].kind == "delete"])
                return outcomes
            if guard is not None and failed == 0:
                for i in pending:
                    outcomes[i] = NotControllerError(
                        f"{_describe(writes, [i])}: guard {guard[0]} version {guard[1]} no "
                        "longer holds; another broker is the controller")
                return outcomes
            slot = next(n for n, (first, ops) in enumerate(spans)
                        if first <= failed < first + len(ops))
            i = pending[slot]
            first, ops = spans[slot]
            outcome = _write_failure(writes[i], ops[failed - first], results[failed])
            if isinstance(outcome, _BatchFailure):
                for j in pending:
                    outcomes[j] = StoreError(str(outcome))
                return outcomes
            outcomes[i] = outcome
            del pending[slot]
        return outcomes

    def delete_many(
        self, versions: Sequence[tuple[str, int]], *, guard: Guard | None = None
    ) -> list[tuple[str, int]]:
        """Delete each ``(token id, version)`` as :meth:`delete` does -- conditional on
        the version (-1: any), with its change notification -- for many tokens at once:
        up to ``_DELETE_GROUP`` tokens per transaction (the guard's check once, then each
        token's delete and notification), the transactions pipelined
        (:func:`zk.writes.commit_all`). A group in which one token changed or vanished
        meanwhile commits nothing and is retried token by token. Returns each token
        deleted with its notification's sequence (tokens gone or changed meanwhile are
        skipped); a failed guard raises NotControllerError."""
        groups = [versions[lo : lo + _DELETE_GROUP] for lo in range(0, len(versions), _DELETE_GROUP)]
        deleted: list[tuple[str, int]] = []
        alone: list[tuple[str, int]] = []
        for group, results in zip(groups, self._commit_deletes(groups, guard)):
            if results is None:
                alone.extend(group)
                continue
            first = 0 if guard is None else 1  # then per token: its delete, its notification
            deleted.extend((token_id, int(results[first + 2 * n + 1][-10:]))
                           for n, (token_id, _) in enumerate(group))
        if alone:
            singles = [[one] for one in alone]
            for (token_id, _), results in zip(alone, self._commit_deletes(singles, guard)):
                if results is not None:
                    deleted.append((token_id, int(results[-1][-10:])))
        self._drop_sides([token_id for token_id, _ in deleted])
        return deleted

    def _commit_deletes(self, groups: Sequence[Sequence[tuple[str, int]]],
                        guard: Guard | None) -> list[list | None]:
        """One guarded transaction per group (each token's delete and notification),
        committed pipelined; each one's results, None where a token was gone or changed
        (nothing of that group committed). A failed guard raises NotControllerError."""

        def build(group: Sequence[tuple[str, int]]) -> Callable[[Any], None]:
            def fill(tx: Any) -> None:
                if guard is not None:
                    tx.check(guard[0], guard[1])
                for token_id, version in group:
                    tx.delete(layout.token_path(token_id), version)
                    tx.create(layout.token_change_create_path(),
                              layout.encode_token_change(token_id), sequence=True)
            return fill

        # About WINDOW deletes in flight, whatever the size of the groups.
        window = max(1, WINDOW // max((len(g) for g in groups), default=1))
        answers = commit_all(self._client, [build(g) for g in groups], "delete tokens",
                             timeout_s=self._reads.timeout_s, window=window)
        out: list[list | None] = []
        for group, results in zip(groups, answers):
            try:
                self._check_results(f"delete {len(group)} tokens", guard, results)
            except (TokenNotFoundError, _VersionMismatch):
                out.append(None)
                continue
            out.append(results)
        return out

    def _check_results(self, what: str, guard: Guard | None, results: list) -> None:
        """Raise the store error a transaction's results stand for (nothing if it passed)."""
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
            if self._wait(what, self._client.exists_async(layout.TOKEN_CHANGES)) is None:
                raise StoreError(f"{what}: {layout.TOKEN_CHANGES} is missing; run ensure_paths()")
            raise TokenNotFoundError(f"{what}: no such token")
        if isinstance(cause, BadVersionError):
            raise _VersionMismatch(f"{what}: the token changed since it was read")
        raise translate(what, cause)

    # --- reads -------------------------------------------------------------------------

    def get(self, token_id: str) -> TokenInformation | None:
        found = self.get_versioned(token_id)
        return found[0] if found else None

    def get_versioned(self, token_id: str) -> tuple[TokenInformation, int] | None:
        """The token and its znode version (for a conditional :meth:`delete`), or None."""
        path = layout.token_path(token_id)
        try:
            data, stat = self._wait(f"read token {token_id}", self._client.get_async(path))
        except ZnodeMissing:
            return None
        return self._restore_sides([layout.decode_token(data)])[0], stat.version

    def token_ids(self) -> list[str]:
        return self._wait("list tokens", self._client.get_children_async(layout.TOKENS))

    def load_all(self) -> list[TokenInformation]:
        """Every token, read with pipelined requests (not one round trip per token).

        A token deleted between the listing and its read is skipped; a token znode that
        does not decode is logged (id only) and skipped rather than failing the load.
        """
        ids = self.token_ids()
        _warn_listing_size(ids)
        tokens, failed = layout.decode_tokens(self._read_all_data(ids))
        for token_id, reason in failed:
            log.warning("skipping token znode %s: %s", token_id, reason)
        return self._restore_sides(tokens)

    def get_many_versioned(
        self, token_ids: Sequence[str]
    ) -> dict[str, tuple[TokenInformation, int]]:
        """The tokens that exist, with their znode versions (for :meth:`delete_many`),
        read as :meth:`get_many` reads."""
        paths = [layout.token_path(i) for i in token_ids]
        found = self._pipelined_get(paths, token_ids, "read tokens")
        infos = self._restore_sides([layout.decode_token(data) for data, _, _ in found])
        return {token_id: (info, stat.version)
                for (_, stat, token_id), info in zip(found, infos)}

    def get_many(self, token_ids: Sequence[str]) -> dict[str, TokenInformation | None]:
        """The current state of each token (None when deleted), read pipelined."""
        found: dict[str, TokenInformation | None] = dict.fromkeys(token_ids)
        paths = [layout.token_path(i) for i in token_ids]
        read = self._pipelined_get(paths, token_ids, "read tokens")
        infos = self._restore_sides([layout.decode_token(data) for data, _, _ in read])
        for (_, _, token_id), info in zip(read, infos):
            found[token_id] = info
        return found

    def notifications(self, watch: Callable[[object], None] | None = None) -> list[str]:
        """The names of the pending ``token_change_<seq>`` children, in sequence order.

        ``watch`` is armed as a one-shot children watch (kazoo calls it on its thread).
        """
        names = self._wait(
            "list token changes", self._client.get_children_async(layout.TOKEN_CHANGES, watch)
        )
        # Listings grow with the write rate until the purge (15 min): filter and sort
        # in C-backed string operations, not by parsing every name.
        valid = [n for n in names if layout.is_token_change_name(n)]
        valid.sort()
        return valid

    def notifications_after(
        self, sequence: int, watch: Callable[[object], None] | None = None
    ) -> list[str]:
        """The notifications with a sequence number above ``sequence``, in order
        (a bisection of the sorted listing)."""
        names = self.notifications(watch)
        if sequence < 0:
            return names
        return names[bisect.bisect_right(names, layout.token_change_name(sequence)):]

    def read_notifications(self, names: Sequence[str]) -> list[tuple[str, str | None]]:
        """``(name, token id)`` for each notification, pipelined; None when it was purged."""
        paths = [f"{layout.TOKEN_CHANGES}/{n}" for n in names]
        found = {
            name: layout.decode_token_change(data)
            for data, _stat, name in self._pipelined_get(paths, names, "read token changes")
        }
        return [(name, found.get(name)) for name in names]

    # --- pipelined reads (zk.reads) ------------------------------------------------

    def _read_all_data(self, token_ids: Sequence[str]) -> list[tuple[str, bytes]]:
        """``(token id, data)`` of every token that still exists, in order: the cold
        start's reads. With multi-read, no stat is parsed and no object made per token
        beyond its data and this pair (a million of them would be freed after the load,
        but keep the memory they sat on)."""
        paths = [layout.token_path(i) for i in token_ids]
        found = self._reads.get_many(paths, "load tokens", with_stat=False)
        return [(token_id, data) for token_id, data in zip(token_ids, found) if data is not None]

    def _pipelined_get(
        self, paths: Sequence[str], keys: Sequence[str], what: str
    ) -> list[tuple[bytes, ZnodeStat, str]]:
        """``(data, stat, key)`` for every path that exists, in order (multi-read
        batches, or one pipelined ``get`` per path: :meth:`zk.reads.ZnodeReads.get_many`)."""
        found = self._reads.get_many(paths, what)
        return [(value[0], value[1], key) for value, key in zip(found, keys) if value is not None]
