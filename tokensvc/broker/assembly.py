"""The broker's assembly: every part built once, in dependency order, as frozen objects.

Owns two builders and what they return:

* :func:`build_local` -> :class:`LocalParts`: what a broker holds before it is
  connected to anything (no event loop, no ZooKeeper): the cluster's clock, metrics,
  the token cache and rules, the user credential cache, the authorizer, the audit log,
  the cache snapshot file, the SCRAM derivation pool and the secrets every broker of
  the cluster derives alike. ``Broker.__init__`` builds it; a test may attach a
  listener to it before the broker starts.
* :func:`assemble` -> :class:`BrokerParts`: everything that needs the running loop or
  the ZooKeeper session, in this order: the clock gate (measured once and started
  before anything is built on the clock; :mod:`tokensvc.broker.gates.clockskew`), the
  stores and their paths, the cluster id, the election (not started), the three syncs
  (not started), the write path and its group commit, the freshness gate, the
  services handlers get, the exactly-once ledger, the forwarder, the expiry sweeper,
  the znode ACL check, the dispatcher and the socket server (no listener open). Its
  only ZooKeeper calls are the clock gate's samples, the paths it makes sure of and
  the cluster id it reads.

Must not: start anything but the clock gate, open a listener, or decide an order of
start-up or shutdown: :class:`tokensvc.broker.broker.Broker` does, on these parts.
"""

from __future__ import annotations

import asyncio
import hashlib
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tokensvc.audit.writer import AuditLog
from tokensvc.authz.authorizer import AclAuthorizer
from tokensvc.broker.dispatch import Dispatcher, clock_refusal
from tokensvc.broker.gates.clockskew import ClockGate
from tokensvc.broker.gates.freshness import FreshnessGate
from tokensvc.broker.handlers import HANDLERS, sasl
from tokensvc.broker.handlers.sasl import HostNoticeLimiter
from tokensvc.broker.loop.loopwatch import StallMeter
from tokensvc.broker.metrics import BrokerMetrics
from tokensvc.broker.network.server import BrokerServer
from tokensvc.broker.services import (
    AclService,
    Authorization,
    CredentialService,
    Services,
    TokenService,
)
from tokensvc.broker.sessions.derivations import DerivationPool
from tokensvc.broker.sessions.events import audit_session
from tokensvc.broker.sessions.registry import SessionRegistry
from tokensvc.broker.sessions.session import Session
from tokensvc.broker.writes.forwarding import EnvelopeForwarder
from tokensvc.broker.writes.groupcommit import GroupCommit
from tokensvc.broker.writes.ledger import WriteLedger
from tokensvc.broker.writes.path import WritePath
from tokensvc.core.cache import TokenCache
from tokensvc.core.clock import Clock, CorrectedClock
from tokensvc.core.clocksync import ClusterTimeEstimator
from tokensvc.core.config import OAUTH_MAPPINGS_FILE, OAUTHBEARER, BrokerConfig, ConfigError
from tokensvc.core.keys import AUDIT_FINGERPRINT_LABEL, SCRAM_SALT_LABEL, derived_secret
from tokensvc.core.manager import TokenManager
from tokensvc.core.principal import KafkaPrincipal
from tokensvc.core.token import TokenInformation
from tokensvc.oauth.authenticator import OAuthAuthenticator, OAuthConfigError, OAuthSettings
from tokensvc.scram.formatter import ScramCredential, ScramMechanism, TokenSalt
from tokensvc.snapshot.files import SnapshotFile
from zk.acl_check import ZnodeAclCheck
from zk.acl_store import AclStore
from zk.acl_sync import AclSync
from zk.brokers import BrokerRegistry
from zk.clock import ClockProbe
from zk.credential_store import CredentialStore
from zk.credential_sync import CredentialSync, UserCredentialCache
from zk.election import ControllerElection
from zk.errors import StoreUnavailable
from zk.expiry import ExpirySweeper
from zk.kraft import KraftMigrationWatch
from zk.layout import coordination
from zk.notifications import Purge, VersionWaiter
from zk.quota_store import QuotaStore
from zk.requests import RequestKeyExistsError, RequestRecords, valid_request_key
from zk.token_store import TokenStore
from zk.token_sync import TokenSync

