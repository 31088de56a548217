"""Set-ups the benchmarks share: local clusters of real broker processes, preloaded tokens.

Owns how the suite starts brokers (``tokensvc.cluster.LocalCluster``: one process
per broker, a managed ZooKeeper, the suite's master key, and the overrides every
bench broker gets), how it makes token details in bulk, and the two shared
set-ups of :class:`bench.suite.BenchContext`: ``cluster3`` (3 brokers, used by
B1, B3 and B8, and by B2 too in quick mode) and ``preloaded`` (a ZooKeeper holding
``sizes.tokens`` tokens, used by B4 and B5); and the ZooKeeper servers of the benchmarks
that work in a chroot of their own (:func:`zookeeper`: in quick mode one server for all of
them). Each is stopped once the last benchmark of the run that uses it has
finished (and anything else started here when the suite closes).

It must not measure anything: benchmarks time their own work.
"""

from __future__ import annotations

import contextlib
import math
import secrets
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from bench import zkraw
from bench.common import UNLIMITED
from bench.suite import BenchContext
from tokensvc.cluster import LocalCluster
from tokensvc.core.keys import key_id, token_hmac
from tokensvc.core.principal import KafkaPrincipal
from tokensvc.core.token import TokenInformation
from zk.client import ZkSettings
from zk.server import ManagedZooKeeper

DAY_MS = 86_400_000
OWNER = KafkaPrincipal.user("bench-owner")

