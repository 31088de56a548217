"""Typed results of the admin client, and their translation from and to wire bodies.

Owns the dataclasses callers get back (:class:`TokenDescription`,
:class:`ClusterDescription`, :class:`ScramCredentialInfo`, ...), the
:class:`AdminError` family, and the pure functions between those types and the
protocol's body dicts (Kafka JSON field names). No sockets, no clocks: everything
here is a function of its arguments.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from tokensvc.authz.acl import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from tokensvc.core.errors import Errors, KafkaError, describe
from tokensvc.core.labels import NO_LABELS, Labels, interned
from tokensvc.core.principal import KafkaPrincipal
from tokensvc.protocol.messages import AUTHORIZED_OPERATIONS_OMITTED
from tokensvc.scram.formatter import ScramMechanism


class AdminError(KafkaError):
    """A request failed with a Kafka error; ``message`` is one line a person can act on."""

    def __init__(self, error: Errors | int, message: str | None = None) -> None:
        try:
            known = Errors(error)
        except ValueError:
            known = Errors.UNKNOWN_SERVER_ERROR
            message = message or describe(error)
            if str(error) not in message:
                message += f" (error code {error})"
        super().__init__(known, message or describe(known))


class BrokerUnreachableError(AdminError):
    """No broker could be reached (or the connection kept failing) within the timeout."""

    def __init__(self, message: str) -> None:
        super().__init__(Errors.NETWORK_EXCEPTION, message)


def raise_for(code: int, message: str | None = None, context: str | None = None) -> None:
    """Raise :class:`AdminError` for a non-zero error code.

    The message is Kafka's meaning of the code, then the broker's own message when it
    adds something, prefixed with ``context`` (what was being done).
    """
    if code == Errors.NONE:
        return
    text = describe(code)
    if message and message != text:
        text = f"{text}: {message}"
    if context:
        text = f"{context}: {text}"
    raise AdminError(code, text)


# --- tokens ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TokenDescription:
    """A delegation token as the brokers describe it (times are epoch milliseconds)."""

    token_id: str
    hmac: bytes = field(repr=False)
    owner: KafkaPrincipal
    requester: KafkaPrincipal
    renewers: tuple[KafkaPrincipal, ...]
    issue_ms: int
    expiry_ms: int
    max_ms: int
    # The token's labels (tokensvc; empty from a broker that does not know them).
    labels: Labels = NO_LABELS

    @property
    def hmac_b64(self) -> str:
        """The token's SCRAM password: standard base64 (with padding) of the HMAC."""
        return base64.b64encode(self.hmac).decode("ascii")

    def to_json(self) -> dict[str, Any]:
        return {
            "token_id": self.token_id,
            "hmac": self.hmac_b64,
            "owner": str(self.owner),
            "requester": str(self.requester),
            "renewers": [str(r) for r in self.renewers],
            "issue_timestamp_ms": self.issue_ms,
            "expiry_timestamp_ms": self.expiry_ms,
            "max_timestamp_ms": self.max_ms,
            "labels": dict(self.labels),
        }


def labels_struct(labels: Labels) -> list[dict[str, str]]:
    """A label set as the tagged fields carry it: ``[{Key, Value}]``."""
    return [{"Key": k, "Value": v} for k, v in labels]


def labels_from(items: Iterable[dict[str, Any]] | None) -> Labels:
    """The labels of a tagged ``[{Key, Value}]`` field (sorted, shared)."""
    if not items:
        return NO_LABELS
    return interned(tuple(sorted((i["Key"], i["Value"]) for i in items)))


def principal_of(value: str | KafkaPrincipal) -> KafkaPrincipal:
    """A principal from ``Type:name`` text (ValueError if malformed) or as given."""
    if isinstance(value, KafkaPrincipal):
        return value
    return KafkaPrincipal.parse(value)


def principal_struct(principal: KafkaPrincipal) -> dict[str, str]:
    return {"PrincipalType": principal.principal_type, "PrincipalName": principal.name}