Addresses = dict[str, tuple[str, int]]


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


# -- before the broker is connected ------------------------------------------------------------


@dataclass(frozen=True)
class LocalParts:
    """What a broker holds before it has a loop or a ZooKeeper session (see the module)."""

    clock: Clock
    metrics: BrokerMetrics
    stall_meter: StallMeter
    cache: TokenCache
    manager: TokenManager
    users: UserCredentialCache
    credentials: _Credentials
    authorizer: AclAuthorizer | None
    audit: AuditLog
    snapshot_file: SnapshotFile | None
    derivations: DerivationPool
    fake_salt_secret: bytes
    audit_fingerprint_key: bytes
    repeated_nonce_notices: HostNoticeLimiter
    oauth: OAuthAuthenticator | None = None


def build_local(config: BrokerConfig, clock: Clock | None = None) -> LocalParts:
    """The broker's local parts. ``clock``: a test's clock, used as it is (unmeasured);
    by default the cluster's time (issue #36): the wall clock corrected by its offset
    from ZooKeeper's time, measured by the clock gate from start on."""
    clock = clock or CorrectedClock(ClusterTimeEstimator())
    metrics = BrokerMetrics()
    # The stall meter (event-loop lag, GIL hold): its thread starts with the loop.
    stall_meter = StallMeter(config.metrics_stall_sample_interval_ms / 1000.0)
    metrics.stalls(stall_meter)
    cache = TokenCache(config.master_keys)
    users = UserCredentialCache()
    manager = TokenManager(
        config.master_keys,
        max_lifetime_ms=config.delegation_token_max_lifetime_ms,
        renew_period_ms=config.delegation_token_expiry_time_ms,
        clock=clock,
        id_taken=lambda token_id: bool(users.credentials(token_id)),
    )
    authorizer = (
        AclAuthorizer(config.super_users,
                      allow_everyone_if_no_acl_found=config.allow_everyone_if_no_acl_found)
        if config.authorizer_class_name
        else None
    )
    audit = (
        AuditLog(
            config.audit_log_dir,
            config.broker_id,
            queue_size=config.audit_queue_size,
            max_file_bytes=config.audit_file_max_bytes,
            rotate_interval_ms=config.audit_file_rotate_ms,
            clock=clock,  # events stamped with the cluster's time
            required=config.audit_required,
            reserve_bytes=config.audit_required_reserve_bytes,
        )
        if config.audit_log_dir
        else AuditLog.disabled()
    )
    # The token cache snapshot (token.cache.snapshot.dir): loaded by the token sync's
    # first load, written by its own thread (tokensvc.snapshot).
    snapshot_file = (
        SnapshotFile(
            config.token_cache_snapshot_dir,
            on_load=lambda result: metrics.snapshot_loads.labels(result).inc(),
            on_write=lambda result: metrics.snapshot_writes.labels(result).inc(),
        )
        if config.token_cache_snapshot_dir
        else None
    )
    return LocalParts(
        oauth=_oauth(config, clock),
        clock=clock,
        metrics=metrics,
        stall_meter=stall_meter,
        cache=cache,
        manager=manager,
        users=users,
        credentials=_Credentials(users, cache, config.master_keys.enabled),
        authorizer=authorizer,
        audit=audit,
        snapshot_file=snapshot_file,
        derivations=DerivationPool(),
        fake_salt_secret=_fake_salt_secret(config),
        audit_fingerprint_key=_audit_fingerprint_key(config),
        repeated_nonce_notices=HostNoticeLimiter(),
    )


# -- the views handlers get ----------------------------------------------------------------------


