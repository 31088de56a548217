"""Broker configuration: the declared table of ``server.properties`` keys and the
checked :class:`BrokerConfig` built from it.

This module owns every broker key, once: its type, default, validator, importance
and documentation live in :data:`BROKER_CONFIG` (docs/broker.md is generated from
it). Values are checked key by key, as Kafka's ``ConfigDef`` does; the only rules
across keys are about structure (listener names and their protocols, SSL material
for SSL listeners, one source for the master key), never about lifetimes: a max
lifetime shorter than the expiry time is legal and gives expiry = max (KIP-48, in
:mod:`tokensvc.core.manager`).

It must not do I/O. Reading the properties file, the master key file, the
environment and checking that files exist happen at the edge
(:mod:`tokensvc.config_loader`), which hands the results in. It never puts a secret
(a master key, a password, the ZooKeeper digest) in a repr or an error message.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields

from tokensvc.core.configdef import (
    REQUIRED,
    ConfigDef,
    ConfigError,
    ConfigKey,
    Importance,
    Matches,
    OneOf,
    PathKind,
    Type,
    at_least,
    between,
)
from tokensvc.core.kafka_keys import KAFKA_BROKER_KEYS, KAFKA_BROKER_PREFIXES
from tokensvc.core.keys import MasterKeys
from tokensvc.core.principal import KafkaPrincipal
from tokensvc.core.zk_security import (
    JAAS_FILE,
    ZK_SECURITY_KEYS,
    ZkSecurity,
    zk_security_from_values,
)
from tokensvc.scram.formatter import ScramMechanism

__all__ = [
    "BROKER_CONFIG",
    "KNOWN_KEYS",
    "BrokerConfig",
    "ConfigError",
    "Listener",
    "master_key_source",
]

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SCRAM_MECHANISMS = tuple(m.mechanism_name for m in ScramMechanism)
OAUTHBEARER = "OAUTHBEARER"
SASL_MECHANISMS = (*SCRAM_MECHANISMS, OAUTHBEARER)
OAUTH_MAPPINGS_FILE = "sasl.oauthbearer.principal.mappings.file"
AUTHORIZERS = ("kafka.security.authorizer.AclAuthorizer", "tokensvc.authz.AclAuthorizer")
SSL_CLIENT_AUTH = ("none", "requested", "required")

SECRET_KEY = "delegation.token.secret.key"
MASTER_KEY_ALIAS = "delegation.token.master.key"
SECRET_KEY_FILE = "delegation.token.secret.key.file"
SECRET_KEY_ENV = "delegation.token.secret.key.env"
SECRET_KEY_PREVIOUS = "delegation.token.secret.key.previous"
KAFKA_SHARED = "kafka.zookeeper.shared"

_LISTENER = r"(?P<name>[A-Za-z0-9_.-]+)://(?P<host>\[[^\]]*\]|[^:/\[\]]*):(?P<port>\d+)"
_HOST_PORT = r"(?P<host>\[[^\]]*\]|[^:/\[\]]+):(?P<port>\d+)"
_LISTENER_FORM = Matches(_LISTENER, "NAME://host:port")

H, M, L = Importance.HIGH, Importance.MEDIUM, Importance.LOW
_KEYS = [
    ConfigKey("broker.id", Type.INT, REQUIRED, at_least(0), H,
              "This broker's id, unique in the cluster."),
    ConfigKey("listeners", Type.LIST, REQUIRED, _LISTENER_FORM, H,
              "Sockets to listen on, `NAME://host:port`. `NAME` is a security protocol "
              "(`PLAINTEXT`, `SSL`, `SASL_PLAINTEXT`, `SASL_SSL`) or a name mapped by "
              "`listener.security.protocol.map`; names are case-insensitive and unique. "
              "Empty host = every interface; IPv6 in brackets (`[::1]`); port 0 = any free port."),
    ConfigKey("listener.security.protocol.map", Type.LIST, (),
              Matches(r"[A-Za-z0-9_.-]+:[A-Za-z_]+", "NAME:PROTOCOL"), M,
              "Security protocol of custom listener names "
              "(`CLIENT:SASL_SSL,INTERNAL:SASL_PLAINTEXT`). Names that are protocols keep "
              "working without an entry.", default_doc="each protocol to itself"),
    ConfigKey("advertised.listeners", Type.LIST, None, _LISTENER_FORM, H,
              "Addresses given to clients in Metadata. Each name must be in `listeners`; the "
              "host must be reachable (not empty, `0.0.0.0` or `::`).",
              default_doc="the bound addresses"),
    ConfigKey("inter.broker.listener.name", Type.STRING, None, None, M,
              "Listener other brokers use to reach this one (forwarding to the controller). "
              "Must be in `listeners`.",
              default_doc="first SASL listener (else the first listener)"),
    ConfigKey("inter.broker.sasl.mechanism", Type.STRING, "SCRAM-SHA-512",
              OneOf(SCRAM_MECHANISMS), M, "Mechanism brokers use to authenticate to each other."),
    ConfigKey("inter.broker.sasl.username", Type.STRING, None, None, M,
              "SCRAM user brokers authenticate as when forwarding."),
    ConfigKey("inter.broker.sasl.password", Type.PASSWORD, None, None, M,
              "That user's password."),
    ConfigKey("zookeeper.connect", Type.STRING, REQUIRED, None, H,
              "ZooKeeper ensemble, `host:port[,host:port...][/chroot]`; the chroot is "
              "created if missing."),
    ConfigKey("zookeeper.session.timeout.ms", Type.INT, 18000, at_least(1), H,
              "ZooKeeper session timeout."),
    ConfigKey("zookeeper.connection.timeout.ms", Type.INT, None, at_least(1), M,
              "How long to wait for the first connection at start.",
              default_doc="`zookeeper.session.timeout.ms`"),
    *ZK_SECURITY_KEYS,
    ConfigKey("zookeeper.max.staleness.ms", Type.LONG, 3000, at_least(1, also=(-1,)), M,
              "A broker whose view of ZooKeeper was last confirmed current longer ago than "
              "this authenticates no token or SCRAM user, and serves no token connection, "
              "until it has caught up; with ZooKeeper unreachable it fails them closed "
              "(REQUEST_TIMED_OUT). -1: answer from the cache, as Kafka does."),
    ConfigKey("max.clock.skew.ms", Type.LONG, 30000, at_least(0, also=(-1,)), M,
              "The broker measures its wall clock's offset from the cluster's time "
              "(ZooKeeper's transaction time) and decides every expiry, issue time and "
              "sweep by the corrected clock. Beyond this offset (the offset less its "
              "uncertainty), or before its first measurement, it refuses token logins and "
              "token writes (REQUEST_TIMED_OUT, retriable; audit reason `clock_skew`) and "
              "its controller sweeps nothing: a host clock that far off is broken, and so "
              "are its TLS checks and log times. 30 s is a thousand times what an "
              "NTP-synchronised host drifts and what a measurement adds (half a ZooKeeper "
              "round trip), tighter than Kerberos's 5 minutes, and small against token "
              "lifetimes. -1: never refuse (the corrected clock is still used)."),
    ConfigKey(KAFKA_SHARED, Type.BOOLEAN, False, None, H,
              "Share the ZooKeeper ensemble (and chroot) with the brokers of an Apache Kafka "
              "3.x cluster in ZooKeeper mode: tokensvc elects its controller and registers its "
              "brokers under `/tokensvc`, never writes Kafka's `/controller`, "
              "`/controller_epoch`, `/brokers` or `/cluster/id`, refuses previous master keys, "
              "and stops writing tokens when a KRaft migration starts "
              "(see [kafka.md](kafka.md))."),
    ConfigKey("zookeeper.acl.check.interval.ms", Type.LONG, 300_000, at_least(1000), L,
              "How often the broker reads back the ACLs of the sensitive znodes and of every "
              "root it writes under; an open one is logged and counted in "
              "`tokensvc_zookeeper_insecure_paths` (the check also runs at start)."),
    ConfigKey("sasl.enabled.mechanisms", Type.LIST, SCRAM_MECHANISMS, OneOf(SASL_MECHANISMS), M,
              "Mechanisms offered on SASL listeners; must not be empty when a SASL listener "
              "exists. `OAUTHBEARER` (KIP-768 JWT logins, see [oauth.md](oauth.md)) needs "
              f"`{OAUTH_MAPPINGS_FILE}`."),
    ConfigKey("sasl.server.max.receive.size", Type.INT, 524288, at_least(1), L,
              "Largest SASL message accepted before authentication, and the largest frame a "
              "connection may send before its first successful login."),
    ConfigKey("sasl.scram.accept.repeated.client.nonce", Type.BOOLEAN, False, None, L,
              "Accept the client-final nonce of librdkafka < 2.6.1 (client nonce + full "
              "server nonce)."),
    ConfigKey("sasl.oauthbearer.expected.audience", Type.LIST, (), None, M,
              "OAUTHBEARER: the JWT's `aud` must hold one of these (Kafka's key). Empty = "
              "the audience is not checked.", default_doc="none"),
    ConfigKey("sasl.oauthbearer.expected.issuer", Type.STRING, None, None, M,
              "OAUTHBEARER: the JWT's `iss` must be this (Kafka's key). Unset = any issuer "
              "is accepted for the keys of `sasl.oauthbearer.jwks.endpoint.url`; the "
              "mappings then decide by `iss`."),
    ConfigKey("sasl.oauthbearer.sub.claim.name", Type.STRING, "sub", None, L,
              "OAUTHBEARER: the claim naming the subject (Kafka's key)."),
    ConfigKey("sasl.oauthbearer.scope.claim.name", Type.STRING, "scope", None, L,
              "OAUTHBEARER: the claim holding the scopes, a space-separated string or a "
              "list (Kafka's key)."),
    ConfigKey("sasl.oauthbearer.clock.skew.seconds", Type.INT, 30, at_least(0), L,
              "OAUTHBEARER: seconds of difference tolerated between the issuer's clock and "
              "the cluster's for `exp`, `nbf` and `iat` (Kafka's key)."),
    ConfigKey("sasl.oauthbearer.jwks.endpoint.url", Type.STRING, None,
              Matches(r"(https?|file):.+", "https://... or file:/path"), M,
              "OAUTHBEARER: the issuer's JWKS, an HTTPS URL (plain HTTP only to a loopback "
              "address) or a `file:` URL of a local JWKS file (Kafka's key). More issuers "
              f"may be declared in `{OAUTH_MAPPINGS_FILE}`."),
    ConfigKey("sasl.oauthbearer.jwks.endpoint.refresh.ms", Type.LONG, 3_600_000, at_least(1), L,
              "OAUTHBEARER: how often the JWKS endpoint is fetched again (Kafka's key). A "
              "JWT whose `kid` the set lacks triggers a refetch at once (at most once a "
              "minute per `kid`, once a second in all)."),
    ConfigKey("sasl.oauthbearer.jwks.endpoint.retry.backoff.ms", Type.LONG, 100, at_least(1), L,
              "OAUTHBEARER: first wait before fetching a failed JWKS endpoint again, "
              "doubling (Kafka's key)."),
    ConfigKey("sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms", Type.LONG, 10_000,
              at_least(1), L, "OAUTHBEARER: longest wait between two JWKS fetch attempts "
              "(Kafka's key)."),
    ConfigKey("sasl.oauthbearer.jwks.endpoint.ca.location", Type.STRING, None, None, L,
              "OAUTHBEARER: PEM bundle of the CAs that sign the JWKS endpoint's "
              "certificate.", default_doc="the system's CAs", path=PathKind.FILE),
    ConfigKey(OAUTH_MAPPINGS_FILE, Type.STRING, None, None, H,
              "OAUTHBEARER: the TOML file mapping an issuer's identities to principals, "
              "each with its token policy (longest token lifetime, labels, tokens for "
              "other owners), and declaring issuers beyond the one of Kafka's keys. "
              "Re-read when it changes. A login no mapping matches is refused. See "
              "[oauth.md](oauth.md).", path=PathKind.FILE),
    ConfigKey("super.users", Type.STRING, None, None, H,
              "`;`-separated principals every authorization check allows "
              "(`User:admin;User:ops`).", default_doc="none"),
    ConfigKey("allow.everyone.if.no.acl.found", Type.BOOLEAN, False, None, H,
              "Allow an operation on a resource that has no ACL at all."),
    ConfigKey("authorizer.class.name", Type.STRING, "", OneOf(("", *AUTHORIZERS)), H,
              "`\"\"` = no authorizer (every authenticated principal is allowed everything). "
              "Both names select tokensvc's ACL authorizer; Kafka's is accepted so Kafka "
              "configurations work unchanged."),
    ConfigKey("early.start.listeners", Type.LIST, (), None, L,
              "Listeners opened before the token cache and ACLs have loaded (KIP-801); the "
              "others open once they have. Each must be in `listeners`.", default_doc="none"),
    ConfigKey("ssl.keystore.type", Type.STRING, "PEM", OneOf(("PEM",)), M,
              "Only PEM is supported."),
    ConfigKey("ssl.keystore.location", Type.STRING, None, None, H,
              "PEM file holding the private key and the certificate chain. Required when any "
              "listener is `SSL` or `SASL_SSL`; must be a readable file.", path=PathKind.FILE),
    ConfigKey("ssl.key.password", Type.PASSWORD, None, None, H,
              "Password of an encrypted private key."),
    ConfigKey("ssl.truststore.type", Type.STRING, "PEM", OneOf(("PEM",)), M,
              "Only PEM is supported."),
    ConfigKey("ssl.truststore.location", Type.STRING, None, None, H,
              "PEM bundle of CAs that sign client certificates; must be a readable file.",
              path=PathKind.FILE),
    ConfigKey("ssl.client.auth", Type.STRING, "none", OneOf(SSL_CLIENT_AUTH), M,
              "Client certificate policy on SSL listeners. With `none`, an `SSL` listener is "
              "one-way SSL (token requests refused there)."),
    ConfigKey(SECRET_KEY, Type.PASSWORD, "", None, H,
              "The current master key. Empty = delegation tokens disabled "
              "(`DELEGATION_TOKEN_AUTH_DISABLED`, said once in the log at start). Every "
              "broker must have the same value."),
    ConfigKey(MASTER_KEY_ALIAS, Type.PASSWORD, "", None, L,
              f"Kafka's older name of `{SECRET_KEY}`. Giving both with different values is an "
              "error."),
    ConfigKey(SECRET_KEY_PREVIOUS, Type.PASSWORD, "", None, L,
              "Comma-separated previous master keys, kept so tokens made under them still "
              "work during a rotation (see [tokens.md](tokens.md)). Needs a current key."),
    ConfigKey(SECRET_KEY_FILE, Type.STRING, None, None, H,
              "Read the current key from this file (surrounding blanks removed). The file "
              "must not be group- or world-accessible (mode `0600` or stricter) and must not "
              "be empty.", path=PathKind.SECRET_FILE),
    ConfigKey(SECRET_KEY_ENV, Type.STRING, None, None, H,
              "Read the current key from this environment variable; unset or empty is an "
              f"error. At most one of `{SECRET_KEY}`/`{MASTER_KEY_ALIAS}`, `.file` and `.env` "
              "may give the current key."),
    ConfigKey("delegation.token.max.lifetime.ms", Type.LONG, 604_800_000, at_least(1), M,
              "Longest lifetime of a token; longer requests are capped."),
    ConfigKey("delegation.token.expiry.time.ms", Type.LONG, 86_400_000, at_least(1), M,
              "Default renew period: a new token's first expiry is min(issue + this, max), "
              "and a renew that asks for a negative period uses it. May exceed the max "
              "lifetime (the expiry is then the max)."),
    ConfigKey("delegation.token.expiry.check.interval.ms", Type.LONG, 3_600_000,
              at_least(1), L, "How often the controller's expiry sweep removes expired tokens."),
    ConfigKey("delegation.token.implicit.login.enable", Type.BOOLEAN, True, None, M,
              "A SCRAM user name that has no credential but is a live token id logs in as "
              "that token without the `tokenauth` extension (for clients that cannot send "
              "extensions)."),
    ConfigKey("delegation.token.session.alter.access.enable", Type.BOOLEAN, False, None, M,
              "Token-authenticated sessions may alter SCRAM credentials and ACLs (Kafka's "
              "behaviour)."),
    ConfigKey("delegation.token.expire.with.owner", Type.BOOLEAN, True, None, M,
              "When a user's last SCRAM credential is deleted, every token the user owns is "
              "deleted in the same ZooKeeper transaction (and its live sessions closed). "
              "`false` keeps Kafka's behaviour: the tokens live on until they expire. Tokens "
              "the user only requested or may renew are not touched. The user's own password "
              "sessions are closed either way."),
    ConfigKey("delegation.token.max.per.owner", Type.INT, 10_000, at_least(0), M,
              "Live tokens one owner may hold; one more create is refused with "
              "POLICY_VIOLATION and nothing is written (0 = no limit). A job on the token "
              "agent holds 1-2 and a person a handful; 10,000 stops a create in a retry loop "
              "(at 540 creates/s) within 20 s, at about 6 MB of ZooKeeper heap and 0.15 s of "
              "every broker's cold start."),
    ConfigKey("audit.log.dir", Type.STRING, None, None, M,
              "Directory for audit `*.jsonl` files (see [audit.md](audit.md)); unset = no "
              "audit log.", path=PathKind.DIRECTORY),
    ConfigKey("token.cache.snapshot.dir", Type.STRING, None, None, M,
              "Directory where this broker keeps a snapshot of its token cache "
              "(`token-cache.snapshot`, mode 0600; no HMAC, credential or key in it), written "
              "every `token.cache.snapshot.interval.ms` and when the broker stops cleanly. A "
              "restart loads it and reads from ZooKeeper only the tokens changed since; a "
              "snapshot that is damaged, from other ZooKeeper data, or older than the oldest "
              "change notification left is refused (logged, counted in "
              "`tokensvc_cache_snapshot_loads_total`) and every token is loaded from ZooKeeper "
              "(see [performance.md](performance.md#how-a-restart-works-at-1m-tokens)). One "
              "directory per broker. Unset = no snapshot: every start loads every token.",
              path=PathKind.DIRECTORY),
    ConfigKey("token.cache.snapshot.interval.ms", Type.LONG, 60_000, at_least(1000), L,
              "How often the token cache snapshot is written, when the cache followed a change "
              "since the last one. A snapshot older than the change notifications ZooKeeper "
              "keeps (15 minutes, or the last 1,000 once they are a minute old) is refused at "
              "a restart."),
    ConfigKey("audit.queue.size", Type.INT, 10_000, at_least(1), L,
              "Audit events buffered between the request path and the writer thread."),
    ConfigKey("audit.file.max.bytes", Type.LONG, 67_108_864, at_least(1), L,
              "Size at which an audit file is rotated."),
    ConfigKey("audit.file.rotate.ms", Type.LONG, 3_600_000, at_least(1), L,
              "Age at which an audit file is rotated."),
    ConfigKey("audit.required", Type.BOOLEAN, False, None, M,
              "true: a login, a token create, renew, expire or revocation, and a credential "
              "or ACL change are answered only after their audit event is written and "
              "fsynced (one fsync covers every event queued before it); while the audit "
              "cannot be written (disk full, directory gone, read-only) they are refused "
              "with REQUEST_TIMED_OUT (retriable) before anything changes. false: an event "
              "that cannot be written is dropped and counted "
              "in `tokensvc_audit_dropped`. Needs `audit.log.dir`. See "
              "[audit.md](audit.md#audit-you-can-require)."),
    ConfigKey("audit.required.reserve.bytes", Type.LONG, 1_048_576, at_least(4096), L,
              "With `audit.required=true`: disk space the writer holds in a reserve file "
              "(`.audit-reserve-<broker.id>` in `audit.log.dir`) and gives up when the disk "
              "fills, so the events of requests already admitted are still written. While "
              "it cannot be held again, logins and writes are refused."),
    ConfigKey("socket.request.max.bytes", Type.INT, 1_048_576, at_least(1), H,
              "Largest request frame accepted after login; a larger size prefix closes the "
              "connection. The largest request this service serves (a CreateAcls or "
              "AlterUserScramCredentials batch) is a few KB; Kafka's 100 MB default would let "
              "one logged-in user make the broker buffer 100 MB per connection."),
    ConfigKey("queued.max.request.bytes", Type.LONG, 16_777_216, at_least(1, also=(-1,)), M,
              "Broker-wide cap on the bytes of request frames held beyond each connection's "
              "fixed 4 KB receive buffer (as Kafka's memory pool). A connection whose next "
              "frame does not fit stops being read until memory is freed; nothing is refused "
              "or closed for it. Must be at least `socket.request.max.bytes`; -1 = no cap."),
    ConfigKey("connections.max.idle.ms", Type.LONG, 600_000, at_least(1), M,
              "Idle connections are closed after this long."),
    ConfigKey("connection.failed.authentication.delay.ms", Type.INT, 100, at_least(0), L,
              "Delay before answering a failed authentication (slows password guessing)."),
    ConfigKey("connections.max.reauth.ms", Type.LONG, 0, at_least(0), M,
              "KIP-368: sessions must re-authenticate within this time; 0 = off."),
    ConfigKey("max.connections.per.ip", Type.INT, 2000, at_least(0), M,
              "Connections allowed from one client address."),
    ConfigKey("request.timeout.ms", Type.INT, 30_000, at_least(1), M,
              "How long a forwarded request (and a stalled read) may take."),
    ConfigKey("metrics.listener", Type.STRING, None, Matches(_HOST_PORT, "host:port"), L,
              "Prometheus `/metrics` endpoint, e.g. `127.0.0.1:0`; unset = no metrics."),
    ConfigKey("metrics.stall.sample.interval.ms", Type.INT, 5, between(1, 1000), L,
              "How often the stall meter samples the event loop's lag and the GIL's hold "
              "(`tokensvc_event_loop_lag_seconds`, `tokensvc_gil_hold_seconds`). A stall "
              "shows at most one interval shorter than it was. Each sample wakes a thread "
              "and the loop: at 5 ms an idle broker spends about 4% of a core on it, at "
              "50 ms about 0.5%."),
    ConfigKey("cluster.id", Type.STRING, None, None, L,
              "Cluster id reported in Metadata and DescribeCluster."),
    ConfigKey("log.format", Type.STRING, "text", OneOf(("text", "json")), L,
              "Broker log format: `text` (one line per record) or `json` (one JSON object "
              "per line: `time`, `level`, `logger`, `message`, `broker_id` and the record's "
              "structured fields such as `client_host` and `error`; secrets redacted as in "
              "the audit log). See [operations.md](operations.md#json-logs)."),
]

BROKER_CONFIG = ConfigDef(_KEYS, foreign=KAFKA_BROKER_KEYS, foreign_prefixes=KAFKA_BROKER_PREFIXES)
"""Every broker key, declared once."""

KNOWN_KEYS = BROKER_CONFIG.names()


@dataclass(frozen=True, slots=True)
class Listener:
    """One ``NAME://host:port`` endpoint; ``host`` "" means every interface."""

    name: str
    security_protocol: str
    host: str
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.name}://{host}:{self.port}"