def create_token_body(
    renewers: Iterable[KafkaPrincipal], owner: KafkaPrincipal | None, max_lifetime_ms: int
) -> dict[str, Any]:
    return {
        "OwnerPrincipalType": owner.principal_type if owner else None,
        "OwnerPrincipalName": owner.name if owner else None,
        "Renewers": [principal_struct(r) for r in renewers],
        "MaxLifetimeMs": max_lifetime_ms,
    }


def token_from_create(
    body: dict[str, Any], version: int, renewers: Iterable[KafkaPrincipal]
) -> TokenDescription:
    owner = KafkaPrincipal(body["PrincipalType"], body["PrincipalName"])
    requester = owner
    if version >= 3 and body.get("TokenRequesterPrincipalName"):
        requester = KafkaPrincipal(
            body["TokenRequesterPrincipalType"], body["TokenRequesterPrincipalName"]
        )
    return TokenDescription(
        token_id=body["TokenId"],
        hmac=bytes(body["Hmac"]),
        owner=owner,
        requester=requester,
        renewers=tuple(renewers),
        issue_ms=body["IssueTimestampMs"],
        expiry_ms=body["ExpiryTimestampMs"],
        max_ms=body["MaxTimestampMs"],
        labels=labels_from(body.get("Labels")),
    )


def tokens_from_describe(body: dict[str, Any], version: int) -> list[TokenDescription]:
    tokens = []
    for item in body["Tokens"]:
        owner = KafkaPrincipal(item["PrincipalType"], item["PrincipalName"])
        requester = owner
        if version >= 3 and item.get("TokenRequesterPrincipalName"):
            requester = KafkaPrincipal(
                item["TokenRequesterPrincipalType"], item["TokenRequesterPrincipalName"]
            )
        tokens.append(
            TokenDescription(
                token_id=item["TokenId"],
                hmac=bytes(item["Hmac"]),
                owner=owner,
                requester=requester,
                renewers=tuple(
                    KafkaPrincipal(r["PrincipalType"], r["PrincipalName"]) for r in item["Renewers"]
                ),
                issue_ms=item["IssueTimestamp"],
                expiry_ms=item["ExpiryTimestamp"],
                max_ms=item["MaxTimestamp"],
                labels=labels_from(item.get("Labels")),
            )
        )
    return tokens


# --- cluster ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BrokerNode:
    broker_id: int
    host: str
    port: int
    rack: str | None = None


@dataclass(frozen=True, slots=True)
class ClusterDescription:
    """DescribeCluster's answer. ``authorized_operations`` is None unless it was asked for."""

    cluster_id: str
    controller_id: int
    brokers: tuple[BrokerNode, ...]
    authorized_operations: frozenset[AclOperation] | None = None


def operations_from_bitfield(bits: int) -> frozenset[AclOperation] | None:
    """KIP-430: bit ``1 << code`` per allowed operation; the sentinel -2^31 means omitted."""
    if bits == AUTHORIZED_OPERATIONS_OMITTED:
        return None
    return frozenset(op for op in AclOperation if op.value > AclOperation.ANY and bits >> op & 1)


def cluster_from_describe(body: dict[str, Any]) -> ClusterDescription:
    return ClusterDescription(
        cluster_id=body["ClusterId"],
        controller_id=body["ControllerId"],
        brokers=tuple(
            BrokerNode(b["BrokerId"], b["Host"], b["Port"], b.get("Rack")) for b in body["Brokers"]
        ),
        authorized_operations=operations_from_bitfield(body["ClusterAuthorizedOperations"]),
    )


# --- SCRAM credentials -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ScramCredentialInfo:
    mechanism: ScramMechanism
    iterations: int


def scram_credentials_from_describe(
    body: dict[str, Any],
) -> dict[str, tuple[ScramCredentialInfo, ...]]:
    raise_for(body["ErrorCode"], body.get("ErrorMessage"), "describe SCRAM credentials")
    users: dict[str, tuple[ScramCredentialInfo, ...]] = {}
    for result in body["Results"]:
        raise_for(result["ErrorCode"], result.get("ErrorMessage"), f"user {result['User']!r}")
        infos = []
        for info in result["CredentialInfos"]:
            try:
                mechanism = ScramMechanism.from_wire_type(info["Mechanism"])
            except ValueError:
                continue  # a mechanism newer than this client: not one it can use
            infos.append(ScramCredentialInfo(mechanism, info["Iterations"]))
        users[result["User"]] = tuple(infos)
    return users


