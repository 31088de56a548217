"""The ACL authorizer: Kafka's AclAuthorizer decisions with KIP-801's readiness rule.

Owns: the in-memory ACL index and every allow/deny decision, plus KIP-430's
authorized-operations bitfields.

Rules of a decision (``authorize``), in order:

1. A super user is always allowed, even before the ACLs are loaded.
2. Until ``mark_ready()`` everyone else gets ``KafkaError(AUTHORIZER_NOT_READY)``
   (KIP-801; answered on the wire as COORDINATOR_LOAD_IN_PROGRESS, retriable).
3. The principal is matched by type and name only: a token-authenticated session
   matches the ACLs of its plain principal.
4. The ACLs that apply to (type, name) are those of the literal pattern ``name``,
   the literal wildcard ``*`` and every prefixed pattern that is a prefix of
   ``name``. If there are none at all (for anyone), ``allow_everyone_if_no_acl_found``
   decides.
5. Among them, an entry matches when its principal is the principal or ``User:*``
   and its host is the client's address or ``*``. A matching DENY for the operation
   (or for ALL) refuses. Otherwise a matching ALLOW for the operation, for ALL, or
   for an operation that implies it allows: READ, WRITE, DELETE and ALTER imply
   DESCRIBE; ALTER_CONFIGS implies DESCRIBE_CONFIGS. DENY never implies.
6. Nothing matched: refused.

Must not: do I/O or read the clock. ACLs arrive through ``load`` (full replace) and
``apply_resource`` (one resource pattern replaced, which is how ZooKeeper change
notifications land). Decisions read an index without taking a lock: each update
replaces one resource's entry set in one step, so a decision sees that resource
either wholly before or wholly after the update; ``load`` swaps the whole index.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterable, Mapping

from tokensvc.authz.acl import (
    ANY_BINDING,
    RESOURCE_TYPES,
    WILDCARD_PRINCIPAL,
    WILDCARD_RESOURCE,
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
    binding_sort_key,
    supported_operations,
)
from tokensvc.core.errors import AUTHORIZER_NOT_READY, KafkaError
from tokensvc.core.principal import KafkaPrincipal

# Kafka's value for "authorized operations were not requested" (Integer.MIN_VALUE).
NOT_REQUESTED_BITFIELD = -(2**31)

_ALL = AclOperation.ALL
_DENY = AclPermissionType.DENY
_ALLOW = AclPermissionType.ALLOW

# Which ALLOWed operations grant a requested one (ALL always does).
_GRANTING: dict[AclOperation, frozenset[AclOperation]] = {
    op: frozenset({op, _ALL}) for op in AclOperation
}
_GRANTING[AclOperation.DESCRIBE] = frozenset(
    {AclOperation.DESCRIBE, AclOperation.READ, AclOperation.WRITE, AclOperation.DELETE,
     AclOperation.ALTER, _ALL}
)
_GRANTING[AclOperation.DESCRIBE_CONFIGS] = frozenset(
    {AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS, _ALL}
)


def operations_bitfield(operations: Iterable[AclOperation]) -> int:
    """KIP-430's encoding: bit ``1 << code`` set for each operation."""
    bits = 0
    for op in operations:
        bits |= 1 << int(op)
    return bits


def ALL_OPERATIONS_BITFIELD(resource_type: ResourceType) -> int:
    """Every supported operation of the type: the answer when no authorizer is configured."""
    return operations_bitfield(supported_operations(resource_type))


class _ResourceAcls:
    """The entries of one resource pattern, grouped by principal string."""

    __slots__ = ("by_principal", "entries")

    def __init__(self, entries: frozenset[AccessControlEntry]) -> None:
        self.entries = entries
        grouped: dict[str, list[AccessControlEntry]] = {}
        for entry in entries:
            grouped.setdefault(entry.principal, []).append(entry)
        self.by_principal: dict[str, tuple[AccessControlEntry, ...]] = {
            p: tuple(es) for p, es in grouped.items()
        }