class _Cluster:
    """The ClusterView handlers get: cluster id, controller and endpoints."""

    def __init__(self, cluster_id: str, broker_id: int, election: ControllerElection,
                 registry: BrokerRegistry, addresses: Addresses,
                 registered: Callable[[], bool]) -> None:
        self.cluster_id = cluster_id
        self._broker_id = broker_id
        self._election = election
        self._registry = registry
        self._addresses = addresses
        self._registered = registered

    @property
    def is_controller(self) -> bool:
        return self._election.is_controller

    def controller_id(self) -> int | None:
        return self._election.controller_id()

    def broker_endpoints(self, listener: str) -> dict[int, tuple[str, int]]:
        result = {}
        # Until this broker has registered and follows /brokers/ids (early-start
        # listeners during loading), it only knows its own endpoints.
        registered = self._registry.brokers().items() if self._registered() else ()
        for bid, info in registered:
            endpoint = info.get("endpoints", {}).get(listener)
            if endpoint:
                result[bid] = (endpoint[1], endpoint[2])
        if self._broker_id not in result and listener in self._addresses:
            result[self._broker_id] = self._addresses[listener]
        return result


def _oauth(config: BrokerConfig, clock: Clock) -> OAuthAuthenticator | None:
    """The OAUTHBEARER authenticator when the mechanism is enabled (reads the mappings
    file and any JWKS file now: a problem stops the start, naming the key)."""
    if OAUTHBEARER not in config.sasl_enabled_mechanisms:
        return None
    try:
        return OAuthAuthenticator(OAuthSettings.from_config(config), clock)
    except OAuthConfigError as exc:
        raise ConfigError(OAUTH_MAPPINGS_FILE, str(exc)) from None


@dataclass(frozen=True)
class _Auth:
    """The AuthService the SASL handlers get."""

    credentials: _Credentials
    fake_salt_secret: bytes
    fingerprint_key: bytes
    repeated_nonce_notices: HostNoticeLimiter
    derivations: DerivationPool
    sessions: SessionRegistry
    freshness: FreshnessGate
    clock_gate: ClockGate | None
    session_lifetime_ms: Callable[[Any], int]
    oauth: OAuthAuthenticator | None = None


def _session_lifetime(config: BrokerConfig, clock: Clock) -> Callable[[Any], int]:
    """A login's session lifetime (KIP-368): ``connections.max.reauth.ms``, and for a
    token login at most the time left before the token's expiry or maximum."""

    def lifetime_ms(server: Any) -> int:
        reauth = config.connections_max_reauth_ms
        if server.token_id is None:
            return reauth
        info = server.token_info
        left = max(1, min(info.expiry_timestamp, info.max_timestamp) - clock.now_ms())
        return min(left, reauth) if reauth > 0 else left

    return lifetime_ms


def _endpoint_of(registry: BrokerRegistry) -> Callable[[int, str], tuple[str, str, int] | None]:
    """The forwarder's look-up of a broker's endpoint on a listener, from /brokers/ids."""

    def endpoint(broker_id: int, listener: str) -> tuple[str, str, int] | None:
        info = registry.brokers().get(broker_id)
        if not info or listener not in info.get("endpoints", {}):
            return None
        protocol, host, port = info["endpoints"][listener]
        return protocol, host, port

    return endpoint


def _owned_token_ids(cache: TokenCache) -> Callable[[str], list[str]]:
    """Ids of the tokens ``User:user`` owns (the cascade of a deleted user)."""

    def owned(user: str) -> list[str]:
        owner = KafkaPrincipal.user(user)
        return sorted(t for t in cache.ids_of([owner])
                      if (info := cache.info(t)) is not None and info.owner == owner)

    return owned


# -- once the loop runs and ZooKeeper is connected ---------------------------------------------


