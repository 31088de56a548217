"""One broker: wires the pure core to ZooKeeper, the network and the audit log.

Owns the broker's lifecycle (start, ready, stop) and the services handlers
call: the token cache and rules, user credentials, the authorizer, the
controller's write path (``write_token``/``delete_token``/credentials/ACLs, each
guarded by this broker's ``/controller`` znode version so a deposed
controller cannot write), forwarding of writes by non-controllers, and audit.

Start-up order: ZooKeeper session → ``early.start.listeners`` open → token,
credential and ACL caches loaded (authorizer ready) → election and expiry
sweep → the other listeners open → registration under ``/brokers/ids``.
Blocking ZooKeeper calls run in worker threads, never on the event loop.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import secrets
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from tokensvc.audit.writer import AuditLog
from tokensvc.authz.acl import (
    AclBinding,
    AclBindingFilter,
    AclCreateResult,
    AclDeleteResult,
    AclOperation,
    ResourcePattern,
    ResourceType,
)
from tokensvc.authz.authorizer import ALL_OPERATIONS_BITFIELD, AclAuthorizer
from tokensvc.broker.context import RequestContext
from tokensvc.broker.handlers import HANDLERS, sasl
from tokensvc.broker.handlers.sasl import HostNoticeLimiter
from tokensvc.broker.metrics import BrokerMetrics
from tokensvc.broker.server import BrokerServer
from tokensvc.broker.session import Session
from tokensvc.broker.sessions import SessionRegistry
from tokensvc.core.cache import TokenCache
from tokensvc.core.clock import Clock, SystemClock
from tokensvc.core.config import BrokerConfig
from tokensvc.core.errors import AUTHORIZER_NOT_READY, Errors, KafkaError
from tokensvc.core.keys import AUDIT_FINGERPRINT_LABEL, SCRAM_SALT_LABEL, derived_secret
from tokensvc.core.manager import TokenManager
from tokensvc.core.token import TokenInformation
from tokensvc.protocol import encode_response
from tokensvc.scram.formatter import ScramCredential, ScramMechanism, TokenSalt
from zk.acl_store import AclStore, AclSync
from zk.brokers import BrokerRegistry
from zk.client import ZkSettings, open_client
from zk.credential_store import CredentialStore, CredentialSync, UserCredentialCache
from zk.election import ControllerElection
from zk.expiry import ExpirySweeper
from zk.sync import TokenSync
from zk.token_store import StoreUnavailable, TokenStore

log = logging.getLogger("tokensvc.broker")

CLUSTER_RESOURCE = "kafka-cluster"


class _Credentials:
    """The SCRAM server's CredentialLookup: users from ZooKeeper, tokens from the cache."""

    def __init__(self, users: UserCredentialCache, tokens: TokenCache, enabled: bool) -> None:
        self._users = users
        self._tokens = tokens
        self._enabled = enabled

    def user_credential(self, username: str, mechanism: ScramMechanism) -> ScramCredential | None:
        return self._users.user_credential(username, mechanism)

    def token_salt(self, token_id: str, mechanism: ScramMechanism) -> TokenSalt | None:
        found = self._tokens.scram_salt(token_id, mechanism)
        return found if self._enabled else None

    def token_credential(self, token_id: str, mechanism: ScramMechanism):
        if not self._enabled:
            return None
        return self._tokens.scram_credential(token_id, mechanism)

    def derived_count(self) -> int:
        return self._tokens.derived_count()


def _fake_salt_secret(config: BrokerConfig) -> bytes:
    """A secret every broker of the cluster shares, for the salts of tokens and unknown names.

    Brokers must agree, or comparing salts for one name across two brokers
    would tell unknown names from real ones. It is the secret the token cache
    derives token salts with (:func:`~tokensvc.core.keys.derived_secret` of the
    master key), so a token and an unknown name get salts alike; or, with tokens disabled, a hash of the shared ZooKeeper
    connect string; it never leaves the broker.
    """
    secret = derived_secret(config.master_keys, SCRAM_SALT_LABEL)
    if secret is not None:
        return secret
    return hashlib.sha256(f"{SCRAM_SALT_LABEL}|{config.zookeeper_connect}".encode()).digest()


