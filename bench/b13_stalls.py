"""B13: the event loop's stalls on every broker during admin work, at 1M tokens.

Set-up: one managed ZooKeeper (with ``--quick`` the one the suite's quick run shares)
holding the tokens (written straight into it in Kafka's layout,
:func:`bench.zkraw.write_tokens`, as B9 does): ``REVOKED`` of ``User:b13-bulk``,
``DUE`` of ``User:b13-due``, the rest spread over 1,000 owners. Then a 3-broker local
cluster on it (expiry sweep every 500 ms, token cache snapshot every 60 s -- 10 s with ``--quick``
-- when the cache changed; the phases start right after every broker's first write, so
the rest and the revocation fit before the next). Phases, one after the other:

* ``rest``: nothing runs (the reference);
* ``revoke``: ``revoke_tokens(owner=User:b13-bulk)`` through a non-controller, until no
  broker's cache holds any of them (``tokens_absent``);
* ``snapshot``: the cache changed (the revocation): until every broker's
  ``tokensvc_cache_snapshot_writes_total{result="ok"}`` grew (a periodic write each);
* ``describe_all``: one DescribeDelegationToken of every token by the super user on a
  non-controller, read by a process of its own (B9's reader);
* ``resync``: the ZooKeeper session of the other non-controller is expired for real
  (:func:`zk.client.expire_session`, its password taken over), until its
  ``tokensvc_cache_resyncs`` grew (its catch-up after the new session) and 1 s more;
* ``sweep``: ``DUE`` tokens were rewritten (with their notifications) to fall due at one
  instant, some seconds after the rewrite (the brokers follow it meanwhile, not
  measured); from that instant until every broker's cache lost them;
* ``creates``: once every broker wrote the snapshot after the sweep and the controller
  purged the sweep's change notifications (by count, once a minute old: until then each
  broker lists all of them on every change it follows, which would be measured instead),
  1,000 CreateDelegationToken requests in flight at once (pipelined over 30 connections,
  10 per broker), until all are answered.

Per phase and broker: the event-loop lag, its CPU share and the GIL hold read from the
broker's ``/metrics`` (``tokensvc_event_loop_lag_seconds``,
``tokensvc_event_loop_lag_cpu_seconds``, ``tokensvc_gil_hold_seconds``: the bucket
counts at the end minus those at the start), as the p99 and the largest sample,
each given as the bucket bound it is under (``<= 20 ms`` answers the target exactly:
20 ms is a bound); samples over 20 ms are counted. Beside them, the CPU seconds each
process used in the phase (user + system, ``/proc/<pid>/stat``): each broker,
ZooKeeper, and the load generator (this process and the children it waited for),
so a stall of one broker's loop shows apart from a machine with no CPU left; and how
many listings of the token change notifications each broker made, with the names they
held together (``tokensvc_token_notification_listings``, ``..._names_listed``).

Target (issue 38): the lag's largest sample <= 20 ms on every broker in every phase.
``--quick`` (CI smoke) runs 5,000 tokens with 250 revoked, 250 due and 100
creates, rests 1 s, lets the due tokens fall due 2 s after their rewrite (5 s in the full
run), and does not wait for the purge before the creates.
``python -m bench.b13_stalls --tokens N`` runs one size alone.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import multiprocessing
import os
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from bench import env, zkraw
from bench.b9_scale import _describe_all
from bench.suite import BenchContext, Outcome, Target, run_alone
from bench.wire import WireError, create_token_body, open_logged_in
from tokensvc.admin import AdminClient, tokens_absent
from tokensvc.broker.loop.loopwatch import STALL_BUCKETS
from tokensvc.client_config import load_client_config
from tokensvc.cluster import LocalCluster
from tokensvc.core.keys import key_id
from tokensvc.core.principal import KafkaPrincipal
from tokensvc.core.token import TokenInformation
from tokensvc.protocol.api import ApiKey
from zk import layout
from zk.client import expire_session
from zk.server import ManagedZooKeeper

ID = "B13"
TITLE = "event-loop stalls on every broker during admin work"
BULK = KafkaPrincipal.user("b13-bulk")
DUE_OWNER = KafkaPrincipal.user("b13-due")
OWNERS = 1_000
SWEEP_INTERVAL_MS = 500
TARGET_MS = 20.0
LAG = "tokensvc_event_loop_lag_seconds"
GIL = "tokensvc_gil_hold_seconds"
LAG_CPU = "tokensvc_event_loop_lag_cpu_seconds"
LISTINGS = "tokensvc_token_notification_listings"
NAMES_LISTED = "tokensvc_token_notification_names_listed"
HISTOGRAMS = {"lag": LAG, "lag_cpu": LAG_CPU, "gil": GIL}
START_TIMEOUT_S = 600.0
ONE_BY_ONE_FROM = 200_000  # tokens from which the brokers start one after another
PHASE_TIMEOUT_S = 600.0
# The controller purges notifications beyond 1,000 (zk.notifications.MAX_PENDING) once
# they are a minute old, in batches above 1.5x that.
PURGED_BELOW = 1_500


@dataclass(frozen=True)
class Scale:
    tokens: int
    revoked: int
    due: int
    creates: int
    rest_s: float
    snapshot_interval_s: float
    wait_for_purge: bool  # before the creates (a minute or two; not in the smoke test)
    # How far ahead of their rewrite the due tokens fall due (and 2 ms more per token).
    sweep_lead_s: float

    @classmethod
    def of(cls, quick: bool, tokens: int | None = None) -> Scale:
        if quick:
            return cls(5_000, 250, 250, 100, 1.0, 10.0, False, 2.0)
        return cls(tokens or 1_000_000, 10_000, 10_000, 1_000, 5.0, 60.0, True, 5.0)


# -- what a phase reads from the processes -----------------------------------------------


def _cpu_s(pid: int | None, *, children: bool = False) -> float | None:
    """CPU seconds (user + system; with ``children``, also of the children waited for)."""
    if pid is None:
        return None
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    ticks = int(fields[11]) + int(fields[12])
    if children:
        ticks += int(fields[13]) + int(fields[14])
    return ticks / os.sysconf("SC_CLK_TCK")


def scrape(address: str) -> dict[str, Any]:
    """The stall histograms (cumulative buckets, count, sum) and the gauges B13 follows."""
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=30) as response:
        text = response.read().decode()
    out: dict[str, Any] = {hist: {} for hist in HISTOGRAMS.values()}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            name = sample.name
            for hist in HISTOGRAMS.values():
                if name == f"{hist}_bucket":
                    out[hist][float(sample.labels["le"])] = sample.value
                elif name == f"{hist}_sum":
                    out[f"{hist}_sum"] = sample.value
            if name == "tokensvc_cache_snapshot_writes_total" and sample.labels.get("result") == "ok":
                out["snapshot_writes"] = sample.value
            elif name in ("tokensvc_cache_resyncs", "tokensvc_token_cache_size",
                          "tokensvc_cache_caught_up_resyncs", "tokensvc_controller",
                          LISTINGS, NAMES_LISTED):
                out[name] = sample.value
    return out


def stall_summary(before: dict[float, float], after: dict[float, float],
                  sum_before: float = 0.0, sum_after: float = 0.0) -> dict[str, Any]:
    """Samples, p99 and largest (each as the bucket bound it is under, ms), mean and the
    samples over the target, from two readings of one cumulative histogram."""
    bounds = sorted(after)
    delta = [after[b] - before.get(b, 0.0) for b in bounds]
    count = delta[-1] if delta else 0.0
    if count <= 0:
        return {"samples": 0}

    def bound_ms(bound: float) -> float | str:
        return "inf" if bound == float("inf") else round(bound * 1000, 1)

    p99 = next(b for b, c in zip(bounds, delta, strict=True) if c >= 0.99 * count)
    largest = next(b for b, c in zip(bounds, delta, strict=True) if c >= count)
    below = [b for b, c in zip(bounds, delta, strict=True) if c < count]
    at_target = next((c for b, c in zip(bounds, delta, strict=True)
                      if abs(b - TARGET_MS / 1000) < 1e-9), count)
    return {
        "samples": int(count),
        "p99_ms_at_most": bound_ms(p99),
        "max_ms_at_most": bound_ms(largest),
        "max_ms_above": bound_ms(below[-1]) if below else 0.0,
        "mean_ms": round((sum_after - sum_before) / count * 1000, 3),
        f"over_{TARGET_MS:.0f}ms": int(count - at_target),
    }


@dataclass
class Reading:
    at: float
    metrics: dict[int, dict[str, Any]]
    cpu: dict[str, float | None]


class Stage:
    """The processes one phase reads: the brokers' metrics and every process's CPU."""

    def __init__(self, cluster: LocalCluster, zk_pid: int | None) -> None:
        self.cluster = cluster
        self.zk_pid = zk_pid
        self.ids = cluster.broker_ids()

    def metrics_address(self, broker_id: int) -> str:
        return self.cluster.broker_info(broker_id)["metrics"]

    def metrics(self, broker_id: int) -> dict[str, Any]:
        return scrape(self.metrics_address(broker_id))

    def read(self) -> Reading:
        cpu: dict[str, float | None] = {
            f"broker_{b}": _cpu_s(self.cluster.broker_pid(b)) for b in self.ids}
        cpu["zookeeper"] = _cpu_s(self.zk_pid)
        cpu["load_generator"] = _cpu_s(os.getpid(), children=True)
        return Reading(time.monotonic(), {b: self.metrics(b) for b in self.ids}, cpu)

    def phase(self, name: str, work: Callable[[], dict[str, Any] | None]) -> dict[str, Any]:
        before = self.read()
        details = work() or {}
        after = self.read()
        figures: dict[str, Any] = {"seconds": round(after.at - before.at, 3), **details,
                                   "load_avg_1m": round(os.getloadavg()[0], 2)}
        for b in self.ids:
            m0, m1 = before.metrics[b], after.metrics[b]
            figures[f"broker_{b}"] = {
                **{key: stall_summary(m0[h], m1[h], m0.get(f"{h}_sum", 0.0),
                                      m1.get(f"{h}_sum", 0.0))
                   for key, h in HISTOGRAMS.items()},
                "snapshot_writes": int(m1.get("snapshot_writes", 0) - m0.get("snapshot_writes", 0)),
                "controller": bool(m1.get("tokensvc_controller")),
                # How often the token follower listed the change notifications, and how
                # many names those listings held together (what its ZooKeeper reply
                # decoding grows with).
                "listings": int(m1.get(LISTINGS, 0) - m0.get(LISTINGS, 0)),
                "names_listed": int(m1.get(NAMES_LISTED, 0) - m0.get(NAMES_LISTED, 0)),
            }
        figures["cpu_s"] = {k: (round(after.cpu[k] - v, 2)
                                if v is not None and after.cpu[k] is not None else None)
                            for k, v in before.cpu.items()}
        print(f"[B13] {name}: {_line(figures, self.ids)}", file=sys.stderr, flush=True)
        return figures

    def wait(self, what: str, done: Callable[[dict[int, dict[str, Any]]], bool],
             timeout_s: float = PHASE_TIMEOUT_S, every_s: float = 0.25) -> float:
        """Poll every broker's metrics until ``done`` holds; seconds it took."""
        started = time.monotonic()
        while time.monotonic() - started < timeout_s:
            if done({b: self.metrics(b) for b in self.ids}):
                return time.monotonic() - started
            time.sleep(every_s)
        raise RuntimeError(f"B13: {what} did not happen within {timeout_s:.0f} s")


