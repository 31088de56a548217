"""The broker's gauges: read from its parts when the metrics endpoint is scraped.

Owns the registration of every broker-wide gauge whose value lives in a part (cache
sizes, resyncs, the controller role, the expiry sweep, the audit queue, the group
commit, sessions, the view's freshness, the clock). Names and help texts are the
metrics' contract (docs/operations.md). Must not: change a part, or keep a value of
its own (a gauge reads its part when scraped).
"""

from __future__ import annotations

from tokensvc.broker.assembly import BrokerParts, LocalParts
from tokensvc.core.config import BrokerConfig

# Owners shown by the tokensvc_owner_tokens gauge (the largest).
TOP_OWNERS = 10


def register_gauges(config: BrokerConfig, local: LocalParts, parts: BrokerParts) -> None:
    """Register the gauges on ``local.metrics`` (once, when the broker starts)."""
    m = local.metrics
    m.top_owners(lambda: local.cache.top_owners(TOP_OWNERS))
    m.gauge("tokensvc_token_cache_size", "Tokens in this broker's cache", lambda: len(local.cache))
    m.gauge("tokensvc_zookeeper_insecure_paths",
            "ZooKeeper paths whose ACL lets anyone read a sensitive znode or change one "
            "(checked every zookeeper.acl.check.interval.ms)",
            lambda: len(parts.acl_check.last or ()))
    m.gauge("tokensvc_derived_credentials", "Token SCRAM credentials derived so far",
            local.cache.derived_count)
    m.gauge("tokensvc_cache_resyncs", "Token cache resynchronisations (start included)",
            lambda: parts.token_sync.resync_count)
    m.gauge("tokensvc_cache_caught_up_resyncs",
            "Resyncs after the start that caught the held cache up instead of "
            "reading every token", lambda: parts.token_sync.caught_up_resyncs)
    m.gauge("tokensvc_token_notification_listings",
            "Listings of the token change notifications by this broker's follower",
            lambda: parts.token_sync.listings)
    m.gauge("tokensvc_token_notification_names_listed",
            "Notification names in those listings (every pending one, each listing)",
            lambda: parts.token_sync.listed_names)
    m.gauge("tokensvc_token_follower_reads_skipped",
            "Token reads the follower left out: the state this broker committed (or "
            "forwarded) at the token's last listed change is in the cache already",
            lambda: parts.token_sync.reads_skipped)
    m.gauge("tokensvc_cache_last_resync_seconds", "Duration of the last full resync",
            lambda: (parts.token_sync.last_resync_ms or 0) / 1000.0)
    m.gauge("tokensvc_controller", "1 if this broker is the controller",
            lambda: 1.0 if parts.election.is_controller else 0.0)
    m.gauge("tokensvc_expiry_sweeps", "Expiry sweeps run by this broker", lambda: parts.sweeper.sweeps)
    m.gauge("tokensvc_audit_queue_depth", "Audit events waiting to be written",
            lambda: local.audit.queue_depth)
    m.gauge("tokensvc_audit_dropped", "Audit events dropped because the queue was full",
            lambda: local.audit.dropped)
    m.gauge("tokensvc_audit_writable",
            "1 while the audit log can be written (audit.required: logins and writes "
            "are refused while 0)", lambda: 1.0 if local.audit.writable else 0.0)
    m.gauge("tokensvc_audit_required", "1 if audit.required=true",
            lambda: 1.0 if local.audit.required else 0.0)
    m.gauge("tokensvc_audit_refused",
            "Logins and writes refused because the required audit could not be written",
            lambda: local.audit.refused)
    m.gauge("tokensvc_audit_queue_capacity", "audit.queue.size: events the queue holds",
            lambda: config.audit_queue_size)
    m.gauge("tokensvc_acl_count", "ACL entries loaded in the authorizer",
            lambda: local.authorizer.acl_count if local.authorizer else 0)
    m.gauge("tokensvc_group_commit_batches",
            "Token-write transactions the controller's group commit sent",
            lambda: parts.group_commit.batches)
    m.gauge("tokensvc_group_commit_writes", "Token writes sent by the group commit",
            lambda: parts.group_commit.committed)
    m.gauge("tokensvc_committed_tokens_applied",
            "Committed token states put into this broker's cache without waiting for "
            "its follower (its own group commit, or a controller's envelope answer)",
            lambda: parts.token_sync.order.applied)
    m.gauge("tokensvc_forwarded_cache_waits",
            "Forwarded writes whose answer waited for this broker's followers",
            lambda: parts.forwarder.waited_for_cache)
    m.gauge("tokensvc_sessions", "Authenticated client sessions", lambda: parts.sessions.count())
    m.gauge("tokensvc_token_sessions", "Connections logged in with a token",
            lambda: parts.sessions.token_sessions())
    m.gauge("tokensvc_zookeeper_view_age_seconds",
            "Seconds since this broker's view of ZooKeeper was last confirmed current",
            parts.freshness.age_s)
    m.gauge("tokensvc_stale_view_catch_ups",
            "Requests that found the view of ZooKeeper stale and waited for a confirmation",
            lambda: parts.freshness.catch_ups)
    m.gauge("tokensvc_stale_view_refusals",
            "Requests refused because the view of ZooKeeper could not be confirmed current",
            lambda: parts.freshness.refusals)
    migration = parts.migration
    m.gauge("tokensvc_kafka_kraft_migration",
            "1 once a Kafka ZooKeeper-to-KRaft migration has started on the shared ensemble "
            "(/migration exists): token writes and the expiry sweep have stopped (always 0 "
            "unless kafka.zookeeper.shared=true)",
            lambda: 1.0 if migration is not None and migration.started else 0.0)
    gate = parts.clock_gate
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