class _AclIndex:
    """Resource patterns -> entries, indexed for lookup by (type, name).

    Literal patterns (``*`` included) are a dict per type. Prefixed patterns are a dict
    per type plus the sorted distinct prefix lengths, so finding the prefixes of a name
    is one dict probe per distinct length, not a scan of the patterns.
    """

    def __init__(self) -> None:
        self.patterns: dict[ResourcePattern, _ResourceAcls] = {}
        self.literal: dict[ResourceType, dict[str, _ResourceAcls]] = {}
        self.prefixed: dict[ResourceType, dict[str, _ResourceAcls]] = {}
        self.prefix_lengths: dict[ResourceType, tuple[int, ...]] = {}
        self._length_counts: dict[ResourceType, Counter[int]] = {}
        self.count = 0

    def put(self, pattern: ResourcePattern, entries: frozenset[AccessControlEntry]) -> None:
        """Replace the entries of one pattern; an empty set removes the pattern."""
        old = self.patterns.get(pattern)
        self.count += len(entries) - (len(old.entries) if old else 0)
        rtype, name = pattern.resource_type, pattern.name
        literal = pattern.pattern_type is PatternType.LITERAL
        by_name = (self.literal if literal else self.prefixed).setdefault(rtype, {})
        if entries:
            acls = _ResourceAcls(entries)
            self.patterns[pattern] = acls
            by_name[name] = acls
            if not literal and old is None:
                self._count_length(rtype, len(name), +1)
        elif old is not None:
            if not literal:
                self._count_length(rtype, len(name), -1)
            del by_name[name]
            del self.patterns[pattern]

    def _count_length(self, rtype: ResourceType, length: int, delta: int) -> None:
        counts = self._length_counts.setdefault(rtype, Counter())
        counts[length] += delta
        if counts[length] <= 0:
            del counts[length]
        # Published after an insert and before a delete (see put): a concurrent reader
        # never probes a length whose prefixes it cannot find.
        self.prefix_lengths[rtype] = tuple(sorted(counts))

    def matching(self, rtype: ResourceType, name: str) -> list[_ResourceAcls]:
        found: list[_ResourceAcls] = []
        literal = self.literal.get(rtype)
        if literal:
            exact = literal.get(name)
            if exact is not None:
                found.append(exact)
            if name != WILDCARD_RESOURCE:
                wildcard = literal.get(WILDCARD_RESOURCE)
                if wildcard is not None:
                    found.append(wildcard)
        prefixed = self.prefixed.get(rtype)
        if prefixed:
            size = len(name)
            for length in self.prefix_lengths.get(rtype, ()):
                if length > size:
                    break
                acls = prefixed.get(name[:length])
                if acls is not None:
                    found.append(acls)
        return found


def _principal_key(principal: KafkaPrincipal | str) -> str:
    if isinstance(principal, KafkaPrincipal):
        return f"{principal.principal_type}:{principal.name}"
    parsed = KafkaPrincipal.parse(principal.strip())
    return f"{parsed.principal_type}:{parsed.name}"


