"""ACL values to and from the CreateAcls / DescribeAcls / DeleteAcls body dicts."""

from __future__ import annotations

from tokensvc.authz.acl import (
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
from tokensvc.authz.wire import (
    binding_from_creation,
    creation_result,
    delete_filter_result,
    describe_resources,
    filter_from_wire,
)
from tokensvc.core.errors import Errors

FOO = AclBinding(
    ResourcePattern(ResourceType.TOPIC, "foo", PatternType.PREFIXED),
    AccessControlEntry("User:alice", "*", AclOperation.READ, AclPermissionType.ALLOW),
)


def test_creation_decodes_to_a_binding():
    creation = {"ResourceType": 2, "ResourceName": "foo", "ResourcePatternType": 4,
                "Principal": "User:alice", "Host": "*", "Operation": 3, "PermissionType": 3}
    assert binding_from_creation(creation) == FOO


def test_version_0_creation_without_pattern_type_is_literal():
    creation = {"ResourceType": 2, "ResourceName": "foo", "Principal": "User:alice",
                "Host": "*", "Operation": 3, "PermissionType": 3}
    assert binding_from_creation(creation).pattern.pattern_type is PatternType.LITERAL


def test_unknown_codes_in_a_creation_become_invalid_bindings():
    creation = {"ResourceType": 77, "ResourceName": "foo", "Principal": "User:alice",
                "Host": "*", "Operation": 3, "PermissionType": 3}
    assert "resource type" in binding_problem(binding_from_creation(creation))


def test_wire_filter_keeps_nulls_as_match_anything():
    body = {"ResourceTypeFilter": 1, "ResourceNameFilter": None, "PatternTypeFilter": 1,
            "PrincipalFilter": None, "HostFilter": None, "Operation": 1, "PermissionType": 1}
    assert filter_from_wire(body) == AclBindingFilter()


def test_describe_groups_entries_by_resource():
    other = AclBinding(FOO.pattern, AccessControlEntry("User:bob", "h", AclOperation.WRITE,
                                                       AclPermissionType.DENY))
    assert describe_resources([other, FOO]) == [
        {"ResourceType": 2, "ResourceName": "foo", "PatternType": 4, "Acls": [
            {"Principal": "User:alice", "Host": "*", "Operation": 3, "PermissionType": 3},
            {"Principal": "User:bob", "Host": "h", "Operation": 4, "PermissionType": 2},
        ]},
    ]


def test_results_carry_error_codes_and_matching_acls():
    assert creation_result(AclCreateResult(FOO, Errors.INVALID_REQUEST, "bad")) == {
        "ErrorCode": 42, "ErrorMessage": "bad",
    }
    result = delete_filter_result(AclDeleteResult(AclBindingFilter(), (FOO,)))
    assert result["ErrorCode"] == 0 and result["ErrorMessage"] is None
    assert result["MatchingAcls"] == [{
        "ErrorCode": 0, "ErrorMessage": None, "ResourceType": 2, "ResourceName": "foo",
        "PatternType": 4, "Principal": "User:alice", "Host": "*", "Operation": 3,
        "PermissionType": 3,
    }]