@dataclass(frozen=True, kw_only=True)
class BrokerConfig:
    """A checked broker configuration (attribute = key in snake_case).

    Defaults live in :data:`BROKER_CONFIG`, not here: build one with
    :meth:`from_properties` (or :func:`tokensvc.config_loader.load_broker_config`).
    """

    broker_id: int
    listeners: list[Listener]
    zookeeper_connect: str
    master_keys: MasterKeys
    listener_security_protocol_map: dict[str, str]
    advertised_listeners: list[Listener] | None
    inter_broker_listener_name: str | None
    inter_broker_sasl_mechanism: str
    inter_broker_sasl_username: str | None
    inter_broker_sasl_password: str | None = field(repr=False)
    zookeeper_session_timeout_ms: int
    zookeeper_connection_timeout_ms: int
    zookeeper_digest: str | None = field(repr=False)
    zookeeper_max_staleness_ms: int
    max_clock_skew_ms: int
    kafka_zookeeper_shared: bool
    zookeeper_security: ZkSecurity
    zookeeper_acl_check_interval_ms: int
    sasl_enabled_mechanisms: tuple[str, ...]
    sasl_server_max_receive_size: int
    sasl_scram_accept_repeated_client_nonce: bool
    sasl_oauthbearer_expected_audience: tuple[str, ...]
    sasl_oauthbearer_expected_issuer: str | None
    sasl_oauthbearer_sub_claim_name: str
    sasl_oauthbearer_scope_claim_name: str
    sasl_oauthbearer_clock_skew_seconds: int
    sasl_oauthbearer_jwks_endpoint_url: str | None
    sasl_oauthbearer_jwks_endpoint_refresh_ms: int
    sasl_oauthbearer_jwks_endpoint_retry_backoff_ms: int
    sasl_oauthbearer_jwks_endpoint_retry_backoff_max_ms: int
    sasl_oauthbearer_jwks_endpoint_ca_location: str | None
    sasl_oauthbearer_principal_mappings_file: str | None
    super_users: frozenset[KafkaPrincipal]
    allow_everyone_if_no_acl_found: bool
    authorizer_class_name: str
    early_start_listeners: tuple[str, ...]
    ssl_keystore_type: str
    ssl_keystore_location: str | None
    ssl_key_password: str | None = field(repr=False)
    ssl_truststore_type: str
    ssl_truststore_location: str | None
    ssl_client_auth: str
    delegation_token_max_lifetime_ms: int
    delegation_token_expiry_time_ms: int
    delegation_token_expiry_check_interval_ms: int
    delegation_token_implicit_login_enable: bool
    delegation_token_session_alter_access_enable: bool
    delegation_token_max_per_owner: int
    delegation_token_expire_with_owner: bool
    audit_log_dir: str | None
    token_cache_snapshot_dir: str | None
    token_cache_snapshot_interval_ms: int
    audit_queue_size: int
    audit_file_max_bytes: int
    audit_file_rotate_ms: int
    audit_required: bool
    audit_required_reserve_bytes: int
    socket_request_max_bytes: int
    queued_max_request_bytes: int
    connections_max_idle_ms: int
    connection_failed_authentication_delay_ms: int
    connections_max_reauth_ms: int
    max_connections_per_ip: int
    request_timeout_ms: int
    metrics_listener: tuple[str, int] | None
    metrics_stall_sample_interval_ms: int
    cluster_id: str | None
    log_format: str

    @property
    def inter_broker_listener(self) -> Listener | None:
        """The listener named by ``inter.broker.listener.name``."""
        return next((lst for lst in self.listeners if lst.name == self.inter_broker_listener_name), None)

    @property
    def sasl_max_message_bytes(self) -> int:
        """``sasl.server.max.receive.size``, under the name the SASL handler uses."""
        return self.sasl_server_max_receive_size

    @classmethod
    def from_properties(
        cls, props: Mapping[str, str], *, resolved: Mapping[str, str] | None = None
    ) -> BrokerConfig:
        """Check ``props`` (key -> raw string) and build the configuration.

        ``resolved`` holds what the edge read for an indirection: the text of the
        file named by ``delegation.token.secret.key.file`` or the value of the
        variable named by ``delegation.token.secret.key.env``, under that key.
        Keys this table does not declare are ignored (see
        :meth:`ConfigDef.ignored_keys`), unless they look like a typo.
        """
        raw = {str(k).strip(): str(v) for k, v in props.items()}
        return _build(BROKER_CONFIG.parse(raw), resolved or {})


