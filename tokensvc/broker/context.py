"""What a request handler knows about the request it serves.

Owns :class:`RequestContext` and :class:`WriteTicket` (the exactly-once identity of
one write request and the ZooKeeper versions it committed). Must not do I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tokensvc.core.principal import KafkaPrincipal

if TYPE_CHECKING:
    from tokensvc.broker.session import Session
    from tokensvc.protocol import RequestHeader


@dataclass
class WriteTicket:
    """One write request as the controller's ledger sees it.

    ``key`` is the request key (the same on every attempt of one client request: the
    forwarder's, from the Envelope's tagged field, or a fresh one for a direct request);
    ``first_attempt`` says no earlier attempt with the key was sent; ``committed``
    collects the notification versions (root name, sequence) its writes committed, which
    the controller reports back so the answering broker can wait for them.
    """

    key: str
    first_attempt: bool = True
    committed: list[tuple[str, int]] = field(default_factory=list)


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
    # Set on the controller for every write request (see WriteTicket).
    write: WriteTicket | None = None

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
