"""Hand-built bytes pin the layout of what kafka-python cannot cross-check.

Delegation-token requests/responses, Envelope and the forwarded principal are
not in kafka-python, so their expected bytes are written out here with
``struct`` straight from the protocol's field lists, independently of the
codec's schema code. Headers, tagged fields and header versions are pinned too.
"""

from __future__ import annotations

import struct

import pytest

from tokensvc.broker.context import CommittedToken, committed_token_fields, committed_token_of
from tokensvc.core.errors import Errors
from tokensvc.core.principal import KafkaPrincipal
from tokensvc.core.token import TokenInformation
from tokensvc.protocol import (
    SUPPORTED,
    ApiKey,
    ProtocolError,
    RequestHeader,
    decode_request,
    decode_request_header,
    decode_response,
    encode_request,
    encode_response,
    flexible,
    request_header_version,
    response_error_code,
    response_header_version,
)
from tokensvc.protocol.principal_serde import deserialize_principal, serialize_principal


def i8(v: int) -> bytes:
    return struct.pack(">b", v)


def i16(v: int) -> bytes:
    return struct.pack(">h", v)


def i32(v: int) -> bytes:
    return struct.pack(">i", v)


def i64(v: int) -> bytes:
    return struct.pack(">q", v)


def s16(text: str | None) -> bytes:
    """Classic string: int16 length (-1 null) then UTF-8."""
    if text is None:
        return i16(-1)
    data = text.encode()
    return i16(len(data)) + data


def cs(text: str | None) -> bytes:
    """Compact string: unsigned varint length+1 (0 null), here always < 127."""
    if text is None:
        return b"\x00"
    data = text.encode()
    assert len(data) < 127
    return bytes([len(data) + 1]) + data


def cb(data: bytes | None) -> bytes:
    if data is None:
        return b"\x00"
    assert len(data) < 127
    return bytes([len(data) + 1]) + data


NO_TAGS = b"\x00"


def header_v1(key: int, version: int, corr: int, client: str | None) -> bytes:
    return i16(key) + i16(version) + i32(corr) + s16(client)


def header_v2(key: int, version: int, corr: int, client: str | None) -> bytes:
    return header_v1(key, version, corr, client) + NO_TAGS


def test_flexible_versions_follow_kafka() -> None:
    first_flexible = {
        ApiKey.API_VERSIONS: 3, ApiKey.SASL_HANDSHAKE: None, ApiKey.SASL_AUTHENTICATE: 2,
        ApiKey.METADATA: 9, ApiKey.DESCRIBE_CLUSTER: 0, ApiKey.CREATE_DELEGATION_TOKEN: 2,
        ApiKey.RENEW_DELEGATION_TOKEN: 2, ApiKey.EXPIRE_DELEGATION_TOKEN: 2,
        ApiKey.DESCRIBE_DELEGATION_TOKEN: 2, ApiKey.CREATE_ACLS: 2, ApiKey.DESCRIBE_ACLS: 2,
        ApiKey.DELETE_ACLS: 2, ApiKey.DESCRIBE_CLIENT_QUOTAS: 1,
        ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: 0,
        ApiKey.ALTER_USER_SCRAM_CREDENTIALS: 0, ApiKey.ENVELOPE: 0,
    }
    assert set(first_flexible) == set(SUPPORTED)
    for key, first in first_flexible.items():
        lo, hi = SUPPORTED[key]
        for version in range(lo, hi + 1):
            expected = first is not None and version >= first
            assert flexible(key, version) is expected, (key, version)
            assert request_header_version(key, version) == (2 if expected else 1)


def test_api_versions_response_header_is_v0_even_when_flexible() -> None:
    assert flexible(ApiKey.API_VERSIONS, 3)
    assert response_header_version(ApiKey.API_VERSIONS, 3) == 0
    assert response_header_version(ApiKey.SASL_AUTHENTICATE, 2) == 1
    assert response_header_version(ApiKey.SASL_HANDSHAKE, 1) == 0
    assert response_header_version(ApiKey.METADATA, 8) == 0


