"""Byte-for-byte cross-check against kafka-python 3.0.12's generated message classes.

For every API and version both implementations define (kafka-python has no
delegation-token or Envelope messages; those are pinned by hand-built bytes in
test_protocol_golden.py), with the shared samples:

* our encoding, decoded by kafka-python, carries the same values, and
  kafka-python re-encodes it to the very same bytes (header included);
* kafka-python, given the same values, encodes exactly our bytes.

kafka-python names fields in snake_case, renames KIP-430 bitfields to
``authorized_operations`` (a set of bit numbers, None when omitted) and reads an
all-zero uuid as None; ``_ours`` / ``_theirs`` translate those representations.
"""

from __future__ import annotations

import re
import uuid
import warnings
from typing import Any

import pytest

# kafka-python reads its bundled message definitions with a deprecated importlib API.
with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.protocol.admin import (
        AlterUserScramCredentialsRequest,
        AlterUserScramCredentialsResponse,
        CreateAclsRequest,
        CreateAclsResponse,
        DeleteAclsRequest,
        DeleteAclsResponse,
        DescribeAclsRequest,
        DescribeAclsResponse,
        DescribeClientQuotasRequest,
        DescribeClientQuotasResponse,
        DescribeClusterRequest,
        DescribeClusterResponse,
        DescribeUserScramCredentialsRequest,
        DescribeUserScramCredentialsResponse,
    )
    from kafka.protocol.metadata import (
        ApiVersionsRequest,
        ApiVersionsResponse,
        MetadataRequest,
        MetadataResponse,
    )
    from kafka.protocol.sasl import (
        SaslAuthenticateRequest,
        SaslAuthenticateResponse,
        SaslHandshakeRequest,
        SaslHandshakeResponse,
    )

from tests.unit.protocol.test_protocol_roundtrip import REQUEST_SAMPLES, RESPONSE_SAMPLES
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
from tokensvc.protocol.schema import UUID, Array, Struct

KAFKA_PYTHON: dict[ApiKey, tuple[type, type]] = {
    ApiKey.API_VERSIONS: (ApiVersionsRequest, ApiVersionsResponse),
    ApiKey.SASL_HANDSHAKE: (SaslHandshakeRequest, SaslHandshakeResponse),
    ApiKey.SASL_AUTHENTICATE: (SaslAuthenticateRequest, SaslAuthenticateResponse),
    ApiKey.METADATA: (MetadataRequest, MetadataResponse),
    ApiKey.DESCRIBE_CLUSTER: (DescribeClusterRequest, DescribeClusterResponse),
    ApiKey.CREATE_ACLS: (CreateAclsRequest, CreateAclsResponse),
    ApiKey.DESCRIBE_ACLS: (DescribeAclsRequest, DescribeAclsResponse),
    ApiKey.DELETE_ACLS: (DeleteAclsRequest, DeleteAclsResponse),
    ApiKey.DESCRIBE_CLIENT_QUOTAS: (DescribeClientQuotasRequest, DescribeClientQuotasResponse),
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: (
        DescribeUserScramCredentialsRequest, DescribeUserScramCredentialsResponse,
    ),
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: (
        AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse,
    ),
}

NOT_IN_KAFKA_PYTHON = {
    ApiKey.CREATE_DELEGATION_TOKEN,
    ApiKey.RENEW_DELEGATION_TOKEN,
    ApiKey.EXPIRE_DELEGATION_TOKEN,
    ApiKey.DESCRIBE_DELEGATION_TOKEN,
    ApiKey.ENVELOPE,
}

OMITTED_OPERATIONS = -(2**31)


# KIP-430 bitfields that kafka-python renames and represents as sets of bits.
BITFIELDS = {"TopicAuthorizedOperations", "ClusterAuthorizedOperations"}

# kafka-python reads its message definitions with a deprecated importlib API.
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def _snake(name: str) -> str:
    if name in BITFIELDS:
        return "authorized_operations"
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def _is_bitfield(name: str) -> bool:
    return name in BITFIELDS


def _bits(value: int) -> set[int] | None:
    if value == OMITTED_OPERATIONS:
        return None
    unsigned = value & 0xFFFFFFFF
    return {bit for bit in range(32) if unsigned >> bit & 1}


def _from_bits(bits: set[int] | None) -> int:
    if bits is None:
        return OMITTED_OPERATIONS
    value = sum(1 << bit for bit in bits)
    return value - 2**32 if value >= 2**31 else value


def _ours(schema: Struct, version: int, theirs: dict) -> dict:
    """kafka-python's to_dict(json=False) in our representation."""
    out: dict[str, Any] = {}
    for f in schema.fields:
        if not f.present_in(version):
            continue
        value = theirs[_snake(f.name)]
        if isinstance(f.type, Array) and isinstance(f.type.element, Struct) and value is not None:
            value = [_ours(f.type.element, version, item) for item in value]
        elif f.type is UUID:
            value = value.bytes if value is not None else bytes(16)
        elif _is_bitfield(f.name):
            value = _from_bits(value)
        out[f.name] = value
    return out


