"""The services a request handler may use: the narrow seam between handlers and the broker.

Owns :class:`Services` (what a handler gets instead of the broker) and the services in it:

* :class:`TokenService` -- token reads (cache), the token rules (manager) and the token
  write path;
* :class:`CredentialService` and :class:`AclService` -- reads from their caches and the
  credential / ACL write paths;
* :class:`Authorization` -- the authorizer facade (``authorize``, cluster operations);
* :class:`ClusterView` -- cluster id, controller, broker endpoints;
* :class:`AuthService` -- what SASL needs (credential lookup, fake-salt secret, session
  lifetime, the session registry);
* ``audit``, ``metrics``, ``config``, ``clock``.

Every write goes through the controller's :class:`~tokensvc.broker.writes.path.WritePath`
(the store call under the controller guard, then this broker's caches caught up), and
the exactly-once ledger (:class:`~tokensvc.broker.writes.ledger.WriteLedger`) is
``Services.ledger``, for the Envelope handler. :class:`Services` is frozen: built once
by :func:`tokensvc.broker.assembly.assemble`.

Stores are reached through the small protocols below, so handlers and the write path are
unit-testable with fakes and a fake clock.

Must not: be imported by ``zk``; let a handler reach the broker object.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from tokensvc.authz.acl import (
    AclBinding,
    AclBindingFilter,
    AclCreateResult,
    AclDeleteResult,
    AclOperation,
    ResourceType,
)
from tokensvc.authz.authorizer import ALL_OPERATIONS_BITFIELD, AclAuthorizer
from tokensvc.broker.describe import describe_tokens
from tokensvc.broker.loop.slices import sliced_filter
from tokensvc.broker.writes.path import TOKENS_ROOT, Guard, Version, WritePath
from tokensvc.core.clock import Clock
from tokensvc.core.errors import AUTHORIZER_NOT_READY, KafkaError
from tokensvc.core.labels import NO_LABELS, Labels
from tokensvc.core.token import DelegationToken, TokenInformation
from tokensvc.protocol.api import ApiKey
from tokensvc.scram.changes import CredentialChange
from tokensvc.scram.formatter import ScramCredential, ScramMechanism

if TYPE_CHECKING:
    from tokensvc.audit.writer import AuditLog
    from tokensvc.broker.context import RequestContext
    from tokensvc.broker.metrics import BrokerMetrics
    from tokensvc.core.cache import TokenCache
    from tokensvc.core.config import BrokerConfig
    from tokensvc.core.manager import TokenManager
    from tokensvc.core.quotas import QuotaConfigs

CLUSTER_RESOURCE = "kafka-cluster"
CREATE_DELEGATION_TOKEN = int(ApiKey.CREATE_DELEGATION_TOKEN)
RENEW_DELEGATION_TOKEN = int(ApiKey.RENEW_DELEGATION_TOKEN)
EXPIRE_DELEGATION_TOKEN = int(ApiKey.EXPIRE_DELEGATION_TOKEN)
CREATE_ACLS = int(ApiKey.CREATE_ACLS)
DELETE_ACLS = int(ApiKey.DELETE_ACLS)
ALTER_USER_SCRAM_CREDENTIALS = int(ApiKey.ALTER_USER_SCRAM_CREDENTIALS)

# Deletes of one revocation in flight at once (4 group-commit transactions of 128).
REVOKE_WINDOW = 512
# Of those, started per turn of the event loop when a revocation begins.
REVOKE_START_SLICE = 32


# --- what the services need from ZooKeeper (implemented in zk/, faked in tests) --------


class TokenStoreWrites(Protocol):
    """Token writes are built here and committed by the write path's group commit
    (``commit_many`` of :class:`zk.token_store.TokenStore`)."""

    def create_write(self, info: TokenInformation, record: Any) -> Any: ...

    def update_write(self, info: TokenInformation, record: Any) -> Any: ...

    def delete_write(self, token_id: str, record: Any) -> Any: ...

    def get(self, token_id: str) -> TokenInformation | None: ...


class CredentialStoreWrites(Protocol):
    def alter_with_tokens(
        self, changes: Sequence[CredentialChange], *, guard: Any, record: Any,
        cascade: Callable[[str], list[str]] | None,
    ) -> tuple[dict[str, bool], list[int], list[int]]: ...

    def alter(
        self, changes: Sequence[CredentialChange], *, guard: Guard, record: Any
    ) -> tuple[dict[str, bool], list[int]]: ...


class AclStoreWrites(Protocol):
    def add(
        self, bindings: Sequence[AclBinding], *, guard: Guard, record: Any
    ) -> tuple[list[AclCreateResult], list[Version]]: ...

    def remove(
        self, filters: Sequence[AclBindingFilter], *, guard: Guard, record: Any
    ) -> tuple[list[AclDeleteResult], list[Version]]: ...


# --- the services ---------------------------------------------------------------------


class TokenService:
    """Token reads from this broker's cache, the rules, and the token write path."""

    def __init__(
        self,
        cache: TokenCache,
        manager: TokenManager,
        store: TokenStoreWrites,
        writes: WritePath,
    ) -> None:
        self._cache = cache
        self.manager = manager
        self._store = store
        self._writes = writes
        self._creating: dict[Any, int] = {}  # owner -> creates in flight (the limit)

    def by_hmac(self, hmac: bytes) -> DelegationToken | None:
        return self._cache.by_hmac(hmac)

    def info(self, token_id: str) -> TokenInformation | None:
        return self._cache.info(token_id)

    async def describe(self, principal: Any, owners: Any, may_describe: Callable[..., bool],
                       version: int, selector: Labels = NO_LABELS,
                       include_labels: bool = False) -> Any:
        """DescribeDelegationToken's selection and encoding through the cache's principal
        and label indexes, in slices that yield to the loop
        (:func:`tokensvc.broker.describe.describe_tokens`)."""
        return await describe_tokens(self._cache, principal, owners, may_describe, version,
                                     selector=selector, include_labels=include_labels)

    async def find(self, token_id: str) -> DelegationToken | None:
        """The token from the cache, else from ZooKeeper (then cached); None if gone."""
        token = self._cache.by_id(token_id) if token_id else None
        if token is None and token_id:
            info = await asyncio.to_thread(self._store.get, token_id)
            token = self._cache.upsert(info) if info is not None else None
        return token

    async def create(self, ctx: RequestContext, info: TokenInformation) -> None:
        record = self._writes.record(ctx, CREATE_DELEGATION_TOKEN, {"token_id": info.token_id})
        await self._writes.commit_token(ctx, self._store.create_write(info, record),
                                        info.token_id, info)

    async def update(self, ctx: RequestContext, info: TokenInformation, outcome: dict) -> None:
        api = EXPIRE_DELEGATION_TOKEN if ctx.api_key == EXPIRE_DELEGATION_TOKEN else RENEW_DELEGATION_TOKEN
        record = self._writes.record(ctx, api, outcome)
        await self._writes.commit_token(ctx, self._store.update_write(info, record),
                                        info.token_id, info)

    async def delete(self, ctx: RequestContext, info: TokenInformation, outcome: dict) -> None:
        record = self._writes.record(ctx, EXPIRE_DELEGATION_TOKEN, outcome)
        await self._writes.commit_token(ctx, self._store.delete_write(info.token_id, record),
                                        info.token_id, None)

    # -- revocation and the per-owner limit -----------------------------------------

    def owned_by(self, owner: Any) -> list[TokenInformation]:
        """The tokens ``owner`` owns, from the cache's principal index (not a scan)."""
        ids = self._cache.ids_of([owner])
        infos = (self._cache.info(token_id) for token_id in ids)
        return [i for i in infos if i is not None and i.owner == owner]

    async def naming(self, owner: Any, selector: Labels) -> list[TokenInformation]:
        """The tokens a revocation by owner and/or labels names: ``owner``'s (None: any
        owner) that carry every label of ``selector`` (empty: any labels), from the
        cache's indexes (not a scan), looked up on the event loop in slices of its time: a
        revocation may name tens of thousands of tokens (looking up ten thousand in one
        step held the controller's loop for 15-30 ms). A token removed meanwhile is left
        out."""
        ids, keep = self._selection(owner, selector)
        return await sliced_filter(ids, keep)

    def _selection(self, owner: Any, selector: Labels
                   ) -> tuple[set[str], Callable[[str], TokenInformation | None]]:
        """The ids the indexes give (a copy), and the check of each one's details."""
        info = self._cache.info
        if not selector:
            def owned(token_id: str) -> TokenInformation | None:
                found = info(token_id)
                return found if found is not None and found.owner == owner else None
            return self._cache.ids_of([owner]), owned

        def labelled(token_id: str) -> TokenInformation | None:
            found = info(token_id)
            return found if found is not None and (owner is None or found.owner == owner) \
                else None
        return self._cache.ids_labelled(selector), labelled

    def owned_count(self, owner: Any) -> int:
        """Live tokens of ``owner`` in the cache plus its creates in flight."""
        return self._cache.owned_count(owner) + self._creating.get(owner, 0)

    def creating(self, owner: Any, delta: int) -> None:
        """Count a create of ``owner`` in flight (+1 before the commit, -1 after)."""
        count = self._creating.get(owner, 0) + delta
        if count > 0:
            self._creating[owner] = count
        else:
            self._creating.pop(owner, None)

    async def revoke(self, ctx: RequestContext,
                     infos: list[TokenInformation]) -> list[TokenInformation]:
        """Delete ``infos`` now: one delete write each, :data:`REVOKE_WINDOW` submitted at
        a time, so the group commit puts up to 128 of them in each ZooKeeper transaction.
        Returns the tokens deleted, in the order given (a token already gone is not). Each deletion is in this broker's cache
        when this returns (read-your-writes) and in the write ticket's committed states
        (for a forwarding broker); live sessions of the tokens are closed as for any
        removed token."""

        # REVOKE_WINDOW workers, each deleting the next token once its last delete is
        # committed, keep several full group-commit batches queued. Not one task per
        # token (starting ten thousand held the loop for a second), nor windows started
        # as a whole: the step that started the next 512 tasks was the longest of the
        # controller's loop in a revocation at 1M tokens (asyncio's slow-callback log,
        # docs/performance.md, B13). After a failure no worker starts another delete;
        # the writes already submitted finish.
        pending = iter(infos)
        deleted: set[str] = set()
        failed: list[BaseException] = []

        async def worker() -> None:
            for info in pending:
                if failed:
                    return
                try:
                    await self._writes.commit_token(
                        ctx, self._store.delete_write(info.token_id, None), info.token_id, None)
                except BaseException as exc:
                    failed.append(exc)
                    raise
                deleted.add(info.token_id)

        workers: list[asyncio.Future[None]] = []
        try:
            for n in range(min(REVOKE_WINDOW, len(infos))):
                workers.append(asyncio.ensure_future(worker()))
                if n % REVOKE_START_SLICE == REVOKE_START_SLICE - 1:
                    await asyncio.sleep(0)
            await asyncio.gather(*workers)
        except asyncio.CancelledError:
            for started in workers:  # (gather cancels them too, but not while starting)
                started.cancel()
            raise
        return await sliced_filter(infos, lambda info: info if info.token_id in deleted else None)

    async def record(self, ctx: RequestContext, outcome: dict) -> None:
        """Record a revocation's answer under its request key (a retry gets it back)."""
        await self._writes.record_alone(ctx, EXPIRE_DELEGATION_TOKEN, outcome)