# Every bench broker: the suite's master key, and no delay after a failed login.
# Kafka's connection.failed.authentication.delay.ms (100 ms here by default) slows
# down password guessing; B3 and B4 poll a token login until it first succeeds, and
# the delay would round every sample up to the next 100 ms.
def broker_overrides(ctx: BenchContext, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    overrides = {
        "delegation.token.secret.key": ctx.master_key,
        "connection.failed.authentication.delay.ms": "0",
    }
    overrides.update(ctx.broker_settings)
    overrides.update(extra or {})
    return overrides


@dataclass
class ClusterHandle:
    """A running local cluster and what benchmarks need to reach it."""

    cluster: LocalCluster
    # How to open its ZooKeeper as its brokers do (TLS and SASL on the secure default).
    zk: ZkSettings
    admin_user: str
    admin_password: str

    @property
    def zk_connect(self) -> str:
        return self.zk.connect

    def address(self, broker_id: int) -> str:
        return self.cluster.broker_info(broker_id)["listeners"]["SASL_PLAINTEXT"]

    def controller(self, timeout: float = 30.0) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = zkraw.controller_id(self.zk)
            if found is not None:
                return found
            time.sleep(0.1)
        raise RuntimeError("no controller elected")

    def roles(self) -> tuple[int, list[int]]:
        """(controller id, the other broker ids in order)."""
        controller = self.controller()
        return controller, [b for b in self.cluster.broker_ids() if b != controller]


def start_cluster(
    ctx: BenchContext,
    stack: contextlib.ExitStack,
    name: str,
    brokers: int,
    *,
    zookeeper: str | None = None,
    extra: Mapping[str, str] | None = None,
) -> ClusterHandle:
    """Start ``brokers`` broker processes (and a managed ZooKeeper unless ``zookeeper``);
    stopped when ``stack`` closes."""
    cluster = LocalCluster.up(
        ctx.directory(name),
        brokers=brokers,
        zookeeper=zookeeper,
        overrides=broker_overrides(ctx, extra),
        die_with_parent=True,
        insecure_zookeeper=ctx.insecure_zookeeper,
    )
    stack.callback(cluster.down)
    admin = cluster.info["admin"]
    return ClusterHandle(cluster, cluster.zk_settings(), admin["username"], admin["password"])


def cluster3(ctx: BenchContext) -> ClusterHandle:
    """The shared 3-broker cluster (B1, B3, B8). In quick mode B2 runs on it too, after
    them (the full run gives B2 a cluster of its own: see ``bench.b2_forwarded_creates``),
    so it starts without the per-owner token limit B2 needs lifted."""
    if ctx.quick:
        return ctx.shared("cluster3", lambda stack: start_cluster(
            ctx, stack, "cluster3", 3, extra=UNLIMITED),
            users=("B1", "B3", "B8", "B2"))
    return ctx.shared("cluster3", lambda stack: start_cluster(ctx, stack, "cluster3", 3),
                      users=("B1", "B3", "B8"))


#: Quick mode: the benchmarks that share one ZooKeeper server (:func:`zookeeper`).
QUICK_ZOOKEEPER_USERS = ("B4", "B5", "B9", "B13", "B16")


@contextlib.contextmanager
def zookeeper(ctx: BenchContext, name: str) -> Iterator[ManagedZooKeeper]:
    """A managed ZooKeeper server with its default settings, for a benchmark that works
    under a chroot of its own: a server of its own (in ``ctx.directory(name)``), stopped
    when the block ends. In quick mode the benchmarks of :data:`QUICK_ZOOKEEPER_USERS`
    share one, stopped after the last of them: at smoke-test sizes a JVM start each was
    much of what they cost."""
    def start(stack: contextlib.ExitStack, directory: str) -> ManagedZooKeeper:
        server = ManagedZooKeeper(ctx.directory(directory), die_with_parent=True)
        server.start()
        stack.callback(server.stop)
        return server

    if ctx.quick:
        yield ctx.shared("quick-zookeeper", lambda stack: start(stack, "quick-zk"),
                         users=QUICK_ZOOKEEPER_USERS)
        return
    with contextlib.ExitStack() as stack:
        yield start(stack, name)


def new_token_id() -> str:
    """16 random bytes, URL-safe base64 without padding: Kafka's token id."""
    return secrets.token_urlsafe(16)


def make_tokens(master_key: str, count: int) -> list[TokenInformation]:
    """``count`` tokens of :data:`OWNER` under ``master_key``, valid for a day."""
    now = int(time.time() * 1000)
    kid = key_id(master_key)
    expiry = now + DAY_MS
    return [
        TokenInformation(new_token_id(), OWNER, OWNER, (), now, expiry, now + 7 * DAY_MS, kid)
        for _ in range(count)
    ]


def token_password(ctx: BenchContext, token_id: str) -> str:
    """The SCRAM password of a token: standard base64 of its HMAC (what the owner got)."""
    import base64

    return base64.b64encode(token_hmac(ctx.master_key, token_id)).decode("ascii")


@dataclass
class Preloaded:
    """A ZooKeeper chroot holding ``tokens`` and the managed server behind it."""

    server: ManagedZooKeeper
    tokens: list[TokenInformation]
    load_seconds: float

    @property
    def connect(self) -> str:
        """The connect string of the chroot with the tokens (one cluster at a time uses it)."""
        return f"{self.server.connect}/preloaded"


def preloaded(ctx: BenchContext) -> Preloaded:
    """The shared ZooKeeper with ``sizes.tokens`` tokens in ``/preloaded`` (B4, B5)."""

    def start(stack: contextlib.ExitStack) -> Preloaded:
        server = stack.enter_context(zookeeper(ctx, "preloaded-zk"))
        tokens = make_tokens(ctx.master_key, ctx.sizes.tokens)
        started = time.monotonic()
        zkraw.write_tokens(f"{server.connect}/preloaded", tokens)
        return Preloaded(server, tokens, time.monotonic() - started)

    return ctx.shared("preloaded", start, users=("B4", "B5"))


@contextlib.contextmanager
def cluster_on(
    ctx: BenchContext, name: str, zookeeper: str, brokers: int = 1,
    extra: Mapping[str, str] | None = None,
) -> Iterator[ClusterHandle]:
    """A cluster on an existing ZooKeeper, stopped when the block ends."""
    with contextlib.ExitStack() as stack:
        yield start_cluster(ctx, stack, name, brokers, zookeeper=zookeeper, extra=extra)


def summary(values: list[float]) -> dict[str, Any]:
    """count, mean, p50, p90, p99 and max of ``values`` (seconds in, milliseconds out)."""
    if not values:
        return {"count": 0}
    ordered = sorted(values)

    def pct(p: float) -> float:
        index = min(len(ordered) - 1, max(0, math.ceil(p / 100 * len(ordered)) - 1))
        return round(ordered[index] * 1000, 3)

    return {
        "count": len(ordered),
        "mean_ms": round(sum(ordered) / len(ordered) * 1000, 3),
        "p50_ms": pct(50),
        "p90_ms": pct(90),
        "p99_ms": pct(99),
        "max_ms": round(ordered[-1] * 1000, 3),
    }


@dataclass
class BesideKafka:
    """tokensvc's 3 brokers and 2 Apache Kafka brokers on one ZooKeeper (B14, B15)."""

    handle: ClusterHandle

    @property
    def cluster(self) -> LocalCluster:
        return self.handle.cluster

    def kafka_addresses(self) -> list[str]:
        return [b["listener"] for b in self.cluster.info["kafka"]["brokers"]]

    def tokensvc_addresses(self) -> list[str]:
        return [self.handle.address(b) for b in self.cluster.broker_ids()]


def beside_kafka(ctx: BenchContext) -> BesideKafka:
    """The shared set-up of tokensvc beside Kafka: ``kafka.zookeeper.shared=true`` on
    three tokensvc brokers, two Kafka 3.9 brokers (no failed-login delay on either side:
    the benchmarks poll logins until they first succeed)."""

    def start(stack: contextlib.ExitStack) -> BesideKafka:
        cluster = LocalCluster.up(
            ctx.directory("beside-kafka"), brokers=3, kafka_brokers=2, die_with_parent=True,
            overrides=broker_overrides(ctx, {"delegation.token.max.per.owner": "100000"}),
            kafka_overrides={"connection.failed.authentication.delay.ms": "0"},
            insecure_zookeeper=ctx.insecure_zookeeper, timeout=180,
        )
        stack.callback(cluster.down)
        admin = cluster.info["admin"]
        return BesideKafka(ClusterHandle(cluster, cluster.zk_settings(), admin["username"],
                                         admin["password"]))

    return ctx.shared("beside-kafka", start, users=("B14", "B15"))
