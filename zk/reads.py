"""Reading many znodes at once: the one pipelined reader of ``zk``.

Owns how ``zk`` reads many znodes without a round trip each, for every store and the
notification recipe:

- :func:`pipelined`: ``start(path)`` -- a kazoo ``*_async`` read that answers a value
  (``get_async``, ``get_children_async``) -- for each path, sent in windows of
  :data:`WINDOW` requests, the whole window sent before its first answer is awaited;
  the answers in path order, None where the znode does not exist.
- :class:`ZnodeReads`: one store's calls on one client, each wait capped at the store's
  timeout (:meth:`ZnodeReads.call` for a single call, read or write); :meth:`ZnodeReads.get_many` reads data (and stats) with ZooKeeper's
  multi-read when the store enables it -- batches of :data:`MULTI_READ_BATCH` paths,
  the batches pipelined, through :func:`zk.client.multi_get_data` -- and falls back for
  good to pipelined gets when the server does not implement it.

Failures are store errors (:mod:`zk.errors`): a missing znode is None, every other
failure is raised, its kazoo exception the ``__cause__``. A wait past the cap is
:class:`zk.errors.StoreUnavailable`.

Must not: know a znode layout or decode data, decide what a store writes, or call a
private kazoo name (the multi-read request is :mod:`zk.client`'s adapter).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import EXCEPTIONS, MarshallingError, NoNodeError, UnimplementedError
from kazoo.interfaces import IAsyncResult
from kazoo.protocol.states import ZnodeStat

from zk.client import multi_get_data
from zk.errors import StoreError, ZnodeMissing, translate, zk_call

log = logging.getLogger(__name__)

# Requests in flight per window of pipelined reads.
WINDOW = 5_000
# Paths per multi-read request.
MULTI_READ_BATCH = 1_000


def wait(what: str, async_result: IAsyncResult, timeout_s: float | None) -> Any:
    """The answer of one kazoo async call, awaited at most ``timeout_s`` (None: no cap)."""
    return zk_call(what, lambda: async_result.get(timeout=timeout_s))


def pipelined(
    start: Callable[[str], IAsyncResult],
    paths: Sequence[str],
    what: str,
    *,
    timeout_s: float | None,
    window: int = WINDOW,
) -> list[Any]:
    """``start(path)``'s answer for each path, in order; None where the znode does not
    exist. Up to ``window`` requests are sent before the first of them is awaited."""
    out: list[Any] = []
    for lo in range(0, len(paths), window):
        pending = [zk_call(what, lambda p=p: start(p)) for p in paths[lo : lo + window]]
        for async_result in pending:
            try:
                out.append(wait(what, async_result, timeout_s))
            except ZnodeMissing:
                out.append(None)
    return out


class ZnodeReads:
    """The reads of one store on one client, each wait capped at ``timeout_s``.

    ``multi_read``: read data with ZooKeeper's multi-read (3.6+); switched off for good,
    with a warning, the first time the server says it does not implement it.
    """

    def __init__(self, client: KazooClient, timeout_s: float | None, *, multi_read: bool = False) -> None:
        self._client = client
        self.timeout_s = timeout_s
        self.multi_read = multi_read

    def wait(self, what: str, async_result: IAsyncResult) -> Any:
        return wait(what, async_result, self.timeout_s)

    def call(self, what: str, start: Callable[[], IAsyncResult]) -> Any:
        """``start()`` -- one kazoo ``*_async`` call, a read or a store's write -- and its
        answer within the cap: how a store makes a single call."""
        return self.wait(what, zk_call(what, start))

    def pipelined(
        self, start: Callable[[str], IAsyncResult], paths: Sequence[str], what: str
    ) -> list[Any]:
        """:func:`pipelined` with this store's cap."""
        return pipelined(start, paths, what, timeout_s=self.timeout_s)

    def get_many(
        self, paths: Sequence[str], what: str, *, with_stat: bool = True
    ) -> list[tuple[bytes, ZnodeStat] | bytes | None]:
        """Each znode's ``(data, stat)`` (``data`` alone without ``with_stat``), in
        order; None where it does not exist."""
        if self.multi_read:
            try:
                return self._multi_read(paths, what, with_stat)
            except StoreError as exc:
                if not isinstance(exc.__cause__, (UnimplementedError, MarshallingError)):
                    raise
                log.warning("ZooKeeper does not support multi-read; using pipelined reads")
                self.multi_read = False
        found = self.pipelined(self._client.get_async, paths, what)
        if with_stat:
            return found
        return [None if value is None else value[0] for value in found]

    def _multi_read(
        self, paths: Sequence[str], what: str, with_stat: bool
    ) -> list[tuple[bytes, ZnodeStat] | bytes | None]:
        pending = [
            zk_call(what, lambda lo=lo: multi_get_data(
                self._client, paths[lo : lo + MULTI_READ_BATCH], with_stat=with_stat))
            for lo in range(0, len(paths), MULTI_READ_BATCH)
        ]
        found: list[tuple[bytes, ZnodeStat] | bytes | None] = []
        for async_result in pending:
            for result in self.wait(what, async_result):
                if not isinstance(result, int):
                    found.append(result)
                elif result == NoNodeError.code:
                    found.append(None)
                else:
                    error = EXCEPTIONS[result]()
                    raise translate(what, error) from error
        return found
