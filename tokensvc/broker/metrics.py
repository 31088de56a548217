"""Broker metrics in Prometheus text format (prometheus_client).

Owns one CollectorRegistry per broker (several brokers may share a process in
tests) and the optional HTTP endpoint on ``metrics.listener``. Gauges that
mirror state (cache sizes, queue depth, controller) read it on scrape through
callbacks, so the request path only increments counters. Every metric, and
what to alert on, is listed in ``docs/operations.md``.

Must not: label anything with a token id, user name or other per-credential
value (cardinality, and the endpoint is unauthenticated), or block the loop.
The one client-chosen label, the client id of forwarded requests, takes at
most ``MAX_CLIENT_IDS`` distinct values; later ones are counted as ``OTHER``.
"""

from __future__ import annotations

import threading
from bisect import bisect_left
from collections.abc import Callable, Iterable
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    start_http_server,
)
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from tokensvc.broker.loop.loopwatch import StallHistogram, StallMeter
from tokensvc.core.errors import Errors
from tokensvc.snapshot.files import LOAD_RESULTS as SNAPSHOT_LOAD_RESULTS
from tokensvc.snapshot.files import WRITE_RESULTS as SNAPSHOT_WRITE_RESULTS

_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                    10.0, 15.0, 30.0)
MAX_CLIENT_IDS = 200
OTHER = "__other__"


class CappedLabelCounter:
    """A counter with one label that takes at most ``limit`` distinct values.

    Values past the limit are counted under :data:`OTHER`, so a client that
    invents client ids cannot grow the broker's memory or the scrape.
    """

    def __init__(self, counter: Counter, limit: int) -> None:
        self._counter = counter
        self._limit = limit
        self._seen: set[str] = set()
        self._lock = threading.Lock()

    def labels(self, value: str | None) -> Counter:
        value = value or ""
        with self._lock:
            if value not in self._seen:
                if len(self._seen) >= self._limit:
                    value = OTHER
                else:
                    self._seen.add(value)
        return self._counter.labels(value)


class LoopCounts(Collector):
    """Request counts, request latency and SCRAM logins: the metrics every login touches.

    prometheus_client's own counters and histograms take a lock on every update; these
    are plain ints and floats updated by the event loop thread only (the one thread that
    serves requests), read at scrape time from the HTTP thread: a scrape may miss an
    update in flight, never corrupt one. Exported as ``tokensvc_requests`` (counter,
    ``api``, ``error``), ``tokensvc_request_latency_seconds`` (histogram, ``api``) and
    ``tokensvc_scram_logins`` (counter, ``mechanism``, ``result``, ``kind``).
    """

    def __init__(self) -> None:
        self._requests: dict[tuple[str, int], int] = {}
        self._latency: dict[str, list[float]] = {}  # api -> bucket counts, then count, sum
        self._logins: dict[tuple[str, str, str], int] = {}
        self._error_names: dict[int, str] = {}

    def request(self, api: str, error: int, seconds: float) -> None:
        key = (api, error)
        self._requests[key] = self._requests.get(key, 0) + 1
        hist = self._latency.get(api)
        if hist is None:
            hist = self._latency[api] = [0] * (len(_LATENCY_BUCKETS) + 2)
        hist[bisect_left(_LATENCY_BUCKETS, seconds)] += 1
        hist[-1] += seconds

    def login(self, mechanism: str, result: str, kind: str) -> None:
        key = (mechanism, result, kind)
        self._logins[key] = self._logins.get(key, 0) + 1

    def _error_name(self, error: int) -> str:
        name = self._error_names.get(error)
        if name is None:
            try:
                name = Errors(error).name
            except ValueError:
                name = str(error)
            self._error_names[error] = name
        return name

    def collect(self) -> Iterable[Metric]:
        requests = CounterMetricFamily(
            "tokensvc_requests", "Requests handled, by API and error code", labels=["api", "error"]
        )
        for (api, error), count in list(self._requests.items()):
            requests.add_metric([api, self._error_name(error)], count)
        yield requests
        latency = HistogramMetricFamily(
            "tokensvc_request_latency_seconds", "Request handling latency", labels=["api"]
        )
        for api, hist in list(self._latency.items()):
            counts = list(hist)
            buckets, total = [], 0
            for bound, count in zip(_LATENCY_BUCKETS, counts, strict=False):
                total += count
                buckets.append((floatToGoString(bound), total))
            total += counts[len(_LATENCY_BUCKETS)]
            buckets.append(("+Inf", total))
            latency.add_metric([api], buckets, sum_value=counts[-1])
        yield latency
        logins = CounterMetricFamily(
            "tokensvc_scram_logins", "SCRAM logins by mechanism, result and kind (user or token)",
            labels=["mechanism", "result", "kind"],
        )
        for labels, count in list(self._logins.items()):
            logins.add_metric(list(labels), count)
        yield logins


class _Stalls:
    """``tokensvc_event_loop_lag_seconds``, ``tokensvc_event_loop_lag_cpu_seconds`` and
    ``tokensvc_gil_hold_seconds`` from the stall meter (:mod:`tokensvc.broker.loop.loopwatch`), read at scrape time."""

    def __init__(self, meter: StallMeter) -> None:
        self._meter = meter

    @staticmethod
    def _family(name: str, doc: str, hist: StallHistogram) -> HistogramMetricFamily:
        family = HistogramMetricFamily(name, doc)
        total = hist.sum
        buckets = [("+Inf" if bound == float("inf") else floatToGoString(bound), count)
                   for bound, count in hist.cumulative()]
        family.add_metric([], buckets, sum_value=total)
        return family

    def collect(self) -> Iterable[Metric]:
        yield self._family(
            "tokensvc_event_loop_lag_seconds",
            "How late the event loop ran a callback asked for now (sampled every 5 ms)",
            self._meter.lag)
        yield self._family(
            "tokensvc_event_loop_lag_cpu_seconds",
            "Of each event-loop lag sample, the CPU time the broker process used meanwhile "
            "(at most the lag; near 0: the process waited for a CPU, not for its own work)",
            self._meter.lag_cpu)
        yield self._family(
            "tokensvc_gil_hold_seconds",
            "How long a sampling thread waited past its wake-up for the GIL (or a CPU): "
            "one stretch of the GIL held by another thread",
            self._meter.gil)