def _line(figures: dict[str, Any], ids: list[int]) -> str:
    parts = []
    for b in ids:
        lag = figures[f"broker_{b}"]["lag"]
        parts.append(f"b{b} lag p99<={lag.get('p99_ms_at_most')} max<={lag.get('max_ms_at_most')}ms"
                     f" (cpu-backed max<={figures[f'broker_{b}']['lag_cpu'].get('max_ms_at_most')})"
                     f" gil max<={figures[f'broker_{b}']['gil'].get('max_ms_at_most')}ms"
                     f" listings {figures[f'broker_{b}']['listings']}"
                     f" ({figures[f'broker_{b}']['names_listed']} names)")
    cpu = " ".join(f"{k}={v}" for k, v in figures["cpu_s"].items())
    return f"{figures['seconds']}s; " + "; ".join(parts) + f"; cpu {cpu}"


# -- set-up ------------------------------------------------------------------------------


def _tokens(master_key: str, scale: Scale, now_ms: int,
            due_out: list[TokenInformation]) -> Iterator[TokenInformation]:
    kid = key_id(master_key)
    for i in range(scale.tokens):
        if i < scale.revoked:
            owner = BULK
        elif i < scale.revoked + scale.due:
            owner = DUE_OWNER
        else:
            owner = KafkaPrincipal.user(f"owner-{i % OWNERS}")
        info = TokenInformation(env.new_token_id(), owner, owner, (), now_ms,
                                now_ms + env.DAY_MS, now_ms + 7 * env.DAY_MS, kid)
        if owner == DUE_OWNER:
            due_out.append(info)
        yield info