def test_supported_versions_are_those_of_the_brief() -> None:
    assert SUPPORTED == {
        ApiKey.API_VERSIONS: (0, 4), ApiKey.SASL_HANDSHAKE: (0, 1),
        ApiKey.SASL_AUTHENTICATE: (0, 2), ApiKey.METADATA: (0, 12),
        ApiKey.DESCRIBE_CLUSTER: (0, 1), ApiKey.CREATE_DELEGATION_TOKEN: (0, 3),
        ApiKey.RENEW_DELEGATION_TOKEN: (0, 2), ApiKey.EXPIRE_DELEGATION_TOKEN: (0, 2),
        ApiKey.DESCRIBE_DELEGATION_TOKEN: (0, 3), ApiKey.CREATE_ACLS: (0, 3),
        ApiKey.DESCRIBE_ACLS: (0, 3), ApiKey.DELETE_ACLS: (0, 3),
        ApiKey.DESCRIBE_CLIENT_QUOTAS: (0, 1), ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: (0, 0),
        ApiKey.ALTER_USER_SCRAM_CREDENTIALS: (0, 0), ApiKey.ENVELOPE: (0, 0),
    }


def test_create_delegation_token_request_v1_layout() -> None:
    body = {"Renewers": [{"PrincipalType": "User", "PrincipalName": "bob"}], "MaxLifetimeMs": -1}
    expected = (
        header_v1(38, 1, 9, "c")
        + i32(1) + s16("User") + s16("bob")
        + i64(-1)
    )
    assert encode_request(RequestHeader(ApiKey.CREATE_DELEGATION_TOKEN, 1,
                                        9, "c"), body) == expected
    assert decode_request(expected)[1] == body


def test_create_delegation_token_request_v3_layout_with_null_owner() -> None:
    body = {
        "OwnerPrincipalType": None,
        "OwnerPrincipalName": None,
        "Renewers": [{"PrincipalType": "User", "PrincipalName": "bob"}],
        "MaxLifetimeMs": 3_600_000,
    }
    expected = (
        header_v2(38, 3, 1, "adm")
        + cs(None) + cs(None)
        + b"\x02" + cs("User") + cs("bob") + NO_TAGS
        + i64(3_600_000)
        + NO_TAGS
    )
    assert encode_request(RequestHeader(ApiKey.CREATE_DELEGATION_TOKEN, 3,
                                        1, "adm"), body) == expected
    assert decode_request(expected)[1] == {**body, "Labels": []}


def test_create_delegation_token_response_layouts() -> None:
    hmac = bytes(range(64))
    body = {
        "ErrorCode": 0, "PrincipalType": "User", "PrincipalName": "alice",
        "TokenRequesterPrincipalType": "User", "TokenRequesterPrincipalName": "admin",
        "IssueTimestampMs": 10, "ExpiryTimestampMs": 20, "MaxTimestampMs": 30,
        "TokenId": "tok", "Hmac": hmac, "ThrottleTimeMs": 5,
    }
    v1 = (
        i32(3)
        + i16(0) + s16("User") + s16("alice")
        + i64(10) + i64(20) + i64(30) + s16("tok")
        + i32(64) + hmac + i32(5)
    )
    v3 = (
        i32(3) + NO_TAGS
        + i16(0) + cs("User") + cs("alice") + cs("User") + cs("admin")
        + i64(10) + i64(20) + i64(30) + cs("tok")
        + cb(hmac) + i32(5) + NO_TAGS
    )
    assert encode_response(RequestHeader(ApiKey.CREATE_DELEGATION_TOKEN, 1, 3, None), body) == v1
    assert encode_response(RequestHeader(ApiKey.CREATE_DELEGATION_TOKEN, 3, 3, None), body) == v3
    assert decode_response(ApiKey.CREATE_DELEGATION_TOKEN, 3, v3) == (
        3, {**body, "Labels": None, "ErrorMessage": None})


# tokensvc's tagged fields of ExpireDelegationToken v2, absent on the wire: their defaults.
NO_REVOKE = {"RevokeOwner": None, "RevokeTokenIds": [], "RevokeDryRun": False,
             "RevokeLabels": []}