class _TopOwners:
    def __init__(self, fn: Callable[[], list[tuple[Any, int]]]) -> None:
        self._fn = fn

    def collect(self) -> Iterable[Metric]:
        family = GaugeMetricFamily("tokensvc_owner_tokens",
                                   "Live tokens of the owners holding the most (top 10)",
                                   labels=["owner"])
        for owner, count in self._fn():
            family.add_metric([str(owner)], count)
        yield family


class BrokerMetrics:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self._loop_counts = LoopCounts()
        r.register(self._loop_counts)
        self.implicit_logins = Counter(
            "tokensvc_scram_implicit_token_logins",
            "Token logins without tokenauth=true (the user name was a token id), by result",
            ["mechanism", "result"],
            registry=r,
        )
        self.token_requests = Counter(
            "tokensvc_token_requests", "Token API outcomes", ["action", "error"], registry=r
        )
        self.reauthentications = Counter(
            "tokensvc_reauthentications",
            "KIP-368 re-authentications on live connections, by mechanism and result",
            ["mechanism", "result"], registry=r,
        )
        self.connections = Gauge("tokensvc_active_connections", "Open client connections", registry=r)
        self.connections_refused = Counter(
            "tokensvc_connections_refused", "Connections refused, by reason", ["reason"], registry=r
        )
        self.forwarded = CappedLabelCounter(
            Counter(
                "tokensvc_forwarded_requests",
                "Requests forwarded to the controller, by client id "
                "(KIP-590 NumRequestsForwardingToControllerPerSec)",
                ["client_id"], registry=r,
            ),
            MAX_CLIENT_IDS,
        )
        self.sessions_revoked = Counter(
            "tokensvc_sessions_revoked",
            "Token sessions closed because their token was removed or passed its expiry",
            registry=r,
        )
        self.sessions_expired = Counter(
            "tokensvc_sessions_expired",
            "Connections closed for a request after the session lifetime without re-authentication",
            registry=r,
        )
        self.sweep_removed = Counter(
            "tokensvc_expiry_swept_tokens", "Tokens removed by the expiry sweep", registry=r
        )
        self.snapshot_loads = Counter(
            "tokensvc_cache_snapshot_loads",
            "Starts with a token cache snapshot configured, by result: loaded, or why every "
            "token was loaded from ZooKeeper (missing, invalid, identity, purged, mismatch, "
            "error)",
            ["result"], registry=r,
        )
        self.snapshot_writes = Counter(
            "tokensvc_cache_snapshot_writes", "Token cache snapshots written, by result",
            ["result"], registry=r,
        )
        self._callbacks: list[Gauge] = []
        # Every known label set exists from the start (at 0), so that dashboards and alert
        # rules find the series before the first event (a refusal, a re-authentication).
        for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
            for result in ("success", "failure"):
                self.implicit_logins.labels(mechanism, result)
                self.reauthentications.labels(mechanism, result)
        for action in ("create", "renew", "expire", "describe"):
            self.token_requests.labels(action, "NONE")
        self.connections_refused.labels("max_connections_per_ip")
        for result in SNAPSHOT_LOAD_RESULTS:
            self.snapshot_loads.labels(result)
        for result in SNAPSHOT_WRITE_RESULTS:
            self.snapshot_writes.labels(result)

    def top_owners(self, fn: Callable[[], list[tuple[Any, int]]]) -> None:
        """``tokensvc_owner_tokens{owner}``: live tokens of the largest owners only (owner
        names are principals the operators chose: the bounded list keeps the series few)."""
        self.registry.register(_TopOwners(fn))

    def stalls(self, meter: StallMeter) -> None:
        """Export the stall meter's histograms (event-loop lag, its CPU share, GIL hold)."""
        self.registry.register(_Stalls(meter))

    def gauge(self, name: str, doc: str, fn: Callable[[], float]) -> None:
        g = Gauge(name, doc, registry=self.registry)
        g.set_function(fn)
        self._callbacks.append(g)

    def request(self, api: str, error: int, seconds: float) -> None:
        self._loop_counts.request(api, error, seconds)

    def login(self, mechanism: str | None, result: str, kind: str) -> None:
        self._loop_counts.login(mechanism or "", result, kind)

    def implicit_login(self, mechanism: str | None, result: str) -> None:
        self.implicit_logins.labels(mechanism or "", result).inc()

    def reauthentication(self, mechanism: str | None, result: str) -> None:
        self.reauthentications.labels(mechanism or "", result).inc()

    def token_request(self, action: str, error: Errors, count: int = 1) -> None:
        self.token_requests.labels(action, Errors(error).name).inc(count)

    def serve(self, host: str, port: int) -> tuple[str, int]:
        server, _thread = start_http_server(port, addr=host, registry=self.registry)
        self._http = server
        return host, server.server_port

    def close(self) -> None:
        http = getattr(self, "_http", None)
        if http is not None:
            http.shutdown()
            http.server_close()
