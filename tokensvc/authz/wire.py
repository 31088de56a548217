"""ACL values <-> the bodies of CreateAcls (30), DescribeAcls (29) and DeleteAcls (31).

Owns the mapping between :mod:`tokensvc.authz.acl` values and the protocol's dicts
(keyed by Kafka's JSON field names, as :mod:`tokensvc.protocol` decodes them). Absent
pattern-type fields (version 0 requests) mean LITERAL, as in Kafka. Unknown codes
become UNKNOWN members, which validation then refuses per item.

Must not: validate, authorize or store (the handlers call ``validate_*``,
``AclAuthorizer`` and ``AclStore`` with what these return).
"""

from __future__ import annotations

from collections.abc import Iterable

from tokensvc.authz.acl import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclCreateResult,
    AclDeleteResult,
    PatternType,
    ResourcePattern,
    binding_sort_key,
)
from tokensvc.core.errors import Errors

_LITERAL = int(PatternType.LITERAL)


def binding_from_creation(creation: dict) -> AclBinding:
    """A CreateAcls ``Creations`` item."""
    return AclBinding(
        ResourcePattern(
            creation["ResourceType"],
            creation["ResourceName"],
            creation.get("ResourcePatternType", _LITERAL),
        ),
        AccessControlEntry(
            creation["Principal"],
            creation["Host"],
            creation["Operation"],
            creation["PermissionType"],
        ),
    )


def filter_from_wire(body: dict) -> AclBindingFilter:
    """A DescribeAcls request body, or a DeleteAcls ``Filters`` item."""
    return AclBindingFilter.of(
        body["ResourceTypeFilter"],
        body.get("ResourceNameFilter"),
        body.get("PatternTypeFilter", _LITERAL),
        body.get("PrincipalFilter"),
        body.get("HostFilter"),
        body["Operation"],
        body["PermissionType"],
    )


def creation_result(result: AclCreateResult) -> dict:
    """A CreateAcls ``Results`` item."""
    return {"ErrorCode": int(result.error), "ErrorMessage": result.message}


def describe_resources(bindings: Iterable[AclBinding]) -> list[dict]:
    """DescribeAcls ``Resources``: bindings grouped by resource pattern, in a stable order."""
    resources: dict[ResourcePattern, list[dict]] = {}
    for b in sorted(bindings, key=binding_sort_key):
        resources.setdefault(b.pattern, []).append(
            {
                "Principal": b.entry.principal,
                "Host": b.entry.host,
                "Operation": int(b.entry.operation),
                "PermissionType": int(b.entry.permission_type),
            }
        )
    return [
        {
            "ResourceType": int(p.resource_type),
            "ResourceName": p.name,
            "PatternType": int(p.pattern_type),
            "Acls": acls,
        }
        for p, acls in resources.items()
    ]


def delete_filter_result(result: AclDeleteResult) -> dict:
    """A DeleteAcls ``FilterResults`` item."""
    return {
        "ErrorCode": int(result.error),
        "ErrorMessage": result.message,
        "MatchingAcls": [
            {
                "ErrorCode": int(Errors.NONE),
                "ErrorMessage": None,
                "ResourceType": int(b.pattern.resource_type),
                "ResourceName": b.pattern.name,
                "PatternType": int(b.pattern.pattern_type),
                "Principal": b.entry.principal,
                "Host": b.entry.host,
                "Operation": int(b.entry.operation),
                "PermissionType": int(b.entry.permission_type),
            }
            for b in sorted(result.deleted, key=binding_sort_key)
        ],
    }
