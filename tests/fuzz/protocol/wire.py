"""What the protocol harnesses share: a request payload around fuzzed body bytes, and
the checks every decoded request passes.

A harness hands the fuzzer's bytes to :func:`request_payload` as the *body* of a request
whose header is well formed, so the mutations are spent on the body rather than on
finding a valid api key. :func:`check_request` then decodes the payload as a broker does
(``decode_client_request``) and checks the round trip through the strict codec.
"""

from __future__ import annotations

from tokensvc.broker.network.decoding import decode_client_request
from tokensvc.protocol import ProtocolError, decode_request, encode_request, flexible
from tokensvc.protocol.primitives import Writer

ERRORS = (ProtocolError,)


def request_payload(api_key: int, api_version: int, body: bytes) -> bytes:
    """A request header (v1, or v2 for flexible versions, no tagged field) then ``body``."""
    w = Writer()
    w.int16(api_key)
    w.int16(api_version)
    w.int32(7)
    w.int16(4)
    w.raw(b"fuzz")
    try:
        if flexible(api_key, api_version):
            w.uvarint(0)
    except ValueError:
        pass  # an api key tokensvc does not speak: no header tags to write
    w.raw(body)
    return w.value()


def check_request(payload: bytes) -> tuple:
    """Decode ``payload`` as a broker does; a request that decodes must encode again and
    decode (strictly) to the same header and body. Returns (header, body)."""
    header, body = decode_client_request(payload)
    again = encode_request(header, body)
    assert decode_request(again) == (header, body), "decode -> encode -> decode differs"
    return header, body
