"""ACLs in ZooKeeper, in Kafka's layout: the ACL store.

Owns the ACL znodes and their bytes, as Kafka (ZooKeeper mode) writes them:

- literal patterns: ``/kafka-acl/<Type>/<name>``; prefixed patterns:
  ``/kafka-acl-extended/prefixed/<Type>/<name>`` (``<Type>`` is Kafka's PascalCase
  name: ``Topic``, ``Group``, ``Cluster``, ``TransactionalId``, ``DelegationToken``,
  ``User``; the name is used as it is, so ``User:bob`` is ``/kafka-acl/User/User:bob``);
- data: ``{"acls":[{"principal":"User:alice","permissionType":"Allow","host":"*",
  "operation":"Read"}],"version":1}`` (Kafka 3.9's key order); a resource with no ACL
  left has no znode;
- change notifications: ``/kafka-acl-changes/acl_changes_<seq>`` with payload
  ``<TYPE>:<name>`` for literal patterns, ``/kafka-acl-extended-changes/acl_changes_<seq>``
  with ``{"version":1,"resourceType":"<TYPE>","name":...,"patternType":"PREFIXED"}`` for
  prefixed ones. Kafka writes the Java enum names there (``TOPIC``, ``TRANSACTIONAL_ID``);
  reading accepts those and the PascalCase names older Kafka wrote.

:class:`AclStore` writes each resource as a compare-and-set on the znode version
(retried when another writer got there first) in ONE transaction with its change
notification, optionally guarded by the controller's ``(path, version)``. Every call is
capped; its failures are the store errors of :mod:`zk.errors` (``StoreUnavailable``:
REQUEST_TIMED_OUT, retriable; ``NotControllerError``; ``StoreError``), and every ACL is
read with the one pipelined reader (:mod:`zk.reads`). The sync that keeps the
authorizer equal to these znodes is :mod:`zk.acl_sync` (ACLs are filed as tokens and
credentials are: ``<kind>_store`` and ``<kind>_sync``).

Must not: decide authorization, or be imported by pure code. Nothing here logs ACL
contents beyond resource names.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import (
    BadVersionError,
    NodeExistsError,
    NoNodeError,
    RolledBackError,
)

from tokensvc.authz.acl import (
    PATTERN_TYPES,
    RESOURCE_TYPES,
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclCreateResult,
    AclDeleteResult,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
    binding_problem,
)
from tokensvc.core.errors import Errors
from zk.errors import NotControllerError, StoreError, ZnodeMissing, translate
from zk.layout import has_lone_surrogate
from zk.notifications import NotificationRoot, Version
from zk.reads import ZnodeReads
from zk.requests import RecordOp, RequestKeyExistsError
from zk.writes import check_transaction

LITERAL_ACLS = "/kafka-acl"
EXTENDED_ACLS = "/kafka-acl-extended"
LITERAL_CHANGES = "/kafka-acl-changes"
EXTENDED_CHANGES = "/kafka-acl-extended-changes"
CHANGE_PREFIX = "acl_changes_"
ACL_VERSION = 1
CHANGE_VERSION = 1
MAX_UPDATE_RETRIES = 10

# (path, version) checked in the same transaction as a write: the controller's guard.
Guard = tuple[str, int]


class AclDataError(ValueError):
    """An ACL znode or change notification does not decode; the message names its path."""


# --- layout (pure) -----------------------------------------------------------------------


def store_root(pattern_type: PatternType) -> str:
    """``/kafka-acl`` for literal patterns, ``/kafka-acl-extended/prefixed`` for prefixed."""
    if pattern_type is PatternType.LITERAL:
        return LITERAL_ACLS
    if pattern_type is PatternType.PREFIXED:
        return f"{EXTENDED_ACLS}/prefixed"
    raise ValueError(f"no ACL store for pattern type {pattern_type!r}")


def type_path(pattern_type: PatternType, resource_type: ResourceType) -> str:
    return f"{store_root(pattern_type)}/{resource_type.kafka_name}"


def resource_path(pattern: ResourcePattern) -> str:
    """The znode of one resource pattern; ValueError if the name cannot be a znode name."""
    name = pattern.name
    if not name or "/" in name or name in (".", "..") or "\x00" in name:
        raise ValueError(f"resource name {name!r} cannot be stored in ZooKeeper")
    return f"{type_path(pattern.pattern_type, pattern.resource_type)}/{name}"


def change_root(pattern_type: PatternType) -> str:
    return LITERAL_CHANGES if pattern_type is PatternType.LITERAL else EXTENDED_CHANGES


def change_sequence(name: str) -> int | None:
    """The sequence number of an ``acl_changes_<seq>`` child, None for other names."""
    digits = name[len(CHANGE_PREFIX):] if name.startswith(CHANGE_PREFIX) else ""
    return int(digits) if digits.isdigit() else None


def _dumps(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def _entry_order(entry: AccessControlEntry) -> tuple:
    return (entry.principal, entry.host, int(entry.operation), int(entry.permission_type))


def encode_acls(entries: Iterable[AccessControlEntry]) -> bytes:
    """A resource znode's bytes: Kafka 3.9's key order (Java hash maps: ``acls`` before
    ``version``; ``principal``, ``permissionType``, ``host``, ``operation``), entries in a
    stable order (Kafka's is its set's hash order)."""
    return _dumps(
        {
            "acls": [
                {
                    "principal": e.principal,
                    "permissionType": e.permission_type.kafka_name,
                    "host": e.host,
                    "operation": e.operation.kafka_name,
                }
                for e in sorted(entries, key=_entry_order)
            ],
            "version": ACL_VERSION,
        }
    )


def _parse_or_unknown(enum_type: type, text: object) -> Any:
    # Kafka reads a name it does not know as UNKNOWN; such an entry never matches.
    try:
        return enum_type.parse(text)
    except ValueError:
        return enum_type.UNKNOWN


def decode_acls(data: bytes | None, path: str = "ACL znode") -> set[AccessControlEntry]:
    """The entries in a resource znode (empty data = no entries)."""
    if not data:
        return set()
    try:
        obj = json.loads(data.decode("utf-8"))
        if has_lone_surrogate(data, obj):
            raise AclDataError(f"{path}: holds a lone surrogate escape (not UTF-8 text)")
        if obj.get("version") != ACL_VERSION:
            raise AclDataError(f"{path}: unsupported version {obj.get('version')!r}")
        entries = set()
        for item in obj["acls"]:
            principal, host = item["principal"], item["host"]
            if not isinstance(principal, str) or not isinstance(host, str):
                raise AclDataError(f"{path}: principal and host must be strings")
            entries.add(
                AccessControlEntry(
                    principal,
                    host,
                    _parse_or_unknown(AclOperation, item["operation"]),
                    _parse_or_unknown(AclPermissionType, item["permissionType"]),
                )
            )
        return entries
    except AclDataError:
        raise
    except (UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError,
            RecursionError) as exc:
        raise AclDataError(f"{path}: not Kafka's ACL JSON ({exc.__class__.__name__})") from None


def encode_change(pattern: ResourcePattern) -> bytes:
    """A change notification's payload for ``pattern`` (see the module docstring)."""
    if pattern.pattern_type is PatternType.LITERAL:
        return f"{pattern.resource_type.name}:{pattern.name}".encode()
    return _dumps(
        {
            "version": CHANGE_VERSION,
            "resourceType": pattern.resource_type.name,
            "name": pattern.name,
            "patternType": pattern.pattern_type.name,
        }
    )