def _theirs(schema: Struct, their_fields: dict, version: int, body: dict) -> dict:
    """Constructor keyword arguments for kafka-python carrying our ``body``."""
    kwargs: dict[str, Any] = {}
    for f in schema.fields:
        if not f.present_in(version):
            continue
        name = _snake(f.name)
        value = body.get(f.name, f.default_in(version))
        if isinstance(f.type, Array) and isinstance(f.type.element, Struct) and value is not None:
            element_cls = their_fields[name].data_class
            element_fields = element_cls._struct.fields
            value = [
                element_cls(version=version,
                            **_theirs(f.type.element, element_fields, version, item))
                for item in value
            ]
        elif f.type is UUID:
            value = uuid.UUID(bytes=value) if value != bytes(16) else None
        elif _is_bitfield(f.name):
            value = _bits(value)
        kwargs[name] = value
    return kwargs


def _api_versions_error_above_v0(key: ApiKey, version: int, body: dict) -> bool:
    # Kafka clients read an ApiVersions response carrying an error as v0, because
    # that is what a broker sends when it does not support the requested version
    # (see test_api_versions_error_response_is_read_as_v0_by_kafka_python).
    return key is ApiKey.API_VERSIONS and version > 0 and body.get("ErrorCode", 0) != 0


def _cases(samples: dict[ApiKey, list[tuple[int, dict]]]) -> list:
    out = []
    for key, entries in samples.items():
        if key not in KAFKA_PYTHON:
            continue
        lo, hi = SUPPORTED[key]
        for version in range(lo, hi + 1):
            for i, (first, body) in enumerate(entries):
                if version >= first and not _api_versions_error_above_v0(key, version, body):
                    out.append(pytest.param(key, version, body, id=f"{key.name}-v{version}-{i}"))
    return out


def test_cross_check_covers_every_api_kafka_python_defines() -> None:
    assert set(KAFKA_PYTHON) | NOT_IN_KAFKA_PYTHON == set(SUPPORTED)
    for key, (request_cls, response_cls) in KAFKA_PYTHON.items():
        assert request_cls.API_KEY == response_cls.API_KEY == key
        assert request_cls.max_version >= SUPPORTED[key][1]


@pytest.mark.parametrize(("api_key", "version", "body"), _cases(REQUEST_SAMPLES))
def test_request_bytes_match_kafka_python(api_key: ApiKey, version: int, body: dict) -> None:
    request_cls = KAFKA_PYTHON[api_key][0]
    header = RequestHeader(int(api_key), version, 4242, "kafka-python-x")
    ours = encode_request(header, body)

    decoded = request_cls.decode(ours, version=version, header=True)
    assert decoded.header.correlation_id == 4242
    assert decoded.header.client_id == "kafka-python-x"
    assert _ours(REQUESTS[api_key], version, decoded.to_dict(json=False)) == decode_request(ours)[1]
    assert bytes(decoded.encode(version=version, header=True)) == ours

    built = request_cls(version=version, **_theirs(
        REQUESTS[api_key], request_cls._struct.fields, version, body))
    built.with_header(correlation_id=4242, client_id="kafka-python-x")
    assert bytes(built.encode(version=version, header=True)) == ours


@pytest.mark.parametrize(("api_key", "version", "body"), _cases(RESPONSE_SAMPLES))
def test_response_bytes_match_kafka_python(api_key: ApiKey, version: int, body: dict) -> None:
    response_cls = KAFKA_PYTHON[api_key][1]
    ours = encode_response(RequestHeader(int(api_key), version, 77, None), body)

    decoded = response_cls.decode(ours, version=version, header=True)
    assert decoded.header.correlation_id == 77
    expected = decode_response(int(api_key), version, ours)[1]
    assert _ours(RESPONSES[api_key], version, decoded.to_dict(json=False)) == expected
    assert bytes(decoded.encode(header=True)) == ours

    built = response_cls(version=version, **_theirs(
        RESPONSES[api_key], response_cls._struct.fields, version, body))
    built.with_header(correlation_id=77)
    assert bytes(built.encode(header=True)) == ours


def test_api_versions_error_response_is_read_as_v0_by_kafka_python() -> None:
    body = {"ErrorCode": 35, "ApiKeys": [{"ApiKey": 18, "MinVersion": 0, "MaxVersion": 4}]}
    v0_response = encode_response(RequestHeader(ApiKey.API_VERSIONS, 0, 5, None), body)

    decoded = ApiVersionsResponse.decode(v0_response, version=3, header=True)

    assert decoded.error_code == 35
    assert [(k.api_key, k.min_version, k.max_version) for k in decoded.api_keys] == [(ApiKey.API_VERSIONS, 0, 4)]
    assert decode_response(ApiKey.API_VERSIONS, 3, v0_response) == (5, decode_response(ApiKey.API_VERSIONS, 0, v0_response)[1])
