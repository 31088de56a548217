"""CreateAcls (30), DescribeAcls (29) and DeleteAcls (31), with Kafka's semantics.

Owns the ACL admin APIs on the broker: who may call them, the per-item answers, the
audit events, and read-your-writes for DescribeAcls.

- DescribeAcls needs DESCRIBE on the cluster; CreateAcls and DeleteAcls need ALTER on
  the cluster. A refused request fails as a whole with CLUSTER_AUTHORIZATION_FAILED
  (every creation / filter result carries it, as Kafka answers).
- With no authorizer configured (``authorizer.class.name`` empty) every answer is
  SECURITY_DISABLED (54).
- An invalid binding (:func:`tokensvc.authz.acl.binding_problem`) or a filter with
  UNKNOWN parts fails alone with INVALID_REQUEST; the others are applied.
- Until this broker's authorizer has loaded the ACLs, non-super users get
  AUTHORIZER_NOT_READY (COORDINATOR_LOAD_IN_PROGRESS, 14, retriable) per item.
  DescribeAcls answers it to super users too: the list would be incomplete.
- Create and Delete are writes (KIP-590): a non-controller runs ``precheck`` (the
  checks above) and forwards; the controller writes through ``services.acls`` (one
  guarded ZooKeeper transaction with the request record) and waits until its own
  authorizer has applied the change before answering. A write that finds this broker
  no longer controller answers NOT_CONTROLLER, which the forwarder retries on the new
  controller.
- Every binding created or deleted, and every refused item, is one ``acl`` audit
  event (enum names as Kafka's Java enums spell them: ``TOPIC``, ``LITERAL``).
- DescribeAcls selects, groups and encodes its bindings in a worker thread (their
  number is unbounded), not on the event loop.
- DescribeAcls first waits (at most ``CATCH_UP_TIMEOUT_S``, event-driven) until this
  broker has applied every ACL change notification present in ZooKeeper, so a describe
  sent to any broker right after a create answered by another broker sees it.

Must not: import ``zk``, write other than through ``services.acls``, or
log ACL contents beyond resource names.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING

from tokensvc.authz.acl import (
    CLUSTER_NAME,
    AclBinding,
    AclBindingFilter,
    AclCreateResult,
    AclDeleteResult,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from tokensvc.authz.wire import (
    binding_from_creation,
    creation_result,
    delete_filter_result,
    describe_resources,
    filter_from_wire,
)
from tokensvc.broker.handlers.base import ApiHandler, replay_recorded
from tokensvc.broker.handlers.scram_users import token_session_may_alter_access
from tokensvc.core.errors import AUTHORIZER_NOT_READY, Errors, KafkaError, describe
from tokensvc.protocol import encode_response_elements
from tokensvc.protocol.api import ApiKey
from tokensvc.protocol.schema import EncodedElements

if TYPE_CHECKING:
    from tokensvc.broker.context import RequestContext
    from tokensvc.broker.services import Services

log = logging.getLogger("tokensvc.broker.acls")

CATCH_UP_TIMEOUT_S = 2.0
_CATCH_UP_POLL_S = 0.01
_NO_AUTHORIZER = "no authorizer is configured on the broker (authorizer.class.name)"


# --- permission ------------------------------------------------------------------------


def _refusal(services: Services, ctx: RequestContext, operation: AclOperation) -> KafkaError | None:
    """Why this request may not run at all, or None when it may. A token session may
    not change ACLs (lasting access from a short-lived token) unless configured."""
    if operation is AclOperation.ALTER and not token_session_may_alter_access(
        ctx.principal.token_authenticated,
        services.config.delegation_token_session_alter_access_enable,
    ):
        return KafkaError(
            Errors.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED,
            "a session authenticated with a delegation token may not change ACLs "
            "(delegation.token.session.alter.access.enable=false)",
        )
    if not services.acls.enabled:
        return KafkaError(Errors.SECURITY_DISABLED, _NO_AUTHORIZER)
    try:
        allowed = services.authz.authorize(ctx, operation, ResourceType.CLUSTER, CLUSTER_NAME)
    except KafkaError as exc:  # AUTHORIZER_NOT_READY
        return exc
    if not allowed:
        return KafkaError(
            Errors.CLUSTER_AUTHORIZATION_FAILED,
            f"{operation.kafka_name} on the cluster is needed to "
            f"{'describe' if operation is AclOperation.DESCRIBE else 'change'} ACLs",
        )
    return None


# --- audit -----------------------------------------------------------------------------


def _audit(
    services: Services,
    ctx: RequestContext,
    action: str,
    error: Errors,
    *,
    resource_type: ResourceType | None,
    resource_name: str | None,
    pattern_type: PatternType | None,
    acl_principal: str | None,
    host: str | None,
    operation: AclOperation | None,
    permission: AclPermissionType | None,
) -> None:
    services.audit.emit(
        "acl",
        action=action,
        outcome="success" if error == Errors.NONE else "failure",
        error_code=int(error),
        requester=str(ctx.principal.without_token_flag()),
        resource_type=resource_type.name if resource_type is not None else None,
        resource_name=resource_name,
        pattern_type=pattern_type.name if pattern_type is not None else None,
        acl_principal=acl_principal,
        host=host,
        operation=operation.name if operation is not None else None,
        permission=permission.name if permission is not None else None,
    )


def _audit_binding(
    services: Services, ctx: RequestContext, action: str, binding: AclBinding, error: Errors
) -> None:
    p, e = binding.pattern, binding.entry
    _audit(
        services, ctx, action, error,
        resource_type=p.resource_type, resource_name=p.name, pattern_type=p.pattern_type,
        acl_principal=e.principal, host=e.host, operation=e.operation,
        permission=e.permission_type,
    )


def _audit_filter(
    services: Services, ctx: RequestContext, acl_filter: AclBindingFilter, error: Errors
) -> None:
    pf, ef = acl_filter.pattern_filter, acl_filter.entry_filter
    _audit(
        services, ctx, "delete", error,
        resource_type=pf.resource_type, resource_name=pf.name, pattern_type=pf.pattern_type,
        acl_principal=ef.principal, host=ef.host, operation=ef.operation,
        permission=ef.permission_type,
    )


# --- CreateAcls ------------------------------------------------------------------------


def _creations(body: dict) -> list[AclBinding]:
    return [binding_from_creation(c) for c in body.get("Creations") or []]


def _create_response(results: Iterable[AclCreateResult], error: Errors = Errors.NONE) -> dict:
    # "ErrorCode" is not a CreateAcls field (the encoder ignores it): it tells the
    # dispatcher and the envelope handler that the request failed as a whole.
    return {
        "ThrottleTimeMs": 0,
        "Results": [creation_result(r) for r in results],
        "ErrorCode": int(error),
    }


def _create_error(version: int, error: Errors) -> dict:
    return _create_response((), error)


def _create_item_errors(version: int, error: Errors, body: dict) -> dict:
    """The whole request failed: every creation gets the error (an empty list reads as
    success)."""
    return {
        "ThrottleTimeMs": 0,
        "Results": [{"ErrorCode": int(error), "ErrorMessage": None}
                    for _ in body.get("Creations") or []],
        "ErrorCode": int(error),
    }


def _refuse_creations(
    services: Services, ctx: RequestContext, bindings: list[AclBinding], refusal: KafkaError
) -> dict:
    if refusal.error is not Errors.NOT_CONTROLLER:  # not a refusal: retried elsewhere
        for binding in bindings:
            _audit_binding(services, ctx, "create", binding, refusal.error)
    return _create_response(
        (AclCreateResult(b, refusal.error, refusal.message) for b in bindings), refusal.error
    )


def precheck_create(services: Services, ctx: RequestContext, body: dict) -> dict | None:
    refusal = _refusal(services, ctx, AclOperation.ALTER)
    if refusal is None:
        return None
    return _refuse_creations(services, ctx, _creations(body), refusal)


async def handle_create(services: Services, ctx: RequestContext, body: dict) -> dict:
    bindings = _creations(body)
    refusal = _refusal(services, ctx, AclOperation.ALTER)
    if refusal is not None:
        return _refuse_creations(services, ctx, bindings, refusal)
    try:
        results = await services.acls.add(ctx, bindings, _create_response)
    except KafkaError as exc:  # NOT_CONTROLLER (the forwarder retries) or ZooKeeper down
        return _refuse_creations(services, ctx, bindings, exc)
    for result in results:
        _audit_binding(services, ctx, "create", result.binding, result.error)
    return _create_response(results)


# --- DeleteAcls ------------------------------------------------------------------------


def _filters(body: dict) -> list[AclBindingFilter]:
    return [filter_from_wire(f) for f in body.get("Filters") or []]


def _delete_response(results: Iterable[AclDeleteResult], error: Errors = Errors.NONE) -> dict:
    # As for CreateAcls, "ErrorCode" is for the dispatcher only (not a wire field).
    return {
        "ThrottleTimeMs": 0,
        "FilterResults": [delete_filter_result(r) for r in results],
        "ErrorCode": int(error),
    }


def _delete_error(version: int, error: Errors) -> dict:
    return _delete_response((), error)


def _delete_item_errors(version: int, error: Errors, body: dict) -> dict:
    """The whole request failed: every filter gets the error and no matching ACLs."""
    return {
        "ThrottleTimeMs": 0,
        "FilterResults": [{"ErrorCode": int(error), "ErrorMessage": None, "MatchingAcls": []}
                          for _ in body.get("Filters") or []],
        "ErrorCode": int(error),
    }


def _refuse_filters(
    services: Services, ctx: RequestContext, filters: list[AclBindingFilter], refusal: KafkaError
) -> dict:
    if refusal.error is not Errors.NOT_CONTROLLER:  # not a refusal: retried elsewhere
        for acl_filter in filters:
            _audit_filter(services, ctx, acl_filter, refusal.error)
    return _delete_response(
        (AclDeleteResult(f, (), refusal.error, refusal.message) for f in filters), refusal.error
    )


def precheck_delete(services: Services, ctx: RequestContext, body: dict) -> dict | None:
    refusal = _refusal(services, ctx, AclOperation.ALTER)
    if refusal is None:
        return None
    return _refuse_filters(services, ctx, _filters(body), refusal)


async def handle_delete(services: Services, ctx: RequestContext, body: dict) -> dict:
    filters = _filters(body)
    refusal = _refusal(services, ctx, AclOperation.ALTER)
    if refusal is not None:
        return _refuse_filters(services, ctx, filters, refusal)
    try:
        results = await services.acls.remove(ctx, filters, _delete_response)
    except KafkaError as exc:
        return _refuse_filters(services, ctx, filters, exc)
    for result in results:
        if result.error != Errors.NONE:
            _audit_filter(services, ctx, result.filter, result.error)
        for binding in result.deleted:
            _audit_binding(services, ctx, "delete", binding, Errors.NONE)
    return _delete_response(results)


# --- DescribeAcls ----------------------------------------------------------------------


def _describe_error(version: int, error: Errors, message: str | None = None) -> dict:
    return {
        "ThrottleTimeMs": 0,
        "ErrorCode": int(error),
        "ErrorMessage": message or describe(error),
        "Resources": [],
    }


async def handle_describe(services: Services, ctx: RequestContext, body: dict) -> dict:
    refusal = _refusal(services, ctx, AclOperation.DESCRIBE)
    if refusal is not None:
        return _describe_error(ctx.api_version, refusal.error, refusal.message)
    if not services.acls.ready:
        return _describe_error(
            ctx.api_version, AUTHORIZER_NOT_READY, "the broker is still loading ACLs; retry"
        )
    acl_filter = filter_from_wire(body)
    if acl_filter.is_unknown:
        return _describe_error(
            ctx.api_version, Errors.INVALID_REQUEST, "the ACL filter contains UNKNOWN elements"
        )
    if not await services.acls.catch_up(CATCH_UP_TIMEOUT_S):
        log.info("DescribeAcls answered before this broker caught up with ZooKeeper")
    version = ctx.api_version

    def resources() -> EncodedElements:
        # Selection, grouping and encoding grow with the ACLs: a worker thread does
        # them, so the event loop never holds a large describe in one piece.
        return encode_response_elements(
            ApiKey.DESCRIBE_ACLS, version, "Resources",
            describe_resources(services.acls.describe(acl_filter)),
        )

    return {
        "ThrottleTimeMs": 0,
        "ErrorCode": 0,
        "ErrorMessage": None,
        "Resources": await asyncio.get_running_loop().run_in_executor(None, resources),
    }


DESCRIBE_ACLS = ApiHandler("DescribeAcls", handle_describe, _describe_error)
CREATE_ACLS = ApiHandler("CreateAcls", handle_create, _create_error, write=True,
                         precheck=precheck_create, replay=replay_recorded,
                         item_errors=_create_item_errors)
DELETE_ACLS = ApiHandler("DeleteAcls", handle_delete, _delete_error, write=True,
                         precheck=precheck_delete, replay=replay_recorded,
                         item_errors=_delete_item_errors)
