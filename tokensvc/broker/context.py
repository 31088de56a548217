"""What a request handler knows about the request it serves."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from tokensvc.core.principal import KafkaPrincipal

if TYPE_CHECKING:
    from tokensvc.broker.session import Session
    from tokensvc.protocol import RequestHeader


@dataclass
class RequestContext:
    header: RequestHeader
    principal: KafkaPrincipal
    listener: str
    security_protocol: str
    client_host: str
    client_port: int
    # The raw request payload (header + body), for forwarding in an envelope.
    payload: bytes
    session: Session | None = None
    # True when the request arrived inside an EnvelopeRequest from another broker.
    forwarded: bool = False
    # Idempotency key of a forwarded write (same for every retry of one client request).
    request_key: str | None = None
    # True when the forwarder said no earlier attempt with this key was sent.
    first_attempt: bool = False

    @property
    def api_key(self) -> int:
        return self.header.api_key

    @property
    def api_version(self) -> int:
        return self.header.api_version

    @property
    def client_id(self) -> str:
        return self.header.client_id or ""

    @property
    def token_requests_allowed(self) -> bool:
        """Kafka's allowTokenRequests: not on token sessions, PLAINTEXT or one-way SSL."""
        if self.principal.token_authenticated:
            return False
        if self.security_protocol == "PLAINTEXT":
            return False
        return not (self.security_protocol == "SSL" and self.principal.name == "ANONYMOUS")
