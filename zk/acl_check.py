"""The broker's check that ZooKeeper protects what it must: ACLs read back, compared.

Owns reading the ACLs of the roots tokensvc writes under (and a bounded sample of the
credential znodes, the first thing an intruder reads) and saying which are open: a
sensitive path (:mod:`zk.znode_acls`) that the world may read or change, or any other
root the world may change. :func:`open_paths` is the rule (pure, given a reader);
:class:`ZnodeAclCheck` runs it at start and every few minutes on a daemon thread, logs a
warning naming what it found and keeps it in ``last`` (the broker's gauge
``tokensvc_zookeeper_insecure_paths`` reads its length).

It must not change an ACL (the security migration does that) and must not walk every
token: the token znodes are judged by their root.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NoNodeError
from kazoo.security import Permissions

from zk import znode_acls

log = logging.getLogger(__name__)

DEFAULT_INTERVAL_S = 300.0
# Credential znodes read per check, beyond the roots.
SAMPLE = 100
_CHANGE = Permissions.WRITE | Permissions.CREATE | Permissions.DELETE | Permissions.ADMIN

Reader = Callable[[str], "list | None"]


def open_paths(read_acls: Reader, list_children: Callable[[str], list[str]]) -> list[str]:
    """The paths whose ACL lets the world in where it must not, as ``path (what)``.
    ``read_acls(path)`` gives a znode's ACL, None when it does not exist."""
    found = []
    paths = [root.path for root in znode_acls.SENSITIVE_ROOTS]
    paths += [p for p in znode_acls.TOKENSVC_ROOTS if p not in paths]
    paths += [f"{znode_acls.CONFIG_USERS}/{name}"
              for name in sorted(list_children(znode_acls.CONFIG_USERS))[:SAMPLE]]
    for path in paths:
        acls = read_acls(path)
        if acls is None:
            continue
        world = znode_acls.world_access(acls)
        if world & _CHANGE:
            found.append(f"{path} (world-writable)")
        elif world & Permissions.READ and znode_acls.is_sensitive(path):
            found.append(f"{path} (world-readable)")
    return found


def _reader(client: KazooClient) -> Reader:
    def read(path: str) -> list | None:
        try:
            acls, _ = client.get_acls(path)
        except NoNodeError:
            return None
        return list(acls)

    return read


def _children(client: KazooClient) -> Callable[[str], list[str]]:
    def children(path: str) -> list[str]:
        try:
            return client.get_children(path)
        except NoNodeError:
            return []

    return children


class ZnodeAclCheck:
    """Checks the ACLs now, then every ``interval_s`` seconds, until closed."""

    def __init__(self, client: KazooClient, interval_s: float = DEFAULT_INTERVAL_S) -> None:
        self._client = client
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.last: list[str] | None = None

    def check(self) -> list[str] | None:
        """One check; None when ZooKeeper could not be read (nothing is reported)."""
        try:
            found = open_paths(_reader(self._client), _children(self._client))
        except KazooException as exc:
            log.info("ZooKeeper ACL check skipped: %s", type(exc).__name__)
            return None
        if found:
            log.warning(
                "ZooKeeper lets anyone in at %d path(s): %s; run `tokensvc zookeeper "
                "security-migration --zookeeper.acl secure` (docs/operations.md)",
                len(found), ", ".join(found[:10]) + (" ..." if len(found) > 10 else ""),
            )
        self.last = found
        return found

    def start(self) -> None:
        self.check()
        self._thread = threading.Thread(target=self._run, name="zk-acl-check", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            self.check()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