@contextlib.contextmanager
def _cluster(ctx: BenchContext, scale: Scale) -> Iterator[tuple[LocalCluster, ManagedZooKeeper,
                                                                list[TokenInformation], float]]:
    with env.zookeeper(ctx, "b13-zk") as zk:
        connect = f"{zk.connect}/b13"
        due: list[TokenInformation] = []
        started = time.monotonic()
        zkraw.write_tokens(connect, _tokens(ctx.master_key, scale, int(time.time() * 1000), due))
        fill_s = time.monotonic() - started
        cluster = LocalCluster.up(
            ctx.directory("b13-cluster"), brokers=3, zookeeper=connect,
            overrides=env.broker_overrides(ctx, {
                "delegation.token.expiry.check.interval.ms": str(SWEEP_INTERVAL_MS),
                "delegation.token.max.per.owner": "10000000",
                "token.cache.snapshot.interval.ms": str(int(scale.snapshot_interval_s * 1000)),
            }),
            die_with_parent=True, timeout=START_TIMEOUT_S,
            # At a million tokens three first listings at once outlast ZooKeeper's
            # request cap on two cores (the one attempt of 2026-11-26): one by one there.
            one_by_one=scale.tokens >= ONE_BY_ONE_FROM)
        try:
            yield cluster, zk, due, fill_s
        finally:
            cluster.down()


