"""The agent's metrics, in Prometheus text on ``--metrics-port`` (for a sidecar).

* ``tokensvc_agent_token_expiry_seconds`` -- seconds until the current token expires
  (negative once it has: the job has no valid credential);
* ``tokensvc_agent_token_max_lifetime_seconds`` -- seconds until its max lifetime;
* ``tokensvc_agent_renewals_total``, ``tokensvc_agent_replacements_total`` (successors
  published), ``tokensvc_agent_tokens_created_total``, ``tokensvc_agent_tokens_expired_total``;
* ``tokensvc_agent_failures_total{cause}`` -- failed attempts by cause (``unreachable``,
  ``timeout``, ``refused``, ``token_gone``, ``lagging_broker``, ``file``);
* ``tokensvc_agent_up`` -- 1 while the agent keeps a valid token, 0 once it gave up;
* ``tokensvc_agent_clock_offset_seconds`` -- the cluster's time minus this host's clock,
  as the last CreateDelegationToken answer showed it (0 before the first).

Its own registry, so nothing else in the process leaks into the page.
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server

FAILURE_CAUSES = ("unreachable", "timeout", "refused", "token_gone", "lagging_broker", "file")


class AgentMetrics:
    def __init__(self, seconds_left: Callable[[], tuple[float, float]],
                 clock_offset: Callable[[], float] = lambda: 0.0) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        Gauge("tokensvc_agent_token_expiry_seconds",
              "Seconds until the current token expires (NaN before the first token).",
              registry=r).set_function(lambda: seconds_left()[0])
        Gauge("tokensvc_agent_token_max_lifetime_seconds",
              "Seconds until the current token's max lifetime.",
              registry=r).set_function(lambda: seconds_left()[1])
        self.renewals = Counter("tokensvc_agent_renewals", "Tokens renewed.", registry=r)
        self.replacements = Counter("tokensvc_agent_replacements",
                                    "Successor tokens published.", registry=r)
        self.created = Counter("tokensvc_agent_tokens_created", "Tokens created.", registry=r)
        self.expired = Counter("tokensvc_agent_tokens_expired", "Tokens expired.", registry=r)
        self.failures = Counter("tokensvc_agent_failures", "Failed attempts by cause.",
                                ["cause"], registry=r)
        for cause in FAILURE_CAUSES:  # every series exists from the start, at 0
            self.failures.labels(cause)
        self.up = Gauge("tokensvc_agent_up", "1 while the agent keeps a valid token.",
                        registry=r)
        self.up.set(1)
        Gauge("tokensvc_agent_clock_offset_seconds",
              "The cluster's time minus this host's clock (from token issue times; the agent "
              "schedules by the cluster's time).", registry=r).set_function(clock_offset)

    def serve(self, port: int, address: str = "0.0.0.0") -> None:
        start_http_server(port, addr=address, registry=self.registry)
