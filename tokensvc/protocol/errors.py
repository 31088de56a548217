"""The codec's failures, each carrying the Kafka error it maps to.

Decoding failures are :class:`ProtocolError` (a :class:`KafkaError`): a peer sent
bytes we cannot or will not read, and the connection should be closed (or, for an
unsupported ApiVersions version, answered with UNSUPPORTED_VERSION). Encoding
failures are :class:`EncodeError` (a ``ValueError``): our own code built a body
that does not fit the schema, which is a bug, never the peer's fault.

This module must not import the rest of the codec.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tokensvc.core.errors import Errors, KafkaError

if TYPE_CHECKING:
    from tokensvc.protocol.header import RequestHeader


class ProtocolError(KafkaError):
    """Bytes that break the Kafka wire format (truncated, bad lengths, bad UTF-8, ...).

    ``reason`` says what is wrong; ``path`` says where (``("Topics", "Name")``).
    """

    def __init__(
        self,
        reason: str,
        error: Errors = Errors.CORRUPT_MESSAGE,
        path: tuple[str, ...] = (),
    ) -> None:
        self.reason = reason
        self.path = path
        where = "".join(p if p.startswith("[") else "." + p for p in path).lstrip(".")
        super().__init__(error, f"{where}: {reason}" if where else reason)

    def within(self, field: str) -> ProtocolError:
        """The same error located one level further out (inside ``field``)."""
        return ProtocolError(self.reason, self.error, (field, *self.path))


class UnsupportedVersionError(ProtocolError):
    """A request for an API key or version this codec does not speak.

    ``header`` is the request header read so far (api key, version, correlation id,
    client id), so the broker can answer ApiVersions with a v0 UNSUPPORTED_VERSION
    response; it is ``None`` when there is no request header (``decode_response``).
    """

    def __init__(self, header: RequestHeader | None, message: str | None = None) -> None:
        if message is None and header is not None:
            message = f"api key {header.api_key} version {header.api_version} is not supported"
        super().__init__(message or "unsupported api key or version", Errors.UNSUPPORTED_VERSION)
        self.header = header


class FrameTooLargeError(ProtocolError):
    """A size prefix that is negative or larger than the receiver accepts."""

    def __init__(self, size: int, max_size: int) -> None:
        if size < 0:
            message = f"invalid frame size {size}"
        else:
            message = f"frame of {size} bytes exceeds the maximum of {max_size}"
        super().__init__(message, Errors.INVALID_REQUEST)
        self.size = size
        self.max_size = max_size


class EncodeError(ValueError):
    """A body given to an ``encode_*`` function does not fit its schema (a bug in our code)."""