# -- the phases --------------------------------------------------------------------------


def _revoke(stage: Stage, answering: str, config: Any) -> dict[str, Any]:
    started = time.monotonic()
    with AdminClient(answering, config, timeout_s=120) as admin:
        result = admin.revoke_tokens(owner=str(BULK))
        acked = time.monotonic() - started
        admin.wait_all_brokers(tokens_absent([t for t, _ in result.revoked], [BULK]),
                               timeout_s=PHASE_TIMEOUT_S)
    return {"revoked": len(result.revoked), "acknowledged_s": round(acked, 3),
            "refused_everywhere_s": round(time.monotonic() - started, 3)}


def _snapshot(stage: Stage, before: dict[int, float]) -> dict[str, Any]:
    took = stage.wait("a snapshot write on every broker", lambda now: all(
        now[b].get("snapshot_writes", 0) > before[b] for b in stage.ids))
    return {"until_written_s": round(took, 3)}


def _describe(address: str, admin: dict[str, Any], expected: int) -> dict[str, Any]:
    spawn = multiprocessing.get_context("spawn")
    sent, out = spawn.Event(), spawn.Queue()
    reader = spawn.Process(target=_describe_all,
                           args=(address, admin["username"], admin["password"], sent, out),
                           daemon=True)
    reader.start()
    try:
        size, count, seconds = out.get(True, PHASE_TIMEOUT_S)
    finally:
        reader.join(30)
    if count < expected:
        raise RuntimeError(f"B13: describe-all showed {count} tokens, expected {expected}")
    return {"describe_all_s": round(seconds, 3), "describe_all_mb": round(size / 2**20, 1),
            "tokens": count}


