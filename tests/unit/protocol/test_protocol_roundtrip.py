"""Every API and version round-trips through the codec with representative bodies.

``REQUEST_SAMPLES``/``RESPONSE_SAMPLES`` map an API to ``(first_version, body)``
pairs; a body is used for every supported version from ``first_version`` on
(fields a version lacks are ignored on encode). They cover nulls, empty arrays,
unicode and tagged fields, and are shared with the kafka-python cross-check.
"""

from __future__ import annotations

import pytest

from tokensvc.core.principal import KafkaPrincipal
from tokensvc.protocol import (
    SUPPORTED,
    ApiKey,
    RequestHeader,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
)
from tokensvc.protocol.messages import REQUESTS, RESPONSES
from tokensvc.protocol.principal_serde import serialize_principal
from tokensvc.protocol.schema import Array, Struct

TOPIC_ID = bytes(range(1, 17))
HMAC = bytes(range(64))

_ACL_FILTER_ANY = {
    "ResourceTypeFilter": 1,
    "ResourceNameFilter": None,
    "PatternTypeFilter": 1,
    "PrincipalFilter": None,
    "HostFilter": None,
    "Operation": 1,
    "PermissionType": 1,
}
_ACL_FILTER_EXACT = {
    "ResourceTypeFilter": 2,
    "ResourceNameFilter": "payments-ü",
    "PatternTypeFilter": 3,
    "PrincipalFilter": "User:ålice",
    "HostFilter": "*",
    "Operation": 3,
    "PermissionType": 3,
}

REQUEST_SAMPLES: dict[ApiKey, list[tuple[int, dict]]] = {
    ApiKey.API_VERSIONS: [
        (0, {}),
        (0, {"ClientSoftwareName": "tokensvc-admin", "ClientSoftwareVersion": "1.0-ß"}),
    ],
    ApiKey.SASL_HANDSHAKE: [(0, {"Mechanism": "SCRAM-SHA-512"})],
    ApiKey.SASL_AUTHENTICATE: [
        (0, {"AuthBytes": b"n,,n=alice,r=fyko+d2lbbFgONRv9qkxdawL"}),
        (0, {"AuthBytes": b""}),
    ],
    ApiKey.METADATA: [
        (0, {
            "Topics": [{"Name": "tøpic"}, {"Name": "b"}],
            "AllowAutoTopicCreation": False,
            "IncludeClusterAuthorizedOperations": True,
            "IncludeTopicAuthorizedOperations": True,
        }),
        (0, {"Topics": []}),
        (1, {"Topics": None, "AllowAutoTopicCreation": True}),
        (10, {"Topics": [{"TopicId": TOPIC_ID, "Name": None}]}),
    ],
    ApiKey.DESCRIBE_CLUSTER: [
        (0, {"IncludeClusterAuthorizedOperations": True, "EndpointType": 1}),
        (0, {}),
    ],
    ApiKey.CREATE_DELEGATION_TOKEN: [
        (0, {
            "Renewers": [{"PrincipalType": "User", "PrincipalName": "bob"}],
            "MaxLifetimeMs": -1,
        }),
        (3, {
            "OwnerPrincipalType": "User",
            "OwnerPrincipalName": "ålice",
            "Renewers": [],
            "MaxLifetimeMs": 86_400_000,
        }),
        (3, {"OwnerPrincipalType": None, "OwnerPrincipalName": None, "Renewers": [
            {"PrincipalType": "User", "PrincipalName": "🦊"},
            {"PrincipalType": "User", "PrincipalName": ""},
        ]}),
    ],
    ApiKey.RENEW_DELEGATION_TOKEN: [
        (0, {"Hmac": HMAC, "RenewPeriodMs": -1}),
        (0, {"Hmac": b"", "RenewPeriodMs": 2**62}),
    ],
    ApiKey.EXPIRE_DELEGATION_TOKEN: [
        (0, {"Hmac": HMAC, "ExpiryTimePeriodMs": -1}),
        (0, {"Hmac": b"\xff" * 3, "ExpiryTimePeriodMs": 0}),
    ],
    ApiKey.DESCRIBE_DELEGATION_TOKEN: [
        (0, {"Owners": None}),
        (0, {"Owners": []}),
        (0, {"Owners": [
            {"PrincipalType": "User", "PrincipalName": "alice"},
            {"PrincipalType": "Group", "PrincipalName": "ops-ü"},
        ]}),
    ],
    ApiKey.CREATE_ACLS: [
        (0, {"Creations": [{
            "ResourceType": 2,
            "ResourceName": "topic-ü",
            "ResourcePatternType": 4,
            "Principal": "User:alice",
            "Host": "*",
            "Operation": 3,
            "PermissionType": 3,
        }]}),
        (0, {"Creations": []}),
    ],
    ApiKey.DESCRIBE_ACLS: [(0, _ACL_FILTER_ANY), (0, _ACL_FILTER_EXACT)],
    ApiKey.DELETE_ACLS: [
        (0, {"Filters": [_ACL_FILTER_ANY, _ACL_FILTER_EXACT]}),
        (0, {"Filters": []}),
    ],
    ApiKey.DESCRIBE_CLIENT_QUOTAS: [
        (0, {"Components": [
            {"EntityType": "user", "MatchType": 0, "Match": "alice"},
            {"EntityType": "client-id", "MatchType": 1, "Match": None},
        ], "Strict": True}),
        (0, {"Components": [{"EntityType": "ip", "MatchType": 2, "Match": None}],
             "Strict": False}),
        (0, {"Components": [], "Strict": False}),
    ],
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: [
        (0, {"Users": None}),
        (0, {"Users": []}),
        (0, {"Users": [{"Name": "alice"}, {"Name": "bøb"}]}),
    ],
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: [
        (0, {
            "Deletions": [{"Name": "carol", "Mechanism": 1}],
            "Upsertions": [{
                "Name": "alice",
                "Mechanism": 2,
                "Iterations": 8192,
                "Salt": b"\x00salt\xff",
                "SaltedPassword": bytes(range(64)),
            }],
        }),
        (0, {"Deletions": [], "Upsertions": []}),
    ],
    ApiKey.ENVELOPE: [
        (0, {
            "RequestData": encode_request(
                RequestHeader(ApiKey.CREATE_DELEGATION_TOKEN, 3, 11, "client-1"),
                {"OwnerPrincipalType": None, "OwnerPrincipalName": None, "MaxLifetimeMs": -1},
            ),
            "RequestPrincipal": serialize_principal(KafkaPrincipal("User", "alice")),
            "ClientHostAddress": bytes([127, 0, 0, 1]),
        }),
        (0, {"RequestData": b"", "RequestPrincipal": None, "ClientHostAddress": bytes(16)}),
    ],
}