# Attributes built from more than their own key (the rest copy their key's value).
_STRUCTURED = frozenset(
    {
        "listeners",
        "listener_security_protocol_map",
        "advertised_listeners",
        "inter_broker_listener_name",
        "zookeeper_connection_timeout_ms",
        "sasl_enabled_mechanisms",
        "sasl_oauthbearer_expected_audience",
        "super_users",
        "early_start_listeners",
        "metrics_listener",
        "zookeeper_security",
    }
)


def _build(values: Mapping[str, object], resolved: Mapping[str, str]) -> BrokerConfig:
    attributes = {f.name for f in fields(BrokerConfig)} - _STRUCTURED
    simple = {
        key.attribute: values[key.name]
        for key in BROKER_CONFIG.keys.values()
        if key.attribute in attributes
    }
    protocol_map = _protocol_map(values)
    listeners = _listeners(values, "listeners", protocol_map) or []
    if not listeners:
        # "listeners=" or "listeners = ," is set but names nothing: a broker with no
        # port to serve on (Kafka fills only an absent key with its default).
        raise ConfigError("listeners", "names no listener (expected NAME://host:port, ...)")
    names = [lst.name for lst in listeners]
    advertised = _listeners(values, "advertised.listeners", protocol_map)
    for lst in advertised or []:
        if lst.name not in names:
            raise ConfigError("advertised.listeners", f"listener {lst.name} is not in listeners")
        if lst.host in ("", "0.0.0.0", "::"):
            raise ConfigError("advertised.listeners", f"{lst} does not name a reachable host")

    mechanisms = values["sasl.enabled.mechanisms"]
    sasl_listeners = [lst for lst in listeners if lst.security_protocol.startswith("SASL_")]
    if sasl_listeners and not mechanisms:
        raise ConfigError("sasl.enabled.mechanisms", "is empty but SASL listeners are configured")
    if OAUTHBEARER in mechanisms and not values[OAUTH_MAPPINGS_FILE]:
        raise ConfigError("sasl.enabled.mechanisms",
                          f"OAUTHBEARER needs {OAUTH_MAPPINGS_FILE} (who may log in as whom)")

    queued, frame_max = values["queued.max.request.bytes"], values["socket.request.max.bytes"]
    if 0 < queued < frame_max:
        # As Kafka: a frame larger than the whole cap could never be read.
        raise ConfigError(
            "queued.max.request.bytes",
            f"must be >= socket.request.max.bytes ({frame_max}) or -1, got {queued}",
        )

    inter_name = values["inter.broker.listener.name"]
    if inter_name is not None:
        inter_name = str(inter_name).upper()
        if inter_name not in names:
            raise ConfigError("inter.broker.listener.name", f"listener {inter_name} is not in listeners")
    else:
        inter_name = (sasl_listeners or listeners)[0].name

    early = tuple(str(name).upper() for name in values["early.start.listeners"])
    for name in early:
        if name not in names:
            raise ConfigError("early.start.listeners", f"listener {name} is not in listeners")

    ssl_listeners = [lst for lst in listeners if lst.security_protocol in ("SSL", "SASL_SSL")]
    if ssl_listeners and values["ssl.keystore.location"] is None:
        raise ConfigError(
            "ssl.keystore.location", f"is required by the {ssl_listeners[0].name} listener"
        )

    if values[KAFKA_SHARED] and str(values[SECRET_KEY_PREVIOUS] or "").strip(" ,"):
        # A Kafka broker knows one delegation.token.secret.key: a token made under a key
        # tokensvc still accepts as "previous" would log in here and nowhere on Kafka.
        raise ConfigError(
            SECRET_KEY_PREVIOUS,
            f"cannot be used with {KAFKA_SHARED}=true: Kafka brokers know only "
            f"{SECRET_KEY}, so tokens made under a previous key would not log in on them "
            "(rotate as docs/kafka.md says)",
        )
    if values["audit.required"] and not values["audit.log.dir"]:
        raise ConfigError("audit.required", "is true but audit.log.dir is not set")
    session_timeout = values["zookeeper.session.timeout.ms"]
    connection_timeout = values["zookeeper.connection.timeout.ms"]
    return BrokerConfig(
        **simple,
        zookeeper_security=zk_security_from_values(values, resolved.get(JAAS_FILE)),
        listeners=listeners,
        listener_security_protocol_map=protocol_map,
        advertised_listeners=advertised,
        inter_broker_listener_name=inter_name,
        zookeeper_connection_timeout_ms=(
            session_timeout if connection_timeout is None else connection_timeout
        ),
        sasl_enabled_mechanisms=tuple(mechanisms),
        sasl_oauthbearer_expected_audience=tuple(
            a.strip() for a in values["sasl.oauthbearer.expected.audience"] if a.strip()),
        super_users=_super_users(values["super.users"]),
        early_start_listeners=early,
        metrics_listener=_host_port(values["metrics.listener"]),
        master_keys=_master_keys(values, resolved),
    )