class CredentialService:
    """SCRAM user credentials: reads from this broker's cache, and the write path."""

    def __init__(self, users: Any, store: CredentialStoreWrites, writes: WritePath,
                 follower_root: str = "credentials",
                 owned_tokens: Callable[[str], list[str]] | None = None) -> None:
        self._users = users
        self._store = store
        self._writes = writes
        self._root = follower_root
        # delegation.token.expire.with.owner: the tokens a deleted user owns (None: kept).
        self._owned_tokens = owned_tokens

    def users(self) -> list[str]:
        return self._users.users()

    def credentials(self, user: str) -> dict[ScramMechanism, ScramCredential]:
        return self._users.credentials(user)

    async def catch_up(self, timeout_s: float) -> bool:
        return await self._writes.catch_up(timeout_s)

    async def alter(
        self,
        ctx: RequestContext,
        changes: Sequence[CredentialChange],
        answer: Callable[[dict[str, bool]], dict],
    ) -> dict[str, bool]:
        """Apply ``changes`` in one transaction; ``answer(effects)`` is the response
        recorded with the request key. Returns ``{user: changed}``."""
        if not changes:
            await self._writes.record_alone(ctx, ALTER_USER_SCRAM_CREDENTIALS, answer({}))
            return {}

        def record(effects: dict[str, bool]) -> Any:
            return self._writes.record(ctx, ALTER_USER_SCRAM_CREDENTIALS, answer(effects))

        def alter(changes: Sequence[CredentialChange], *, guard: Guard, record: Any) -> Any:
            effects, sequences, token_sequences = self._store.alter_with_tokens(
                changes, guard=guard, record=record, cascade=self._owned_tokens)
            return effects, ([(self._root, s) for s in sequences]
                             + [(TOKENS_ROOT, s) for s in token_sequences])

        return await self._writes.commit(ctx, alter, list(changes),
                                         record=record if ctx.write else None)