RESPONSE_SAMPLES: dict[ApiKey, list[tuple[int, dict]]] = {
    ApiKey.API_VERSIONS: [
        (0, {
            "ErrorCode": 0,
            "ApiKeys": [
                {"ApiKey": 3, "MinVersion": 0, "MaxVersion": 12},
                {"ApiKey": 18, "MinVersion": 0, "MaxVersion": 4},
                {"ApiKey": 38, "MinVersion": 0, "MaxVersion": 3},
            ],
            "ThrottleTimeMs": 12,
            "SupportedFeatures": [{"Name": "metadata.version", "MinVersion": 1, "MaxVersion": 20}],
            "FinalizedFeaturesEpoch": 7,
            "FinalizedFeatures": [
                {"Name": "metadata.version", "MaxVersionLevel": 20, "MinVersionLevel": 1},
            ],
            "ZkMigrationReady": True,
        }),
        (0, {"ErrorCode": 35, "ApiKeys": []}),
    ],
    ApiKey.SASL_HANDSHAKE: [
        (0, {"ErrorCode": 0, "Mechanisms": ["SCRAM-SHA-256", "SCRAM-SHA-512"]}),
        (0, {"ErrorCode": 33, "Mechanisms": []}),
    ],
    ApiKey.SASL_AUTHENTICATE: [
        (0, {
            "ErrorCode": 58,
            "ErrorMessage": "authentication failed ✗",
            "AuthBytes": b"",
            "SessionLifetimeMs": 3_600_000,
        }),
        (0, {"ErrorCode": 0, "ErrorMessage": None, "AuthBytes": b"v=rmF9pqV8S7suAoZWja4dJRkF"}),
    ],
    ApiKey.METADATA: [
        (0, {
            "ThrottleTimeMs": 5,
            "Brokers": [
                {"NodeId": 1, "Host": "127.0.0.1", "Port": 9092, "Rack": "r1"},
                {"NodeId": 2, "Host": "broker-ü", "Port": 9093, "Rack": None},
            ],
            "ClusterId": "cluster-ä",
            "ControllerId": 2,
            "Topics": [{
                "ErrorCode": 3,
                "Name": "t",
                "TopicId": TOPIC_ID,
                "IsInternal": True,
                "Partitions": [{
                    "ErrorCode": 0,
                    "PartitionIndex": 1,
                    "LeaderId": 2,
                    "LeaderEpoch": 5,
                    "ReplicaNodes": [1, 2],
                    "IsrNodes": [2],
                    "OfflineReplicas": [1],
                }],
                "TopicAuthorizedOperations": 0x0F8,
            }],
            "ClusterAuthorizedOperations": 0x1F0,
        }),
        (0, {"Brokers": [], "Topics": []}),
        (2, {"Brokers": [], "ClusterId": None, "Topics": []}),
        (12, {"Brokers": [], "Topics": [{"ErrorCode": 3, "Name": None, "TopicId": TOPIC_ID}]}),
    ],
    ApiKey.DESCRIBE_CLUSTER: [
        (0, {
            "ThrottleTimeMs": 0,
            "ErrorCode": 0,
            "ErrorMessage": None,
            "EndpointType": 1,
            "ClusterId": "cluster-ä",
            "ControllerId": 1,
            "Brokers": [
                {"BrokerId": 1, "Host": "127.0.0.1", "Port": 9092, "Rack": None},
                {"BrokerId": 2, "Host": "h2", "Port": 19092, "Rack": "rack-ü"},
            ],
            "ClusterAuthorizedOperations": 0x0B80,
        }),
        (0, {"ErrorCode": 31, "ErrorMessage": "denied", "Brokers": []}),
    ],
    ApiKey.CREATE_DELEGATION_TOKEN: [
        (0, {
            "ErrorCode": 0,
            "PrincipalType": "User",
            "PrincipalName": "ålice",
            "TokenRequesterPrincipalType": "User",
            "TokenRequesterPrincipalName": "admin",
            "IssueTimestampMs": 1_700_000_000_000,
            "ExpiryTimestampMs": 1_700_086_400_000,
            "MaxTimestampMs": 1_700_604_800_000,
            "TokenId": "Zm9vYmFyYmF6cXV4cXV1eA",
            "Hmac": HMAC,
            "ThrottleTimeMs": 0,
        }),
        (0, {"ErrorCode": 64, "Hmac": b""}),
    ],
    ApiKey.RENEW_DELEGATION_TOKEN: [
        (0, {"ErrorCode": 0, "ExpiryTimestampMs": 1_700_086_400_000, "ThrottleTimeMs": 7}),
        (0, {"ErrorCode": 66}),
    ],
    ApiKey.EXPIRE_DELEGATION_TOKEN: [
        (0, {"ErrorCode": 0, "ExpiryTimestampMs": -1, "ThrottleTimeMs": 0}),
        (0, {"ErrorCode": 62}),
    ],
    ApiKey.DESCRIBE_DELEGATION_TOKEN: [
        (0, {
            "ErrorCode": 0,
            "Tokens": [{
                "PrincipalType": "User",
                "PrincipalName": "alice",
                "TokenRequesterPrincipalType": "User",
                "TokenRequesterPrincipalName": "ådmin",
                "IssueTimestamp": 1,
                "ExpiryTimestamp": 2,
                "MaxTimestamp": 3,
                "TokenId": "tok-1",
                "Hmac": HMAC,
                "Renewers": [{"PrincipalType": "User", "PrincipalName": "bob"}],
            }, {
                "PrincipalType": "User",
                "PrincipalName": "carol",
                "IssueTimestamp": 4,
                "ExpiryTimestamp": 5,
                "MaxTimestamp": 6,
                "TokenId": "tok-2",
                "Hmac": b"",
                "Renewers": [],
            }],
            "ThrottleTimeMs": 3,
        }),
        (0, {"ErrorCode": 65, "Tokens": []}),
    ],
    ApiKey.CREATE_ACLS: [
        (0, {"ThrottleTimeMs": 0, "Results": [
            {"ErrorCode": 0, "ErrorMessage": None},
            {"ErrorCode": 42, "ErrorMessage": "invalid resource type ✗"},
        ]}),
        (0, {"Results": []}),
    ],
    ApiKey.DESCRIBE_ACLS: [
        (0, {
            "ThrottleTimeMs": 0,
            "ErrorCode": 0,
            "ErrorMessage": None,
            "Resources": [{
                "ResourceType": 2,
                "ResourceName": "payments",
                "PatternType": 4,
                "Acls": [
                    {"Principal": "User:alice", "Host": "*", "Operation": 3, "PermissionType": 3},
                    {"Principal": "User:bøb", "Host": "10.0.0.1", "Operation": 2,
                     "PermissionType": 2},
                ],
            }, {"ResourceType": 4, "ResourceName": "kafka-cluster", "Acls": []}],
        }),
        (0, {"ErrorCode": 31, "ErrorMessage": "not authorized", "Resources": []}),
    ],
    ApiKey.DELETE_ACLS: [
        (0, {"ThrottleTimeMs": 1, "FilterResults": [
            {"ErrorCode": 0, "ErrorMessage": None, "MatchingAcls": [{
                "ErrorCode": 0,
                "ErrorMessage": None,
                "ResourceType": 2,
                "ResourceName": "payments",
                "PatternType": 3,
                "Principal": "User:alice",
                "Host": "*",
                "Operation": 3,
                "PermissionType": 3,
            }]},
            {"ErrorCode": 42, "ErrorMessage": "bad filter", "MatchingAcls": []},
        ]}),
        (0, {"FilterResults": []}),
    ],
    ApiKey.DESCRIBE_CLIENT_QUOTAS: [
        (0, {"ThrottleTimeMs": 0, "ErrorCode": 0, "ErrorMessage": None, "Entries": [
            {"Entity": [{"EntityType": "user", "EntityName": "alice"},
                        {"EntityType": "client-id", "EntityName": None}],
             "Values": [{"Key": "producer_byte_rate", "Value": 1024.0},
                        {"Key": "request_percentage", "Value": 12.5}]},
            {"Entity": [{"EntityType": "user", "EntityName": "bøb"}], "Values": []},
        ]}),
        (0, {"ThrottleTimeMs": 3, "ErrorCode": 42, "ErrorMessage": "duplicate user component",
             "Entries": None}),
    ],
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: [
        (0, {"ThrottleTimeMs": 0, "ErrorCode": 0, "ErrorMessage": None, "Results": [
            {"User": "alice", "ErrorCode": 0, "ErrorMessage": None, "CredentialInfos": [
                {"Mechanism": 1, "Iterations": 4096},
                {"Mechanism": 2, "Iterations": 8192},
            ]},
            {"User": "ghøst", "ErrorCode": 91, "ErrorMessage": "no credentials",
             "CredentialInfos": []},
        ]}),
        (0, {"ErrorCode": 31, "ErrorMessage": "denied", "Results": []}),
    ],
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: [
        (0, {"ThrottleTimeMs": 0, "Results": [
            {"User": "alice", "ErrorCode": 0, "ErrorMessage": None},
            {"User": "bob", "ErrorCode": 93, "ErrorMessage": "too few iterations"},
        ]}),
        (0, {"Results": []}),
    ],
    ApiKey.ENVELOPE: [
        (0, {"ResponseData": b"\x00\x00\x00\x0b\x00\x00", "ErrorCode": 0}),
        (0, {"ResponseData": None, "ErrorCode": 41}),
    ],
}