def test_expire_v2_revocation_tags_layout() -> None:
    """Tag 0 the owner (a struct), tag 1 the token ids, tag 2 the dry run: each written only
    when it differs from its default, in tag order, after Kafka's own fields."""
    body = {"Hmac": b"", "ExpiryTimePeriodMs": -1, "RevokeTokenIds": ["ab"], "RevokeDryRun": True}
    encoded = encode_request(RequestHeader(ApiKey.EXPIRE_DELEGATION_TOKEN, 2, 7, None), body)
    ids = b"\x02" + b"\x03ab"  # compact array of 1, compact string "ab"
    tags = b"\x02" + b"\x01" + bytes([len(ids)]) + ids + b"\x02\x01\x01"
    assert encoded == header_v2(40, 2, 7, None) + cb(b"") + i64(-1) + tags
    assert decode_request(encoded)[1] == {**body, "RevokeOwner": None, "RevokeLabels": []}
    # Kafka's own v0/v1 (not flexible) cannot carry them and are unchanged.
    v1 = encode_request(RequestHeader(ApiKey.EXPIRE_DELEGATION_TOKEN, 1,
                                      7, "c"), {"Hmac": b"h", "ExpiryTimePeriodMs": 1})
    assert decode_request(v1)[1] == {"Hmac": b"h", "ExpiryTimePeriodMs": 1}


def test_renew_and_expire_requests_v2_layout() -> None:
    hmac = b"\x01\x02\x03"
    renew = header_v2(39, 2, 4, None) + cb(hmac) + i64(-1) + NO_TAGS
    expire = header_v2(40, 2, 5, None) + cb(hmac) + i64(0) + NO_TAGS
    assert decode_request(renew)[1] == {"Hmac": hmac, "RenewPeriodMs": -1}
    assert decode_request(expire)[1] == {"Hmac": hmac, "ExpiryTimePeriodMs": 0, **NO_REVOKE}
    assert encode_request(RequestHeader(ApiKey.RENEW_DELEGATION_TOKEN, 2,
                                        4, None), {"Hmac": hmac, "RenewPeriodMs": -1}) \
        == renew


def test_describe_delegation_token_request_null_owners_means_all() -> None:
    v0 = header_v1(41, 0, 1, "c") + i32(-1)
    v3 = header_v2(41, 3, 1, "c") + b"\x00" + NO_TAGS
    assert decode_request(v0)[1] == {"Owners": None}
    assert decode_request(v3)[1] == {"Owners": None, "LabelSelector": [], "IncludeLabels": False}
    assert encode_request(RequestHeader(ApiKey.DESCRIBE_DELEGATION_TOKEN, 3, 1, "c"), {}) == v3


def test_describe_delegation_token_response_v3_layout() -> None:
    body = {
        "ErrorCode": 0,
        "Tokens": [{
            "PrincipalType": "User", "PrincipalName": "alice",
            "TokenRequesterPrincipalType": "User", "TokenRequesterPrincipalName": "admin",
            "IssueTimestamp": 1, "ExpiryTimestamp": 2, "MaxTimestamp": 3,
            "TokenId": "t1", "Hmac": b"\xaa",
            "Renewers": [{"PrincipalType": "User", "PrincipalName": "bob"}],
        }],
        "ThrottleTimeMs": 0,
    }
    expected = (
        i32(8) + NO_TAGS + i16(0)
        + b"\x02"
        + cs("User") + cs("alice") + cs("User") + cs("admin")
        + i64(1) + i64(2) + i64(3) + cs("t1") + cb(b"\xaa")
        + b"\x02" + cs("User") + cs("bob") + NO_TAGS
        + NO_TAGS
        + i32(0) + NO_TAGS
    )
    assert encode_response(RequestHeader(ApiKey.DESCRIBE_DELEGATION_TOKEN, 3,
                                         8, None), body) == expected
    decoded = {**body, "ErrorMessage": None,
               "Tokens": [{**body["Tokens"][0], "Labels": []}]}
    assert decode_response(ApiKey.DESCRIBE_DELEGATION_TOKEN, 3, expected) == (8, decoded)


