"""One broker: wires the pure core to ZooKeeper, the network and the audit log.

Owns the broker's lifecycle (start, ready, stop), the wiring of the
:class:`~tokensvc.broker.services.Services` handlers get (token cache and rules,
credentials, authorizer, the controller's write path guarded by this broker's
``/controller_epoch`` version, audit, metrics), and :meth:`Broker.dispatch`, the one
callable the socket server hands every decoded request to: it routes through the
ApiKey -> handler table; a write goes to the controller's exactly-once ledger
(:mod:`tokensvc.broker.writes.ledger`) here, or to the forwarder
(:mod:`tokensvc.broker.writes.forwarding`) on a non-controller.

Start-up order: ZooKeeper session → the clock measured against ZooKeeper's time (one
round of samples; :mod:`tokensvc.broker.gates.clockskew`) → ``early.start.listeners`` open → token,
credential and ACL caches loaded (authorizer ready; the token cache from its
snapshot, caught up from ZooKeeper, when ``token.cache.snapshot.dir`` holds a
usable one: :mod:`tokensvc.snapshot`) → election and expiry sweep → the other
listeners open → registration under ``/brokers/ids``. Blocking ZooKeeper calls
run in worker threads, never on the event loop; the snapshot is written by a
thread of its own, periodically and at a clean stop.

Bounded staleness (issue #20): the broker's
:class:`~tokensvc.broker.gates.freshness.FreshnessGate` confirms, in the background every
``zookeeper.max.staleness.ms / 3``, that the token, credential and ACL caches are current
(:meth:`zk.notifications.VersionWaiter.confirm_current`). :meth:`Broker.dispatch` holds
every request of a token-authenticated connection until the view is fresh, the SASL
handler every login step; a request whose connection was revoked meanwhile (its token
was removed by the catch-up) is not served.

One clock (issue #36): ``self.clock`` is a
:class:`~tokensvc.core.clock.CorrectedClock` -- the cluster's time, measured against
ZooKeeper's by the :class:`~tokensvc.broker.gates.clockskew.ClockGate` -- and is the clock of
the token rules, SCRAM's expiry check, the session registry, the expiry sweep and the
syncs' purges. While the gate does not trust it (beyond ``max.clock.skew.ms`` or not
measured), token logins (SASL handler), token writes (here on a non-controller, in the
ledger on the controller, forwarded or not) and the expiry sweep are refused.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import secrets
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from tokensvc.audit.writer import AuditLog
from tokensvc.authz.authorizer import AclAuthorizer
from tokensvc.broker.context import RequestContext, WriteTicket, client_request_key
from tokensvc.broker.gates.clockskew import ClockGate
from tokensvc.broker.gates.freshness import FreshnessGate, StaleView
from tokensvc.broker.handlers import HANDLERS, sasl
from tokensvc.broker.handlers import tokens as token_handlers
from tokensvc.broker.handlers.base import ApiHandler
from tokensvc.broker.handlers.sasl import HostNoticeLimiter
from tokensvc.broker.loop.loopwatch import LoopWatch, StallMeter
from tokensvc.broker.loop.offloop import encode_response_segments_async
from tokensvc.broker.metrics import BrokerMetrics
from tokensvc.broker.network.server import BrokerServer
from tokensvc.broker.services import (
    AclService,
    Authorization,
    CredentialService,
    Services,
    TokenService,
    WritePath,
)
from tokensvc.broker.sessions.derivations import DerivationPool
from tokensvc.broker.sessions.registry import SessionRegistry
from tokensvc.broker.sessions.session import Session, State
from tokensvc.broker.writes.forwarding import EnvelopeForwarder
from tokensvc.broker.writes.groupcommit import GroupCommit
from tokensvc.broker.writes.ledger import WriteLedger, new_request_key
from tokensvc.core.cache import TokenCache
from tokensvc.core.clock import Clock, CorrectedClock
from tokensvc.core.clocksync import ClusterTimeEstimator
from tokensvc.core.config import BrokerConfig
from tokensvc.core.errors import Errors, KafkaError
from tokensvc.core.keys import AUDIT_FINGERPRINT_LABEL, SCRAM_SALT_LABEL, derived_secret
from tokensvc.core.manager import TokenManager
from tokensvc.core.principal import KafkaPrincipal
from tokensvc.core.token import TokenInformation
from tokensvc.protocol import encode_response
from tokensvc.scram.formatter import ScramCredential, ScramMechanism, TokenSalt
from tokensvc.snapshot import format as snapshot_format
from tokensvc.snapshot.files import SnapshotFile, SnapshotWriter
from zk.acl_check import ZnodeAclCheck
from zk.acl_store import AclStore
from zk.acl_sync import AclSync
from zk.brokers import BrokerRegistry
from zk.client import ZkSettings, open_client
from zk.clock import ClockProbe
from zk.credential_store import CredentialStore
from zk.credential_sync import CredentialSync, UserCredentialCache
from zk.election import ControllerElection
from zk.errors import StoreUnavailable
from zk.expiry import ExpirySweeper
from zk.notifications import VersionWaiter
from zk.requests import RequestKeyExistsError, RequestRecords, valid_request_key
from zk.token_store import TokenStore
from zk.token_sync import TokenSync

# Owners shown by the tokensvc_owner_tokens gauge (the largest).
TOP_OWNERS = 10
log = logging.getLogger("tokensvc.broker")

# Threads for the blocking store calls (asyncio.to_thread). Every ZooKeeper call of the
# token, credential and ACL stores is capped (10 s, StoreUnavailable past it), so a
# partition holds a thread for at most that long; the pool's size only bounds how many
# such writes wait at once.
ZK_WORKER_THREADS = 64

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


class _Cluster:
    """The ClusterView handlers get: cluster id, controller and endpoints."""

    def __init__(self, broker: Broker) -> None:
        self._broker = broker

    @property
    def cluster_id(self) -> str:
        return self._broker.cluster_id

    @property
    def is_controller(self) -> bool:
        return self._broker.is_controller

    def controller_id(self) -> int | None:
        return self._broker.controller_id()

    def broker_endpoints(self, listener: str) -> dict[int, tuple[str, int]]:
        return self._broker.broker_endpoints(listener)


class _Auth:
    """The AuthService the SASL handlers get."""

    def __init__(self, broker: Broker) -> None:
        self._broker = broker
        self.credentials = broker.credentials
        self.fake_salt_secret = broker.fake_salt_secret
        self.fingerprint_key = broker.audit_fingerprint_key
        self.repeated_nonce_notices = broker.repeated_nonce_notices
        self.derivations = broker.derivations

    @property
    def sessions(self) -> SessionRegistry:
        assert self._broker.sessions is not None
        return self._broker.sessions

    @property
    def freshness(self) -> FreshnessGate:
        assert self._broker.freshness is not None
        return self._broker.freshness

    @property
    def clock_gate(self) -> ClockGate | None:
        return self._broker.clock_gate

    def session_lifetime_ms(self, server: Any) -> int:
        return self._broker.session_lifetime_ms(server)


class Broker:
    def __init__(self, config: BrokerConfig, *, clock: Clock | None = None) -> None:
        self.config = config
        self.broker_id = config.broker_id
        # The cluster's time (issue #36): the wall clock corrected by its offset from
        # ZooKeeper's time, measured by the clock gate from start on. An injected clock
        # (tests) is used as it is, unmeasured.
        self.clock: Clock = clock or CorrectedClock(ClusterTimeEstimator())
        self.clock_gate: ClockGate | None = None
        self.metrics = BrokerMetrics()
        # The stall meter (event-loop lag, GIL hold): its thread starts with the loop.
        self.stall_meter = StallMeter()
        self.metrics.stalls(self.stall_meter)
        self.loop_watch: LoopWatch | None = None
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
        self.derivations = DerivationPool()
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
                clock=self.clock,  # events stamped with the cluster's time
                required=config.audit_required,
                reserve_bytes=config.audit_required_reserve_bytes,
            )
            if config.audit_log_dir
            else AuditLog.disabled()
        )
        self.server: BrokerServer | None = None  # needs the session registry
        self.sessions: SessionRegistry | None = None  # needs the running loop
        self.auth = _Auth(self)
        self.services: Services | None = None
        self.forwarder: EnvelopeForwarder | None = None
        self.ledger: WriteLedger | None = None
        self.freshness: FreshnessGate | None = None
        self.cluster_id = config.cluster_id or ""
        # The token cache snapshot (token.cache.snapshot.dir): loaded by the token sync's
        # first load, written by its own thread (tokensvc.snapshot).
        self.snapshot_file: SnapshotFile | None = None
        if config.token_cache_snapshot_dir:
            self.snapshot_file = SnapshotFile(
                config.token_cache_snapshot_dir,
                on_load=lambda result: self.metrics.snapshot_loads.labels(result).inc(),
                on_write=lambda result: self.metrics.snapshot_writes.labels(result).inc(),
            )
        self.snapshot_writer: SnapshotWriter | None = None
        self._zk = None
        self._executor: ThreadPoolExecutor | None = None
        self._started = False

    @property
    def tokens(self) -> TokenService:
        """The token service (the SASL path reads token sessions' infos from it)."""
        assert self.services is not None
        return self.services.tokens

    # -- lifecycle ----------------------------------------------------------

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        # ZooKeeper calls run in worker threads; while ZooKeeper is slow or without quorum
        # each may hold one for its whole timeout, so the pool is sized for that, not for
        # the CPU count (asyncio's default).
        self._executor = ThreadPoolExecutor(max_workers=ZK_WORKER_THREADS,
                                            thread_name_prefix="zk-call")
        loop.set_default_executor(self._executor)
        self.loop_watch = LoopWatch(loop, self.stall_meter)
        self.loop_watch.start()
        self.sessions = SessionRegistry(
            loop,
            reauth_ms=self.config.connections_max_reauth_ms,
            on_revoked=self._audit_revoked,
            clock=self.clock,
        )
        self.cache.add_batch_listener(self.sessions.on_token_changes)
        self.users.add_listener(self.sessions.on_user_change)

        async def raw_sasl(session: Session, payload: bytes) -> bytes:
            assert self.services is not None
            return (await sasl.evaluate(self.services, session, payload))[0]

        self.server = BrokerServer(
            self.config,
            dispatch=self.dispatch,
            raw_sasl=raw_sasl,
            handshake=lambda session, mechanism, version: sasl.begin_handshake(
                self.services, session, mechanism, version
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
            security=self.config.zookeeper_security,
        )
        self._zk = await asyncio.to_thread(open_client, settings)
        zk = self._zk
        if isinstance(self.clock, CorrectedClock):
            await self._measure_clock(ClockProbe(zk, self.broker_id))
        self.token_store = TokenStore(zk)
        self.credential_store = CredentialStore(zk)
        self.acl_store = AclStore(zk)
        self.records = RequestRecords(zk)
        self.registry = BrokerRegistry(zk)
        await asyncio.to_thread(self.token_store.ensure_paths)
        await asyncio.to_thread(self.records.ensure_paths)
        if not self.cluster_id:
            self.cluster_id = await asyncio.to_thread(self.registry.cluster_id)

        is_purger = self._is_controller_now
        self.token_sync = TokenSync(zk, self.token_store, self.cache, is_purger=is_purger,
                                    now_ms=self.clock.now_ms, snapshot=self.snapshot_file,
                                    identity_extra={"cluster_id": self.cluster_id})
        self.credential_sync = CredentialSync(zk, self.credential_store, self.users,
                                              is_purger=is_purger, now_ms=self.clock.now_ms)
        self.acl_sync = (
            AclSync(zk, self.acl_store, self.authorizer, clock=self.clock, is_purger=is_purger)
            if self.authorizer is not None
            else None
        )
        followers = VersionWaiter(
            [self.token_sync, self.credential_sync] + ([self.acl_sync] if self.acl_sync else [])
        )
        # The store's method is looked up per batch (a test may wrap it on the instance).
        self.group_commit = GroupCommit(
            lambda writes, guard: self.token_store.commit_many(writes, guard=guard),
            size_of=lambda write: write.size,
        )
        writes = WritePath(
            guard=self._guard,
            followers=followers,
            records=self.records,
            cache_timeout_s=self.config.request_timeout_ms / 1000.0,
            unknown=(StoreUnavailable,),
            exists=RequestKeyExistsError,
            tokens=self.group_commit,
            apply_token=self.token_sync.apply_committed,
        )
        self.writes = writes
        # Never confirmed until the caches have loaded: an early-start listener's login
        # waits for the first round, which waits for the loads.
        self.freshness = FreshnessGate(
            self.config.zookeeper_max_staleness_ms,
            lambda: asyncio.wrap_future(followers.confirm_current()),
            round_timeout_s=self.config.request_timeout_ms / 1000.0,
        )
        self.services = Services(
            config=self.config,
            clock=self.clock,
            audit=self.audit,
            metrics=self.metrics,
            authz=Authorization(self.authorizer, self.config.super_users),
            tokens=TokenService(self.cache, self.manager, self.token_store, writes),
            credentials=CredentialService(
                self.users, self.credential_store, writes,
                owned_tokens=self._owned_token_ids if self.config.delegation_token_expire_with_owner
                else None),
            acls=AclService(self.authorizer, self.acl_store, writes),
            cluster=_Cluster(self),
            auth=self.auth,
        )
        self.ledger = WriteLedger(
            self.services,
            HANDLERS,
            writes,
            self.records.get,
            valid_request_key,
            request_timeout_ms=self.config.request_timeout_ms,
            refuse=self._clock_refusal,
        )
        self.services.ledger = self.ledger

        early = [lst for lst in self.config.listeners if lst.name in self.config.early_start_listeners]
        await self.server.open(early)

        await asyncio.to_thread(self.token_sync.start)
        if self.snapshot_file is not None:
            # Started from a snapshot and nothing changed since: the file is current, and
            # the first periodic write waits for a change.
            loaded = self.token_sync.snapshot_loaded
            self.snapshot_writer = SnapshotWriter(
                self.snapshot_file, self._take_snapshot,
                self.config.token_cache_snapshot_interval_ms / 1000.0,
                written=_snapshot_key(*loaded) if loaded else None)
            self.snapshot_writer.start()
        await asyncio.to_thread(self.credential_sync.start)
        if self.acl_sync is not None:
            await asyncio.to_thread(self.acl_sync.start)
        self.freshness.start()

        self.election = ControllerElection(zk, self.broker_id, on_change=self._controller_changed)
        await asyncio.to_thread(self.election.start)
        self.sweeper = ExpirySweeper(
            self.token_store,
            self.cache,
            self.election,
            self.clock,
            interval_ms=self.config.delegation_token_expiry_check_interval_ms,
            on_removed=self._audit_swept,
            purge=self._purge,
            trusted=self.clock_gate.trusted if self.clock_gate is not None else None,
        )
        self.sweeper.start()
        self.acl_check = ZnodeAclCheck(
            zk, interval_s=self.config.zookeeper_acl_check_interval_ms / 1000.0)
        await asyncio.to_thread(self.acl_check.start)
        self._register_gauges()
        if self.config.metrics_listener:
            host, port = self.config.metrics_listener
            self.metrics_address = await asyncio.to_thread(self.metrics.serve, host, port)
            log.info("metrics on http://%s:%d/metrics", *self.metrics_address)

        self.forwarder = EnvelopeForwarder(
            self.config,
            controller_id=self.controller_id,
            is_controller=lambda: self.is_controller,
            endpoint=self._endpoint,
            apply_locally=self.ledger.apply,
            reach=writes.reach,
            apply_token=self.token_sync.apply_committed,
            audit=self.audit.emit,
            count=lambda client_id: self.metrics.forwarded.labels(client_id).inc(),
        )
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
        if self.freshness is not None:
            await self.freshness.close()
        if self.clock_gate is not None:
            await self.clock_gate.close()
        if self.snapshot_writer is not None:
            # A clean stop leaves a snapshot of the cache as it is now (off the loop).
            await asyncio.to_thread(self.snapshot_writer.close)
        for part in ("acl_check", "sweeper", "election", "registry", "acl_sync", "credential_sync",
                     "token_sync"):
            obj = getattr(self, part, None)
            if obj is not None:
                await asyncio.to_thread(obj.close)
        if self._zk is not None:
            await asyncio.to_thread(self._close_zk)
        self.metrics.close()
        if self.loop_watch is not None:
            self.loop_watch.close()
        self.audit.close()
        self.derivations.close()
        if self._executor is not None:
            self._executor.shutdown(wait=False)

    async def _measure_clock(self, probe: ClockProbe) -> None:
        """Measure the clock once before any listener opens, then every few seconds
        (:mod:`tokensvc.broker.gates.clockskew`): no token login is decided on an unchecked
        clock. A failed first round leaves the clock UNCHECKED (token logins and writes
        refused, retriable) until a background round succeeds."""
        assert isinstance(self.clock, CorrectedClock)
        self.clock_gate = ClockGate(self.clock, self.config.max_clock_skew_ms, probe.sample)
        await self.clock_gate.measure()  # a failure is logged there; retried in the background
        self.clock_gate.start()

    def _clock_refusal(self, ctx: RequestContext, handler: Any, body: dict) -> dict | None:
        """The answer to a token write while the clock is not trusted (audited, reason
        ``clock_skew``), or None: serve it."""
        if self.clock_gate is None or ctx.api_key not in token_handlers.TOKEN_WRITE_ACTIONS:
            return None
        refused = self.clock_gate.refusal()
        if refused is None:
            return None
        assert self.services is not None
        token_handlers.audit_refused_write(self.services, ctx, refused.error, refused.reason)
        return handler.error_for(ctx.api_version, refused.error, body)

    def _take_snapshot(self, written: object) -> tuple[object, bytes] | None:
        """The snapshot file's bytes, unless the cache followed no change since the one
        written last (``written``: its sequence and identity). The writer's thread."""
        view = self.token_sync.snapshot_view()
        if view is None:
            return None
        sequence, identity, tokens = view
        key = _snapshot_key(sequence, identity)
        if key == written:
            return None
        return key, snapshot_format.encode(sequence, identity, tokens, self.clock.now_ms())

    def _close_zk(self) -> None:
        self._zk.stop()
        self._zk.close()

    def _purge(self, now_ms: int) -> int:
        """The controller's periodic purge: old notifications of every root and old
        request records (runs on the sweeper's thread)."""
        syncs = [s for s in (self.token_sync, self.credential_sync, self.acl_sync) if s]
        purged = sum(s.purge(now_ms) for s in syncs)
        self.records.purge(now_ms)
        return purged

    def _owned_token_ids(self, user: str) -> list[str]:
        """Ids of the tokens ``User:user`` owns (the cascade of a deleted user)."""
        owner = KafkaPrincipal.user(user)
        return sorted(t for t in self.cache.ids_of([owner])
                      if (info := self.cache.info(t)) is not None and info.owner == owner)

    def _register_gauges(self) -> None:
        m = self.metrics
        m.top_owners(lambda: self.cache.top_owners(TOP_OWNERS))
        m.gauge("tokensvc_token_cache_size", "Tokens in this broker's cache", lambda: len(self.cache))
        m.gauge("tokensvc_zookeeper_insecure_paths",
                "ZooKeeper paths whose ACL lets anyone read a sensitive znode or change one "
                "(checked every zookeeper.acl.check.interval.ms)",
                lambda: len(self.acl_check.last or ()))
        m.gauge("tokensvc_derived_credentials", "Token SCRAM credentials derived so far",
                self.cache.derived_count)
        m.gauge("tokensvc_cache_resyncs", "Token cache resynchronisations (start included)",
                lambda: self.token_sync.resync_count)
        m.gauge("tokensvc_cache_caught_up_resyncs",
                "Resyncs after the start that caught the held cache up instead of "
                "reading every token", lambda: self.token_sync.caught_up_resyncs)
        m.gauge("tokensvc_cache_last_resync_seconds", "Duration of the last full resync",
                lambda: (self.token_sync.last_resync_ms or 0) / 1000.0)
        m.gauge("tokensvc_controller", "1 if this broker is the controller",
                lambda: 1.0 if self.is_controller else 0.0)
        m.gauge("tokensvc_expiry_sweeps", "Expiry sweeps run by this broker", lambda: self.sweeper.sweeps)
        m.gauge("tokensvc_audit_queue_depth", "Audit events waiting to be written",
                lambda: self.audit.queue_depth)
        m.gauge("tokensvc_audit_dropped", "Audit events dropped because the queue was full",
                lambda: self.audit.dropped)
        m.gauge("tokensvc_audit_writable",
                "1 while the audit log can be written (audit.required: logins and writes "
                "are refused while 0)", lambda: 1.0 if self.audit.writable else 0.0)
        m.gauge("tokensvc_audit_required", "1 if audit.required=true",
                lambda: 1.0 if self.audit.required else 0.0)
        m.gauge("tokensvc_audit_refused",
                "Logins and writes refused because the required audit could not be written",
                lambda: self.audit.refused)
        m.gauge("tokensvc_audit_queue_capacity", "audit.queue.size: events the queue holds",
                lambda: self.config.audit_queue_size)
        m.gauge("tokensvc_acl_count", "ACL entries loaded in the authorizer",
                lambda: self.authorizer.acl_count if self.authorizer else 0)
        m.gauge("tokensvc_group_commit_batches",
                "Token-write transactions the controller's group commit sent",
                lambda: self.group_commit.batches)
        m.gauge("tokensvc_group_commit_writes", "Token writes sent by the group commit",
                lambda: self.group_commit.committed)
        m.gauge("tokensvc_committed_tokens_applied",
                "Committed token states put into this broker's cache without waiting for "
                "its follower (its own group commit, or a controller's envelope answer)",
                lambda: self.token_sync.order.applied)
        m.gauge("tokensvc_forwarded_cache_waits",
                "Forwarded writes whose answer waited for this broker's followers",
                lambda: self.forwarder.waited_for_cache if self.forwarder else 0)
        m.gauge("tokensvc_sessions", "Authenticated client sessions", lambda: self.sessions.count())
        m.gauge("tokensvc_token_sessions", "Connections logged in with a token",
                lambda: self.sessions.token_sessions())
        m.gauge("tokensvc_zookeeper_view_age_seconds",
                "Seconds since this broker's view of ZooKeeper was last confirmed current",
                self.freshness.age_s)
        m.gauge("tokensvc_stale_view_catch_ups",
                "Requests that found the view of ZooKeeper stale and waited for a confirmation",
                lambda: self.freshness.catch_ups)
        m.gauge("tokensvc_stale_view_refusals",
                "Requests refused because the view of ZooKeeper could not be confirmed current",
                lambda: self.freshness.refusals)
        gate = self.clock_gate
        if gate is not None:
            m.gauge("tokensvc_clock_offset_seconds",
                    "The cluster's time (ZooKeeper's) minus this host's wall clock: positive "
                    "when the host is behind (NaN until measured)", gate.offset_seconds)
            m.gauge("tokensvc_clock_uncertainty_seconds",
                    "How far the clock offset may be off (half a round trip, grown with age)",
                    gate.uncertainty_seconds)
            m.gauge("tokensvc_clock_estimate_age_seconds",
                    "Seconds since the last successful clock sample", gate.estimate_age_seconds)
            m.gauge("tokensvc_clock_max_skew_seconds", "max.clock.skew.ms in seconds (<0: no bound)",
                    lambda: gate.bound_ms / 1000.0 if gate.bound_ms >= 0 else -1.0)
            m.gauge("tokensvc_clock_skew_refusing",
                    "1 while this broker refuses token logins and writes for its clock "
                    "(beyond max.clock.skew.ms, or not measured)", gate.refusing)
            m.gauge("tokensvc_clock_skew_refusals",
                    "Token logins and token writes refused because of the clock",
                    lambda: gate.refusals)
            m.gauge("tokensvc_clock_sample_failures", "Clock samples that failed (ZooKeeper)",
                    lambda: gate.failed_samples)

    # -- controller ---------------------------------------------------------

    @property
    def is_controller(self) -> bool:
        election = getattr(self, "election", None)
        return bool(election and election.is_controller)

    def _is_controller_now(self) -> bool:
        return self.is_controller

    def _guard(self) -> tuple[str, int] | None:
        election = getattr(self, "election", None)
        return election.guard() if election is not None else None

    def controller_id(self) -> int | None:
        election = getattr(self, "election", None)
        return election.controller_id() if election else None

    def _controller_changed(self, controller: int | None, is_me: bool) -> None:
        log.info("controller is now %s%s", controller, " (this broker)" if is_me else "")

    def _endpoint(self, broker_id: int, listener: str) -> tuple[str, str, int] | None:
        info = self.registry.brokers().get(broker_id)
        if not info or listener not in info.get("endpoints", {}):
            return None
        protocol, host, port = info["endpoints"][listener]
        return protocol, host, port

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

    # -- request dispatch -----------------------------------------------------

    @staticmethod
    def api_name(api_key: int) -> str:
        handler = HANDLERS.get(api_key)
        return handler.name if handler else str(api_key)

    async def dispatch(self, ctx: RequestContext, body: dict) -> tuple[bytes | list[bytes], int]:
        """Handle one request; returns the encoded response and its top-level error code.

        A response with pre-encoded parts (a large describe) comes as the list of its
        bytes objects, in order, for the connection to write without joining them.

        Writes (KIP-590): on a non-controller, the handler's ``precheck`` then the
        forwarder; on the controller, the exactly-once ledger with a fresh request key.
        """
        handler = HANDLERS.get(ctx.api_key)
        if handler is None:
            raise KafkaError(Errors.UNSUPPORTED_VERSION, f"api {ctx.api_key} is not served")
        services = self.services
        version = ctx.api_version
        try:
            if services is None:  # still connecting to ZooKeeper: the client retries
                raise KafkaError(Errors.NOT_CONTROLLER, "the broker is still starting")
            session = ctx.session
            if session is not None and session.principal is not None \
                    and ctx.listener != self.config.inter_broker_listener_name \
                    and not self.freshness.fresh():
                await self._catch_up_for(ctx, session)
            if handler.write and not ctx.forwarded:
                if not self.is_controller:
                    refused = handler.precheck(services, ctx, body) if handler.precheck else None
                    if refused is None:
                        refused = self._clock_refusal(ctx, handler, body)
                    if refused is not None:
                        return encode_response(ctx.header, refused), refused.get("ErrorCode", 0)
                    if self.forwarder is None:  # still starting: the client retries
                        raise KafkaError(Errors.NOT_CONTROLLER, "the broker is still starting")
                    if not self.audit.required:
                        return await self.forwarder.forward(ctx, handler)
                    return await self._forward_audited(ctx, handler, body)
                assert self.ledger is not None
                own = client_request_key(ctx)
                ctx.write = WriteTicket(own or new_request_key(), first_attempt=own is None)
                return await self.ledger.apply(ctx, body)
            response = await handler.handle(services, ctx, body)
        except KafkaError as exc:
            response = handler.error_for(version, exc.error, body)
        except Exception:
            log.exception("%s failed", handler.name)
            response = handler.error_for(version, Errors.UNKNOWN_SERVER_ERROR, body)
        segments = await encode_response_segments_async(ctx.header, response)
        encoded = segments[0] if len(segments) == 1 else segments
        return encoded, int(response.get("ErrorCode", 0) or 0)

    async def _forward_audited(self, ctx: RequestContext, handler: ApiHandler,
                               body: dict) -> tuple[bytes | list[bytes], int]:
        """audit.required on a forwarding broker: refuse while its audit log cannot be
        written (nothing forwarded). The write's own event (``token``, ``acl``,
        ``credential``) is the controller's, fsynced before the controller answers; this
        broker's ``forward`` event is queued, not waited for (a second fsync in series
        halved B2)."""
        refused = self.audit.refusal()
        if refused is not None:
            raise refused
        assert self.forwarder is not None
        return await self.forwarder.forward(ctx, handler)

    async def _catch_up_for(self, ctx: RequestContext, session: Session) -> None:
        """Hold an authenticated connection's request -- a token's or a user's -- until
        the view is fresh. Raises StaleView (audited, reason ``stale_view``) past
        ``request.timeout.ms``, and a KafkaError when the catch-up revoked the connection
        meanwhile (its token removed, or its user deleted or given a new password). The
        inter-broker listener is not held: envelopes go to the controller, whose writes
        are fenced by the controller epoch in ZooKeeper itself."""
        try:
            await self.freshness.catch_up(self.config.request_timeout_ms / 1000.0)
        except StaleView as exc:
            self.audit.emit(
                "session",
                action="refused",
                principal=str(session.principal),
                token_id=session.token_id,
                client_host=session.client_host,
                listener=session.listener,
                reason=exc.reason,
            )
            raise
        if session.state is State.CLOSED:
            raise KafkaError(Errors.SASL_AUTHENTICATION_FAILED,
                             f"this connection's token or user credential was revoked "
                             f"({self.api_name(ctx.api_key)} not served)")

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


def _snapshot_key(sequence: int, identity: dict) -> tuple:
    """What tells two snapshots of the same cache apart: its sequence and identity."""
    return sequence, tuple(sorted(identity.items()))


async def run_broker(config: BrokerConfig, stop: asyncio.Event) -> None:
    broker = Broker(config)
    start = time.monotonic()
    await broker.start()
    log.info("broker %d ready in %.2fs", config.broker_id, time.monotonic() - start)
    try:
        await stop.wait()
    finally:
        await broker.stop()
