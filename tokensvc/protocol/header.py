"""The request header as the codec hands it out: a plain record, no codec logic.

It lives apart from ``codec`` so that ``errors`` can name it without importing
the codec (which imports ``errors``). This module imports nothing of the codec.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    # tokensvc's own tagged field of the flexible header (v2): the client's key for one
    # write call, the same on every retry of it (the exactly-once key; docs/protocol.md).
    request_key: str | None = None
