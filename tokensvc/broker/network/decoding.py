"""How a broker reads a client's request: as Kafka's brokers do, not more strictly.

Owns one rule the strict codec does not apply: bytes that follow a complete
request body are ignored. Apache Kafka's brokers never check for them, and
clients rely on it: librdkafka 2.x sends an all-topics MetadataRequest v9+
with the 4-byte placeholder of the topics count left in place, so its body
parses (null topics, flags false) and three bytes remain. Refusing such a
request would close every librdkafka connection on ``list_topics``.

Everything else is the codec's: unknown versions still raise
``UnsupportedVersionError`` and a body that does not parse still raises
``ProtocolError``. Responses and inter-broker traffic stay strict; this module
must not touch sockets.
"""

from __future__ import annotations

from tokensvc.protocol import (
    ProtocolError,
    RequestHeader,
    decode_request_header,
    flexible,
)
from tokensvc.protocol.api import ApiKey, api_key_of
from tokensvc.protocol.messages import REQUESTS
from tokensvc.protocol.primitives import Reader
from tokensvc.protocol.sasl_fast import read_sasl_authenticate_request

_SASL_AUTHENTICATE = int(ApiKey.SASL_AUTHENTICATE)


def decode_client_request(payload: bytes) -> tuple[RequestHeader, dict]:
    """Header and body of one request payload; bytes after the body are ignored."""
    header, offset = decode_request_header(payload)
    return header, decode_client_body(header, payload, offset)


def decode_client_body(header: RequestHeader, payload: bytes, offset: int) -> dict:
    """The body of a request whose header ``decode_request_header`` read (ending at
    ``offset``): a broker reads the header first, and the body only of a request the
    session may send now (a body costs CPU in proportion to its size)."""
    schema = REQUESTS[api_key_of(header.api_key)]
    try:
        if header.api_key == _SASL_AUTHENTICATE:  # half of a token login's requests
            return read_sasl_authenticate_request(Reader(payload, offset), header.api_version)
        return schema.read(
            Reader(payload, offset),
            header.api_version,
            flexible(header.api_key, header.api_version),
        )
    except ProtocolError as exc:
        raise exc.within(f"{schema.name}(v{header.api_version})") from None