@dataclass(frozen=True)
class BrokerParts:
    """Everything :func:`assemble` built; what ``Broker`` starts and stops."""

    cluster_id: str
    clock_gate: ClockGate | None
    sessions: SessionRegistry
    token_store: TokenStore
    credential_store: CredentialStore
    acl_store: AclStore
    records: RequestRecords
    registry: BrokerRegistry
    election: ControllerElection
    migration: KraftMigrationWatch | None
    token_sync: TokenSync
    credential_sync: CredentialSync
    acl_sync: AclSync | None
    group_commit: GroupCommit
    writes: WritePath
    freshness: FreshnessGate
    services: Services
    ledger: WriteLedger
    forwarder: EnvelopeForwarder
    sweeper: ExpirySweeper
    acl_check: ZnodeAclCheck
    dispatcher: Dispatcher
    server: BrokerServer


def _sweep_allowed(gate: ClockGate | None,
                   migrating: Callable[[], bool] | None) -> Callable[[], bool] | None:
    """Whether the expiry sweep may delete tokens now: on a trusted clock, and never once
    a Kafka KRaft migration has started (Kafka's controller owns the tokens then)."""
    if gate is None and migrating is None:
        return None

    def allowed() -> bool:
        if migrating is not None and migrating():
            return False
        return gate is None or gate.trusted()

    return allowed


async def _clock_gate(config: BrokerConfig, clock: Clock, zk: Any) -> ClockGate | None:
    """Measure the clock once before anything is built on it, then every few seconds
    (:mod:`tokensvc.broker.gates.clockskew`): no token login is decided on an unchecked
    clock. A failed first round leaves the clock UNCHECKED (token logins and writes
    refused, retriable) until a background round succeeds. None for a test's clock."""
    if not isinstance(clock, CorrectedClock):
        return None
    gate = ClockGate(clock, config.max_clock_skew_ms, ClockProbe(zk, config.broker_id).sample)
    await gate.measure()  # a failure is logged there; retried in the background
    gate.start()
    return gate


async def assemble(
    config: BrokerConfig,
    local: LocalParts,
    zk: Any,  # the KazooClient of zk.client.open_client
    *,
    registered: Callable[[], bool],
    forwarding: Callable[[], bool],
    on_controller_change: Callable[[int | None, bool], None],
) -> BrokerParts:
    """Build the broker's parts on the running loop and the connected ``zk``.

    ``registered()``: whether the broker is registered under ``/brokers/ids`` (until
    then it knows only its own endpoints); ``forwarding()``: whether writes may be
    forwarded yet (before, a non-controller answers NOT_CONTROLLER: the client
    retries). The clock gate is started here, and closed again if a later step fails.
    """
    gate = await _clock_gate(config, local.clock, zk)
    try:
        return await _assemble(config, local, zk, gate, registered=registered,
                               forwarding=forwarding, on_controller_change=on_controller_change)
    except BaseException:
        if gate is not None:
            await gate.close()
        raise


