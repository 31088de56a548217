"""Deleting many znodes at once: the one pipelined deleter of ``zk``.

Owns how ``zk`` deletes many znodes, or commits many transactions, without a round
trip each, for every store and the notification recipe:

- :func:`delete_all`: plain deletes (any version), sent in windows of :data:`WINDOW`
  requests, the whole window sent before its first answer is awaited. A znode already
  gone is not an error: Kafka's brokers purge the same notifications, a sweep may race
  another, and the goal -- the znode is gone -- holds. Used by the notification purge,
  the request-record purge and the token side znodes (labels, key id).
- :func:`created_before`: the znodes of a list created before a cutoff (ZooKeeper's
  ``ctime``), their stats read in windows: what a purge by age deletes.
- :func:`commit_all`: many prepared transactions committed pipelined, each answer its
  list of results (kazoo's, failures included) in order: the token store's batched
  deletes (a token and its notification per pair of operations).
- :func:`check_transaction`: a transaction that would be over what ZooKeeper takes in
  one request is refused before it is sent (ZooKeeper would close the connection).

Failures other than a missing znode are store errors (:mod:`zk.errors`), each wait capped
at the caller's timeout.

Must not: know a znode layout, decide what a transaction's failure means (the caller
reads the results), or delete anything it was not handed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from kazoo.client import KazooClient
from kazoo.protocol.states import ZnodeStat

from tokensvc.core.errors import Errors
from zk.errors import StoreError, ZnodeMissing, zk_call
from zk.reads import pipelined, wait

# Requests in flight per window of pipelined deletes or transactions.
WINDOW = 5_000
# ZooKeeper closes the connection of a client whose request is over jute.maxbuffer
# (0xfffff bytes by default): a store's one transaction per request stays below this.
MAX_TRANSACTION_BYTES = 1_000_000
# A multi operation's own bytes besides its path and data (header, lengths, version,
# flags), and each znode ACL of a create (scheme, id, permissions).
_OP_BYTES = 24
_ACL_BYTES = 64
# Stats in flight per window of :func:`created_before` (its scan usually stops early).
STAT_WINDOW = 64


def delete_all(
    client: KazooClient,
    paths: Sequence[str],
    what: str,
    *,
    timeout_s: float | None = None,
    window: int = WINDOW,
) -> int:
    """Delete every znode of ``paths`` (any version), pipelined; how many this call
    deleted (the ones already gone are skipped, not errors)."""
    deleted = 0
    for lo in range(0, len(paths), window):
        pending = [zk_call(what, lambda p=p: client.delete_async(p)) for p in paths[lo:lo + window]]
        for async_result in pending:
            try:
                wait(what, async_result, timeout_s)
            except ZnodeMissing:
                continue
            deleted += 1
    return deleted


def created_before(
    client: KazooClient,
    paths: Sequence[str],
    cutoff_ms: int,
    what: str,
    *,
    ordered: bool = False,
    timeout_s: float | None = None,
    window: int = STAT_WINDOW,
) -> tuple[list[str], int | None]:
    """The paths whose znode was created before ``cutoff_ms`` (gone ones left out), and
    with ``ordered`` (creation times grow along ``paths``: sequential znodes) the scan
    stops at the first younger one and its creation time is returned too (else None)."""
    old: list[str] = []
    for lo in range(0, len(paths), window):
        part = paths[lo:lo + window]
        stats: list[ZnodeStat | None] = pipelined(client.exists_async, part, what,
                                                  timeout_s=timeout_s)
        for path, stat in zip(part, stats):
            if stat is None:
                continue
            if stat.ctime < cutoff_ms:
                old.append(path)
            elif ordered:
                return old, stat.ctime
    return old, None


def commit_all(
    client: KazooClient,
    build: Sequence[Callable[[Any], None]],
    what: str,
    *,
    timeout_s: float | None = None,
    window: int = WINDOW,
) -> list[list[Any]]:
    """Commit one transaction per ``build`` function (each adds its operations to the
    transaction it is handed), pipelined; each transaction's results in order, or the
    store error of a commit that was not answered (its outcome unknown) is raised."""
    out: list[list[Any]] = []
    for lo in range(0, len(build), window):
        pending = []
        for fill in build[lo:lo + window]:
            tx = client.transaction()
            fill(tx)
            pending.append(zk_call(what, tx.commit_async))
        out.extend(wait(what, async_result, timeout_s) for async_result in pending)
    return out


def transaction_bytes(tx: Any) -> int:
    """About the size of a kazoo transaction's request: each operation's path and data
    (``TransactionRequest.operations``) and a bound for the rest."""
    total = 0
    for op in tx.operations:
        data = getattr(op, "data", None) or b""
        total += _OP_BYTES + len(op.path.encode()) + len(data)
        total += _ACL_BYTES * len(getattr(op, "acl", None) or ())
    return total


def check_transaction(tx: Any, what: str) -> None:
    """INVALID_REQUEST (a store error) for a transaction over :data:`MAX_TRANSACTION_BYTES`:
    a request naming too many items for one ZooKeeper transaction is refused whole,
    nothing written, instead of costing the broker its ZooKeeper connection."""
    size = transaction_bytes(tx)
    if size > MAX_TRANSACTION_BYTES:
        raise StoreError(
            f"{what}: one ZooKeeper transaction of about {size:,} bytes, over the "
            f"{MAX_TRANSACTION_BYTES:,} sent in one request; send fewer items per request",
            Errors.INVALID_REQUEST)
