"""The four delegation token APIs (KIP-48), with Kafka's rules and codes.

Session checks (token-authenticated, PLAINTEXT, one-way SSL) and permission
checks happen here; the token rules themselves are TokenManager's. Create,
renew and expire are writes: only the controller applies them (a
non-controller runs ``precheck`` and forwards). Every outcome is audited;
no response field other than the Create/Describe ``Hmac`` carries the HMAC,
and no audit event or log line ever does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tokensvc.authz.acl import AclOperation, ResourceType
from tokensvc.broker.describe import describe_tokens
from tokensvc.broker.handlers import ApiHandler, register
from tokensvc.core.errors import Errors, KafkaError
from tokensvc.core.principal import KafkaPrincipal
from tokensvc.core.token import DelegationToken, TokenInformation

if TYPE_CHECKING:
    from tokensvc.broker.broker import Broker
    from tokensvc.broker.context import RequestContext


def _principal(ptype: str | None, name: str | None) -> KafkaPrincipal:
    return KafkaPrincipal(ptype or "", name or "")


def _session_check(broker: Broker, ctx: RequestContext) -> Errors | None:
    if not ctx.token_requests_allowed:
        return Errors.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED
    if not broker.config.master_keys.enabled:
        return Errors.DELEGATION_TOKEN_AUTH_DISABLED
    return None


def _audit(broker: Broker, ctx: RequestContext, action: str, error: Errors, **fields) -> None:
    broker.metrics.token_request(action, error)
    broker.audit.emit(
        "token",
        action=action,
        outcome="success" if error == Errors.NONE else "failure",
        error_code=int(error),
        error=error.name,
        requester=str(ctx.principal.without_token_flag()),
        token_authenticated=ctx.principal.token_authenticated,
        client_host=ctx.client_host,
        listener=ctx.listener,
        forwarded=ctx.forwarded,
        **fields,
    )


# --- CreateDelegationToken -------------------------------------------------


def create_error(version: int, error: Errors, requester: KafkaPrincipal | None = None) -> dict:
    p = requester or KafkaPrincipal("", "")
    return {
        "ErrorCode": int(error),
        "PrincipalType": p.principal_type,
        "PrincipalName": p.name,
        "TokenRequesterPrincipalType": p.principal_type,
        "TokenRequesterPrincipalName": p.name,
        "IssueTimestampMs": -1,
        "ExpiryTimestampMs": -1,
        "MaxTimestampMs": -1,
        "TokenId": "",
        "Hmac": b"",
        "ThrottleTimeMs": 0,
    }


def _create_checks(broker: Broker, ctx: RequestContext, body: dict) -> tuple[Errors, KafkaPrincipal]:
    requester = ctx.principal.without_token_flag()
    error = _session_check(broker, ctx)
    if error:
        return error, requester
    owner = requester
    if body.get("OwnerPrincipalName"):
        owner = _principal(body.get("OwnerPrincipalType"), body.get("OwnerPrincipalName"))
    if not owner.is_user:
        return Errors.INVALID_PRINCIPAL_TYPE, owner
    if owner != requester and not broker.authorize(
        ctx, AclOperation.CREATE_TOKENS, ResourceType.USER, str(owner)
    ):
        return Errors.DELEGATION_TOKEN_AUTHORIZATION_FAILED, owner
    for r in body.get("Renewers") or []:
        if r.get("PrincipalType") != "User" or not r.get("PrincipalName"):
            return Errors.INVALID_PRINCIPAL_TYPE, owner
    return Errors.NONE, owner


def precheck_create(broker: Broker, ctx: RequestContext, body: dict) -> dict | None:
    error, owner = _create_checks(broker, ctx, body)
    if error:
        _audit(broker, ctx, "create", error, owner=str(owner), token_id=None)
        return create_error(ctx.api_version, error, ctx.principal)
    return None


async def handle_create(broker: Broker, ctx: RequestContext, body: dict) -> dict:
    error, owner = _create_checks(broker, ctx, body)
    requester = ctx.principal.without_token_flag()
    if error:
        _audit(broker, ctx, "create", error, owner=str(owner), token_id=None)
        return create_error(ctx.api_version, error, requester)
    renewers = [_principal(r["PrincipalType"], r["PrincipalName"]) for r in body.get("Renewers") or []]
    try:
        token = broker.manager.create(owner, requester, renewers, int(body.get("MaxLifetimeMs", -1)))
        await broker.write_token(token.info, create=True, request_key=broker.request_key(ctx))
    except KafkaError as exc:
        _audit(broker, ctx, "create", exc.error, owner=str(owner), token_id=None)
        return create_error(ctx.api_version, exc.error, requester)
    info = token.info
    _audit(
        broker,
        ctx,
        "create",
        Errors.NONE,
        owner=str(info.owner),
        token_id=info.token_id,
        renewers=[str(r) for r in info.renewers],
        expiry_ms=info.expiry_timestamp,
        max_ms=info.max_timestamp,
    )
    return create_response(token)


def create_response(token: DelegationToken) -> dict:
    """The CreateDelegationToken answer for a token (also used to replay a retried create)."""
    info = token.info
    return {
        "ErrorCode": 0,
        "PrincipalType": info.owner.principal_type,
        "PrincipalName": info.owner.name,
        "TokenRequesterPrincipalType": info.token_requester.principal_type,
        "TokenRequesterPrincipalName": info.token_requester.name,
        "IssueTimestampMs": info.issue_timestamp,
        "ExpiryTimestampMs": info.expiry_timestamp,
        "MaxTimestampMs": info.max_timestamp,
        "TokenId": info.token_id,
        "Hmac": token.hmac,
        "ThrottleTimeMs": 0,
    }


# --- Renew / Expire ---------------------------------------------------------


def _expiry_error(version: int, error: Errors) -> dict:
    return {"ErrorCode": int(error), "ExpiryTimestampMs": -1, "ThrottleTimeMs": 0}


def precheck_session(action: str):
    def precheck(broker: Broker, ctx: RequestContext, body: dict) -> dict | None:
        error = _session_check(broker, ctx)
        if error:
            _audit(broker, ctx, action, error, owner=None, token_id=None)
            return _expiry_error(ctx.api_version, error)
        return None

    return precheck


def _lookup(broker: Broker, body: dict) -> DelegationToken | None:
    return broker.cache.by_hmac(bytes(body.get("Hmac") or b""))


async def handle_renew(broker: Broker, ctx: RequestContext, body: dict) -> dict:
    error = _session_check(broker, ctx)
    if error:
        _audit(broker, ctx, "renew", error, owner=None, token_id=None)
        return _expiry_error(ctx.api_version, error)
    token = _lookup(broker, body)
    try:
        info = broker.manager.renew(token, ctx.principal, int(body.get("RenewPeriodMs", -1)))
        await broker.write_token(info)
    except KafkaError as exc:
        _audit(broker, ctx, "renew", exc.error, **_token_fields(token))
        return _expiry_error(ctx.api_version, exc.error)
    _audit(broker, ctx, "renew", Errors.NONE, **_token_fields(token), expiry_ms=info.expiry_timestamp,
           max_ms=info.max_timestamp)
    return {"ErrorCode": 0, "ExpiryTimestampMs": info.expiry_timestamp, "ThrottleTimeMs": 0}


async def handle_expire(broker: Broker, ctx: RequestContext, body: dict) -> dict:
    error = _session_check(broker, ctx)
    if error:
        _audit(broker, ctx, "expire", error, owner=None, token_id=None)
        return _expiry_error(ctx.api_version, error)
    token = _lookup(broker, body)
    try:
        info = broker.manager.expire(token, ctx.principal, int(body.get("ExpiryTimePeriodMs", -1)))
        if info is None:
            assert token is not None
            await broker.delete_token(token.info)
            expiry = broker.clock.now_ms()
        else:
            await broker.write_token(info)
            expiry = info.expiry_timestamp
    except KafkaError as exc:
        _audit(broker, ctx, "expire", exc.error, **_token_fields(token))
        return _expiry_error(ctx.api_version, exc.error)
    _audit(broker, ctx, "expire", Errors.NONE, **_token_fields(token), expiry_ms=expiry,
           max_ms=token.info.max_timestamp if token else None)
    return {"ErrorCode": 0, "ExpiryTimestampMs": expiry, "ThrottleTimeMs": 0}


def _token_fields(token: DelegationToken | None) -> dict:
    if token is None:
        return {"owner": None, "token_id": None}
    return {"owner": str(token.info.owner), "token_id": token.info.token_id}


# --- DescribeDelegationToken -----------------------------------------------


def _describe_error(version: int, error: Errors) -> dict:
    return {"ErrorCode": int(error), "Tokens": [], "ThrottleTimeMs": 0}


async def handle_describe(broker: Broker, ctx: RequestContext, body: dict) -> dict:
    error = _session_check(broker, ctx)
    if error:
        _audit(broker, ctx, "describe", error, owner=None, token_id=None, count=0)
        return _describe_error(ctx.api_version, error)
    owners_field = body.get("Owners")
    owners = None
    if owners_field is not None:
        owners = [_principal(o.get("PrincipalType"), o.get("PrincipalName")) for o in owners_field]

    def may_describe(info: TokenInformation) -> bool:
        return broker.authorize(
            ctx, AclOperation.DESCRIBE, ResourceType.DELEGATION_TOKEN, info.token_id
        ) or broker.authorize(ctx, AclOperation.DESCRIBE_TOKENS, ResourceType.USER, str(info.owner))

    try:
        described = await describe_tokens(
            broker.cache, ctx.principal, owners, may_describe, ctx.api_version
        )
    except KafkaError as exc:
        _audit(broker, ctx, "describe", exc.error, owner=None, token_id=None, count=0)
        return _describe_error(ctx.api_version, exc.error)
    _audit(broker, ctx, "describe", Errors.NONE, owner=None, token_id=None, count=described.count)
    return {"ErrorCode": 0, "Tokens": described.tokens, "ThrottleTimeMs": 0}


register(38, ApiHandler("CreateDelegationToken", handle_create, create_error, write=True,
                        precheck=precheck_create))
register(39, ApiHandler("RenewDelegationToken", handle_renew, _expiry_error, write=True,
                        precheck=precheck_session("renew")))
register(40, ApiHandler("ExpireDelegationToken", handle_expire, _expiry_error, write=True,
                        precheck=precheck_session("expire")))
register(41, ApiHandler("DescribeDelegationToken", handle_describe, _describe_error))
