"""The ACL sync: an authorizer kept equal to the ACLs in ZooKeeper.

Owns :class:`AclSync`, which keeps an :class:`~tokensvc.authz.authorizer.AclAuthorizer`
equal to the ACL znodes on the one notification recipe
(:class:`zk.notifications.ChangeNotifications`): every ACL loaded at start and after a
session loss, then each notification of ``/kafka-acl-changes`` and
``/kafka-acl-extended-changes`` applied in sequence order by re-reading the resource it
names (see the class docstring for what happens when the connection is lost). The
znodes, their bytes and the reads are :mod:`zk.acl_store`'s (ACLs are filed as tokens
and credentials are: ``<kind>_store`` and ``<kind>_sync``).

Must not: decide authorization, write ACLs (the store does; the recipe only purges
notifications on the controller), or log ACL contents beyond resource names.
"""

from __future__ import annotations

import logging

from tokensvc.authz.acl import PatternType, ResourcePattern
from tokensvc.authz.authorizer import AclAuthorizer
from tokensvc.core.errors import KafkaError
from zk.acl_store import ACL_ROOTS, AclDataError, AclStore, decode_change
from zk.notifications import ChangeNotifications, NotificationRoot, OnResync, Purge

# Named as before the sync was filed apart from the store: runbooks quote "zk.acl_store:".
log = logging.getLogger("zk.acl_store")

_PATTERN_OF_ROOT = {root.name: pt for pt, root in ACL_ROOTS.items()}


class AclSync(ChangeNotifications):
    """Keeps an :class:`AclAuthorizer` equal to the ACLs in ZooKeeper.

    The follow/resync/purge cycle and its reconnect policy are
    :class:`zk.notifications.ChangeNotifications`' (version names ``"acls"`` and
    ``"acls-extended"``). Loading reads every ACL, hands them to
    ``authorizer.load_resources`` and, the first time, calls ``authorizer.mark_ready()``.
    A notification re-reads the resource it names and calls ``apply_resource``, in
    sequence order: re-reading makes it idempotent, so a later ALLOW after a DENY (or
    the reverse) always ends in ZooKeeper's current state. A notification or resource
    whose bytes do not decode is logged and skipped (the authorizer keeps that
    resource's ACLs). While the connection is suspended the authorizer keeps answering
    from what it has (it stays ready, as Kafka's ZooKeeper authorizer does).

    Stats: those of the recipe, and ``last_applied`` per pattern type.

    The shape of every sync: ``(store, authorizer, *, purge=None, on_resync=None)``;
    ``on_resync`` gets a :class:`zk.notifications.Resync` (``entries``: resources held).
    """

    def __init__(
        self,
        store: AclStore,
        authorizer: AclAuthorizer,
        *,
        purge: Purge | None = None,
        on_resync: OnResync | None = None,
    ) -> None:
        self._store = store
        self._authorizer = authorizer
        super().__init__(
            store.client,
            "acl-sync",
            list(ACL_ROOTS.values()),
            load=self._load_acls,
            apply=self._apply_acls,
            purge=purge,
            on_resync=on_resync,
            recoverable=(KafkaError, AclDataError),
        )

    def start(self) -> None:
        """Load every ACL, mark the authorizer ready, then follow changes."""
        self._store.ensure_paths()
        super().start()
        self._authorizer.mark_ready()

    @property
    def last_applied(self) -> dict[PatternType, int]:
        """The sequence number of the last notification handled, per change root."""
        applied = self.applied
        return {pt: applied[root.name] for pt, root in ACL_ROOTS.items()}

    def _load_acls(self) -> int:
        resources = self._store.load_all()
        self._authorizer.load_resources(resources)
        return len(resources)

    def _apply_acls(self, root: NotificationRoot, notes: list[tuple[int, bytes]]) -> None:
        pattern_type = _PATTERN_OF_ROOT[root.name]
        patterns: dict[ResourcePattern, None] = {}
        for sequence, data in notes:
            try:
                patterns[decode_change(data, pattern_type)] = None
            except AclDataError as exc:
                log.error("skipping ACL change %s: %s", root.child(sequence), exc)
        for pattern in patterns:
            try:
                entries = self._store.load_resource(pattern)
            except AclDataError as exc:
                # Retrying cannot fix bad bytes: keep what the authorizer has for that
                # resource (the next change to it, or a resync, repairs it).
                log.error("skipping ACL resource %s: %s", pattern, exc)
                continue
            self._authorizer.apply_resource(pattern, entries)