def test_envelope_request_and_response_layout() -> None:
    inner = encode_request(RequestHeader(ApiKey.EXPIRE_DELEGATION_TOKEN, 2,
                                         3, "cli"), {"Hmac": b"h", "ExpiryTimePeriodMs": 1})
    principal = serialize_principal(KafkaPrincipal("User", "alice"))
    request = (
        header_v2(58, 0, 12, "broker-1")
        + bytes([len(inner) + 1]) + inner
        + cb(principal)
        + cb(b"\x7f\x00\x00\x01")
        + NO_TAGS
    )
    header, body = decode_request(request)
    assert header == RequestHeader(ApiKey.ENVELOPE, 0, 12, "broker-1")
    assert body == {
        "RequestData": inner, "RequestPrincipal": principal, "ClientHostAddress": b"\x7f\x00\x00\x01",
        "RequestKey": None, "FirstAttempt": False,
    }
    assert decode_request(body["RequestData"])[1] == {"Hmac": b"h", "ExpiryTimePeriodMs": 1,
                                                      **NO_REVOKE}

    response = i32(12) + NO_TAGS + b"\x00" + i16(41) + NO_TAGS
    assert encode_response(header, {"ErrorCode": 41}) == response
    assert decode_response(ApiKey.ENVELOPE, 0, response) == (
        12, {"ResponseData": None, "ErrorCode": 41, "CommittedVersions": [],
         "CommittedTokens": []}
    )


def test_envelope_tagged_fields_carry_the_request_key_and_the_committed_versions() -> None:
    """tokensvc's own tags: a request key (tag 0) and first-attempt flag (tag 1) in the
    request, the committed notification versions (tag 0) in the response; a peer that
    does not know them skips them (unknown tags are ignored)."""
    inner = encode_request(RequestHeader(ApiKey.EXPIRE_DELEGATION_TOKEN, 2,
                                         3, "cli"), {"Hmac": b"h", "ExpiryTimePeriodMs": 1})
    base = cb(inner) + cb(b"p") + cb(b"\x7f\x00\x00\x01")
    request = (
        header_v2(58, 0, 12, "broker-1") + base
        + b"\x02" + b"\x00\x03" + cs("k1") + b"\x01\x01\x01"
    )
    header, body = decode_request(request)
    assert (body["RequestKey"], body["FirstAttempt"]) == ("k1", True)
    assert encode_request(header, body) == request

    versions = [{"Root": "tokens", "Sequence": 7}]
    response = encode_response(header, {"ResponseData": b"r", "ErrorCode": 0,
                                        "CommittedVersions": versions})
    tagged = b"\x01" + b"\x00" + bytes([1 + 7 + 8 + 1]) + b"\x02" + cs("tokens") + i64(7) + NO_TAGS
    assert response == i32(12) + NO_TAGS + cb(b"r") + i16(0) + tagged
    assert decode_response(ApiKey.ENVELOPE, 0, response)[1]["CommittedVersions"] == versions


def test_api_versions_v3_response_has_v0_header_and_tagged_features() -> None:
    body = {
        "ErrorCode": 0,
        "ApiKeys": [{"ApiKey": 18, "MinVersion": 0, "MaxVersion": 4}],
        "ThrottleTimeMs": 0,
        "FinalizedFeaturesEpoch": 2,
        "ZkMigrationReady": True,
    }
    expected = (
        i32(6)  # header v0: no tagged-field section
        + i16(0) + b"\x02" + i16(18) + i16(0) + i16(4) + NO_TAGS + i32(0)
        + b"\x02"  # two tagged fields, ascending tags, defaults left out
        + b"\x01\x08" + i64(2)
        + b"\x03\x01" + b"\x01"
    )
    assert encode_response(RequestHeader(ApiKey.API_VERSIONS, 3, 6, None), body) == expected
    _, decoded = decode_response(ApiKey.API_VERSIONS, 3, expected)
    assert decoded["FinalizedFeaturesEpoch"] == 2
    assert decoded["ZkMigrationReady"] is True
    assert decoded["SupportedFeatures"] == []
    assert decoded["FinalizedFeatures"] == []


def test_unknown_tagged_fields_are_skipped_in_header_and_body() -> None:
    unknown = b"\x02" + b"\x63\x03abc" + b"\x7f\x00"  # tag 99 (3 bytes), tag 127 (empty)
    request = (
        i16(36) + i16(2) + i32(1) + s16("c") + unknown
        + cb(b"auth") + unknown
    )
    header, body = decode_request(request)
    assert header == RequestHeader(ApiKey.SASL_AUTHENTICATE, 2, 1, "c")
    assert body == {"AuthBytes": b"auth"}


