"""The report's frames: pure Spark transformations that build each report section.

This module owns :class:`Reports`: over one set of in-range, de-duplicated events (and the
token snapshot) it builds token_usage, owner_usage, lifecycle, logins_hourly, findings,
token_origin, revocations and labels (tokens, logins, failures and hosts per value of each
label key the job groups by; a token's labels come from its create or revocation event,
or from the token snapshot). :func:`report_frames` names them as the job writes them and
:func:`order_of` gives each one's row order. The rules are those of
:mod:`tokensvc.audit.rules`, whose pure reference implementation the tests hold these
frames to.

DataFrame expressions only (no Python UDFs): executors need nothing but Spark. It must
not read or write anything (:mod:`.inputs` and :mod:`.output` do) nor run a Spark action.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from tokensvc.audit import aggregates
from tokensvc.audit.reporting.options import DEFAULT_GROUP_BY_LABELS
from tokensvc.audit.rules import (
    FINDING_COLUMNS,
    LIFECYCLE_COLUMNS,
    LOGINS_HOURLY_COLUMNS,
    OWNER_USAGE_COLUMNS,
    RULE_SEVERITY,
    SEVERITIES,
    TOKEN_USAGE_COLUMNS,
    UNUSED_DETAIL,
    RuleSettings,
)

# Hosts listed per label value in the labels report (the count is exact).
LABEL_HOSTS_SHOWN = 20
LABELS_COLUMNS = ("label", "value", "tokens", "owners", "logins_ok", "logins_failed",
                  "distinct_hosts", "hosts", "first_use", "last_use")
_LABEL_MAP = T.MapType(T.StringType(), T.StringType())
# The client id of the token agent's requests (tokensvc.agent.runner.CLIENT_ID): tokens it
# created are "agent"-made in the token_origin report.
AGENT_CLIENT_ID = "tokensvc-agent"
_S, _L, _I = T.StringType(), T.LongType(), T.IntegerType()


def _hour_text(hour_ms: Column) -> Column:
    return F.date_format(F.timestamp_millis(hour_ms), "yyyy-MM-dd'T'HH:00'Z'")


class Reports:
    """The report DataFrames over one set of in-range, de-duplicated events.

    The counts, sums and sets come from partial tables (:mod:`tokensvc.audit.aggregates`):
    ``partials`` (the lake's per-batch tables) when given, else built from ``events``;
    either way one merge per table. The failed-login bursts and the findings per
    event read ``events`` (only the failed logins and the token creates); the token
    origins, revocations and labels read the successful creates and revocations, taken
    from ``events`` once and kept (:meth:`persisted` names what the job releases).
    """

    def __init__(self, events: DataFrame, snapshot: DataFrame, settings: RuleSettings,
                 as_of_ms: int, partials: dict[str, DataFrame] | None = None,
                 group_by_labels: tuple[str, ...] = DEFAULT_GROUP_BY_LABELS) -> None:
        self.settings = settings
        self.as_of_ms = as_of_ms
        self.events = events
        self.snapshot = snapshot
        self.group_by_labels = group_by_labels
        self.logins = aggregates.logins(events)
        self.requests = aggregates.requests(events)
        if partials is None:
            partials = {name: build(events) for name, build in aggregates.PARTIALS.items()}
        self.partials = partials
        # The successful creates and revocations of tokens: a few rows per token, read by
        # token_origin, revocations and the labels (and the page), taken from the events
        # in one scan instead of one each.
        self.token_changes = events.filter(
            (F.col("type") == "token") & F.col("action").isin("create", "revoke")
            & (F.col("outcome") == "success") & F.col("token_id").isNotNull()
        ).select("action", "token_id", "owner", "requester", "client_id", "reason", "labels",
                 "ts").persist()
        # One row per token, with its labels (null if none are known): small, read by most.
        tokens = partials[aggregates.TOKENS]
        self.tokens = aggregates.merge_tokens(tokens.unionByName(
            aggregates.snapshot_tokens(snapshot, tokens))).join(
            self._token_labels(), "token_id", "left").persist()

    def persisted(self) -> tuple[DataFrame, ...]:
        """The DataFrames this object persisted (the job releases them)."""
        return self.tokens, self.token_changes

    def token_usage(self) -> DataFrame:
        return self.tokens.select(*TOKEN_USAGE_COLUMNS)

    def owner_usage(self) -> DataFrame:
        return self.tokens.filter(F.col("owner").isNotNull()).groupBy("owner").agg(
            F.count("*").alias("tokens"),
            F.sum("logins_ok").alias("logins_ok"),
            F.sum("logins_failed").alias("logins_failed"),
            F.size(F.array_distinct(F.flatten(F.collect_list("hosts")))).alias("distinct_hosts"),
        ).select(*OWNER_USAGE_COLUMNS)

    def token_origin(self) -> DataFrame:
        """Tokens created per owner, agent-made (client id ``tokensvc-agent...``: the token
        agent, docs/agent.md) or hand-made (any other client)."""
        created = self.token_changes.filter(F.col("action") == "create")
        origin = F.when(F.coalesce(F.col("client_id"), F.lit("")).startswith(AGENT_CLIENT_ID),
                        F.lit("agent")).otherwise(F.lit("hand"))
        return created.groupBy(F.coalesce("owner", F.lit("(unknown)")).alias("owner"),
                               origin.alias("origin")).agg(
            F.countDistinct("token_id").alias("tokens"),
            F.min("ts").alias("first_ts"), F.max("ts").alias("last_ts"))

    def revocations(self) -> DataFrame:
        """Tokens revoked without their HMAC, by actor (the requester) and reason
        (``revoked_by_id``, ``revoked_by_owner``, ``owner_deleted``)."""
        revoked = self.token_changes.filter(F.col("action") == "revoke")
        return revoked.groupBy(F.coalesce("requester", F.lit("(unknown)")).alias("actor"),
                               F.coalesce("reason", F.lit("(none)")).alias("reason")).agg(
            F.countDistinct("token_id").alias("tokens"),
            F.countDistinct("owner").alias("owners"),
            F.min("ts").alias("first_ts"), F.max("ts").alias("last_ts"))

    def _token_labels(self) -> DataFrame:
        """``token_id``, ``labels`` (a map) of every token whose labels are known: from its
        create or revocation event (the only events that carry them, docs/audit.md), else
        from the token snapshot. Every other event about a token names it by id only.
        Every such token has a row in the token table (its create or revocation event, or
        its snapshot line, put it there), which carries these labels."""
        from_events = self.token_changes.filter(F.col("labels").isNotNull()).select(
            "token_id", F.from_json("labels", _LABEL_MAP).alias("labels"))
        from_snapshot = self.snapshot.filter(
            F.col("labels").isNotNull() & (F.size("labels") > 0)).select("token_id", "labels")
        return from_events.unionByName(from_snapshot).filter(F.col("labels").isNotNull()) \
            .groupBy("token_id").agg(F.first("labels").alias("labels"))

    def labels(self) -> DataFrame:
        """Per value of each label key in ``group_by_labels``: the tokens carrying it, their
        owners, successful and failed logins, distinct hosts (and the first
        :data:`LABEL_HOSTS_SHOWN` of them), first and last use."""
        labelled = self.tokens.filter(F.col("labels").isNotNull())
        per_key = None
        for key in self.group_by_labels:
            rows = labelled.select(
                F.lit(key).alias("label"), F.col("labels").getItem(key).alias("value"),
                "token_id", "owner", "logins_ok", "logins_failed", "hosts", "first_use",
                "last_use",
            ).filter(F.col("value").isNotNull())
            per_key = rows if per_key is None else per_key.unionByName(rows)
        if per_key is None:
            return self.tokens.sparkSession.createDataFrame([], T.StructType([
                T.StructField("label", _S), T.StructField("value", _S),
                T.StructField("tokens", _L), T.StructField("owners", _L),
                T.StructField("logins_ok", _L), T.StructField("logins_failed", _L),
                T.StructField("distinct_hosts", _I), T.StructField("hosts", T.ArrayType(_S)),
                T.StructField("first_use", _L), T.StructField("last_use", _L)]))
        # No distinct counts: Spark plans two or more of them by copying every row once per
        # count and sorting the copies, which cost seconds here at 2M events (B6). The
        # token table has one row per token, so a token is counted once per value; the
        # owners are counted as a set. (sort_array: the strings' own order, without the
        # comparator function array_sort calls per comparison.)
        hosts = F.sort_array(F.array_distinct(F.flatten(F.collect_list("hosts"))))
        return per_key.groupBy("label", "value").agg(
            F.count(F.lit(1)).alias("tokens"),
            F.size(F.collect_set("owner")).cast(_L).alias("owners"),
            F.sum("logins_ok").cast(_L).alias("logins_ok"),
            F.sum("logins_failed").cast(_L).alias("logins_failed"),
            hosts.alias("all_hosts"),
            F.min("first_use").alias("first_use"), F.max("last_use").alias("last_use"),
        ).select("label", "value", "tokens", "owners", "logins_ok", "logins_failed",
                 F.size("all_hosts").alias("distinct_hosts"),
                 F.slice("all_hosts", 1, LABEL_HOSTS_SHOWN).alias("hosts"),
                 "first_use", "last_use")

    # -- per hour -----------------------------------------------------------------

    def hourly(self) -> DataFrame:
        """Logins and lifecycle changes per hour."""
        return aggregates.merge_hours(self.partials[aggregates.HOURS]).withColumn(
            "hour", _hour_text(F.col("hour_ms")))

    @staticmethod
    def lifecycle(hourly: DataFrame) -> DataFrame:
        busy = F.col("creates") + F.col("renews") + F.col("expiries") + F.col("sweeps") > 0
        return hourly.filter(busy).select(*LIFECYCLE_COLUMNS)

    @staticmethod
    def logins_hourly(hourly: DataFrame) -> DataFrame:
        return hourly.filter(F.col("ok") + F.col("failed") > 0).select(*LOGINS_HOURLY_COLUMNS)

    # -- findings -----------------------------------------------------------------

    def _owners(self) -> DataFrame:
        return self.tokens.select(F.col("token_id").alias("owner_of"), "owner")

    def _bursts(self) -> DataFrame:
        """Both burst rules: one window over (kind, key) of failed logins."""
        s = self.settings
        failures = self.logins.filter(~F.col("ok"))
        keyed = failures.filter((F.col("kind") == "token") & F.col("tid").isNotNull()).select(
            F.lit("failed_login_burst_token").alias("rule"), F.col("tid").alias("key"), "ts",
        ).unionByName(failures.filter(F.col("client_host").isNotNull()).select(
            F.lit("failed_login_burst_host").alias("rule"), F.col("client_host").alias("key"),
            "ts",
        ))
        window = Window.partitionBy("rule", "key").orderBy("ts").rangeBetween(
            0, s.burst_window_ms)
        bursts = (
            keyed.select("rule", "key", "ts", F.count(F.lit(1)).over(window).alias("n"),
                         F.max("ts").over(window).alias("end"))
            .filter(F.col("n") >= s.burst_threshold)
            .groupBy("rule", "key").agg(F.min("ts").alias("first_ts"),
                                        F.max("end").alias("last_ts"), F.max("n").alias("count"))
            .join(self._owners(), F.col("key") == F.col("owner_of"), "left")
        )
        by_token = F.col("rule") == "failed_login_burst_token"
        return self._finding(
            bursts, F.col("rule"),
            token_id=F.when(by_token, F.col("key")), owner=F.when(by_token, F.col("owner")),
            client_host=F.when(~by_token, F.col("key")),
            detail=F.format_string(f"%d failed logins within {s.burst_window_s}s",
                                   F.col("count")),
        )

    def _grouped(self) -> DataFrame:
        """unknown_token, expired_token_use and token_session_token_request, in one
        aggregation keyed by (rule, token id or requester, client host)."""
        grouped = aggregates.merge_grouped(self.partials[aggregates.GROUPED]).join(
            self._owners(), F.col("key") == F.col("owner_of"), "left")
        rule, count = F.col("rule"), F.col("count")
        session = rule == "token_session_token_request"
        detail = (
            F.when(rule == "unknown_token",
                   F.format_string("%d logins with an unknown token id", count))
            .when(rule == "expired_token_use",
                  F.format_string("%d logins with an expired token", count))
            .otherwise(F.format_string("%d token requests from a token-authenticated session",
                                       count))
        )
        return self._finding(
            grouped, rule, token_id=F.when(~session, F.col("key")),
            owner=F.when(session, F.col("key")).otherwise(F.col("owner")),
            client_host=F.col("client_host"), detail=detail,
        )

    def _per_token(self) -> DataFrame:
        """too_many_hosts and unused_before_expiry: filters of the token table."""
        s = self.settings
        many = F.col("distinct_hosts") > s.host_threshold
        unused = F.col("logins_ok") == 0
        from_log = unused & F.col("created").isNotNull() & F.col("ended").isNotNull()
        from_snapshot = (unused & ~from_log & F.col("in_snapshot")
                         & (F.col("snapshot_end_ms") < F.lit(self.as_of_ms)))
        rows = self.tokens.filter(many).select(
            F.lit("too_many_hosts").alias("rule"), "token_id", "owner",
            F.format_string(f"used from %d distinct hosts (threshold {s.host_threshold})",
                            F.col("distinct_hosts")).alias("detail"),
            F.col("first_use").alias("first_ts"), F.col("last_use").alias("last_ts"),
            F.col("distinct_hosts").cast(_L).alias("count"),
        ).unionByName(self.tokens.filter(from_log | from_snapshot).select(
            F.lit("unused_before_expiry").alias("rule"), "token_id", "owner",
            F.when(~from_log, UNUSED_DETAIL["snapshot"])
            .when(F.col("ended.how") == "sweep", UNUSED_DETAIL["sweep"])
            .otherwise(UNUSED_DETAIL["expire"]).alias("detail"),
            F.when(from_log, F.col("created")).otherwise(F.col("issue_ms")).alias("first_ts"),
            F.when(from_log, F.col("ended.ts")).otherwise(F.col("snapshot_end_ms"))
            .alias("last_ts"),
            F.lit(0).cast(_L).alias("count"),
        ))
        return self._finding(rows, F.col("rule"), token_id=F.col("token_id"),
                             owner=F.col("owner"), client_host=F.lit(None),
                             detail=F.col("detail"))

    def _other_owner(self) -> DataFrame:
        rows = self.requests.filter(
            (F.col("action") == "create") & F.col("ok") & F.col("owner").isNotNull()
            & F.col("requester").isNotNull() & (F.col("owner") != F.col("requester"))
        ).select("token_id", "owner", "client_host", "requester",
                 F.col("ts").alias("first_ts"), F.col("ts").alias("last_ts"),
                 F.lit(1).alias("count"))
        return self._finding(rows, F.lit("created_for_other_owner"), token_id=F.col("token_id"),
                             owner=F.col("owner"), client_host=F.col("client_host"),
                             detail=F.concat(F.lit("created by "), F.col("requester")))

    @staticmethod
    def _finding(df: DataFrame, rule: Column, *, token_id: Column, owner: Column,
                 client_host: Column, detail: Column) -> DataFrame:
        return df.select(
            rule.alias("rule"), token_id.cast(_S).alias("token_id"),
            owner.cast(_S).alias("owner"), client_host.cast(_S).alias("client_host"),
            detail.alias("detail"), F.col("first_ts").cast(_L).alias("first_ts"),
            F.col("last_ts").cast(_L).alias("last_ts"), F.col("count").cast(_L).alias("count"),
        )

    def findings(self) -> DataFrame:
        parts = [self._bursts(), self._grouped(), self._per_token(), self._other_owner()]
        union = parts[0]
        for df in parts[1:]:
            union = union.unionByName(df)
        return union.select(*FINDING_COLUMNS)



def report_frames(reports: Reports, hourly: DataFrame) -> dict[str, DataFrame]:
    """Every report by name (the names of :data:`~.options.REPORTS`), in the order they
    are written; ``hourly`` is :meth:`Reports.hourly`, computed once for two of them."""
    return {
        "token_usage": reports.token_usage(),
        "owner_usage": reports.owner_usage(),
        "lifecycle": reports.lifecycle(hourly),
        "logins_hourly": reports.logins_hourly(hourly),
        "findings": reports.findings(),
        "token_origin": reports.token_origin(),
        "revocations": reports.revocations(),
        "labels": reports.labels(),
    }


def order_of(name: str) -> list[Column]:
    """The row order of each report (deterministic output)."""
    if name == "findings":
        return [F.col("rule"), F.col("first_ts"), F.coalesce("token_id", F.lit("")),
                F.coalesce("client_host", F.lit(""))]
    if name == "token_origin":
        return [F.col("owner"), F.col("origin")]
    if name == "revocations":
        return [F.col("actor"), F.col("reason")]
    if name == "labels":
        return [F.col("label"), F.col("value")]
    key = {"token_usage": "token_id", "owner_usage": "owner"}.get(name, "hour_ms")
    return [F.col(key)]


def severity_rank() -> Column:
    """Each finding's severity as its index in :data:`SEVERITIES` (the most severe first)."""
    rank = F.lit(len(SEVERITIES))
    for rule, severity in RULE_SEVERITY.items():
        rank = F.when(F.col("rule") == rule, SEVERITIES.index(severity)).otherwise(rank)
    return rank
