"""Whether a Kafka ZooKeeper-to-KRaft migration has started on the shared ensemble.

Owns one watch of ``/migration`` (Kafka's ``MigrationZNode``, created when a KRaft
controller quorum takes over a ZooKeeper-mode cluster). Beside Kafka
(``kafka.zookeeper.shared=true``) the migration ends tokensvc's part: Kafka's KRaft
controller copies the metadata it knows and, from then on, deletes the token znodes it
does not hold in KRaft, so a token tokensvc wrote afterwards would vanish. The broker
asks :attr:`KraftMigrationWatch.started` before every token write and refuses it once
the znode has been seen (docs/kafka.md says what an operator does then).

Lifecycle (kazoo-recipe style): ``start()`` arms a kazoo ``DataWatch`` (it re-arms
itself on every event and after a reconnect; kazoo runs the callback on its event thread,
where this only sets a flag and calls ``on_change``, which must not block). Once seen,
the migration is remembered for the life of the process: a znode that goes away again
does not make the token znodes safe to write (Kafka never rolls a migration back to
ZooKeeper by deleting it). ``close()`` stops the watch. The kazoo client belongs to the
caller.

Must not: write anything (it only reads ``/migration``), or block kazoo's thread.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from kazoo.client import KazooClient
from kazoo.recipe.watchers import DataWatch

from zk import layout

log = logging.getLogger(__name__)


class KraftMigrationWatch:
    """Follow ``/migration``; see the module docstring."""

    def __init__(self, client: KazooClient, *,
                 on_change: Callable[[bool], None] | None = None) -> None:
        self._client = client
        self._on_change = on_change
        self._lock = threading.Lock()
        self._started = False
        self._closed = False
        self._watch: DataWatch | None = None

    @property
    def started(self) -> bool:
        """True once ``/migration`` has been seen."""
        with self._lock:
            return self._started

    def start(self) -> None:
        """Read ``/migration`` now (the first answer arrives before this returns) and
        follow it."""
        if self._watch is None:
            self._watch = DataWatch(self._client, layout.MIGRATION, self._on_data)

    def close(self) -> None:
        with self._lock:
            self._closed = True

    def _on_data(self, _data: bytes | None, stat: object | None) -> bool | None:
        with self._lock:
            if self._closed:
                return False  # kazoo stops the watch
            if stat is None or self._started:
                return None
            self._started = True
        log.error("a Kafka ZooKeeper-to-KRaft migration has started (%s exists): token "
                  "creates, renewals and expiries are refused from now on, and the expiry "
                  "sweep stops (docs/kafka.md)", layout.MIGRATION)
        if self._on_change is not None:
            self._on_change(True)
        return None
