"""BrokerMetrics without a server: the client id label of forwarded requests is bounded."""

from __future__ import annotations

from prometheus_client import generate_latest

from tokensvc.broker.metrics import MAX_CLIENT_IDS, OTHER, BrokerMetrics


def forwarded(metrics: BrokerMetrics, client_id: str) -> float | None:
    return metrics.registry.get_sample_value(
        "tokensvc_forwarded_requests_total", {"client_id": client_id}
    )


def test_forwarded_requests_are_counted_per_client_id():
    metrics = BrokerMetrics()
    metrics.forwarded.labels("app-1").inc()
    metrics.forwarded.labels("app-1").inc()
    metrics.forwarded.labels(None).inc()
    assert forwarded(metrics, "app-1") == 2
    assert forwarded(metrics, "") == 1


def test_client_ids_past_the_limit_are_counted_as_other():
    metrics = BrokerMetrics()
    for i in range(MAX_CLIENT_IDS + 50):
        metrics.forwarded.labels(f"client-{i}").inc()
    metrics.forwarded.labels("client-0").inc()  # a known id keeps its own series
    text = generate_latest(metrics.registry).decode()
    series = [line for line in text.splitlines()
              if line.startswith("tokensvc_forwarded_requests_total{")]
    assert len(series) == MAX_CLIENT_IDS + 1
    assert forwarded(metrics, OTHER) == 50
    assert forwarded(metrics, "client-0") == 2
    assert forwarded(metrics, f"client-{MAX_CLIENT_IDS}") is None


def test_request_errors_are_labelled_by_kafka_error_name():
    metrics = BrokerMetrics()
    metrics.request("RenewDelegationToken", 62, 0.001)
    metrics.request("Odd", 12345, 0.001)
    sample = metrics.registry.get_sample_value
    assert sample("tokensvc_requests_total",
                  {"api": "RenewDelegationToken", "error": "DELEGATION_TOKEN_NOT_FOUND"}) == 1
    assert sample("tokensvc_requests_total", {"api": "Odd", "error": "12345"}) == 1
    assert sample("tokensvc_request_latency_seconds_count", {"api": "Odd"}) == 1