async def _assemble(
    config: BrokerConfig,
    local: LocalParts,
    zk: Any,
    gate: ClockGate | None,
    *,
    registered: Callable[[], bool],
    forwarding: Callable[[], bool],
    on_controller_change: Callable[[int | None, bool], None],
) -> BrokerParts:
    loop = asyncio.get_running_loop()
    clock, audit, metrics = local.clock, local.audit, local.metrics

    def on_revoked(session: Session, reason: str) -> None:
        metrics.sessions_revoked.inc()
        audit_session(audit, "revoked", session, reason)

    sessions = SessionRegistry(loop, reauth_ms=config.connections_max_reauth_ms,
                               on_revoked=on_revoked, clock=clock)
    local.cache.add_batch_listener(sessions.on_token_changes)
    local.users.add_listener(sessions.on_user_change)

    # Beside Kafka brokers, a token's key id and labels are also kept where a Kafka
    # renewal does not touch them (zk.token_store).
    token_store = TokenStore(zk, beside_kafka=config.kafka_zookeeper_shared)
    credential_store = CredentialStore(zk)
    acl_store = AclStore(zk)
    quota_store = QuotaStore(zk)
    records = RequestRecords(zk)
    paths = coordination(config.kafka_zookeeper_shared)
    registry = BrokerRegistry(zk, paths=paths)
    migration = KraftMigrationWatch(zk) if config.kafka_zookeeper_shared else None
    if migration is not None:
        await asyncio.to_thread(migration.start)
    await asyncio.to_thread(token_store.ensure_paths)
    await asyncio.to_thread(records.ensure_paths)
    cluster_id = config.cluster_id or await asyncio.to_thread(registry.cluster_id)

    election = ControllerElection(
        zk, config.broker_id, on_change=on_controller_change, paths=paths,
        # A broker whose clock is off does not stand for controller, and resigns if it
        # is one: the others go on writing (issue #50).
        eligible=gate.trusted if gate is not None else None,
    )
    if gate is not None:
        gate.add_listener(lambda _state: election.reconsider())
    migrating = (lambda: migration.started) if migration is not None else None

    def is_controller() -> bool:
        return election.is_controller

    def purges_notifications() -> bool:
        # The controller purges, by the cluster's time: not while its clock is beyond
        # max.clock.skew.ms or not yet measured (ctimes are ZooKeeper's time).
        return election.is_controller and (gate is None or gate.trusted())

    notification_purge = Purge(purges_notifications, clock.now_ms)
    if config.kafka_zookeeper_shared:
        # Kafka's brokers purge these roots too, and only past 15 minutes: so do we.
        notification_purge = notification_purge.kafka_only()
    token_sync = TokenSync(token_store, local.cache, purge=notification_purge,
                           snapshot=local.snapshot_file,
                           identity_extra={"cluster_id": cluster_id})
    credential_sync = CredentialSync(credential_store, local.users, purge=notification_purge)
    acl_sync = (
        AclSync(acl_store, local.authorizer, purge=notification_purge)
        if local.authorizer is not None
        else None
    )
    followers = VersionWaiter([token_sync, credential_sync] + ([acl_sync] if acl_sync else []))
    # The store's method is looked up per batch (a test may wrap it on the instance).
    group_commit = GroupCommit(
        lambda writes, guard: token_store.commit_many(writes, guard=guard),
        size_of=lambda write: write.size,
    )
    writes = WritePath(
        guard=election.guard,
        followers=followers,
        records=records,
        cache_timeout_s=config.request_timeout_ms / 1000.0,
        unknown=(StoreUnavailable,),
        exists=RequestKeyExistsError,
        tokens=group_commit,
        apply_token=token_sync.apply_committed,
    )
    # Never confirmed until the caches have loaded: an early-start listener's login
    # waits for the first round, which waits for the loads.
    freshness = FreshnessGate(
        config.zookeeper_max_staleness_ms,
        lambda: asyncio.wrap_future(followers.confirm_current()),
        round_timeout_s=config.request_timeout_ms / 1000.0,
    )

    def refuse(services: Services, ctx: Any, handler: Any, body: dict) -> dict | None:
        return clock_refusal(gate, services, ctx, handler, body, migrating)

    ledger = WriteLedger(
        HANDLERS,
        writes,
        records.get,
        valid_request_key,
        request_timeout_ms=config.request_timeout_ms,
        refuse=refuse,
    )
    addresses: Addresses = {}
    services = Services(
        config=config,
        clock=clock,
        audit=audit,
        metrics=metrics,
        authz=Authorization(local.authorizer, config.super_users),
        tokens=TokenService(local.cache, local.manager, token_store, writes),
        credentials=CredentialService(
            local.users, credential_store, writes,
            owned_tokens=_owned_token_ids(local.cache)
            if config.delegation_token_expire_with_owner else None),
        acls=AclService(local.authorizer, acl_store, writes),
        cluster=_Cluster(cluster_id, config.broker_id, election, registry, addresses,
                         registered),
        auth=_Auth(
            credentials=local.credentials,
            fake_salt_secret=local.fake_salt_secret,
            fingerprint_key=local.audit_fingerprint_key,
            repeated_nonce_notices=local.repeated_nonce_notices,
            derivations=local.derivations,
            sessions=sessions,
            freshness=freshness,
            clock_gate=gate,
            session_lifetime_ms=_session_lifetime(config, clock),
            oauth=local.oauth,
        ),
        ledger=ledger,
        quotas=quota_store,
    )
    forwarder = EnvelopeForwarder(
        config,
        controller_id=election.controller_id,
        is_controller=is_controller,
        endpoint=_endpoint_of(registry),
        apply_locally=lambda ctx, body: ledger.apply(services, ctx, body),
        reach=writes.reach,
        apply_token=token_sync.apply_committed,
        audit=audit.emit,
        count=lambda client_id: metrics.forwarded.labels(client_id).inc(),
    )

    def on_removed(info: TokenInformation, reason: str) -> None:
        metrics.sweep_removed.inc()
        audit.emit("sweep", token_id=info.token_id, owner=str(info.owner),
                   expiry_ms=info.expiry_timestamp, max_ms=info.max_timestamp, reason=reason)

    syncs = [s for s in (token_sync, credential_sync, acl_sync) if s is not None]

    def purge(now_ms: int) -> int:
        # The controller's periodic purge (the sweeper's thread): old notifications of
        # every root, old request records and orphaned token labels.
        purged = sum(sync.purge(now_ms) for sync in syncs)
        records.purge(now_ms)
        # Beside Kafka: labels kept apart whose token a Kafka broker's expiry deleted.
        token_store.remove_orphan_sides(lambda token_id: local.cache.info(token_id) is not None)
        return purged

    sweeper = ExpirySweeper(
        token_store,
        local.cache,
        election,
        clock,
        interval_ms=config.delegation_token_expiry_check_interval_ms,
        on_removed=on_removed,
        purge=purge,
        trusted=_sweep_allowed(gate, migrating),
        apply_committed=token_sync.apply_committed,
    )
    acl_check = ZnodeAclCheck(zk, interval_s=config.zookeeper_acl_check_interval_ms / 1000.0)
    dispatcher = Dispatcher(
        config,
        services,
        ledger=ledger,
        forwarder=forwarder,
        freshness=freshness,
        clock_gate=gate,
        is_controller=is_controller,
        forwarding=forwarding,
        migrating=migrating,
    )

    async def raw_sasl(session: Session, payload: bytes) -> bytes:
        return (await sasl.evaluate(services, session, payload))[0]

    def on_session_expired(session: Session) -> None:
        audit_session(audit, "expired", session,
                      "session lifetime over without re-authentication")

    server = BrokerServer(
        config,
        dispatch=dispatcher.dispatch,
        raw_sasl=raw_sasl,
        handshake=lambda session, mechanism, version: sasl.begin_handshake(
            services, session, mechanism, version
        ),
        sessions=sessions,
        metrics=metrics,
        clock=clock,
        on_session_expired=on_session_expired,
        api_name=Dispatcher.api_name,
        addresses=addresses,
    )
    return BrokerParts(
        cluster_id=cluster_id,
        clock_gate=gate,
        sessions=sessions,
        token_store=token_store,
        credential_store=credential_store,
        acl_store=acl_store,
        records=records,
        registry=registry,
        election=election,
        migration=migration,
        token_sync=token_sync,
        credential_sync=credential_sync,
        acl_sync=acl_sync,
        group_commit=group_commit,
        writes=writes,
        freshness=freshness,
        services=services,
        ledger=ledger,
        forwarder=forwarder,
        sweeper=sweeper,
        acl_check=acl_check,
        dispatcher=dispatcher,
        server=server,
    )