class AclService:
    """ACLs: this broker's authorizer (reads) and the ACL write path."""

    def __init__(self, authorizer: AclAuthorizer | None, store: AclStoreWrites,
                 writes: WritePath) -> None:
        self._authorizer = authorizer
        self._store = store
        self._writes = writes

    @property
    def enabled(self) -> bool:
        return self._authorizer is not None

    @property
    def ready(self) -> bool:
        return self._authorizer is not None and self._authorizer.ready

    def describe(self, acl_filter: AclBindingFilter) -> list[AclBinding]:
        assert self._authorizer is not None
        return list(self._authorizer.describe(acl_filter))

    async def catch_up(self, timeout_s: float) -> bool:
        return await self._writes.catch_up(timeout_s)

    async def add(
        self, ctx: RequestContext, bindings: Sequence[AclBinding],
        answer: Callable[[list[AclCreateResult]], dict],
    ) -> list[AclCreateResult]:
        def record(results: list[AclCreateResult]) -> Any:
            return self._writes.record(ctx, CREATE_ACLS, answer(results))

        return await self._writes.commit(ctx, self._store.add, list(bindings),
                                         record=record if ctx.write else None)

    async def remove(
        self, ctx: RequestContext, filters: Sequence[AclBindingFilter],
        answer: Callable[[list[AclDeleteResult]], dict],
    ) -> list[AclDeleteResult]:
        def record(results: list[AclDeleteResult]) -> Any:
            return self._writes.record(ctx, DELETE_ACLS, answer(results))

        return await self._writes.commit(ctx, self._store.remove, list(filters),
                                         record=record if ctx.write else None)