def _resync(stage: Stage, cluster: LocalCluster, broker_id: int) -> dict[str, Any]:
    with zkraw.client(cluster.zk_settings()) as zk:
        stat = zk.exists(layout.broker_path(broker_id))
        if stat is None:
            raise RuntimeError(f"B13: broker {broker_id} is not registered")
        session = stat.ephemeralOwner
    resyncs = stage.metrics(broker_id)["tokensvc_cache_resyncs"]
    started = time.monotonic()
    expire_session(cluster.zk_settings(), session)
    stage.wait(f"broker {broker_id}'s resync", lambda now: now[broker_id][
        "tokensvc_cache_resyncs"] > resyncs)
    resynced = time.monotonic() - started
    time.sleep(1.0)
    caught_up = stage.metrics(broker_id).get("tokensvc_cache_caught_up_resyncs")
    return {"expired_broker": broker_id, "resync_s": round(resynced, 3),
            "caught_up_resyncs": caught_up}


def _sweep(stage: Stage, due: int, sizes: dict[int, float]) -> dict[str, Any]:
    took = stage.wait("the sweep", lambda now: all(
        now[b]["tokensvc_token_cache_size"] <= sizes[b] - due for b in stage.ids))
    return {"due": due, "until_gone_everywhere_s": round(took, 3)}


async def _creates(addresses: list[str], admin: dict[str, Any], count: int) -> dict[str, Any]:
    per = 10
    conns = [await open_logged_in(a, admin["username"], admin["password"])
             for a in addresses for _ in range(per)]
    body = create_token_body()
    errors = 0
    started = time.perf_counter()
    try:
        futures = [conns[i % len(conns)].request(ApiKey.CREATE_DELEGATION_TOKEN, 3, body) for i in range(count)]
        for result in await asyncio.gather(*futures, return_exceptions=True):
            if isinstance(result, WireError | OSError) or (
                    isinstance(result, dict) and result["ErrorCode"]):
                errors += 1
            elif isinstance(result, BaseException):
                raise result
    finally:
        for conn in conns:
            conn.close()
    return {"creates": count, "errors": errors,
            "all_answered_s": round(time.perf_counter() - started, 3)}


def _until_purged(connect: str, timeout_s: float = 300.0) -> float:
    """Seconds until ZooKeeper holds at most ``PURGED_BELOW`` token change notifications."""
    started = time.monotonic()
    while zkraw.pending_notifications(connect) > PURGED_BELOW:
        if time.monotonic() - started > timeout_s:
            raise RuntimeError("B13: the change notifications were not purged")
        time.sleep(1.0)
    return round(time.monotonic() - started, 1)


def measure(ctx: BenchContext, scale: Scale) -> dict[str, Any]:
    results: dict[str, Any] = {"scale": scale.__dict__}
    with _cluster(ctx, scale) as (cluster, zk, due, fill_s):
        results["fill_s"] = round(fill_s, 1)
        stage = Stage(cluster, zk.pid)
        config = load_client_config(cluster.info["admin"]["properties"])
        admin = cluster.info["admin"]
        handle = env.ClusterHandle(cluster, cluster.zk_settings(),
                                   admin["username"], admin["password"])
        controller, others = handle.roles()
        results["controller"] = controller
        # Every broker loaded every token, and wrote its first snapshot: the writers
        # wake every snapshot interval from now on, and write only after a change, so
        # the rest and the revocation fit before the next wake and the snapshot phase
        # waits for it (each phase counts the writes it saw: ``snapshot_writes``).
        stage.wait("every broker's cache", lambda now: all(
            now[b].get("tokensvc_token_cache_size", 0) >= scale.tokens for b in stage.ids))
        stage.wait("every broker's first snapshot", lambda now: all(
            now[b].get("snapshot_writes", 0) >= 1 for b in stage.ids))
        phases: dict[str, Any] = {}
        results["phases"] = phases
        phases["rest"] = stage.phase("rest", lambda: time.sleep(scale.rest_s))
        answering = handle.address(others[0])
        phases["revoke"] = stage.phase("revoke", lambda: _revoke(stage, answering, config))
        written = {b: m.get("snapshot_writes", 0)
                   for b, m in stage.read().metrics.items()}
        phases["snapshot"] = stage.phase("snapshot", lambda: _snapshot(stage, written))
        phases["describe_all"] = stage.phase("describe_all", lambda: _describe(
            answering, admin, scale.tokens - scale.revoked))
        phases["resync"] = stage.phase("resync", lambda: _resync(stage, cluster, others[1]))
        # The due tokens fall due at one instant, after their rewrite has been followed.
        sizes = {b: m["tokensvc_token_cache_size"] for b, m in stage.read().metrics.items()}
        when = time.time() + scale.sweep_lead_s + len(due) / 500
        zkraw.rewrite_tokens(cluster.info["zookeeper"]["connect"],
                             [t.with_expiry(int(when * 1000)) for t in due])
        results["rewrite_done_before_due"] = time.time() < when
        # The brokers follow the rewrite before the instant (not measured as the sweep's).
        while time.time() < when:
            time.sleep(min(0.05, max(0.0, when - time.time())))
        # The sweep changes every cache: each broker writes a snapshot after it, which
        # must come before the creates (a write inside them would be counted as theirs).
        # Counted from before the sweep: under load that write may land inside the sweep.
        settled = {b: m.get("snapshot_writes", 0) for b, m in stage.read().metrics.items()}
        phases["sweep"] = stage.phase("sweep", lambda: _sweep(stage, len(due), sizes))
        stage.wait("the snapshot after the sweep", lambda now: all(
            now[b].get("snapshot_writes", 0) > settled[b] for b in stage.ids))
        # ... and let the controller purge the sweep's 10,000 change notifications (by
        # count, once they are a minute old): until then every broker lists them all on
        # each change it follows, and the creates would measure that backlog instead.
        if scale.wait_for_purge:
            results["purge_wait_s"] = _until_purged(cluster.info["zookeeper"]["connect"])
        addresses = [handle.address(b) for b in cluster.broker_ids()]
        phases["creates"] = stage.phase("creates", lambda: asyncio.run(
            _creates(addresses, admin, scale.creates)))
    return results