class AclAuthorizer:
    """Kafka's ACL authorizer over an in-memory index (see the module docstring)."""

    def __init__(
        self,
        super_users: Iterable[KafkaPrincipal | str] = (),
        allow_everyone_if_no_acl_found: bool = False,
    ) -> None:
        self._super_users = frozenset(_principal_key(p) for p in super_users)
        self.allow_everyone_if_no_acl_found = bool(allow_everyone_if_no_acl_found)
        self._index = _AclIndex()
        self._write_lock = threading.Lock()
        self._ready = False

    # --- lifecycle and updates ---------------------------------------------------------

    @property
    def ready(self) -> bool:
        return self._ready

    def mark_ready(self) -> None:
        """The initial load is complete: non-super users may now be authorized."""
        self._ready = True

    def load(self, bindings: Iterable[AclBinding]) -> None:
        """Replace every ACL with ``bindings`` in one step."""
        grouped: dict[ResourcePattern, set[AccessControlEntry]] = {}
        for binding in bindings:
            grouped.setdefault(binding.pattern, set()).add(binding.entry)
        self.load_resources(grouped)

    def load_resources(
        self, acls: Mapping[ResourcePattern, Iterable[AccessControlEntry]]
    ) -> None:
        """Replace every ACL with ``acls`` (the shape :meth:`zk.acl_store.AclStore.load_all`
        returns) in one step."""
        index = _AclIndex()
        for pattern, entries in acls.items():
            _check_pattern(pattern)
            index.put(pattern, frozenset(entries))
        with self._write_lock:
            self._index = index

    def apply_resource(
        self, pattern: ResourcePattern, entries: Iterable[AccessControlEntry]
    ) -> None:
        """Replace the ACLs of one resource pattern; an empty set removes them."""
        _check_pattern(pattern)
        frozen = frozenset(entries)
        with self._write_lock:
            self._index.put(pattern, frozen)

    # --- queries -----------------------------------------------------------------------

    @property
    def acl_count(self) -> int:
        return self._index.count

    def acls(self, pattern: ResourcePattern) -> frozenset[AccessControlEntry]:
        """The entries stored for exactly this pattern (no wildcard or prefix matching)."""
        found = self._index.patterns.get(pattern)
        return found.entries if found else frozenset()

    def describe(self, acl_filter: AclBindingFilter = ANY_BINDING) -> list[AclBinding]:
        """Every binding ``acl_filter`` matches, in a stable order."""
        with self._write_lock:
            items = list(self._index.patterns.items())
        out = [
            AclBinding(pattern, entry)
            for pattern, acls in items
            if acl_filter.pattern_filter.matches(pattern)
            for entry in acls.entries
            if acl_filter.entry_filter.matches(entry)
        ]
        out.sort(key=binding_sort_key)
        return out

    def is_super_user(self, principal: KafkaPrincipal) -> bool:
        return _principal_key(principal) in self._super_users

    # --- decisions ---------------------------------------------------------------------

    def authorize(
        self,
        principal: KafkaPrincipal,
        host: str,
        operation: AclOperation,
        resource_type: ResourceType,
        name: str,
    ) -> bool:
        """May ``principal`` connecting from ``host`` perform ``operation`` on the resource
        ``resource_type``/``name``? Raises KafkaError(AUTHORIZER_NOT_READY) for a non-super
        user before :meth:`mark_ready`."""
        key = f"{principal.principal_type}:{principal.name}"
        if key in self._super_users:
            return True
        if not self._ready:
            raise KafkaError(AUTHORIZER_NOT_READY, "the authorizer is still loading ACLs; retry")
        if type(operation) is not AclOperation:
            operation = AclOperation(operation)
        if resource_type not in RESOURCE_TYPES:
            raise ValueError(f"cannot authorize on resource type {resource_type!r}")
        if operation in (AclOperation.ANY, AclOperation.UNKNOWN):
            raise ValueError(f"cannot authorize operation {operation!r}")
        groups = self._index.matching(resource_type, name)
        if not groups:
            return self.allow_everyone_if_no_acl_found
        granting = _GRANTING[operation]
        allowed = False
        principal_keys = (key,) if key == WILDCARD_PRINCIPAL else (key, WILDCARD_PRINCIPAL)
        for acls in groups:
            by_principal = acls.by_principal
            for pkey in principal_keys:
                for entry in by_principal.get(pkey, ()):
                    if entry.host != host and entry.host != "*":
                        continue
                    if entry.permission_type is _DENY:
                        if entry.operation is operation or entry.operation is _ALL:
                            return False
                    elif entry.permission_type is _ALLOW and entry.operation in granting:
                        allowed = True
        return allowed

    def authorized_operations(
        self, principal: KafkaPrincipal, host: str, resource_type: ResourceType, name: str
    ) -> set[AclOperation]:
        """The supported operations of the resource type this principal may perform."""
        return {
            op
            for op in supported_operations(resource_type)
            if self.authorize(principal, host, op, resource_type, name)
        }

    def authorized_operations_bitfield(
        self, principal: KafkaPrincipal, host: str, resource_type: ResourceType, name: str
    ) -> int:
        """KIP-430's ``AuthorizedOperations``: bit ``1 << code`` per authorized operation."""
        return operations_bitfield(
            self.authorized_operations(principal, host, resource_type, name)
        )


def _check_pattern(pattern: ResourcePattern) -> None:
    if pattern.resource_type not in RESOURCE_TYPES or pattern.pattern_type not in (
        PatternType.LITERAL,
        PatternType.PREFIXED,
    ):
        raise ValueError(f"not a storable resource pattern: {pattern!r}")
