"""EnvelopeRequest (KIP-590), on the controller.

The checks, in Kafka's order: an envelope on a client listener closes the
connection (after a CLUSTER_AUTHORIZATION_FAILED answer); a sender without
CLUSTER_ACTION on the cluster gets CLUSTER_AUTHORIZATION_FAILED; a broker that is
not the active controller answers NOT_CONTROLLER (the forwarder retries); an
unreadable principal is PRINCIPAL_DESERIALIZATION_FAILURE; a bad client address,
an undecodable inner request, an inner API that is not a forwardable write or a
malformed request key is INVALID_REQUEST. Otherwise the inner request is handled
as the original principal from the original client address, through the
forwarder's :class:`~tokensvc.broker.forwarding.CreateLedger` (exactly-once
create), and its response goes back unchanged in ``ResponseData``.

Must not: trust anything in the envelope before the sender is authorized, or
handle an inner request that is not a write.
"""

from __future__ import annotations

import ipaddress
from typing import TYPE_CHECKING

from tokensvc.authz.acl import AclOperation, ResourceType
from tokensvc.broker.context import RequestContext
from tokensvc.broker.decoding import decode_client_request
from tokensvc.broker.forwarding import is_first_attempt, split_request_key
from tokensvc.broker.handlers import HANDLERS, ApiHandler, register
from tokensvc.core.errors import Errors
from tokensvc.protocol import ProtocolError
from tokensvc.protocol.principal_serde import deserialize_principal
from zk.token_store import request_key_path

if TYPE_CHECKING:
    from tokensvc.broker.broker import Broker

CLUSTER = "kafka-cluster"


def _error(version: int, error: Errors) -> dict:
    return {"ResponseData": None, "ErrorCode": int(error)}


def _valid_request_key(key: str) -> bool:
    try:
        request_key_path(key)
    except ValueError:
        return False
    return True


def _host(raw: bytes) -> str | None:
    try:
        if len(raw) == 4:
            return str(ipaddress.IPv4Address(raw))
        if len(raw) == 16:
            return str(ipaddress.IPv6Address(raw))
    except ValueError:
        return None
    return None


async def handle_envelope(broker: Broker, ctx: RequestContext, body: dict) -> dict:
    if ctx.listener != broker.config.inter_broker_listener_name:
        # Kafka closes a client listener's connection that sends an envelope.
        if ctx.session is not None:
            ctx.session.close()
        return _error(ctx.api_version, Errors.CLUSTER_AUTHORIZATION_FAILED)
    if not broker.authorize(ctx, AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER):
        return _error(ctx.api_version, Errors.CLUSTER_AUTHORIZATION_FAILED)
    if not broker.is_controller:
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
        inner_header, inner_body = decode_client_request(data)
    except ProtocolError:
        return _error(ctx.api_version, Errors.INVALID_REQUEST)
    handler = HANDLERS.get(inner_header.api_key)
    if handler is None or not handler.write:
        return _error(ctx.api_version, Errors.INVALID_REQUEST)
    _, request_key = split_request_key(ctx.header.client_id)
    if request_key is not None and not _valid_request_key(request_key):
        return _error(ctx.api_version, Errors.INVALID_REQUEST)
    if broker.forwarder is None:  # still starting
        return _error(ctx.api_version, Errors.NOT_CONTROLLER)
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
        request_key=request_key,
        first_attempt=request_key is not None and is_first_attempt(ctx.header.client_id),
    )
    response, error = await broker.forwarder.ledger.apply(inner, inner_body)
    if error == Errors.NOT_CONTROLLER:
        return _error(ctx.api_version, Errors.NOT_CONTROLLER)
    return {"ResponseData": response, "ErrorCode": 0}


register(58, ApiHandler("Envelope", handle_envelope, _error))