class Authorization:
    """The authorizer facade handlers use (AUTHORIZER_NOT_READY while ACLs load)."""

    def __init__(self, authorizer: AclAuthorizer | None, super_users: Iterable[Any]) -> None:
        self._authorizer = authorizer
        self._super_users = frozenset(super_users)

    def authorize(
        self, ctx: RequestContext, operation: AclOperation, resource_type: ResourceType, name: str
    ) -> bool:
        if self._authorizer is None:
            return True
        principal = ctx.principal.without_token_flag()
        if not self._authorizer.ready:
            if principal in self._super_users:
                return True
            raise KafkaError(AUTHORIZER_NOT_READY, "the authorizer is still loading ACLs; retry")
        return self._authorizer.authorize(principal, ctx.client_host, operation, resource_type,
                                          name)

    def allows_everything(self, ctx: RequestContext) -> bool:
        """True when every :meth:`authorize` of this session is True whatever it asks
        (no authorizer, or a super user): a describe then asks nothing per token."""
        return self._authorizer is None or ctx.principal.without_token_flag() in self._super_users

    def cluster_operations(self, ctx: RequestContext) -> int:
        if self._authorizer is None:
            return ALL_OPERATIONS_BITFIELD(ResourceType.CLUSTER)
        return self._authorizer.authorized_operations_bitfield(
            ctx.principal.without_token_flag(), ctx.client_host, ResourceType.CLUSTER,
            CLUSTER_RESOURCE,
        )


class ClusterView(Protocol):
    """What handlers may know about the cluster."""

    @property
    def cluster_id(self) -> str: ...

    @property
    def is_controller(self) -> bool: ...

    def controller_id(self) -> int | None: ...

    def broker_endpoints(self, listener: str) -> dict[int, tuple[str, int]]: ...


class AuthService(Protocol):
    """What the SASL handlers need beyond config, clock, audit and metrics."""

    credentials: Any
    fake_salt_secret: bytes
    fingerprint_key: bytes
    repeated_nonce_notices: Any
    sessions: Any
    freshness: Any  # FreshnessGate: fresh(), catch_up(timeout_s)
    clock_gate: Any  # ClockGate | None: refusal() while the clock is not trusted
    derivations: Any  # DerivationPool: run(derivation) off the event loop
    oauth: Any  # OAuthAuthenticator | None: authenticate(jwt) -> Identity (OAUTHBEARER)

    def session_lifetime_ms(self, server: Any) -> int: ...


class Ledger(Protocol):
    """The controller's exactly-once ledger (:class:`tokensvc.broker.writes.ledger.WriteLedger`)."""

    async def apply(self, services: Services, ctx: RequestContext,
                    body: dict) -> tuple[bytes, int]: ...

    def writes_api(self, api_key: int) -> bool: ...

    def valid_key(self, key: str) -> bool: ...


@dataclass(frozen=True)
class Services:
    """Everything a handler may use. Built once per broker (:mod:`tokensvc.broker.assembly`)."""

    config: BrokerConfig
    clock: Clock
    audit: AuditLog
    metrics: BrokerMetrics
    authz: Authorization
    tokens: TokenService
    credentials: CredentialService
    acls: AclService
    cluster: ClusterView
    auth: AuthService
    ledger: Ledger | None = None
    # Kafka's quota znodes, read for DescribeClientQuotas (None: not served).
    quotas: QuotaConfigs | None = None
