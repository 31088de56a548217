"""The four delegation token APIs (KIP-48), with Kafka's rules and codes.

Session checks (token-authenticated, PLAINTEXT, one-way SSL) and permission
checks happen here; the token rules themselves are TokenManager's. Create,
renew and expire are writes: only the controller applies them (a
non-controller runs ``precheck`` and forwards). A create on an OAUTHBEARER session first
gets its mapping's token policy (:func:`apply_oauth_policy`: lifetime capped, labels
added, other owners refused unless allowed), on the broker that holds the session, which
then forwards the request so rewritten. Every outcome is audited;
no response field other than the Create/Describe ``Hmac`` carries the HMAC,
and no audit event or log line ever does.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from tokensvc.authz.acl import AclOperation, ResourceType
from tokensvc.broker.handlers.base import ApiHandler, replay_recorded
from tokensvc.broker.loop.slices import sliced, sliced_filter
from tokensvc.core.errors import Errors, KafkaError
from tokensvc.core.labels import NO_LABELS, LabelError, Labels, validate
from tokensvc.core.principal import KafkaPrincipal
from tokensvc.core.token import DelegationToken, TokenInformation
from tokensvc.oauth.mappings import Identity, PolicyRefused
from tokensvc.protocol import encode_request

if TYPE_CHECKING:
    from tokensvc.broker.context import RequestContext
    from tokensvc.broker.services import Services

log = logging.getLogger("tokensvc.broker.tokens")


def _principal(ptype: str | None, name: str | None) -> KafkaPrincipal:
    return KafkaPrincipal(ptype or "", name or "")


def _labels_of(body: dict, field: str, what: str = "labels") -> Labels:
    """The label set in the request's tagged field ``field`` (LabelError if it breaks a
    rule: tokensvc.core.labels)."""
    raw = body.get(field) or []
    if not raw:
        return NO_LABELS
    return validate(((item.get("Key"), item.get("Value")) for item in raw), what=what)


def _label_fields(labels: Labels) -> dict:
    """Audit fields of a token's labels (a JSON object; absent when it has none)."""
    return {"labels": dict(labels)} if labels else {}


def _session_check(services: Services, ctx: RequestContext) -> Errors | None:
    if not ctx.token_requests_allowed:
        return Errors.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED
    if not services.config.master_keys.enabled:
        return Errors.DELEGATION_TOKEN_AUTH_DISABLED
    return None


def _audit(services: Services, ctx: RequestContext, action: str, error: Errors, **fields) -> None:
    services.metrics.token_request(action, error)
    services.audit.emit("token", **_request_fields(ctx, action, error), **fields)


def _request_fields(ctx: RequestContext, action: str, error: Errors) -> dict:
    """What every token event says of the request."""
    return {
        "action": action,
        "outcome": "success" if error == Errors.NONE else "failure",
        "error_code": int(error),
        "error": error.name,
        "requester": str(ctx.principal.without_token_flag()),
        "token_authenticated": ctx.principal.token_authenticated,
        "client_host": ctx.client_host,
        "listener": ctx.listener,
        "forwarded": ctx.forwarded,
        "client_id": ctx.client_id or None,
    }


# The token writes, by ApiKey, and the audit action of each.
TOKEN_WRITE_ACTIONS = {38: "create", 39: "renew", 40: "expire"}


def audit_refused_write(services: Services, ctx: RequestContext, error: Errors,
                        reason: str) -> None:
    """Audit a token write the broker refused before its handler ran (``reason``: why,
    e.g. ``clock_skew``)."""
    _audit(services, ctx, TOKEN_WRITE_ACTIONS[ctx.api_key], error, reason=reason)


# An owner past this share of delegation.token.max.per.owner is logged and audited once.
NEAR_LIMIT_SHARE = 0.8
# Audit events a revocation hands to the audit writer at once (``emit_many``: built on
# its thread), between two yields to the event loop. A profile of the controller's loop
# during a 10,000-token revocation at 1M tokens had these events, built on the loop, as
# its largest cost.
AUDIT_SLICE = 64

