"""DescribeUserScramCredentials and AlterUserScramCredentials (KIP-554).

Describe needs DESCRIBE on the cluster, alter needs ALTER. An upsertion carries
the salted password (never the password); the broker derives the stored and
server keys and writes Kafka's credential string to ZooKeeper. Alter is a
write: only the controller applies it.

Describe builds and encodes its results in a worker thread: their number grows
with the users, and the event loop must never hold it in one piece.

Two refusals Kafka does not make (docs/security.md lists them): a
token-authenticated session may not alter credentials at all
(DELEGATION_TOKEN_REQUEST_NOT_ALLOWED, unless
``delegation.token.session.alter.access.enable``), so a stolen token cannot
buy lasting access; and no user may be named like a token the broker knows
(UNACCEPTABLE_CREDENTIAL), since such a name logs in as that token when
implicit token login is on.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import TYPE_CHECKING

from tokensvc.authz.acl import CLUSTER_NAME, AclOperation, ResourceType
from tokensvc.broker.handlers.base import ApiHandler, replay_recorded
from tokensvc.core.errors import Errors, KafkaError
from tokensvc.core.principal import KafkaPrincipal
from tokensvc.protocol import encode_response_elements
from tokensvc.protocol.api import ApiKey
from tokensvc.protocol.schema import EncodedElements
from tokensvc.scram.changes import CredentialChange
from tokensvc.scram.formatter import (
    MAX_ITERATIONS,
    MIN_ITERATIONS,
    ScramCredential,
    ScramMechanism,
)

if TYPE_CHECKING:
    from tokensvc.broker.context import RequestContext
    from tokensvc.broker.services import Services

CATCH_UP_TIMEOUT_S = 2.0


def _describe_error(version: int, error: Errors) -> dict:
    return {"ThrottleTimeMs": 0, "ErrorCode": int(error), "ErrorMessage": None, "Results": []}


async def handle_describe(services: Services, ctx: RequestContext, body: dict) -> dict:
    if not services.authz.authorize(ctx, AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
        return _describe_error(ctx.api_version, Errors.CLUSTER_AUTHORIZATION_FAILED)
    await services.credentials.catch_up(CATCH_UP_TIMEOUT_S)
    requested = body.get("Users")
    version = ctx.api_version

    def results() -> EncodedElements:
        # Grows with the users: built and encoded in a worker thread, off the event loop.
        return encode_response_elements(
            ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, version, "Results",
            _describe_results(services, requested),
        )

    return {
        "ThrottleTimeMs": 0,
        "ErrorCode": 0,
        "ErrorMessage": None,
        "Results": await asyncio.get_running_loop().run_in_executor(None, results),
    }


def _describe_results(services: Services, requested: list[dict] | None) -> list[dict]:
    # As in Kafka, a null or empty list describes every user (librdkafka sends empty).
    if not requested:
        names = services.credentials.users()
        counts: Counter = Counter()
    else:
        names = [u.get("Name") or "" for u in requested]
        counts = Counter(names)
    results = []
    for name in dict.fromkeys(names):
        if counts.get(name, 0) > 1:
            results.append(_user_result(name, Errors.DUPLICATE_RESOURCE, "duplicate user in request"))
            continue
        creds = services.credentials.credentials(name)
        if not creds:
            results.append(_user_result(name, Errors.RESOURCE_NOT_FOUND, "attempt to describe a user "
                                        "credential that does not exist"))
            continue
        results.append(
            {
                "User": name,
                "ErrorCode": 0,
                "ErrorMessage": None,
                "CredentialInfos": [
                    {"Mechanism": mech.wire_type, "Iterations": cred.iterations}
                    for mech, cred in sorted(creds.items(), key=lambda kv: kv[0].wire_type)
                ],
            }
        )
    return results


def _user_result(name: str, error: Errors, message: str | None = None) -> dict:
    return {"User": name, "ErrorCode": int(error), "ErrorMessage": message, "CredentialInfos": []}


def _alter_error(version: int, error: Errors) -> dict:
    return {"ThrottleTimeMs": 0, "Results": []}


def _alter_result(name: str, error: Errors, message: str | None = None) -> dict:
    return {"User": name, "ErrorCode": int(error), "ErrorMessage": message}


TOKEN_SESSION_REFUSED = (
    "a session authenticated with a delegation token may not alter SCRAM credentials "
    "(delegation.token.session.alter.access.enable=false)"
)


def token_session_may_alter_access(token_authenticated: bool, allowed_by_config: bool) -> bool:
    """Whether a session may change credentials or ACLs: not with a token, unless configured."""
    return allowed_by_config or not token_authenticated


def token_id_collision(name: str, token_known: bool) -> str | None:
    """Why a user may not be named ``name`` (it is a token id the broker knows), or None."""
    if not token_known:
        return None
    return (
        f"user name {name!r} equals the id of a delegation token; a SCRAM login with it "
        "would be a login with that token. Choose another name"
    )


def precheck_alter(services: Services, ctx: RequestContext, body: dict) -> dict | None:
    """The refusal of the whole request (audited here, on whichever broker refuses), or None."""
    refused = None
    if not token_session_may_alter_access(
        ctx.principal.token_authenticated,
        services.config.delegation_token_session_alter_access_enable,
    ):
        refused = _all_failed(body, Errors.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED,
                              TOKEN_SESSION_REFUSED)
    elif not services.authz.authorize(ctx, AclOperation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME):
        refused = _all_failed(body, Errors.CLUSTER_AUTHORIZATION_FAILED)
    if refused is not None:
        for result in refused["Results"]:
            _audit(services, ctx, "upsert", result["User"], None, None, Errors(result["ErrorCode"]))
    return refused


def _all_failed(body: dict, error: Errors, message: str | None = None) -> dict:
    names = [d.get("Name") or "" for d in body.get("Deletions") or []]
    names += [u.get("Name") or "" for u in body.get("Upsertions") or []]
    return {
        "ThrottleTimeMs": 0,
        "Results": [_alter_result(n, error, message) for n in dict.fromkeys(names)],
    }


def _alter_item_errors(version: int, error: Errors, body: dict) -> dict:
    """The whole request failed (forwarding timed out, ZooKeeper down): every user named
    gets the error. "ErrorCode" is not a wire field here; the dispatcher counts it."""
    return {**_all_failed(body, error), "ErrorCode": int(error)}


async def handle_alter(services: Services, ctx: RequestContext, body: dict) -> dict:
    refused = precheck_alter(services, ctx, body)
    if refused is not None:
        return refused
    deletions = body.get("Deletions") or []
    upsertions = body.get("Upsertions") or []
    names = [d.get("Name") or "" for d in deletions] + [u.get("Name") or "" for u in upsertions]
    counts = Counter(names)
    results: dict[str, dict] = {}
    changes: list[CredentialChange] = []
    iterations_of: dict[str, int] = {}
    for name in dict.fromkeys(names):
        if counts[name] > 1:
            results[name] = _alter_result(name, Errors.DUPLICATE_RESOURCE,
                                          "a user may appear once per request")
        elif not name:
            results[name] = _alter_result(name, Errors.UNACCEPTABLE_CREDENTIAL, "empty user name")
    for d in deletions:
        name = d.get("Name") or ""
        if name in results:
            continue
        try:
            mech = ScramMechanism.from_wire_type(int(d.get("Mechanism", 0)))
        except ValueError:
            results[name] = _alter_result(name, Errors.UNSUPPORTED_SASL_MECHANISM, "unknown mechanism")
            continue
        changes.append(CredentialChange(name, mech, None))
    for u in upsertions:
        name = u.get("Name") or ""
        if name in results:
            continue
        try:
            mech = ScramMechanism.from_wire_type(int(u.get("Mechanism", 0)))
        except ValueError:
            results[name] = _alter_result(name, Errors.UNSUPPORTED_SASL_MECHANISM, "unknown mechanism")
            continue
        iterations = int(u.get("Iterations", 0))
        salt = bytes(u.get("Salt") or b"")
        salted = bytes(u.get("SaltedPassword") or b"")
        if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
            results[name] = _alter_result(
                name, Errors.UNACCEPTABLE_CREDENTIAL,
                f"iterations must be between {MIN_ITERATIONS} and {MAX_ITERATIONS}",
            )
            _audit(services, ctx, "upsert", name, mech, iterations, Errors.UNACCEPTABLE_CREDENTIAL)
            continue
        if not salt or not salted:
            results[name] = _alter_result(name, Errors.UNACCEPTABLE_CREDENTIAL, "empty salt or password")
            continue
        collision = token_id_collision(name, services.tokens.info(name) is not None)
        if collision is not None:
            results[name] = _alter_result(name, Errors.UNACCEPTABLE_CREDENTIAL, collision)
            _audit(services, ctx, "upsert", name, mech, iterations, Errors.UNACCEPTABLE_CREDENTIAL)
            continue
        client_key = mech.hmac(salted, b"Client Key")
        credential = ScramCredential(
            salt=salt,
            stored_key=mech.hash(client_key),
            server_key=mech.hmac(salted, b"Server Key"),
            iterations=iterations,
        )
        changes.append(CredentialChange(name, mech, credential))
        iterations_of[name] = iterations

    def answer(effects: dict[str, bool]) -> dict:
        for change in changes:
            if change.credential is None and not effects.get(change.user, False):
                results[change.user] = _alter_result(
                    change.user, Errors.RESOURCE_NOT_FOUND,
                    "attempt to delete a user credential that does not exist",
                )
            else:
                results[change.user] = _alter_result(change.user, Errors.NONE)
        return {"ThrottleTimeMs": 0, "Results": [results[n] for n in dict.fromkeys(names)]}

    # Tokens that end with their owner (delegation.token.expire.with.owner): audited as
    # revocations once the deletion of the owner's last credential has committed.
    owned_before = {}
    if services.config.delegation_token_expire_with_owner:
        for change in changes:
            left = set(services.credentials.credentials(change.user)) - {change.mechanism}
            if change.credential is None and not left:
                owned_before[change.user] = services.tokens.owned_by(
                    KafkaPrincipal.user(change.user))
    try:
        effects = await services.credentials.alter(ctx, changes, answer)
    except KafkaError as exc:
        if exc.error == Errors.NOT_CONTROLLER:
            return _not_controller(names)
        for change in changes:
            results[change.user] = _alter_result(change.user, exc.error, exc.message)
        return {"ThrottleTimeMs": 0, "Results": [results[n] for n in dict.fromkeys(names)]}
    response = answer(effects)
    for change in changes:
        action = "delete" if change.credential is None else "upsert"
        error = Errors(results[change.user]["ErrorCode"])
        _audit(services, ctx, action, change.user, change.mechanism, iterations_of.get(change.user),
               error)
    for infos in owned_before.values():
        for info in infos:
            if services.tokens.info(info.token_id) is None:
                services.audit.emit(
                    "token", action="revoke", outcome="success", error_code=0, error="NONE",
                    requester=str(ctx.principal.without_token_flag()), owner=str(info.owner),
                    token_id=info.token_id, reason="owner_deleted",
                    client_host=ctx.client_host, listener=ctx.listener,
                    forwarded=ctx.forwarded, client_id=ctx.client_id or None)
    return response


def _not_controller(names: list[str]) -> dict:
    """Controllership lost before the write: the extra top-level ``ErrorCode`` (ignored
    by the encoder, this response has none on the wire) lets the envelope answer
    NOT_CONTROLLER so the forwarder retries (the request is one transaction: nothing of
    it was written)."""
    return {
        "ThrottleTimeMs": 0,
        "ErrorCode": int(Errors.NOT_CONTROLLER),
        "Results": [_alter_result(n, Errors.NOT_CONTROLLER) for n in dict.fromkeys(names)],
    }


def _audit(services, ctx, action, user, mech, iterations, error: Errors) -> None:
    services.audit.emit(
        "credential",
        action=action,
        outcome="success" if error == Errors.NONE else "failure",
        error_code=int(error),
        requester=str(ctx.principal.without_token_flag()),
        user=user,
        mechanism=mech.mechanism_name if mech else None,
        iterations=iterations,
    )


DESCRIBE_USER_SCRAM_CREDENTIALS = ApiHandler(
    "DescribeUserScramCredentials", handle_describe, _describe_error
)
ALTER_USER_SCRAM_CREDENTIALS = ApiHandler(
    "AlterUserScramCredentials", handle_alter, _alter_error, write=True, precheck=precheck_alter,
    replay=replay_recorded, item_errors=_alter_item_errors,
)
