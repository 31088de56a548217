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
from collections.abc import Callable
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    start_http_server,
)

from tokensvc.core.errors import Errors

_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
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


class BrokerMetrics:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self._request_children: dict[tuple[str, int], tuple[Any, Any]] = {}
        self.requests = Counter(
            "tokensvc_requests", "Requests handled, by API and error code", ["api", "error"], registry=r
        )
        self.latency = Histogram(
            "tokensvc_request_latency_seconds", "Request handling latency", ["api"],
            buckets=_LATENCY_BUCKETS, registry=r,
        )
        self.logins = Counter(
            "tokensvc_scram_logins", "SCRAM logins by mechanism, result and kind (user or token)",
            ["mechanism", "result", "kind"], registry=r,
        )
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
        self._callbacks: list[Gauge] = []

    def gauge(self, name: str, doc: str, fn: Callable[[], float]) -> None:
        g = Gauge(name, doc, registry=self.registry)
        g.set_function(fn)
        self._callbacks.append(g)

    def request(self, api: str, error: int, seconds: float) -> None:
        # Every request lands here: keep the labelled children instead of looking
        # them up (labels() validates and hashes its arguments on each call).
        key = (api, error)
        children = self._request_children.get(key)
        if children is None:
            try:
                name = Errors(error).name
            except ValueError:
                name = str(error)
            children = (self.requests.labels(api, name), self.latency.labels(api))
            self._request_children[key] = children
        children[0].inc()
        children[1].observe(seconds)

    def login(self, mechanism: str | None, result: str, kind: str) -> None:
        self.logins.labels(mechanism or "", result, kind).inc()

    def implicit_login(self, mechanism: str | None, result: str) -> None:
        self.implicit_logins.labels(mechanism or "", result).inc()

    def reauthentication(self, mechanism: str | None, result: str) -> None:
        self.reauthentications.labels(mechanism or "", result).inc()

    def token_request(self, action: str, error: Errors) -> None:
        self.token_requests.labels(action, Errors(error).name).inc()

    def serve(self, host: str, port: int) -> tuple[str, int]:
        server, _thread = start_http_server(port, addr=host, registry=self.registry)
        self._http = server
        return host, server.server_port

    def close(self) -> None:
        http = getattr(self, "_http", None)
        if http is not None:
            http.shutdown()
            http.server_close()
