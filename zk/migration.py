"""The security migration: give every existing znode of tokensvc its declared ACL.

Owns walking the roots tokensvc writes under (:data:`zk.znode_acls.TOKENSVC_ROOTS`, and
the chroot's parents) and setting on each znode the ACL :func:`zk.znode_acls.acl_for`
declares, ``secure`` (the brokers' identity ALL, the world READ except sensitive paths)
or ``unsecure`` (the world ALL), as Kafka's ``zookeeper-security-migration.sh`` does.

It reads each znode's ACL first and writes only those that differ, in pipelined
windows: a second run changes nothing, and a run killed half-way is resumed by running
it again (what it already set is read and skipped). Znodes created while it walks get
the table's ACL from the brokers themselves (they run with ``zookeeper.set.acl`` set as
the procedure says, docs/operations.md); znodes deleted meanwhile are skipped.

It must not create or delete znodes, and needs a session authenticated as the brokers
for ``secure`` (ZooKeeper's ``auth`` scheme names the session's identities).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from zk import znode_acls

WINDOW = 1_000


@dataclass
class MigrationResult:
    """What one run saw and did."""

    znodes: int = 0
    changed: int = 0
    vanished: int = 0


def _wait_all(results: list) -> list:
    out = []
    for result in results:
        try:
            out.append(result.get())
        except NoNodeError:
            out.append(None)
    return out


def _set_window(client: KazooClient, paths: list[str], secure: bool,
                result: MigrationResult) -> list[str]:
    """Set the declared ACL on ``paths`` where it differs; returns their children's paths."""
    acls = _wait_all([client.get_acls_async(p) for p in paths])
    children = _wait_all([client.get_children_async(p) for p in paths])
    writes = []
    for path, current in zip(paths, acls, strict=True):
        if current is None:
            result.vanished += 1
            continue
        result.znodes += 1
        stored = list(current[0])
        if znode_acls.matches_declared(path, stored, secure):
            continue
        writes.append(client.set_acls_async(path, znode_acls.acl_for(path, secure)))
    for outcome in _wait_all(writes):
        if outcome is None:
            result.vanished += 1
        else:
            result.changed += 1
    below = []
    for path, names in zip(paths, children, strict=True):
        for name in names or ():
            below.append(f"{path.rstrip('/')}/{name}")
    return below


def migrate(client: KazooClient, secure: bool, *,
            progress: Callable[[MigrationResult], None] | None = None) -> MigrationResult:
    """Set the declared ACL on every znode under tokensvc's roots, breadth first."""
    result = MigrationResult()
    level = [root for root in znode_acls.TOKENSVC_ROOTS if client.exists(root)]
    while level:
        nxt: list[str] = []
        for start in range(0, len(level), WINDOW):
            nxt.extend(_set_window(client, level[start:start + WINDOW], secure, result))
            if progress is not None:
                progress(result)
        level = nxt
    return result


def migrate_chroot_parents(root_client: KazooClient, chroot: str, secure: bool) -> int:
    """The chroot and its parents (a client without chroot): never sensitive. Returns how
    many were changed."""
    changed = 0
    parts = [p for p in chroot.strip("/").split("/") if p]
    for depth in range(1, len(parts) + 1):
        path = "/" + "/".join(parts[:depth])
        try:
            stored, _ = root_client.get_acls(path)
        except NoNodeError:
            continue
        # A chroot parent is judged as a non-sensitive path.
        if znode_acls.matches_declared("/", list(stored), secure):
            continue
        root_client.set_acls(path, znode_acls.acl_for("/", secure))
        changed += 1
    return changed
