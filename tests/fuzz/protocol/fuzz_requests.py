"""Every request body of every API key and version a broker serves, and what a broker
reads out of it before any handler runs: ACL bindings and filters, token labels, client
quota filters, and inside an Envelope (KIP-590) the forwarded principal, client address and inner request.

The first two bytes pick the (api key, version) pair, cycling through every pair
served; the rest is the body. Properties: the round trip of ``wire.check_request``; the
values built from a body raise only KafkaError (INVALID_REQUEST and its kin).
"""

from __future__ import annotations

from tests.fuzz.protocol.wire import check_request, request_payload
from tokensvc.authz.acl import validate_binding, validate_filter
from tokensvc.authz.wire import binding_from_creation, filter_from_wire
from tokensvc.broker.handlers.envelope import _host
from tokensvc.core.errors import KafkaError
from tokensvc.core.labels import validate
from tokensvc.core.quotas import quota_filter
from tokensvc.protocol import SUPPORTED, ApiKey
from tokensvc.protocol.principal_serde import deserialize_principal, serialize_principal

ERRORS = (KafkaError,)
PAIRS = [(int(key), version) for key, (lo, hi) in sorted(SUPPORTED.items())
         for version in range(lo, hi + 1)]


def _labels(items: list | None) -> None:
    if items:
        validate((item.get("Key"), item.get("Value")) for item in items)


def _envelope(body: dict) -> None:
    principal = deserialize_principal(bytes(body["RequestPrincipal"] or b""))
    again = deserialize_principal(serialize_principal(principal))
    assert again == principal, "principal serde round trip differs"
    _host(bytes(body["ClientHostAddress"] or b""))
    check_request(bytes(body["RequestData"] or b""))


def fuzz_one(data: bytes) -> None:
    if len(data) < 2:
        return
    api_key, version = PAIRS[int.from_bytes(data[:2], "big") % len(PAIRS)]
    _, body = check_request(request_payload(api_key, version, data[2:]))
    if api_key == ApiKey.CREATE_ACLS:
        for creation in body["Creations"]:
            validate_binding(binding_from_creation(creation))
    elif api_key == ApiKey.DESCRIBE_ACLS:
        validate_filter(filter_from_wire(body))
    elif api_key == ApiKey.DELETE_ACLS:
        for item in body["Filters"]:
            validate_filter(filter_from_wire(item))
    elif api_key == ApiKey.CREATE_DELEGATION_TOKEN:
        _labels(body.get("Labels"))
    elif api_key == ApiKey.EXPIRE_DELEGATION_TOKEN:
        _labels(body.get("RevokeLabels"))
    elif api_key == ApiKey.DESCRIBE_CLIENT_QUOTAS:
        quota_filter(body["Components"], body["Strict"])
    elif api_key == ApiKey.ENVELOPE:
        _envelope(body)