# --- ACLs ------------------------------------------------------------------------------


def acl_creation(binding: AclBinding) -> dict[str, Any]:
    p, e = binding.pattern, binding.entry
    return {
        "ResourceType": int(p.resource_type),
        "ResourceName": p.name,
        "ResourcePatternType": int(p.pattern_type),
        "Principal": e.principal,
        "Host": e.host,
        "Operation": int(e.operation),
        "PermissionType": int(e.permission_type),
    }


def acl_filter_fields(acl_filter: AclBindingFilter) -> dict[str, Any]:
    p, e = acl_filter.pattern_filter, acl_filter.entry_filter
    return {
        "ResourceTypeFilter": int(p.resource_type),
        "ResourceNameFilter": p.name,
        "PatternTypeFilter": int(p.pattern_type),
        "PrincipalFilter": e.principal,
        "HostFilter": e.host,
        "Operation": int(e.operation),
        "PermissionType": int(e.permission_type),
    }


def needs_pattern_types(bindings: Iterable[AclBinding | AclBindingFilter]) -> bool:
    """True when a request uses pattern types that version 0 (literal only) cannot carry."""
    for item in bindings:
        if isinstance(item, AclBinding):
            pattern_type = item.pattern.pattern_type
            allowed = (PatternType.LITERAL,)
        else:
            pattern_type = item.pattern_filter.pattern_type
            allowed = (PatternType.LITERAL, PatternType.ANY)
        if pattern_type not in allowed:
            return True
    return False


def bindings_from_describe(body: dict[str, Any]) -> list[AclBinding]:
    raise_for(body["ErrorCode"], body.get("ErrorMessage"), "describe ACLs")
    bindings = []
    for resource in body["Resources"]:
        pattern = ResourcePattern(
            ResourceType(resource["ResourceType"]),
            resource["ResourceName"],
            PatternType(resource.get("PatternType", PatternType.LITERAL)),
        )
        for acl in resource["Acls"]:
            entry = AccessControlEntry(
                acl["Principal"],
                acl["Host"],
                AclOperation(acl["Operation"]),
                AclPermissionType(acl["PermissionType"]),
            )
            bindings.append(AclBinding(pattern, entry))
    return bindings


def binding_from_matching(acl: dict[str, Any]) -> AclBinding:
    return AclBinding(
        ResourcePattern(
            ResourceType(acl["ResourceType"]),
            acl["ResourceName"],
            PatternType(acl.get("PatternType", PatternType.LITERAL)),
        ),
        AccessControlEntry(
            acl["Principal"],
            acl["Host"],
            AclOperation(acl["Operation"]),
            AclPermissionType(acl["PermissionType"]),
        ),
    )


@dataclass(frozen=True)
class Revocation:
    """What a revocation by owner, label or id did (or, for a dry run, would do)."""

    revoked: tuple[tuple[str, KafkaPrincipal], ...]  # (token id, owner)
    not_found: tuple[str, ...]
    created_after: tuple[str, ...]  # the selected tokens created after its last pass
    dry_run: bool

    def to_json(self) -> dict[str, Any]:
        return {
            "dry_run": self.dry_run,
            "count": len(self.revoked),
            "revoked": [{"token_id": t, "owner": str(o)} for t, o in self.revoked],
            "not_found": list(self.not_found),
            "created_after": list(self.created_after),
        }


def revocation_from(response: dict[str, Any], dry_run: bool) -> Revocation:
    return Revocation(
        revoked=tuple((r["TokenId"], KafkaPrincipal(r["OwnerType"], r["OwnerName"]))
                      for r in response.get("Revoked") or []),
        not_found=tuple(response.get("RevokeNotFound") or ()),
        created_after=tuple(response.get("RevokeCreatedAfter") or ()),
        dry_run=dry_run,
    )