def _ms(bound: float | str) -> float:
    """A bucket bound in ms; above the last bucket (5 s) that bound (JSON has no infinity)."""
    return STALL_BUCKETS[-1] * 1000 if bound == "inf" else float(bound)


def _worst(results: dict[str, Any], histogram: str = "lag") -> tuple[float | None, str]:
    """The largest bound of ``histogram`` on any broker in any phase but rest, and where."""
    worst, where = None, ""
    for name, figures in results["phases"].items():
        if name == "rest":
            continue
        for key, value in figures.items():
            if not key.startswith("broker_"):
                continue
            raw = value[histogram].get("max_ms_at_most")
            if raw is None:
                continue
            bound = _ms(raw)
            if worst is None or bound > worst:
                worst, where = bound, f"{name} on {key}"
    return worst, where


def run(ctx: BenchContext) -> Outcome:
    scale = Scale.of(ctx.quick)
    results = measure(ctx, scale)
    worst, where = _worst(results)
    own, own_where = _worst(results, "lag_cpu")
    rest = results["phases"]["rest"]
    rest_worst = max((_ms(v["lag"].get("max_ms_at_most", 0)) for k, v in rest.items()
                      if k.startswith("broker_") and v["lag"].get("samples")), default=None)
    return Outcome(
        ID, TITLE,
        measured=worst, unit=f"ms largest loop lag (bucket bound), {where}",
        reference=rest_worst, reference_unit="ms", reference_label="largest loop lag at rest",
        ratio=(worst / rest_worst) if worst is not None and rest_worst else None,
        ratio_label="largest lag during admin work / at rest",
        targets=[Target(f"loop lag <= {TARGET_MS:.0f} ms on every broker in every phase "
                        f"at {scale.tokens:,} tokens (worst <= {worst} ms: {where})",
                        None if worst is None else worst <= TARGET_MS),
                 Target(f"the part with the broker's own CPU behind it <= {TARGET_MS:.0f} ms "
                        f"(worst <= {own} ms: {own_where}; the rest is a host without CPU "
                        "to spare)", None if own is None else own <= TARGET_MS)],
        details=results,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.b13_stalls",
                                     description="B13 alone, at any size")
    parser.add_argument("--tokens", type=int, default=1_000_000)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", type=Path, default=None, help="write the figures as JSON here")
    args = parser.parse_args(argv)
    scale = Scale.of(args.quick, args.tokens)
    return run_alone(args.quick, lambda ctx: measure(ctx, scale), args.out)


if __name__ == "__main__":
    sys.exit(main())