def test_unknown_tagged_fields_in_nested_structs_and_responses_are_skipped() -> None:
    response = (
        i32(1)  # ApiVersions: response header v0
        + i16(0) + b"\x02" + i16(3) + i16(0) + i16(12) + b"\x01\x40\x00"  # nested: tag 64
        + i32(0) + b"\x01" + b"\x04\x00"  # top level: unknown tag 4 next to known ones
    )
    assert decode_response(ApiKey.API_VERSIONS, 3, response) == (1, {
        "ErrorCode": 0,
        "ApiKeys": [{"ApiKey": 3, "MinVersion": 0, "MaxVersion": 12}],
        "ThrottleTimeMs": 0,
        "SupportedFeatures": [],
        "FinalizedFeaturesEpoch": -1,
        "FinalizedFeatures": [],
        "ZkMigrationReady": False,
    })
    renew = i32(2) + b"\x01" + b"\x05\x01z" + i16(0) + i64(9) + i32(0) + b"\x01\x06\x00"
    assert decode_response(ApiKey.RENEW_DELEGATION_TOKEN, 2, renew) == (
        2, {"ErrorCode": 0, "ExpiryTimestampMs": 9, "ThrottleTimeMs": 0},
    )


def test_known_tagged_field_must_fill_its_declared_size() -> None:
    body = i16(0) + b"\x01" + i32(0) + b"\x01" + b"\x01\x09" + i64(2) + b"\x00"
    with pytest.raises(ProtocolError, match="FinalizedFeaturesEpoch"):
        decode_response(ApiKey.API_VERSIONS, 3, i32(1) + body)


def test_decode_request_header_returns_body_offset() -> None:
    payload = header_v2(58, 0, 12, "b") + b"\x01\x00\x01" + NO_TAGS
    header, offset = decode_request_header(payload)
    assert header == RequestHeader(ApiKey.ENVELOPE, 0, 12, "b")
    assert offset == len(header_v2(58, 0, 12, "b"))


def test_missing_fields_take_schema_defaults() -> None:
    _, body = decode_response(ApiKey.METADATA, 10,
                              encode_response(RequestHeader(ApiKey.METADATA, 10, 1, None), {
        "Topics": [{"Name": "t", "Partitions": [{}]}],
    }))
    assert body["ClusterId"] is None
    assert body["ControllerId"] == -1
    assert body["ClusterAuthorizedOperations"] == -(2**31)
    topic = body["Topics"][0]
    assert topic["TopicId"] == bytes(16)
    assert topic["TopicAuthorizedOperations"] == -(2**31)
    assert topic["Partitions"][0]["LeaderEpoch"] == -1
    assert topic["Partitions"][0]["ReplicaNodes"] == []
    _, request = decode_request(encode_request(RequestHeader(ApiKey.METADATA, 4, 1, None), {}))
    assert request == {"Topics": None, "AllowAutoTopicCreation": True}


def test_metadata_v0_request_without_topics_is_an_empty_list() -> None:
    payload = encode_request(RequestHeader(ApiKey.METADATA, 0, 1, None), {})
    assert payload == header_v1(3, 0, 1, None) + i32(0)
    assert decode_request(payload)[1] == {"Topics": []}


def test_fields_absent_from_a_version_are_ignored_on_encode() -> None:
    body = {"Mechanism": "PLAIN", "NotAField": 1, "ThrottleTimeMs": 3}
    assert decode_request(encode_request(RequestHeader(ApiKey.SASL_HANDSHAKE, 1,
                                                       1, None), body))[1] == {
        "Mechanism": "PLAIN",
    }
    only_v8 = {"Topics": [], "IncludeClusterAuthorizedOperations": True}
    assert "IncludeClusterAuthorizedOperations" not in decode_request(
        encode_request(RequestHeader(ApiKey.METADATA, 11, 1, None), only_v8))[1]


def test_acl_pattern_type_defaults_to_literal_from_v1() -> None:
    payload = encode_request(RequestHeader(ApiKey.DESCRIBE_ACLS, 1,
                                           1, None), {"ResourceTypeFilter": 2})
    assert decode_request(payload)[1]["PatternTypeFilter"] == 3
    assert "PatternTypeFilter" not in decode_request(
        encode_request(RequestHeader(ApiKey.DESCRIBE_ACLS, 0,
                                     1, None), {"ResourceTypeFilter": 2}))[1]


