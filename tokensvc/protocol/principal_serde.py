"""The principal a forwarding broker puts in EnvelopeRequest.RequestPrincipal.

The format is Kafka's DefaultKafkaPrincipalBuilder serde: an int16 schema
version (0), then the flexible ``DefaultPrincipalData`` v0 message (compact
strings Type and Name, bool TokenAuthenticated, tagged fields). So a tokensvc
controller reads what a Kafka broker forwards, and the other way round.
This module must not know about envelopes or sockets; garbage is a ProtocolError.
"""

from __future__ import annotations

from tokensvc.core.errors import Errors
from tokensvc.core.principal import KafkaPrincipal
from tokensvc.protocol.errors import ProtocolError
from tokensvc.protocol.messages import DEFAULT_PRINCIPAL_DATA
from tokensvc.protocol.primitives import Reader, Writer

PRINCIPAL_DATA_VERSION = 0


def serialize_principal(principal: KafkaPrincipal) -> bytes:
    """Version-prefixed DefaultPrincipalData bytes for ``principal``."""
    w = Writer()
    w.int16(PRINCIPAL_DATA_VERSION)
    DEFAULT_PRINCIPAL_DATA.write(
        w,
        {
            "Type": principal.principal_type,
            "Name": principal.name,
            "TokenAuthenticated": principal.token_authenticated,
        },
        PRINCIPAL_DATA_VERSION,
        True,
    )
    return w.value()


def deserialize_principal(data: bytes) -> KafkaPrincipal:
    """The principal in ``data``; ProtocolError (PRINCIPAL_DESERIALIZATION_FAILURE) if garbage."""
    r = Reader(data)
    try:
        version = r.int16()
        if version != PRINCIPAL_DATA_VERSION:
            raise ProtocolError(f"unknown principal data version {version}")
        fields = DEFAULT_PRINCIPAL_DATA.read(r, version, True)
        r.expect_end()
    except ProtocolError as exc:
        raise ProtocolError(
            f"bad principal data: {exc.message}", Errors.PRINCIPAL_DESERIALIZATION_FAILURE
        ) from None
    return KafkaPrincipal(fields["Type"], fields["Name"], fields["TokenAuthenticated"])
