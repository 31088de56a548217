"""ACL znodes (``/kafka-acl/<type>/<name>``, ``/kafka-acl-extended/prefixed/...``) and
their change notifications: zk.acl_store.decode_acls and decode_change.

The first byte picks the decoder. Properties: only AclDataError escapes; entries read
are encoded and read again to the same set; a change notification read is encoded and
read again to the same resource pattern.
"""

from __future__ import annotations

from tokensvc.authz.acl import AclOperation, AclPermissionType, PatternType
from zk.acl_store import AclDataError, decode_acls, decode_change, encode_acls, encode_change

ERRORS = (AclDataError,)
DICTIONARY = "json.dict"
_UNKNOWN = (AclOperation.UNKNOWN, AclPermissionType.UNKNOWN)


def fuzz_one(data: bytes) -> None:
    if not data:
        return
    kind, rest = data[0] % 3, data[1:]
    if kind == 0:
        entries = decode_acls(rest)
        known = {e for e in entries
                 if e.operation not in _UNKNOWN and e.permission_type not in _UNKNOWN}
        again = decode_acls(encode_acls(known))
        assert again == known, "ACL round trip differs"
        return
    pattern_type = PatternType.LITERAL if kind == 1 else PatternType.PREFIXED
    pattern = decode_change(rest, pattern_type)
    if pattern.pattern_type is pattern_type and pattern.resource_type.name != "UNKNOWN":
        assert decode_change(encode_change(pattern), pattern_type) == pattern


def seeds() -> dict[str, bytes]:
    """ACL znodes and notifications as Kafka 3.9's AclAuthorizer writes them
    (ResourceZNode version 1; literal notifications ``Type:name``, extended ones JSON)."""
    return {
        "kafka-acls": (b'\x00{"version":1,"acls":[{"principal":"User:alice","permissionType":'
                       b'"Allow","operation":"Read","host":"*"},{"principal":"User:bob",'
                       b'"permissionType":"Deny","operation":"DescribeConfigs","host":"10.0.0.1"}]}'),
        "kafka-literal-change": b"\x01Topic:payments",
        "kafka-prefixed-change": (b'\x02{"version":1,"resourceType":"TOPIC","name":"pay",'
                                  b'"patternType":"PREFIXED"}'),
        "kafka-token-change": b"\x01DelegationToken:Zl0YT9kvSLaHtdxp5pMVbA",
    }