def test_default_principal_data_layout() -> None:
    data = serialize_principal(KafkaPrincipal("User", "alice", token_authenticated=True))
    assert data == i16(0) + cs("User") + cs("alice") + b"\x01" + NO_TAGS


@pytest.mark.parametrize("principal", [
    KafkaPrincipal("User", "alice"),
    KafkaPrincipal("User", "ålice 🦊", token_authenticated=True),
    KafkaPrincipal("Group", ""),
])
def test_principal_round_trips(principal: KafkaPrincipal) -> None:
    assert deserialize_principal(serialize_principal(principal)) == principal


def test_principal_with_unknown_tagged_field_is_read() -> None:
    data = i16(0) + cs("User") + cs("bob") + b"\x00" + b"\x01\x0a\x02hi"
    assert deserialize_principal(data) == KafkaPrincipal("User", "bob")


@pytest.mark.parametrize("garbage", [
    b"",
    b"\x00",
    i16(1) + cs("User") + cs("bob") + b"\x00" + NO_TAGS,
    i16(-1),
    i16(0) + cs("User") + cs("bob"),
    i16(0) + cs("User") + cs("bob") + b"\x00" + NO_TAGS + b"x",
    i16(0) + b"\x03\xff\xfe" + cs("bob") + b"\x00" + NO_TAGS,
    i16(0) + b"\x00" + cs("bob") + b"\x00" + NO_TAGS,
])
def test_principal_garbage_is_a_deserialization_failure(garbage: bytes) -> None:
    with pytest.raises(ProtocolError) as info:
        deserialize_principal(garbage)
    assert info.value.error is Errors.PRINCIPAL_DESERIALIZATION_FAILURE



def test_committed_tokens_ride_the_envelope_response_and_come_back_equal() -> None:
    alice, bob = KafkaPrincipal.user("alice"), KafkaPrincipal.user("bob")
    created = CommittedToken(
        "tok-1", 41, TokenInformation("tok-1", alice, bob, (bob,), 1, 2, 3, "kid")
    )
    deleted = CommittedToken("tok-2", 42, None)
    body = {"ResponseData": b"x", "ErrorCode": 0, "CommittedVersions": [],
            "CommittedTokens": [committed_token_fields(created), committed_token_fields(deleted)]}
    encoded = encode_response(RequestHeader(ApiKey.ENVELOPE, 0, 12, "broker-1"), body)
    _, decoded = decode_response(ApiKey.ENVELOPE, 0, encoded)
    assert [committed_token_of(t) for t in decoded["CommittedTokens"]] == [created, deleted]


@pytest.mark.parametrize(("api_key", "version", "body"), [
    (38, 3, {"ErrorCode": 58, "PrincipalType": "User", "PrincipalName": "alice",
             "TokenRequesterPrincipalType": "User", "TokenRequesterPrincipalName": "alice",
             "IssueTimestampMs": 1, "ExpiryTimestampMs": 2, "MaxTimestampMs": 3,
             "TokenId": "t", "Hmac": b"h", "ThrottleTimeMs": 0}),
    (38, 1, {"ErrorCode": 0, "PrincipalType": "User", "PrincipalName": "alice",
             "IssueTimestampMs": 1, "ExpiryTimestampMs": 2, "MaxTimestampMs": 3,
             "TokenId": "t", "Hmac": b"h", "ThrottleTimeMs": 0}),
    (39, 2, {"ErrorCode": 62, "ExpiryTimestampMs": 5, "ThrottleTimeMs": 0}),
    (40, 0, {"ErrorCode": 0, "ExpiryTimestampMs": 5, "ThrottleTimeMs": 0}),
])
def test_the_top_level_error_code_is_read_without_decoding_the_rest(api_key, version, body):
    encoded = encode_response(RequestHeader(api_key, version, 9, "c"), body)
    assert response_error_code(api_key, version, encoded) == body["ErrorCode"]
    assert decode_response(api_key, version, encoded)[1]["ErrorCode"] == body["ErrorCode"]


def test_responses_whose_first_field_is_not_the_error_code_are_left_to_the_decoder():
    encoded = encode_response(RequestHeader(ApiKey.CREATE_ACLS, 3,
                                            9, "c"), {"ThrottleTimeMs": 0, "Results": []})
    assert response_error_code(30, 3, encoded) is None