def _protocol_map(values: Mapping[str, object]) -> dict[str, str]:
    key = "listener.security.protocol.map"
    items = values[key]
    if not items:
        return {proto: proto for proto in SECURITY_PROTOCOLS}
    mapping: dict[str, str] = {}
    for item in items:
        name, _, proto = item.partition(":")
        name, proto = name.strip().upper(), proto.strip().upper()
        if proto not in SECURITY_PROTOCOLS:
            raise ConfigError(
                key, f"{proto!r} is not a security protocol ({', '.join(SECURITY_PROTOCOLS)})"
            )
        if name in mapping:
            raise ConfigError(key, f"listener name {name} is mapped twice")
        mapping[name] = proto
    return mapping


def _listeners(
    values: Mapping[str, object], key: str, protocol_map: Mapping[str, str]
) -> list[Listener] | None:
    items = values[key]
    if items is None:
        return None
    result: list[Listener] = []
    for item in items:
        match = re.fullmatch(_LISTENER, item)
        assert match is not None  # the key's validator checked the form
        name = match["name"].upper()
        protocol = protocol_map.get(name) or (name if name in SECURITY_PROTOCOLS else None)
        if protocol is None:
            raise ConfigError(
                key,
                f"listener name {name} is neither a security protocol nor mapped by "
                "listener.security.protocol.map",
            )
        port = int(match["port"])
        if port > 65535:
            raise ConfigError(key, f"port {port} of {item!r} is out of range")
        if any(lst.name == name for lst in result):
            raise ConfigError(key, f"listener name {name} is used twice")
        result.append(Listener(name, protocol, match["host"].strip("[]"), port))
    return result


