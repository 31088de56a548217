"""Token znodes (``/delegation_token/tokens/<id>``): zk.layout.decode_token and the
cold-start bulk decoder zk.layout.decode_tokens.

Properties: only LayoutError escapes decode_token; a token decoded is encoded and
decoded again to the same token; decode_tokens of the znode (alone, and in a batch with
a valid neighbour) decodes or refuses it exactly as decode_token does.
"""

from __future__ import annotations

from zk import layout
from zk.layout import LayoutError

ERRORS = (LayoutError,)
DICTIONARY = "json.dict"

_NEIGHBOUR = ("t0", (b'{"version":3,"owner":"User%3Aa","tokenRequester":"User%3Aa",'
                     b'"renewers":[],"issueTimestamp":1,"maxTimestamp":3,"expiryTimestamp":2,'
                     b'"tokenId":"t0"}'))


def fuzz_one(data: bytes) -> None:
    try:
        token = layout.decode_token(data)
    except LayoutError:
        token = None
    token_id = token.token_id if token is not None else "unknown"
    for batch in ([(token_id, data)], [_NEIGHBOUR, (token_id, data)]):
        decoded, failed = layout.decode_tokens(batch)
        expected = [layout.decode_token(_NEIGHBOUR[1])] if len(batch) == 2 else []
        if token is not None:
            expected.append(token)
        assert decoded == expected, "decode_tokens and decode_token differ"
        assert len(failed) == (token is None)
    if token is not None:
        assert layout.decode_token(layout.encode_token(token)) == token, "round trip differs"


def seeds() -> dict[str, bytes]:
    """Token znodes in the JSON of Kafka 3.9's DelegationTokenInfoZNode (versions 1-3,
    principals URL-encoded), and tokensvc's with a key id and labels."""
    v3 = (b'{"version":3,"owner":"User%3Aalice","tokenRequester":"User%3Abob",'
          b'"renewers":["User%3Arenew%20er","User%3Aops%2A"],"issueTimestamp":1700000000000,'
          b'"maxTimestamp":1700604800000,"expiryTimestamp":1700086400000,'
          b'"tokenId":"Zl0YT9kvSLaHtdxp5pMVbA"}')
    return {
        "kafka-v3": v3,
        "kafka-v2": (b'{"version":2,"owner":"User%3Aalice","renewers":[],'
                     b'"issueTimestamp":1,"maxTimestamp":3,"expiryTimestamp":2,"tokenId":"abc"}'),
        "kafka-v1": (b'{"version":1,"owner":"User%3Aalice","renewers":["User%3Abob"],'
                     b'"issueTimestamp":1,"maxTimestamp":3,"expiryTimestamp":2,"tokenId":"abc"}'),
        "tokensvc-key-labels": v3[:-1] + b',"keyId":"0123456789abcdef",'
                                          b'"labels":{"job":"etl","team":"data"}}',
    }