def _audit_fingerprint_key(config: BrokerConfig) -> bytes:
    """The key of the audit fingerprints of unknown names: derived from the master key,
    so every broker agrees; a per-process random key when tokens are disabled (there
    is then no shared secret, and a guessable key would let a log reader test guesses)."""
    return derived_secret(config.master_keys, AUDIT_FINGERPRINT_LABEL) or secrets.token_bytes(32)


class Broker:
    def __init__(self, config: BrokerConfig, *, clock: Clock | None = None) -> None:
        self.config = config
        self.broker_id = config.broker_id
        self.clock = clock or SystemClock()
        self.metrics = BrokerMetrics()
        self.cache = TokenCache(config.master_keys)
        self.manager = TokenManager(
            config.master_keys,
            max_lifetime_ms=config.delegation_token_max_lifetime_ms,
            renew_period_ms=config.delegation_token_expiry_time_ms,
            clock=self.clock,
            id_taken=lambda token_id: bool(self.users.credentials(token_id)),
        )
        self.fake_salt_secret = _fake_salt_secret(config)
        self.audit_fingerprint_key = _audit_fingerprint_key(config)
        self.repeated_nonce_notices = HostNoticeLimiter()
        self.users = UserCredentialCache()
        self.credentials = _Credentials(self.users, self.cache, config.master_keys.enabled)
        self.authorizer: AclAuthorizer | None = None
        if config.authorizer_class_name:
            self.authorizer = AclAuthorizer(
                config.super_users, allow_everyone_if_no_acl_found=config.allow_everyone_if_no_acl_found
            )
        self.audit = (
            AuditLog(
                config.audit_log_dir,
                self.broker_id,
                queue_size=config.audit_queue_size,
                max_file_bytes=config.audit_file_max_bytes,
                rotate_interval_ms=config.audit_file_rotate_ms,
            )
            if config.audit_log_dir
            else AuditLog.disabled()
        )
        self.server: BrokerServer | None = None  # needs the session registry
        self.sessions: SessionRegistry | None = None  # needs the running loop
        self.forwarder = None
        self.cluster_id = config.cluster_id or ""
        self._zk = None
        self._started = False

    # -- lifecycle ----------------------------------------------------------

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self.sessions = SessionRegistry(
            loop,
            reauth_ms=self.config.connections_max_reauth_ms,
            on_revoked=self._audit_revoked,
            clock=self.clock,
        )
        self.cache.add_listener(self.sessions.on_token_change)

        async def raw_sasl(session: Session, payload: bytes) -> bytes:
            return (await sasl.evaluate(self, session, payload))[0]

        self.server = BrokerServer(
            self.config,
            dispatch=self.dispatch,
            raw_sasl=raw_sasl,
            handshake=lambda session, mechanism, version: sasl.begin_handshake(
                self, session, mechanism, version
            ),
            sessions=self.sessions,
            metrics=self.metrics,
            clock=self.clock,
            on_session_expired=self.on_session_expired,
            api_name=self.api_name,
        )
        self.audit.start()
        settings = ZkSettings(
            self.config.zookeeper_connect,
            session_timeout_ms=self.config.zookeeper_session_timeout_ms,
            connection_timeout_ms=self.config.zookeeper_connection_timeout_ms,
            digest=self.config.zookeeper_digest,
        )
        self._zk = await asyncio.to_thread(open_client, settings)
        zk = self._zk
        self.token_store = TokenStore(zk)
        self.credential_store = CredentialStore(zk)
        self.acl_store = AclStore(zk)
        self.registry = BrokerRegistry(zk)
        await asyncio.to_thread(self.token_store.ensure_paths)
        if not self.cluster_id:
            self.cluster_id = await asyncio.to_thread(self.registry.cluster_id)

        early = [lst for lst in self.config.listeners if lst.name in self.config.early_start_listeners]
        await self.server.open(early)

        self.token_sync = TokenSync(zk, self.token_store, self.cache)
        self.credential_sync = CredentialSync(zk, self.credential_store, self.users)
        await asyncio.to_thread(self.token_sync.start)
        await asyncio.to_thread(self.credential_sync.start)
        if self.authorizer is not None:
            self.acl_sync = AclSync(zk, self.acl_store, self.authorizer)
            await asyncio.to_thread(self.acl_sync.start)
        else:
            self.acl_sync = None

        self.election = ControllerElection(zk, self.broker_id, on_change=self._controller_changed)
        await asyncio.to_thread(self.election.start)
        self.sweeper = ExpirySweeper(
            self.token_store,
            self.cache,
            self.election,
            self.clock,
            interval_ms=self.config.delegation_token_expiry_check_interval_ms,
            on_removed=self._audit_swept,
        )
        self.sweeper.start()
        self._register_gauges()
        if self.config.metrics_listener:
            host, port = self.config.metrics_listener
            self.metrics_address = await asyncio.to_thread(self.metrics.serve, host, port)
            log.info("metrics on http://%s:%d/metrics", *self.metrics_address)

        from tokensvc.broker.forwarding import EnvelopeForwarder

        self.forwarder = EnvelopeForwarder(self)
        await self.server.open(self.config.listeners)
        endpoints = {
            lst.name: (lst.security_protocol, *self.server.addresses[lst.name])
            for lst in self.config.listeners
        }
        advertised = self.config.advertised_listeners or []
        for lst in advertised:
            if lst.name in endpoints:
                endpoints[lst.name] = (lst.security_protocol, lst.host, lst.port)
        await asyncio.to_thread(self.registry.register, self.broker_id, endpoints)
        await asyncio.to_thread(self.registry.start)
        self._started = True
        log.info("broker %d started; controller is %s", self.broker_id, self.controller_id())

    async def stop(self) -> None:
        log.info("broker %d stopping", self.broker_id)
        if self.server is not None:
            await self.server.close()
        if self.forwarder is not None:
            await self.forwarder.close()
        for part in ("sweeper", "election", "registry", "acl_sync", "credential_sync", "token_sync"):
            obj = getattr(self, part, None)
            if obj is not None:
                await asyncio.to_thread(obj.close)
        if self._zk is not None:
            await asyncio.to_thread(self._close_zk)
        self.metrics.close()
        self.audit.close()

    def _close_zk(self) -> None:
        self._zk.stop()
        self._zk.close()

    def _register_gauges(self) -> None:
        m = self.metrics
        m.gauge("tokensvc_token_cache_size", "Tokens in this broker's cache", lambda: len(self.cache))
        m.gauge("tokensvc_derived_credentials", "Token SCRAM credentials derived so far",
                self.cache.derived_count)
        m.gauge("tokensvc_cache_resyncs", "Full token cache resynchronisations",
                lambda: self.token_sync.resync_count)
        m.gauge("tokensvc_cache_last_resync_seconds", "Duration of the last full resync",
                lambda: (self.token_sync.last_resync_ms or 0) / 1000.0)
        m.gauge("tokensvc_controller", "1 if this broker is the controller",
                lambda: 1.0 if self.is_controller else 0.0)
        m.gauge("tokensvc_expiry_sweeps", "Expiry sweeps run by this broker", lambda: self.sweeper.sweeps)
        m.gauge("tokensvc_audit_queue_depth", "Audit events waiting to be written",
                lambda: self.audit.queue_depth)
        m.gauge("tokensvc_audit_dropped", "Audit events dropped because the queue was full",
                lambda: self.audit.dropped)
        m.gauge("tokensvc_acl_count", "ACL entries loaded in the authorizer",
                lambda: self.authorizer.acl_count if self.authorizer else 0)
        m.gauge("tokensvc_sessions", "Authenticated client sessions", lambda: self.sessions.count())
        m.gauge("tokensvc_token_sessions", "Connections logged in with a token",
                lambda: self.sessions.token_sessions())

    # -- controller ---------------------------------------------------------

    @property
    def is_controller(self) -> bool:
        election = getattr(self, "election", None)
        return bool(election and election.is_controller)

    def controller_id(self) -> int | None:
        election = getattr(self, "election", None)
        return election.controller_id() if election else None

    def _controller_changed(self, controller: int | None, is_me: bool) -> None:
        log.info("controller is now %s%s", controller, " (this broker)" if is_me else "")

    def broker_endpoints(self, listener: str) -> dict[int, tuple[str, int]]:
        result = {}
        # Until this broker has registered and follows /brokers/ids (early-start
        # listeners during loading), it only knows its own endpoints.
        registered = self.registry.brokers().items() if self._started else ()
        for bid, info in registered:
            endpoint = info.get("endpoints", {}).get(listener)
            if endpoint:
                result[bid] = (endpoint[1], endpoint[2])
        if self.broker_id not in result and listener in self.server.addresses:
            result[self.broker_id] = self.server.addresses[listener]
        return result

    # -- authorization --------------------------------------------------------

    def authorize(
        self, ctx: RequestContext, operation: AclOperation, resource_type: ResourceType, name: str
    ) -> bool:
        if self.authorizer is None:
            return True
        principal = ctx.principal.without_token_flag()
        if not self.authorizer.ready:
            if principal in self.config.super_users:
                return True
            raise KafkaError(AUTHORIZER_NOT_READY, "the authorizer is still loading ACLs; retry")
        return self.authorizer.authorize(principal, ctx.client_host, operation, resource_type, name)

    def cluster_authorized_operations(self, ctx: RequestContext) -> int:
        if self.authorizer is None:
            return ALL_OPERATIONS_BITFIELD(ResourceType.CLUSTER)
        return self.authorizer.authorized_operations_bitfield(
            ctx.principal.without_token_flag(), ctx.client_host, ResourceType.CLUSTER, CLUSTER_RESOURCE
        )

    # -- request dispatch -----------------------------------------------------

    @staticmethod
    def api_name(api_key: int) -> str:
        handler = HANDLERS.get(api_key)
        return handler.name if handler else str(api_key)

    async def dispatch(self, ctx: RequestContext, body: dict) -> tuple[bytes, int]:
        """Handle one request; returns the encoded response and its top-level error code."""
        handler = HANDLERS.get(ctx.api_key)
        if handler is None:
            raise KafkaError(Errors.UNSUPPORTED_VERSION, f"api {ctx.api_key} is not served")
        version = ctx.api_version
        try:
            if handler.write and not ctx.forwarded and not self.is_controller:
                refused = handler.precheck(self, ctx, body) if handler.precheck else None
                if refused is not None:
                    return encode_response(ctx.header, refused), refused.get("ErrorCode", 0)
                if self.forwarder is None:  # still starting: the client retries
                    raise KafkaError(Errors.NOT_CONTROLLER, "the broker is still starting")
                return await self.forwarder.forward(ctx, handler)
            response = await handler.handle(self, ctx, body)
        except KafkaError as exc:
            response = handler.error_body(version, exc.error)
        except Exception:
            log.exception("%s failed", handler.name)
            response = handler.error_body(version, Errors.UNKNOWN_SERVER_ERROR)
        return encode_response(ctx.header, response), int(response.get("ErrorCode", 0) or 0)

    # -- controller write path -------------------------------------------------

    def _require_controller(self) -> tuple[str, int]:
        guard = self.election.guard() if self.is_controller else None
        if guard is None:
            raise KafkaError(Errors.NOT_CONTROLLER)
        return guard

    async def _write(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        guard = self._require_controller()
        try:
            return await asyncio.to_thread(fn, *args, guard=guard, **kwargs)
        except StoreUnavailable as exc:
            raise KafkaError(Errors.REQUEST_TIMED_OUT, f"ZooKeeper unavailable: {exc}") from exc

    def request_key(self, ctx: RequestContext) -> str | None:
        return getattr(ctx, "request_key", None)

    async def write_token(
        self, info: TokenInformation, *, create: bool = False, request_key: str | None = None
    ) -> None:
        """Write ``info`` under the controller guard, then cache it. A create with a
        ``request_key`` records the key in the same transaction (exactly-once create);
        an already recorded key raises ``RequestKeyExistsError`` and writes nothing."""
        if create:
            await self._write(self.token_store.create, info, request_key=request_key)
        else:
            await self._write(self.token_store.update, info)
        self.cache.upsert(info)

    async def delete_token(self, info: TokenInformation) -> None:
        await self._write(self.token_store.delete, info.token_id)
        self.cache.remove(info.token_id)

    async def upsert_credential(
        self, user: str, mechanism: ScramMechanism, credential: ScramCredential
    ) -> None:
        await self._write(self.credential_store.upsert, user, mechanism, credential)
        self.users.put(user, mechanism, credential)

    async def delete_credential(self, user: str, mechanism: ScramMechanism) -> bool:
        removed = await self._write(self.credential_store.delete, user, mechanism)
        self.users.discard(user, mechanism)
        return bool(removed)

    async def add_acls(self, bindings: Sequence[AclBinding]) -> list[AclCreateResult]:
        """Write ACLs under the controller guard (one result per binding), then apply the
        resources they touched to this broker's authorizer before returning."""
        results = await self._write(self.acl_store.add, list(bindings))
        await self._reload_acls(r.binding.pattern for r in results if r.error == Errors.NONE)
        return results

    async def remove_acls(self, filters: Sequence[AclBindingFilter]) -> list[AclDeleteResult]:
        """Delete the ACLs each filter matches under the controller guard, then apply the
        resources they touched to this broker's authorizer before returning."""
        results = await self._write(self.acl_store.remove, list(filters))
        await self._reload_acls(b.pattern for r in results for b in r.deleted)
        return results

    async def _reload_acls(self, patterns: Iterable[ResourcePattern]) -> None:
        # Re-read from ZooKeeper: the znode, not this request, is the resource's state.
        # AclSync applies the same notifications later; re-reading makes that idempotent.
        wanted = set(patterns)
        if self.authorizer is None or not wanted:
            return
        try:
            loaded = await asyncio.to_thread(
                lambda: {p: self.acl_store.load_resource(p) for p in wanted}
            )
        except KafkaError as exc:
            log.warning("ACLs written; applying them here waits for the sync: %s", exc)
            return
        for pattern, entries in loaded.items():
            self.authorizer.apply_resource(pattern, entries)

    # -- sessions -------------------------------------------------------------

    def session_lifetime_ms(self, server) -> int:
        reauth = self.config.connections_max_reauth_ms
        if server.token_id is None:
            return reauth
        info = server.token_info
        left = max(1, min(info.expiry_timestamp, info.max_timestamp) - self.clock.now_ms())
        return min(left, reauth) if reauth > 0 else left

    def on_session_expired(self, session: Session) -> None:
        self.audit.emit(
            "session",
            action="expired",
            principal=str(session.principal),
            token_id=session.token_id,
            client_host=session.client_host,
            listener=session.listener,
            reason="session lifetime over without re-authentication",
        )

    def _audit_revoked(self, session: Session, reason: str) -> None:
        self.metrics.sessions_revoked.inc()
        self.audit.emit(
            "session",
            action="revoked",
            principal=str(session.principal),
            token_id=session.token_id,
            client_host=session.client_host,
            listener=session.listener,
            reason=reason,
        )

    def _audit_swept(self, info: TokenInformation, reason: str) -> None:
        self.metrics.sweep_removed.inc()
        self.audit.emit(
            "sweep",
            token_id=info.token_id,
            owner=str(info.owner),
            expiry_ms=info.expiry_timestamp,
            max_ms=info.max_timestamp,
            reason=reason,
        )


async def run_broker(config: BrokerConfig, stop: asyncio.Event) -> None:
    broker = Broker(config)
    start = time.monotonic()
    await broker.start()
    log.info("broker %d ready in %.2fs", config.broker_id, time.monotonic() - start)
    try:
        await stop.wait()
    finally:
        await broker.stop()