def cases(samples: dict[ApiKey, list[tuple[int, dict]]]) -> list:
    """(api_key, version, sample index, body) for every supported version of every API."""
    out = []
    for key, entries in samples.items():
        lo, hi = SUPPORTED[key]
        for version in range(lo, hi + 1):
            for i, (first, body) in enumerate(entries):
                if version >= first:
                    out.append(pytest.param(key, version, body, id=f"{key.name}-v{version}-{i}"))
    return out


def assert_carries(schema: Struct, version: int, decoded: dict, sent: dict) -> None:
    """``decoded`` has exactly the version's fields, and every value that was sent."""
    plan = schema.plan(version)
    fields = [f for f, _ in plan.regular] + [f for f, _ in plan.tagged.values()]
    assert set(decoded) == {f.name for f in fields}
    for f in fields:
        if f.name not in sent:
            assert decoded[f.name] == f.default_in(version), f.name
            continue
        value = sent[f.name]
        if isinstance(f.type, Array) and isinstance(f.type.element, Struct) and value:
            assert len(decoded[f.name]) == len(value)
            for got, want in zip(decoded[f.name], value, strict=True):
                assert_carries(f.type.element, version, got, want)
        else:
            assert decoded[f.name] == value, f.name


def test_every_supported_api_has_request_and_response_samples() -> None:
    assert set(REQUEST_SAMPLES) == set(SUPPORTED) == set(RESPONSE_SAMPLES)
    assert set(REQUESTS) == set(SUPPORTED) == set(RESPONSES)


@pytest.mark.parametrize(("api_key", "version", "body"), cases(REQUEST_SAMPLES))
def test_request_round_trips(api_key: ApiKey, version: int, body: dict) -> None:
    header = RequestHeader(int(api_key), version, 2**31 - 1, "clïent")
    payload = encode_request(header, body)

    decoded_header, decoded = decode_request(payload)

    assert decoded_header == header
    assert_carries(REQUESTS[api_key], version, decoded, body)
    assert encode_request(header, decoded) == payload


@pytest.mark.parametrize(("api_key", "version", "body"), cases(RESPONSE_SAMPLES))
def test_response_round_trips(api_key: ApiKey, version: int, body: dict) -> None:
    header = RequestHeader(int(api_key), version, -7, None)
    payload = encode_response(header, body)

    correlation_id, decoded = decode_response(int(api_key), version, payload)

    assert correlation_id == -7
    assert_carries(RESPONSES[api_key], version, decoded, body)
    assert encode_response(header, decoded) == payload


def test_request_with_null_client_id_round_trips() -> None:
    header = RequestHeader(ApiKey.API_VERSIONS, 3, 1, None)
    assert decode_request(encode_request(header, {}))[0] == header
