"""Kafka's ACL model: enums with the wire codes, patterns, entries, bindings, filters.

Owns: the four enums (``ResourceType``, ``PatternType``, ``AclOperation``,
``AclPermissionType``) with Kafka's numbers; the names Kafka writes for them in
ZooKeeper and shows in its tools (``Topic``, ``DelegationToken``, ``Read``,
``Allow``, ``Literal``...) with lenient parsers; the immutable values
``ResourcePattern``, ``AccessControlEntry``, ``AclBinding`` and the filters with
Kafka's ``matches`` semantics; which operations each resource type supports;
the validation a binding must pass before it may be created; and the per-item
results of create/delete.

Must not: do I/O, decide authorization (that is :mod:`tokensvc.authz.authorizer`)
or know where ACLs are stored.

An unknown wire code decodes to ``UNKNOWN`` (as Kafka's ``fromCode`` does), so a
request from a newer client yields a per-item INVALID_REQUEST, never a crash.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum
from typing import Self

from tokensvc.core.errors import Errors, KafkaError

WILDCARD_RESOURCE = "*"
WILDCARD_PRINCIPAL = "User:*"
WILDCARD_HOST = "*"
# The one name a CLUSTER resource may have (Kafka's ``kafka-cluster``).
CLUSTER_NAME = "kafka-cluster"


class _KafkaEnum(IntEnum):
    """An IntEnum whose unknown integer codes become ``UNKNOWN``."""

    @classmethod
    def _missing_(cls, value: object) -> _KafkaEnum | None:
        if isinstance(value, int) and not isinstance(value, bool):
            return cls["UNKNOWN"]
        return None

    @property
    def kafka_name(self) -> str:
        """Kafka's PascalCase name (``TRANSACTIONAL_ID`` -> ``TransactionalId``)."""
        return "".join(part.capitalize() for part in self.name.split("_"))

    @property
    def is_unknown(self) -> bool:
        return self.name == "UNKNOWN"

    @classmethod
    def parse(cls, text: str) -> Self:
        """Parse Kafka's PascalCase name, the enum name, or either in any case
        (``TransactionalId``, ``TRANSACTIONAL_ID``, ``transactional-id``).

        Raises ValueError naming the accepted values.
        """
        wanted = _normalize(text) if isinstance(text, str) else None
        for member in cls:
            if _normalize(member.name) == wanted:
                return member
        accepted = ", ".join(m.kafka_name for m in cls if m.name != "UNKNOWN")
        raise ValueError(f"unknown {cls.__name__} {text!r}; expected one of {accepted}")


def _normalize(text: str) -> str:
    return text.replace("_", "").replace("-", "").lower()


