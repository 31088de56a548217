"""The ACL of every znode tokensvc creates: one declared path -> ACL table.

Owns which paths are sensitive (readable only by the brokers' identity) and the ACL a
znode gets, with Kafka's ``zookeeper.set.acl`` semantics (``ZkData.defaultAcls``):

- ACLs on (``secure=True``): ``auth`` ALL (every identity the creating session
  authenticated with: its SASL user, its certificate's subject, its digest) and, unless
  the path is sensitive, ``world:anyone`` READ;
- ACLs off: ``world:anyone`` ALL (ZooKeeper's open ACL), as Kafka without the key.

The sensitive paths are Kafka's three (:data:`KAFKA_SENSITIVE_ROOTS`; a Kafka broker
sharing the ensemble with the same identity reads and writes them as it expects) and
those of our own a reader could abuse (:data:`OUR_SENSITIVE_ROOTS`, each with its
reason). A path is under a root when it is the root or below it. Paths are relative to
the chroot, as the stores see them; chroot parents are never sensitive.

The table is applied by :mod:`zk.client` to every create (plain, ``ensure_path``,
transactions) and by the security migration to every existing znode; the broker's
check (:mod:`zk.acl_check`) reads the sensitive roots back. It must not talk to
ZooKeeper.
"""

from __future__ import annotations

from dataclasses import dataclass

from kazoo.security import ACL, OPEN_ACL_UNSAFE, Id, Permissions

from zk import layout

# Paths the stores own, spelled here because the stores import the client that imports
# this table (tests/unit/zk/test_znode_acls.py holds them equal to the stores' constants).
CONFIG = "/config"
CONFIG_USERS = "/config/users"
CONFIG_BROKERS = "/config/brokers"
REQUESTS = f"{layout.DELEGATION_TOKEN}/requests"
ACL_ROOTS = ("/kafka-acl", "/kafka-acl-extended", "/kafka-acl-changes",
             "/kafka-acl-extended-changes")


@dataclass(frozen=True)
class SensitiveRoot:
    """A subtree nobody but the brokers may read, and why."""

    path: str
    reason: str


KAFKA_SENSITIVE_ROOTS = (
    SensitiveRoot(CONFIG_USERS, "SCRAM credentials: salt, stored and server keys allow an "
                              "offline guess of the password (Kafka)"),
    SensitiveRoot(CONFIG_BROKERS, "broker configuration overrides (Kafka)"),
    SensitiveRoot(layout.TOKENS, "token details: owner, renewers, expiry (Kafka)"),
)
OUR_SENSITIVE_ROOTS = (
    SensitiveRoot(REQUESTS, "request records: a reader who learns a request key could "
                            "replay a forwarded create and be answered with its token"),
    SensitiveRoot(layout.TOKEN_CHANGES, "every changed token's id, which DescribeDelegationToken "
                                        "shows only to those allowed to see the token"),
    SensitiveRoot(layout.TOKEN_LABELS, "token ids (each a user name of an implicit token login) "
                                       "with their labels, which only DescribeDelegationToken "
                                       "shows, to those allowed to see the token"),
)
SENSITIVE_ROOTS = KAFKA_SENSITIVE_ROOTS + OUR_SENSITIVE_ROOTS

# Every root tokensvc creates znodes under (for the migration and the docs).
TOKENSVC_ROOTS = (
    layout.DELEGATION_TOKEN,
    layout.CONTROLLER,
    layout.CONTROLLER_EPOCH,
    layout.BROKERS,
    layout.CLUSTER,
    CONFIG,
    *ACL_ROOTS,
    layout.TOKENSVC,  # /tokensvc/clock/<id>: the brokers' clock probes (zk.clock)
)

BROKERS_ALL = ACL(Permissions.ALL, Id("auth", ""))
WORLD_READ = ACL(Permissions.READ, Id("world", "anyone"))


def is_sensitive(path: str) -> bool:
    """Whether ``path`` (relative to the chroot) is in a sensitive subtree."""
    return any(path == root.path or path.startswith(root.path + "/") for root in SENSITIVE_ROOTS)


def acl_for(path: str, secure: bool) -> list[ACL]:
    """The ACL a znode at ``path`` gets."""
    if not secure:
        return list(OPEN_ACL_UNSAFE)
    return [BROKERS_ALL] if is_sensitive(path) else [BROKERS_ALL, WORLD_READ]


def world_access(acls: list[ACL]) -> int:
    """The permissions ``world:anyone`` has under ``acls`` (a bit set of Permissions)."""
    perms = 0
    for entry in acls:
        if entry.id.scheme == "world" and entry.id.id == "anyone":
            perms |= entry.perms
    return perms


def matches_declared(path: str, acls: list[ACL], secure: bool) -> bool:
    """Whether a znode's ACL as read back is what the table declares. ZooKeeper stores
    ``auth`` as the creator's identities, so any ALL entry that is not the world's
    stands for it."""
    if not secure:
        return world_access(acls) == Permissions.ALL
    world = world_access(acls)
    wanted_world = 0 if is_sensitive(path) else Permissions.READ
    owners = [a for a in acls if a.id.scheme != "world" and a.perms == Permissions.ALL]
    return world == wanted_world and bool(owners)