def _host_port(text: object) -> tuple[str, int] | None:
    if text is None:
        return None
    match = re.fullmatch(_HOST_PORT, str(text))
    assert match is not None  # the key's validator checked the form
    if int(match["port"]) > 65535:
        raise ConfigError("metrics.listener", f"port {match['port']} is out of range")
    return match["host"].strip("[]"), int(match["port"])


def _super_users(text: object) -> frozenset[KafkaPrincipal]:
    users = set()
    for item in str(text or "").split(";"):
        if item.strip():
            try:
                users.add(KafkaPrincipal.parse(item.strip()))
            except ValueError as exc:
                raise ConfigError("super.users", str(exc)) from exc
    return frozenset(users)


def master_key_source(props: Mapping[str, str]) -> str | None:
    """The indirection the current master key comes from (``SECRET_KEY_FILE`` or
    ``SECRET_KEY_ENV``), None when it is given inline or not at all. Raises
    :class:`ConfigError` when more than one source gives it."""
    direct = (props.get(SECRET_KEY) or "").strip()
    alias = (props.get(MASTER_KEY_ALIAS) or "").strip()
    if direct and alias and direct != alias:
        raise ConfigError(MASTER_KEY_ALIAS, f"conflicts with {SECRET_KEY}: give only one of them")
    sources = []
    if direct or alias:
        sources.append(SECRET_KEY if direct else MASTER_KEY_ALIAS)
    for key in (SECRET_KEY_FILE, SECRET_KEY_ENV):
        if (props.get(key) or "").strip():
            sources.append(key)
    if len(sources) > 1:
        raise ConfigError(sources[1], f"conflicts with {sources[0]}: give one source for the key")
    return sources[0] if sources and sources[0] in (SECRET_KEY_FILE, SECRET_KEY_ENV) else None


def _master_keys(values: Mapping[str, object], resolved: Mapping[str, str]) -> MasterKeys:
    source = master_key_source({k: str(v or "") for k, v in values.items()
                                if k in (SECRET_KEY, MASTER_KEY_ALIAS, SECRET_KEY_FILE, SECRET_KEY_ENV)})
    if source is None:
        current = str(values[SECRET_KEY] or values[MASTER_KEY_ALIAS] or "")
    else:
        current = resolved.get(source, "")
        if not current:
            raise ConfigError(source, "was not read: load the file with tokensvc.config_loader")
    previous = [key.strip() for key in str(values[SECRET_KEY_PREVIOUS]).split(",") if key.strip()]
    if previous and not current:
        raise ConfigError(SECRET_KEY_PREVIOUS, "needs a current key (tokens are disabled)")
    return MasterKeys(current, previous)