# --- CreateDelegationToken -------------------------------------------------


def create_error(version: int, error: Errors, requester: KafkaPrincipal | None = None,
                 message: str | None = None) -> dict:
    """A refused create; ``message`` (tokensvc's ``ErrorMessage`` tag, v2+) says why when
    the refusal is about labels -- only a client that sent labels gets it."""
    p = requester or KafkaPrincipal("", "")
    return {
        "ErrorMessage": message,
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


def _create_checks(services: Services, ctx: RequestContext, body: dict) -> tuple[Errors, KafkaPrincipal]:
    requester = ctx.principal.without_token_flag()
    error = _session_check(services, ctx)
    if error:
        return error, requester
    owner = requester
    if body.get("OwnerPrincipalName"):
        owner = _principal(body.get("OwnerPrincipalType"), body.get("OwnerPrincipalName"))
    if not owner.is_user:
        return Errors.INVALID_PRINCIPAL_TYPE, owner
    if owner != requester and not services.authz.authorize(
        ctx, AclOperation.CREATE_TOKENS, ResourceType.USER, str(owner)
    ):
        return Errors.DELEGATION_TOKEN_AUTHORIZATION_FAILED, owner
    for r in body.get("Renewers") or []:
        if r.get("PrincipalType") != "User" or not r.get("PrincipalName"):
            return Errors.INVALID_PRINCIPAL_TYPE, owner
    return Errors.NONE, owner


def _label_refusal(services: Services, ctx: RequestContext, body: dict,
                   owner: KafkaPrincipal) -> tuple[Labels, dict | None]:
    """The request's labels, or the refusal of a create whose labels break a rule
    (INVALID_REQUEST naming the label; audited without the labels, which are not valid)."""
    try:
        return _labels_of(body, "Labels"), None
    except LabelError as exc:
        _audit(services, ctx, "create", exc.error, owner=str(owner), token_id=None,
               reason="invalid_labels")
        return NO_LABELS, create_error(ctx.api_version, exc.error, ctx.principal.without_token_flag(),
                                       exc.message)


# The first CreateDelegationToken version that carries labels (a tagged field).
LABELS_VERSION = 2


def apply_oauth_policy(services: Services, ctx: RequestContext, body: dict) -> dict | None:
    """An OAUTHBEARER session's create, under its mapping's token policy: ``body`` (and the
    payload a non-controller forwards) rewritten with the capped lifetime and the added
    labels; or the refusal (audited, reason ``oauth_policy``). None for other sessions,
    for forwarded requests (the forwarding broker applied it) and when the labels are
    invalid (refused by the label check next)."""
    identity = ctx.session.identity if ctx.session is not None and not ctx.forwarded else None
    if not isinstance(identity, Identity):
        return None
    requester = ctx.principal.without_token_flag()
    owner = requester
    if body.get("OwnerPrincipalName"):
        owner = _principal(body.get("OwnerPrincipalType"), body.get("OwnerPrincipalName"))
    try:
        requested = _labels_of(body, "Labels")
    except LabelError:
        return None
    try:
        lifetime, labels = identity.policy.apply(requester, owner, int(body.get("MaxLifetimeMs", -1)),
                                                 requested)
        if labels and ctx.api_version < LABELS_VERSION:
            raise PolicyRefused(Errors.INVALID_REQUEST,
                                f"the mapping {identity.mapping!r} labels its tokens: use "
                                f"CreateDelegationToken v{LABELS_VERSION} or later")
    except PolicyRefused as exc:
        _audit(services, ctx, "create", exc.error, owner=str(owner), token_id=None,
               reason="oauth_policy")
        return create_error(ctx.api_version, exc.error, requester, exc.message)
    body["MaxLifetimeMs"] = lifetime
    if ctx.api_version >= LABELS_VERSION:
        body["Labels"] = [{"Key": k, "Value": v} for k, v in labels]
    ctx.payload = encode_request(ctx.header, body)
    return None


def precheck_create(services: Services, ctx: RequestContext, body: dict) -> dict | None:
    refused = apply_oauth_policy(services, ctx, body)
    if refused is not None:
        return refused
    error, owner = _create_checks(services, ctx, body)
    if error:
        _audit(services, ctx, "create", error, owner=str(owner), token_id=None)
        return create_error(ctx.api_version, error, ctx.principal)
    _, refused = _label_refusal(services, ctx, body, owner)
    return refused


async def handle_create(services: Services, ctx: RequestContext, body: dict) -> dict:
    refused = apply_oauth_policy(services, ctx, body)
    if refused is not None:
        return refused
    error, owner = _create_checks(services, ctx, body)
    requester = ctx.principal.without_token_flag()
    if error:
        _audit(services, ctx, "create", error, owner=str(owner), token_id=None)
        return create_error(ctx.api_version, error, requester)
    labels, refused = _label_refusal(services, ctx, body, owner)
    if refused is not None:
        return refused
    renewers = [_principal(r["PrincipalType"], r["PrincipalName"]) for r in body.get("Renewers") or []]
    limit = services.config.delegation_token_max_per_owner
    held = services.tokens.owned_count(owner)
    if 0 < limit <= held:
        log.warning("refusing a token for %s: it holds %d, delegation.token.max.per.owner=%d",
                    owner, held, limit)
        _audit(services, ctx, "create", Errors.POLICY_VIOLATION, owner=str(owner), token_id=None,
               count=held, reason="owner_limit")
        return create_error(ctx.api_version, Errors.POLICY_VIOLATION, requester)
    services.tokens.creating(owner, +1)
    try:
        token = services.tokens.manager.create(owner, requester, renewers,
                                               int(body.get("MaxLifetimeMs", -1)), labels)
        await services.tokens.create(ctx, token.info)
    except KafkaError as exc:
        _audit(services, ctx, "create", exc.error, owner=str(owner), token_id=None)
        return create_error(ctx.api_version, exc.error, requester)
    finally:
        services.tokens.creating(owner, -1)
    if limit > 0 and held + 1 == int(limit * NEAR_LIMIT_SHARE) + 1:
        log.warning("%s holds %d tokens: past %d%% of delegation.token.max.per.owner=%d",
                    owner, held + 1, int(NEAR_LIMIT_SHARE * 100), limit)
        _audit(services, ctx, "create", Errors.NONE, owner=str(owner), token_id=None,
               count=held + 1, reason="owner_near_limit")
    info = token.info
    _audit(
        services,
        ctx,
        "create",
        Errors.NONE,
        owner=str(info.owner),
        token_id=info.token_id,
        renewers=[str(r) for r in info.renewers],
        expiry_ms=info.expiry_timestamp,
        max_ms=info.max_timestamp,
        **_label_fields(info.labels),
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
        # tokensvc's tag, only for a labelled token (whose creator sent labels): what the
        # token carries. A client that sent none gets Kafka's bytes.
        "Labels": [{"Key": k, "Value": v} for k, v in info.labels] if info.labels else None,
    }


async def replay_create(services: Services, ctx: RequestContext, outcome: dict) -> dict:
    """The answer to a create retried after its first attempt was applied: the token the
    first attempt created (recorded by id; the HMAC is recomputed, never stored)."""
    requester = ctx.principal.without_token_flag()
    token = await services.tokens.find(str(outcome.get("token_id") or ""))
    if token is None:  # created, then expired and swept before this retry
        return create_error(ctx.api_version, Errors.DELEGATION_TOKEN_NOT_FOUND, requester)
    if token.info.token_requester != requester:
        return create_error(ctx.api_version, Errors.INVALID_REQUEST, requester)
    return create_response(token)


# --- Renew / Expire ---------------------------------------------------------


def _expiry_ok(expiry_ms: int) -> dict:
    """A successful renew/expire answer; also the outcome recorded with its request key."""
    return {"ErrorCode": 0, "ExpiryTimestampMs": expiry_ms, "ThrottleTimeMs": 0}


def _expiry_error(version: int, error: Errors) -> dict:
    return {"ErrorCode": int(error), "ExpiryTimestampMs": -1, "ThrottleTimeMs": 0}


def precheck_session(action: str):
    def precheck(services: Services, ctx: RequestContext, body: dict) -> dict | None:
        error = _session_check(services, ctx)
        if error:
            _audit(services, ctx, action, error, owner=None, token_id=None)
            return _expiry_error(ctx.api_version, error)
        return None

    return precheck


def _lookup(services: Services, body: dict) -> DelegationToken | None:
    return services.tokens.by_hmac(bytes(body.get("Hmac") or b""))


async def handle_renew(services: Services, ctx: RequestContext, body: dict) -> dict:
    error = _session_check(services, ctx)
    if error:
        _audit(services, ctx, "renew", error, owner=None, token_id=None)
        return _expiry_error(ctx.api_version, error)
    token = _lookup(services, body)
    try:
        info = services.tokens.manager.renew(token, ctx.principal, int(body.get("RenewPeriodMs", -1)))
        await services.tokens.update(ctx, info, _expiry_ok(info.expiry_timestamp))
    except KafkaError as exc:
        _audit(services, ctx, "renew", exc.error, **_token_fields(token))
        return _expiry_error(ctx.api_version, exc.error)
    _audit(services, ctx, "renew", Errors.NONE, **_token_fields(token), expiry_ms=info.expiry_timestamp,
           max_ms=info.max_timestamp)
    return _expiry_ok(info.expiry_timestamp)


async def handle_expire(services: Services, ctx: RequestContext, body: dict) -> dict:
    error = _session_check(services, ctx)
    if error:
        _audit(services, ctx, "expire", error, owner=None, token_id=None)
        return _expiry_error(ctx.api_version, error)
    if (body.get("RevokeOwner") is not None or body.get("RevokeTokenIds")
            or body.get("RevokeLabels")):
        return await handle_revoke(services, ctx, body)
    token = _lookup(services, body)
    try:
        info = services.tokens.manager.expire(token, ctx.principal, int(body.get("ExpiryTimePeriodMs", -1)))
        if info is None:
            assert token is not None
            expiry = services.clock.now_ms()
            await services.tokens.delete(ctx, token.info, _expiry_ok(expiry))
        else:
            expiry = info.expiry_timestamp
            await services.tokens.update(ctx, info, _expiry_ok(expiry))
    except KafkaError as exc:
        _audit(services, ctx, "expire", exc.error, **_token_fields(token))
        return _expiry_error(ctx.api_version, exc.error)
    _audit(services, ctx, "expire", Errors.NONE, **_token_fields(token), expiry_ms=expiry,
           max_ms=token.info.max_timestamp if token else None)
    return _expiry_ok(expiry)


# --- Revocation without HMACs (tokensvc's tagged fields on ExpireDelegationToken v2) ----


def _revoke_error(error: Errors, message: str) -> dict:
    return {"ErrorCode": int(error), "ExpiryTimestampMs": -1, "ThrottleTimeMs": 0,
            "Revoked": [], "RevokeMessage": message}


def _may_revoke(services: Services, ctx: RequestContext) -> Callable[[TokenInformation], bool]:
    """Who may revoke a token without its HMAC: a super user (or no authorizer), the
    token's owner or a renewer (who may expire it with the HMAC anyway), or a principal
    allowed ALL on the token's DelegationToken resource (``DelegationToken:<id>``, or a
    prefixed or ``*`` pattern) -- Kafka's DelegationToken resource knows only DESCRIBE, so
    revoking takes the ALL that covers it."""
    if services.authz.allows_everything(ctx):
        return lambda _info: True
    principal = ctx.principal.without_token_flag()

    def allowed(info: TokenInformation) -> bool:
        return info.owner_or_renewer(principal) or services.authz.authorize(
            ctx, AclOperation.ALL, ResourceType.DELEGATION_TOKEN, info.token_id)

    return allowed


async def _selected(services: Services, owner: KafkaPrincipal | None,
                    selector: Labels) -> list[TokenInformation]:
    """The live tokens a revocation by owner and/or labels names (the cache's indexes,
    walked in slices of the loop's time)."""
    return await services.tokens.naming(owner, selector)


def _revoked_entry(info: TokenInformation) -> dict:
    return {"TokenId": info.token_id, "OwnerType": info.owner.principal_type,
            "OwnerName": info.owner.name}


async def handle_revoke(services: Services, ctx: RequestContext, body: dict) -> dict:
    """Expire every token of an owner, every token carrying some labels (of an owner, when
    both are given), or tokens by id, now. Refused as a whole (nothing changes) when the
    caller may not revoke one of them; a dry run changes nothing."""
    owner_field = body.get("RevokeOwner")
    ids = list(dict.fromkeys(body.get("RevokeTokenIds") or []))
    dry_run = bool(body.get("RevokeDryRun"))
    try:
        selector = _labels_of(body, "RevokeLabels", "label selector")
    except LabelError as exc:
        _audit(services, ctx, "revoke", exc.error, owner=None, token_id=None,
               reason="invalid_labels")
        return _revoke_error(exc.error, exc.message)
    if ids and (owner_field is not None or selector):
        return _revoke_error(Errors.INVALID_REQUEST,
                             "give an owner and/or labels, or token ids, not both")
    owner = (_principal(owner_field.get("PrincipalType"), owner_field.get("PrincipalName"))
             if owner_field is not None else None)
    reason = ("revoked_by_label" if selector else
              "revoked_by_owner" if owner is not None else "revoked_by_id")
    scope = {"selector": dict(selector)} if selector else {}
    selecting = owner is not None or bool(selector)
    # Every walk over the named tokens below is sliced (``tokensvc.broker.loop.slices``):
    # on the controller, a revocation of 10,000 tokens held the loop 30-40 ms in the steps
    # before and after its deletes (selection, permission check, answer).
    if selecting:
        infos, not_found = await _selected(services, owner, selector), []
    else:
        infos = await sliced_filter(ids, services.tokens.info)
        known = {i.token_id for i in infos}
        not_found = [t for t in ids if t not in known]
    allowed = _may_revoke(services, ctx)
    denied = await sliced_filter(infos, lambda i: None if allowed(i) else i)
    if denied:
        _audit(services, ctx, "revoke", Errors.DELEGATION_TOKEN_AUTHORIZATION_FAILED,
               owner=str(owner) if owner else None, token_id=None, count=len(denied),
               reason=reason, **scope)
        return _revoke_error(Errors.DELEGATION_TOKEN_AUTHORIZATION_FAILED,
                             f"not allowed to revoke {len(denied)} of the {len(infos)} tokens "
                             "(needs ALL on their DelegationToken resource)")
    revoked: dict[str, TokenInformation] = {}
    created_after: list[str] = []
    if not dry_run:
        try:
            for info in await services.tokens.revoke(ctx, infos):
                revoked[info.token_id] = info
            if selecting:
                # Tokens of the owner / with the labels created while the deletes ran:
                # revoked too, once more (the permission rule again: a token the caller
                # may not revoke is left and reported); any created after that pass are
                # reported, never left unsaid.
                again = await sliced_filter(
                    await _selected(services, owner, selector),
                    lambda i: i if i.token_id not in revoked and allowed(i) else None)
                for info in await services.tokens.revoke(ctx, again):
                    revoked[info.token_id] = info
                created_after = [i.token_id for i in await _selected(services, owner, selector)]
        except KafkaError as exc:
            _audit(services, ctx, "revoke", exc.error, owner=str(owner) if owner else None,
                   token_id=None, count=len(revoked), reason=reason, **scope)
            return _revoke_error(exc.error, f"revocation stopped after {len(revoked)} tokens")
    listed = list(revoked.values()) if not dry_run else infos
    answer = {
        "ErrorCode": int(Errors.DELEGATION_TOKEN_NOT_FOUND if not infos and not_found
                         else Errors.NONE),
        "ExpiryTimestampMs": services.clock.now_ms(),
        "ThrottleTimeMs": 0,
        "Revoked": await sliced(listed, _revoked_entry),
        "RevokeNotFound": not_found,
        "RevokeCreatedAfter": created_after,
        "RevokeMessage": "dry run: nothing changed" if dry_run else None,
    }
    if not dry_run and listed:
        common = {**_request_fields(ctx, "revoke", Errors.NONE), "reason": reason, **scope}
        for lo in range(0, len(listed), AUDIT_SLICE):
            if lo:
                await asyncio.sleep(0)  # ten thousand events in one go held the loop
            part = listed[lo:lo + AUDIT_SLICE]
            services.metrics.token_request("revoke", Errors.NONE, len(part))
            services.audit.emit_many("token", common, [
                {"owner": str(i.owner), "token_id": i.token_id, **_label_fields(i.labels)}
                for i in part])
    if not dry_run:
        await services.tokens.record(ctx, answer)
    return answer


def _token_fields(token: DelegationToken | None) -> dict:
    if token is None:
        return {"owner": None, "token_id": None}
    return {"owner": str(token.info.owner), "token_id": token.info.token_id}


# --- DescribeDelegationToken -----------------------------------------------


def _describe_error(version: int, error: Errors, message: str | None = None) -> dict:
    return {"ErrorCode": int(error), "Tokens": [], "ThrottleTimeMs": 0, "ErrorMessage": message}


async def handle_describe(services: Services, ctx: RequestContext, body: dict) -> dict:
    error = _session_check(services, ctx)
    if error:
        _audit(services, ctx, "describe", error, owner=None, token_id=None, count=0)
        return _describe_error(ctx.api_version, error)
    owners_field = body.get("Owners")
    owners = None
    if owners_field is not None:
        owners = [_principal(o.get("PrincipalType"), o.get("PrincipalName")) for o in owners_field]
    try:
        selector = _labels_of(body, "LabelSelector", "label selector")
    except LabelError as exc:
        _audit(services, ctx, "describe", exc.error, owner=None, token_id=None, count=0,
               reason="invalid_labels")
        return _describe_error(ctx.api_version, exc.error, exc.message)
    scope = {"selector": dict(selector)} if selector else {}

    def may_describe(info: TokenInformation) -> bool:
        return services.authz.authorize(
            ctx, AclOperation.DESCRIBE, ResourceType.DELEGATION_TOKEN, info.token_id
        ) or services.authz.authorize(ctx, AclOperation.DESCRIBE_TOKENS, ResourceType.USER, str(info.owner))

    def may_describe_any(_info: TokenInformation) -> bool:
        return True

    # A super user (or no authorizer) is allowed every token: asked once, not per token.
    allowed = may_describe_any if services.authz.allows_everything(ctx) else may_describe

    try:
        described = await services.tokens.describe(
            ctx.principal, owners, allowed, ctx.api_version, selector,
            bool(body.get("IncludeLabels")))
    except KafkaError as exc:
        _audit(services, ctx, "describe", exc.error, owner=None, token_id=None, count=0, **scope)
        return _describe_error(ctx.api_version, exc.error)
    _audit(services, ctx, "describe", Errors.NONE, owner=None, token_id=None,
           count=described.count, **scope)
    return {"ErrorCode": 0, "Tokens": described.tokens, "ThrottleTimeMs": 0}


CREATE_DELEGATION_TOKEN = ApiHandler(
    "CreateDelegationToken", handle_create, create_error, write=True, precheck=precheck_create,
    replay=replay_create,
)
RENEW_DELEGATION_TOKEN = ApiHandler(
    "RenewDelegationToken", handle_renew, _expiry_error, write=True,
    precheck=precheck_session("renew"), replay=replay_recorded,
)
EXPIRE_DELEGATION_TOKEN = ApiHandler(
    "ExpireDelegationToken", handle_expire, _expiry_error, write=True,
    precheck=precheck_session("expire"), replay=replay_recorded,
)
DESCRIBE_DELEGATION_TOKEN = ApiHandler("DescribeDelegationToken", handle_describe, _describe_error)
