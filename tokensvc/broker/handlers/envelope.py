"""EnvelopeRequest (KIP-590), on the controller: only brokers may send one.

Who may send an envelope (checked first, in this order):

* it must arrive on the inter-broker listener -- on a client listener the connection is
  closed after the answer, as Kafka does;
* the session must not be token-authenticated, whatever the token's owner (a stolen
  token must never mint tokens or change anything through an envelope);
* the session's principal must be the configured inter-broker user, or hold
  CLUSTER_ACTION on the cluster.

Anything else gets CLUSTER_AUTHORIZATION_FAILED and a ``forward`` audit event (api
``Envelope``, outcome failure). A broker that is not the controller answers
NOT_CONTROLLER (the sender retries elsewhere); a principal that does not deserialize
gets PRINCIPAL_DESERIALIZATION_FAILURE; an inner request that is not a write, an
unreadable inner request or client address, or a malformed request key gets
INVALID_REQUEST.

Otherwise the inner request is applied as the original principal from the original
client address through the controller's exactly-once ledger, with the request key of
the envelope's ``RequestKey`` tagged field (``FirstAttempt`` says no earlier attempt was
sent); an envelope without a key (an older sender) gets a fresh one. The inner response
goes back unchanged in ``ResponseData``, with the notification versions the write
committed in the ``CommittedVersions`` tagged field, so the forwarding broker can wait
until it serves the write before answering its client, and the token states its token
writes committed in ``CommittedTokens``, which the forwarding broker puts into its
cache at once instead of waiting for its follower.

Must not: trust anything in the envelope before the sender is authorized, handle an inner
request that is not a write, or import ``zk``.
"""

from __future__ import annotations

import asyncio
import ipaddress
from typing import TYPE_CHECKING

from tokensvc.authz.acl import CLUSTER_NAME, AclOperation, ResourceType
from tokensvc.broker.context import RequestContext, WriteTicket, committed_token_fields
from tokensvc.broker.handlers.base import ApiHandler
from tokensvc.broker.loop.offloop import LARGE_FRAME_BYTES, LARGE_ITEMS
from tokensvc.broker.network.decoding import decode_client_request
from tokensvc.core.errors import Errors, KafkaError
from tokensvc.protocol import ProtocolError
from tokensvc.protocol.principal_serde import deserialize_principal

if TYPE_CHECKING:
    from tokensvc.broker.services import Services



def _error(version: int, error: Errors) -> dict:
    return {"ResponseData": None, "ErrorCode": int(error)}


def _host(raw: bytes) -> str | None:
    try:
        if len(raw) == 4:
            return str(ipaddress.IPv4Address(raw))
        if len(raw) == 16:
            return str(ipaddress.IPv6Address(raw))
    except ValueError:
        return None
    return None


def sender_refusal(services: Services, ctx: RequestContext) -> str | None:
    """Why this session may not send an envelope, or None when it is a broker's."""
    config = services.config
    if ctx.listener != config.inter_broker_listener_name:
        return "client_listener"
    principal = ctx.principal
    if principal.token_authenticated:
        return "token_session"
    broker_user = config.inter_broker_sasl_username
    if broker_user and principal.principal_type == "User" and principal.name == broker_user:
        return None
    try:
        allowed = services.authz.authorize(ctx, AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER,
                                           CLUSTER_NAME)
    except KafkaError:  # AUTHORIZER_NOT_READY: not provably a broker yet
        allowed = False
    return None if allowed else "not_a_broker"


def _refuse(services: Services, ctx: RequestContext, reason: str) -> dict:
    if reason == "client_listener" and ctx.session is not None:
        ctx.session.close()  # Kafka closes a client listener's connection that sends one
    services.audit.emit(
        "forward",
        api="Envelope",
        client_id=ctx.client_id,
        principal=str(ctx.principal),
        client_host=ctx.client_host,
        controller_id=None,
        outcome="failure",
        error_code=int(Errors.CLUSTER_AUTHORIZATION_FAILED),
        attempts=1,
        latency_ms=0,
    )
    return _error(ctx.api_version, Errors.CLUSTER_AUTHORIZATION_FAILED)


async def handle_envelope(services: Services, ctx: RequestContext, body: dict) -> dict:
    reason = sender_refusal(services, ctx)
    if reason is not None:
        return _refuse(services, ctx, reason)
    ledger = services.ledger
    if not services.cluster.is_controller or ledger is None:
        return _error(ctx.api_version, Errors.NOT_CONTROLLER)
    try:
        principal = deserialize_principal(bytes(body.get("RequestPrincipal") or b""))
    except (ProtocolError, ValueError):
        return _error(ctx.api_version, Errors.PRINCIPAL_DESERIALIZATION_FAILURE)
    host = _host(bytes(body.get("ClientHostAddress") or b""))
    if host is None:
        return _error(ctx.api_version, Errors.INVALID_REQUEST)
    data = bytes(body.get("RequestData") or b"")
    try:
        # A client's large request (an ACL batch) is decoded off the loop here too.
        inner_header, inner_body = (
            await asyncio.to_thread(decode_client_request, data)
            if len(data) > LARGE_FRAME_BYTES else decode_client_request(data))
    except ProtocolError:
        return _error(ctx.api_version, Errors.INVALID_REQUEST)
    if not ledger.writes_api(inner_header.api_key):
        return _error(ctx.api_version, Errors.INVALID_REQUEST)
    key = body.get("RequestKey")
    if key is not None and not ledger.valid_key(key):
        return _error(ctx.api_version, Errors.INVALID_REQUEST)
    ticket = (
        WriteTicket(key, first_attempt=bool(body.get("FirstAttempt")))
        if key is not None
        else None  # the ledger gives it a fresh key
    )
    inner = RequestContext(
        header=inner_header,
        principal=principal,
        listener=ctx.listener,
        security_protocol=ctx.security_protocol,
        client_host=host,
        client_port=0,
        payload=data,
        session=None,
        forwarded=True,
        write=ticket,
    )
    response, error = await ledger.apply(services, inner, inner_body)
    if error == Errors.NOT_CONTROLLER:
        return _error(ctx.api_version, Errors.NOT_CONTROLLER)
    committed = inner.write.committed if inner.write is not None else []
    tokens = inner.write.tokens if inner.write is not None else []

    def fields() -> list[dict]:
        return [committed_token_fields(t) for t in tokens]

    # A revocation's ten thousand states: built in a thread (the response is then
    # encoded in one too, tokensvc.broker.loop.offloop).
    return {
        "ResponseData": response,
        "ErrorCode": 0,
        "CommittedVersions": [{"Root": root, "Sequence": seq} for root, seq in committed],
        "CommittedTokens": (await asyncio.to_thread(fields) if len(tokens) > LARGE_ITEMS
                            else fields()),
    }


ENVELOPE = ApiHandler("Envelope", handle_envelope, _error)
