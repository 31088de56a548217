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