class ResourceType(_KafkaEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(_KafkaEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(_KafkaEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class AclPermissionType(_KafkaEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


# The concrete values: what a stored ACL may carry.
RESOURCE_TYPES = tuple(t for t in ResourceType if t.value > ResourceType.ANY)
PATTERN_TYPES = (PatternType.LITERAL, PatternType.PREFIXED)

_op = AclOperation
# Kafka's AclEntry.supportedOperations: the operations KIP-430 reports per type.
_SUPPORTED: dict[ResourceType, frozenset[AclOperation]] = {
    ResourceType.TOPIC: frozenset(
        {_op.READ, _op.WRITE, _op.CREATE, _op.DESCRIBE, _op.DELETE, _op.ALTER,
         _op.DESCRIBE_CONFIGS, _op.ALTER_CONFIGS}
    ),
    ResourceType.GROUP: frozenset({_op.READ, _op.DESCRIBE, _op.DELETE}),
    ResourceType.CLUSTER: frozenset(
        {_op.CREATE, _op.CLUSTER_ACTION, _op.DESCRIBE_CONFIGS, _op.ALTER_CONFIGS,
         _op.IDEMPOTENT_WRITE, _op.ALTER, _op.DESCRIBE}
    ),
    ResourceType.TRANSACTIONAL_ID: frozenset({_op.DESCRIBE, _op.WRITE}),
    ResourceType.DELEGATION_TOKEN: frozenset({_op.DESCRIBE}),
    ResourceType.USER: frozenset({_op.CREATE_TOKENS, _op.DESCRIBE_TOKENS}),
}


def supported_operations(resource_type: ResourceType) -> frozenset[AclOperation]:
    """The operations that apply to a concrete resource type (never ALL/ANY/UNKNOWN)."""
    try:
        return _SUPPORTED[ResourceType(resource_type)]
    except KeyError:
        raise ValueError(f"{resource_type!r} is not a concrete resource type") from None


def _coerce(obj: object, **fields: type[_KafkaEnum]) -> None:
    """Turn plain ints (wire codes) into the enum members, in a frozen dataclass."""
    for name, enum_type in fields.items():
        value = getattr(obj, name)
        if type(value) is not enum_type:
            object.__setattr__(obj, name, enum_type(value))


# --- values ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ResourcePattern:
    """What an ACL applies to: a literal name (``*`` = every resource of the type)
    or a name prefix."""

    resource_type: ResourceType
    name: str
    pattern_type: PatternType = PatternType.LITERAL

    def __post_init__(self) -> None:
        _coerce(self, resource_type=ResourceType, pattern_type=PatternType)

    def __str__(self) -> str:
        return f"{self.resource_type.kafka_name}:{self.pattern_type.kafka_name}:{self.name}"


@dataclass(frozen=True, slots=True)
class AccessControlEntry:
    """Who (``Type:name`` or ``User:*``), from where (an address or ``*``), what, and
    whether it is allowed or denied."""

    principal: str
    host: str
    operation: AclOperation
    permission_type: AclPermissionType

    def __post_init__(self) -> None:
        _coerce(self, operation=AclOperation, permission_type=AclPermissionType)

    def __str__(self) -> str:
        return (
            f"{self.principal} {self.permission_type.kafka_name} "
            f"{self.operation.kafka_name} from {self.host}"
        )


@dataclass(frozen=True, slots=True)
class AclBinding:
    pattern: ResourcePattern
    entry: AccessControlEntry

    def __str__(self) -> str:
        return f"{self.entry} on {self.pattern}"


def binding_sort_key(binding: AclBinding) -> tuple:
    """A total order for listings: type, pattern type, name, principal, host, op, permission."""
    p, e = binding.pattern, binding.entry
    return (
        int(p.resource_type), int(p.pattern_type), p.name,
        e.principal, e.host, int(e.operation), int(e.permission_type),
    )


# --- filters -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ResourcePatternFilter:
    """Kafka's ResourcePatternFilter.

    ``resource_type`` ANY matches every type. ``name`` None matches every name.
    ``pattern_type`` ANY matches both pattern types by exact name; MATCH matches every
    pattern that would apply to ``name`` (the literal name, the ``*`` wildcard, and
    prefixes of it); LITERAL/PREFIXED match only that pattern type, by exact name.
    """

    resource_type: ResourceType = ResourceType.ANY
    name: str | None = None
    pattern_type: PatternType = PatternType.ANY

    def __post_init__(self) -> None:
        _coerce(self, resource_type=ResourceType, pattern_type=PatternType)

    @property
    def is_unknown(self) -> bool:
        return self.resource_type.is_unknown or self.pattern_type.is_unknown

    def matches(self, pattern: ResourcePattern) -> bool:
        if self.resource_type is not ResourceType.ANY and self.resource_type != pattern.resource_type:
            return False
        if (
            self.pattern_type not in (PatternType.ANY, PatternType.MATCH)
            and self.pattern_type != pattern.pattern_type
        ):
            return False
        if self.name is None:
            return True
        if self.pattern_type is PatternType.ANY or self.pattern_type == pattern.pattern_type:
            return self.name == pattern.name
        # MATCH: would this pattern apply to a resource called ``name``?
        if pattern.pattern_type is PatternType.LITERAL:
            return self.name == pattern.name or pattern.name == WILDCARD_RESOURCE
        if pattern.pattern_type is PatternType.PREFIXED:
            return self.name.startswith(pattern.name)
        return False


@dataclass(frozen=True, slots=True)
class AccessControlEntryFilter:
    """Kafka's AccessControlEntryFilter: None principal/host and ANY operation/permission
    match everything; otherwise exact equality (``User:*`` matches only the wildcard
    entry, not every principal)."""

    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission_type: AclPermissionType = AclPermissionType.ANY

    def __post_init__(self) -> None:
        _coerce(self, operation=AclOperation, permission_type=AclPermissionType)

    @property
    def is_unknown(self) -> bool:
        return self.operation.is_unknown or self.permission_type.is_unknown

    def matches(self, entry: AccessControlEntry) -> bool:
        if self.principal is not None and self.principal != entry.principal:
            return False
        if self.host is not None and self.host != entry.host:
            return False
        if self.operation is not AclOperation.ANY and self.operation != entry.operation:
            return False
        return (
            self.permission_type is AclPermissionType.ANY
            or self.permission_type == entry.permission_type
        )


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    pattern_filter: ResourcePatternFilter = field(default_factory=ResourcePatternFilter)
    entry_filter: AccessControlEntryFilter = field(default_factory=AccessControlEntryFilter)

    @classmethod
    def of(
        cls,
        resource_type: ResourceType = ResourceType.ANY,
        name: str | None = None,
        pattern_type: PatternType = PatternType.ANY,
        principal: str | None = None,
        host: str | None = None,
        operation: AclOperation = AclOperation.ANY,
        permission_type: AclPermissionType = AclPermissionType.ANY,
    ) -> AclBindingFilter:
        """A filter from flat fields (the shape of DescribeAcls/DeleteAcls and the CLI)."""
        return cls(
            ResourcePatternFilter(resource_type, name, pattern_type),
            AccessControlEntryFilter(principal, host, operation, permission_type),
        )

    @classmethod
    def exact(cls, binding: AclBinding) -> AclBindingFilter:
        """The filter that matches this one binding and nothing else."""
        p, e = binding.pattern, binding.entry
        return cls.of(
            p.resource_type, p.name, p.pattern_type,
            e.principal, e.host, e.operation, e.permission_type,
        )

    @property
    def is_unknown(self) -> bool:
        return self.pattern_filter.is_unknown or self.entry_filter.is_unknown

    def matches(self, binding: AclBinding) -> bool:
        return self.pattern_filter.matches(binding.pattern) and self.entry_filter.matches(
            binding.entry
        )


ANY_BINDING = AclBindingFilter()


# --- validation --------------------------------------------------------------------------


def binding_problem(binding: AclBinding) -> str | None:
    """Why this binding cannot be created, or None if it can.

    The broker's checks from Kafka's CreateAcls: concrete resource and pattern types,
    operation and permission; a non-empty name; ``kafka-cluster`` as the only CLUSTER
    name; a ``Type:name`` principal; a non-empty host.
    """
    p, e = binding.pattern, binding.entry
    if p.resource_type not in RESOURCE_TYPES:
        return f"invalid resource type {p.resource_type.name}"
    if p.pattern_type not in PATTERN_TYPES:
        return f"invalid pattern type {p.pattern_type.name}; use Literal or Prefixed"
    if e.operation in (AclOperation.ANY, AclOperation.UNKNOWN):
        return f"invalid operation {e.operation.name}"
    if e.permission_type not in (AclPermissionType.ALLOW, AclPermissionType.DENY):
        return f"invalid permission type {e.permission_type.name}; use Allow or Deny"
    if not isinstance(p.name, str) or not p.name:
        return "resource name should not be empty"
    if p.resource_type is ResourceType.CLUSTER and p.name != CLUSTER_NAME:
        return f"the only valid name for the CLUSTER resource is {CLUSTER_NAME}"
    principal_type, colon, principal_name = (e.principal or "").partition(":")
    if not colon or not principal_type or not principal_name:
        return f"could not parse principal {e.principal!r}: expected Type:name"
    if not isinstance(e.host, str) or not e.host:
        return "host should not be empty; use * for every host"
    return None


def validate_binding(binding: AclBinding) -> None:
    """Raise KafkaError(INVALID_REQUEST) if ``binding`` cannot be created."""
    problem = binding_problem(binding)
    if problem is not None:
        raise KafkaError(Errors.INVALID_REQUEST, f"invalid ACL {binding}: {problem}")


def validate_filter(acl_filter: AclBindingFilter) -> None:
    """Raise KafkaError(INVALID_REQUEST) if a filter has UNKNOWN components (it could
    silently match nothing, or everything, in a newer Kafka's reading)."""
    if acl_filter.is_unknown:
        raise KafkaError(Errors.INVALID_REQUEST, "ACL filter contains UNKNOWN elements")


# --- results -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AclCreateResult:
    """One CreateAcls item: the binding and its error (NONE when created or already there)."""

    binding: AclBinding
    error: Errors = Errors.NONE
    message: str | None = None


@dataclass(frozen=True, slots=True)
class AclDeleteResult:
    """One DeleteAcls filter: the bindings it removed, or the error that stopped it."""

    filter: AclBindingFilter
    deleted: tuple[AclBinding, ...] = ()
    error: Errors = Errors.NONE
    message: str | None = None
