"""What a request handler knows about the request it serves.

Owns :class:`RequestContext`, :class:`WriteTicket` (the exactly-once identity of one
write request and the ZooKeeper versions it committed) and :class:`CommittedToken` (a
token state a write committed, which the answering broker puts into its cache at once).
Must not do I/O.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tokensvc.core.labels import interned
from tokensvc.core.principal import KafkaPrincipal
from tokensvc.core.token import TokenInformation

if TYPE_CHECKING:
    from tokensvc.broker.sessions.session import Session
    from tokensvc.protocol import RequestHeader


@dataclass(frozen=True)
class CommittedToken:
    """The state of one token after a committed write: ``info`` (None: the token was
    deleted), committed with the change notification ``sequence`` of the tokens root."""

    token_id: str
    sequence: int
    info: TokenInformation | None


def _principal(kind: str, name: str) -> KafkaPrincipal:
    return KafkaPrincipal(kind, name)


def committed_token_fields(token: CommittedToken) -> dict:
    """``token`` as an element of the EnvelopeResponse's ``CommittedTokens`` field."""
    info = token.info
    if info is None:
        return {"Sequence": token.sequence, "TokenId": token.token_id, "Deleted": True,
                "OwnerType": "", "OwnerName": "", "RequesterType": "", "RequesterName": "",
                "Renewers": [], "IssueTimestamp": -1, "ExpiryTimestamp": -1,
                "MaxTimestamp": -1, "KeyId": ""}
    return {
        "Sequence": token.sequence, "TokenId": token.token_id, "Deleted": False,
        "OwnerType": info.owner.principal_type, "OwnerName": info.owner.name,
        "RequesterType": info.token_requester.principal_type,
        "RequesterName": info.token_requester.name,
        "Renewers": [{"PrincipalType": r.principal_type, "PrincipalName": r.name}
                     for r in info.renewers],
        "IssueTimestamp": info.issue_timestamp, "ExpiryTimestamp": info.expiry_timestamp,
        "MaxTimestamp": info.max_timestamp, "KeyId": info.key_id,
        "Labels": [{"Key": k, "Value": v} for k, v in info.labels],
    }


def committed_token_of(fields: dict) -> CommittedToken:
    """The inverse of :func:`committed_token_fields` (KeyError/TypeError if malformed)."""
    token_id = fields["TokenId"]
    if fields["Deleted"]:
        return CommittedToken(token_id, int(fields["Sequence"]), None)
    info = TokenInformation(
        token_id,
        _principal(fields["OwnerType"], fields["OwnerName"]),
        _principal(fields["RequesterType"], fields["RequesterName"]),
        tuple(_principal(r["PrincipalType"], r["PrincipalName"]) for r in fields["Renewers"]),
        int(fields["IssueTimestamp"]),
        int(fields["ExpiryTimestamp"]),
        int(fields["MaxTimestamp"]),
        fields["KeyId"],
        # The controller checked them at create; sorted and shared as the cache keeps them.
        interned(tuple(sorted((lb["Key"], lb["Value"]) for lb in fields.get("Labels") or []))),
    )
    return CommittedToken(token_id, int(fields["Sequence"]), info)


_CLIENT_KEY = re.compile(r"^[0-9A-Za-z_-]{8,64}$")


def client_request_key(ctx: RequestContext) -> str | None:
    """The exactly-once key of a write whose client sent its own (tokensvc's header tag,
    the same on every retry of one call), bound to the client's principal: the ledger key
    is a hash of both, so another principal presenting the same key gets another ledger
    key. None when the client sent none (Kafka clients: a key per request, as before) or
    one that is not 8-64 characters of ``[0-9A-Za-z_-]``."""
    key = ctx.header.request_key
    if not key or not _CLIENT_KEY.match(key):
        return None
    principal = str(ctx.principal.without_token_flag())
    return hashlib.sha256(f"{principal}\0{key}".encode()).hexdigest()[:32]


@dataclass
class WriteTicket:
    """One write request as the controller's ledger sees it.

    ``key`` is the request key (the same on every attempt of one client request: the
    forwarder's, from the Envelope's tagged field, or a fresh one for a direct request);
    ``first_attempt`` says no earlier attempt with the key was sent; ``committed``
    collects the notification versions (root name, sequence) its writes committed, which
    the controller reports back so the answering broker can wait for them; ``tokens``
    the token states those writes committed, reported with them, so the answering
    broker can put them into its cache instead of waiting for its follower.
    """

    key: str
    first_attempt: bool = True
    committed: list[tuple[str, int]] = field(default_factory=list)
    tokens: list[CommittedToken] = field(default_factory=list)


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