def decode_change(data: bytes | None, pattern_type: PatternType) -> ResourcePattern:
    """The resource pattern a notification under ``change_root(pattern_type)`` names."""
    try:
        text = (data or b"").decode("utf-8")
        if pattern_type is PatternType.LITERAL:
            type_name, colon, name = text.partition(":")
            if not colon:
                raise ValueError("no ':' separator")
            return ResourcePattern(ResourceType.parse(type_name), name, PatternType.LITERAL)
        obj = json.loads(text)
        if obj["version"] > CHANGE_VERSION:
            raise ValueError(f"unsupported version {obj['version']}")
        return ResourcePattern(
            ResourceType.parse(obj["resourceType"]),
            obj["name"],
            PatternType.parse(obj["patternType"]),
        )
    except (UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError,
            RecursionError) as exc:
        raise AclDataError(f"ACL change notification does not decode: {exc}") from None


# --- store -------------------------------------------------------------------------------


class _Retry(Exception):
    """Another writer changed the resource between our read and our write."""


class AclStore:
    """ACL znodes and their change notifications, on a started kazoo client.

    The shape of every store: ``(client, *, request_timeout_s=10.0, multi_read=True)``,
    the client as :attr:`client`. Construction does no I/O; the parent znodes are
    created on first use.
    """

    def __init__(
        self, client: KazooClient, *, request_timeout_s: float = 10.0, multi_read: bool = True
    ) -> None:
        self._client = client
        self._paths_ready = False
        # Every ZooKeeper call is capped at this, as token writes are: past it, a retriable
        # REQUEST_TIMED_OUT instead of a thread held for good by a partition.
        self._reads = ZnodeReads(client, request_timeout_s, multi_read=multi_read)

    @property
    def client(self) -> KazooClient:
        return self._client

    def ensure_paths(self) -> None:
        """Create the store roots, one child per resource type, and the change roots."""
        if self._paths_ready:
            return
        paths = [LITERAL_CHANGES, EXTENDED_CHANGES] + [
            type_path(pt, rt) for pt in PATTERN_TYPES for rt in RESOURCE_TYPES
        ]
        for path in paths:
            self._reads.call(f"create {path}", lambda p=path: self._client.ensure_path_async(p))
        self._paths_ready = True

    # --- writes ------------------------------------------------------------------------

    def add(
        self,
        bindings: Sequence[AclBinding],
        *,
        guard: Guard | None = None,
        record: Callable[[list[AclCreateResult]], RecordOp] | None = None,
    ) -> tuple[list[AclCreateResult], list[Version]]:
        """Create ACLs; one result per binding, in order (NONE also when it existed), and
        the notification versions committed.

        Invalid bindings get INVALID_REQUEST; the others are written in ONE transaction
        (one znode and one notification per resource changed, and the request record when
        given). Raises NotControllerError (NOT_CONTROLLER) when ``guard`` no longer holds and
        RequestKeyExistsError when the record already exists (nothing written).
        """
        self.ensure_paths()
        results: list[AclCreateResult | None] = [None] * len(bindings)
        by_pattern: dict[ResourcePattern, list[int]] = {}
        for i, binding in enumerate(bindings):
            problem = binding_problem(binding)
            if problem is None:
                try:
                    resource_path(binding.pattern)
                except ValueError as exc:
                    problem = str(exc)
            if problem is not None:
                results[i] = AclCreateResult(binding, Errors.INVALID_REQUEST, problem)
            else:
                by_pattern.setdefault(binding.pattern, []).append(i)
        for indexes in by_pattern.values():
            for i in indexes:
                results[i] = AclCreateResult(bindings[i], Errors.NONE, None)
        final = [r for r in results if r is not None]
        changes = {
            pattern: (lambda current, add=frozenset(bindings[i].entry for i in idx): current | add)
            for pattern, idx in by_pattern.items()
        }
        _, versions = self._apply(changes, guard, record(final) if record else None)
        return final, versions

    def remove(
        self,
        filters: Sequence[AclBindingFilter],
        *,
        guard: Guard | None = None,
        record: Callable[[list[AclDeleteResult]], RecordOp] | None = None,
    ) -> tuple[list[AclDeleteResult], list[Version]]:
        """Delete every ACL matching each filter, in ONE transaction (with the request
        record when given); one result per filter, in order, with the bindings it
        removed, and the notification versions committed. A binding matching several
        filters is reported under each. Raises as :meth:`add` does."""
        self.ensure_paths()
        errors: list[tuple[Errors, str | None]] = [(Errors.NONE, None)] * len(filters)
        valid = []
        for i, acl_filter in enumerate(filters):
            if acl_filter.is_unknown:
                errors[i] = (Errors.INVALID_REQUEST, "ACL filter contains UNKNOWN elements")
            else:
                valid.append(i)
        candidates = self._candidates(filters, valid)

        def keep_for(idx: list[int]) -> Callable[[frozenset], frozenset]:
            def keep(current: frozenset) -> frozenset:
                return frozenset(
                    e for e in current if not any(filters[i].entry_filter.matches(e) for i in idx)
                )

            return keep

        changes = {pattern: keep_for(idx) for pattern, idx in candidates.items()}

        def results_of(effects: dict[ResourcePattern, tuple[frozenset, frozenset]]) -> list:
            deleted: list[list[AclBinding]] = [[] for _ in filters]
            for pattern, (old, new) in effects.items():
                for entry in old - new:
                    for i in candidates[pattern]:
                        if filters[i].entry_filter.matches(entry):
                            deleted[i].append(AclBinding(pattern, entry))
            return [
                AclDeleteResult(f, tuple(deleted[i]), *errors[i]) for i, f in enumerate(filters)
            ]

        effects, versions = self._apply(
            changes, guard, None, record=(lambda e: record(results_of(e))) if record else None
        )
        return results_of(effects), versions

    def _candidates(
        self, filters: Sequence[AclBindingFilter], indexes: list[int]
    ) -> dict[ResourcePattern, list[int]]:
        """The stored resource patterns each filter's pattern part could match."""
        listings: dict[tuple[PatternType, ResourceType], list[str]] = {}
        found: dict[ResourcePattern, list[int]] = {}
        for i in indexes:
            pf = filters[i].pattern_filter
            rtypes = RESOURCE_TYPES if pf.resource_type is ResourceType.ANY else (pf.resource_type,)
            ptypes = PATTERN_TYPES if pf.pattern_type in (
                PatternType.ANY, PatternType.MATCH
            ) else (pf.pattern_type,)
            for pt in ptypes:
                for rt in rtypes:
                    if pf.name is not None and pf.pattern_type is not PatternType.MATCH:
                        names = [pf.name]  # exact name: no need to list the type
                    else:
                        key = (pt, rt)
                        if key not in listings:
                            listings[key] = self._children(type_path(pt, rt))
                        names = listings[key]
                    for name in names:
                        pattern = ResourcePattern(rt, name, pt)
                        if pf.matches(pattern):
                            found.setdefault(pattern, []).append(i)
        return found

    def _apply(
        self,
        changes: dict[ResourcePattern, Callable[[frozenset], frozenset]],
        guard: Guard | None,
        record_op: RecordOp | None,
        *,
        record: Callable[[dict], RecordOp] | None = None,
    ) -> tuple[dict[ResourcePattern, tuple[frozenset, frozenset]], list[Version]]:
        """Compare-and-set every resource of ``changes`` in one transaction: read them,
        apply each change, write the changed ones at the versions read, with one
        notification each and the request record; retry (with jittered backoff, as Kafka
        does) when another writer won. Returns ``{pattern: (old, new)}`` and the
        notification versions; no transaction when nothing changed and nothing is
        recorded."""
        paths = {p: resource_path(p) for p in changes}
        for attempt in range(MAX_UPDATE_RETRIES):
            reads = self._read_many(paths)
            effects = {p: (reads[p][0], frozenset(changes[p](reads[p][0]))) for p in changes}
            changed = [p for p, (old, new) in effects.items() if old != new]
            op = record(effects) if record is not None else record_op
            if not changed and op is None:
                return effects, []
            tx = self._client.transaction()
            if guard is not None:
                tx.check(guard[0], guard[1])
            for p in changed:
                new, version = effects[p][1], reads[p][1]
                if version is None:
                    tx.create(paths[p], encode_acls(new))
                elif new:
                    tx.set_data(paths[p], encode_acls(new), version)
                else:
                    tx.delete(paths[p], version)
            if op is not None:
                tx.create(op.path, op.data)
            for p in changed:
                tx.create(
                    f"{change_root(p.pattern_type)}/{CHANGE_PREFIX}", encode_change(p), sequence=True
                )
            try:
                results = self._commit(tx, guard, len(changed), op is not None)
            except _Retry:
                time.sleep(random.uniform(0, min(0.2, 0.005 * 2**attempt)))
                continue
            created = results[len(results) - len(changed):] if changed else []
            versions = [
                (ACL_ROOTS[p.pattern_type].name, int(path[-10:])) for p, path in zip(changed, created)
            ]
            return effects, versions
        raise StoreError(f"ACL update lost {MAX_UPDATE_RETRIES} races with other writers")

    def _commit(self, tx: Any, guard: Guard | None, writes: int, recorded: bool) -> list:
        check_transaction(tx, "update ACLs")
        results = self._reads.call("update ACLs", tx.commit_async)
        failures = [r for r in results if isinstance(r, Exception)]
        if not failures:
            return results
        if guard is not None and not isinstance(results[0], RolledBackError):
            raise NotControllerError(
                f"guard {guard[0]} version {guard[1]} no longer holds; another broker is "
                "the controller"
            )
        offset = (1 if guard is not None else 0) + writes
        if recorded and isinstance(results[offset], NodeExistsError):
            raise RequestKeyExistsError("request key already recorded")
        cause = next(r for r in failures if not isinstance(r, RolledBackError))
        if isinstance(cause, (BadVersionError, NodeExistsError, NoNodeError)):
            raise _Retry()
        raise translate("update ACLs", cause)

    # --- reads -------------------------------------------------------------------------

    def _read_many(self, paths: dict[ResourcePattern, str]
                   ) -> dict[ResourcePattern, tuple[frozenset[AccessControlEntry], int | None]]:
        """Each pattern's entries and znode version (None: no znode), the paths read in
        multi-read batches (one round trip each cost 1.5 ms per filter of a request)."""
        patterns = list(paths)
        found = self._reads.get_many([paths[p] for p in patterns], "read ACLs")
        reads: dict[ResourcePattern, tuple[frozenset[AccessControlEntry], int | None]] = {}
        for pattern, value in zip(patterns, found):
            if value is None:
                reads[pattern] = (frozenset(), None)
            else:
                data, stat = value  # type: ignore[misc]
                reads[pattern] = (frozenset(decode_acls(data, paths[pattern])), stat.version)
        return reads

    def _children(self, path: str) -> list[str]:
        try:
            return self._reads.call(f"list {path}", lambda: self._client.get_children_async(path))
        except ZnodeMissing:
            return []

    def load_resource(self, pattern: ResourcePattern) -> set[AccessControlEntry]:
        """The entries stored for exactly this pattern (empty when it has no znode)."""
        try:
            path = resource_path(pattern)
        except ValueError:
            return set()
        return set(self._read_many({pattern: path})[pattern][0])

    def load_all(self) -> dict[ResourcePattern, set[AccessControlEntry]]:
        """Every stored ACL, read with pipelined requests (listings, then data).

        A znode that does not decode raises AclDataError: silently skipping it could
        drop a DENY.
        """
        self.ensure_paths()
        dirs = [(pt, rt) for pt in PATTERN_TYPES for rt in RESOURCE_TYPES]
        listed = self._reads.pipelined(
            self._client.get_children_async, [type_path(pt, rt) for pt, rt in dirs], "list ACLs"
        )
        patterns = [
            ResourcePattern(rt, name, pt)
            for (pt, rt), names in zip(dirs, listed)
            if names is not None
            for name in names
        ]
        paths = [resource_path(p) for p in patterns]
        values = self._reads.get_many(paths, "load ACLs", with_stat=False)
        acls: dict[ResourcePattern, set[AccessControlEntry]] = {}
        for pattern, path, value in zip(patterns, paths, values):
            if value is not None:
                entries = decode_acls(value, path)
                if entries:
                    acls[pattern] = entries
        return acls

    # --- notifications -----------------------------------------------------------------

    def notifications(self, pattern_type: PatternType) -> list[tuple[int, str]]:
        """``(sequence, child name)`` of the pending notifications of one change root,
        in sequence order."""
        names = self._children(change_root(pattern_type))
        return sorted(
            (seq, name) for name in names if (seq := change_sequence(name)) is not None
        )


# The notification roots of the two pattern types (their versions are what writes report).
ACL_ROOTS = {
    PatternType.LITERAL: NotificationRoot("acls", LITERAL_CHANGES, CHANGE_PREFIX),
    PatternType.PREFIXED: NotificationRoot("acls-extended", EXTENDED_CHANGES, CHANGE_PREFIX),
}
