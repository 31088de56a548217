"""The stall meter of a real broker process: its histograms are served on ``/metrics``,
keep counting while the broker runs, and at rest stay small.

One broker (``LocalCluster``, its own process) on the suite's ZooKeeper. Two scrapes over
real HTTP some seconds apart: the lag histogram's count grows with the sampling (one
sample per 5 ms, less on a loaded machine: the test only asks for a fraction), every
histogram is well formed (cumulative buckets, ``+Inf`` equal to the count), the lag's CPU
share is never more than the lag, and the mean lag at rest is bounded (a broker that is
doing nothing answers a callback far within 100 ms on average, even on a busy host).
"""

from __future__ import annotations

import time
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.local_cluster import ClusterFactory
from tokensvc.broker.loop.loopwatch import SAMPLE_INTERVAL_S
from tokensvc.cluster import LocalCluster

HISTOGRAMS = ("tokensvc_event_loop_lag_seconds", "tokensvc_event_loop_lag_cpu_seconds",
              "tokensvc_gil_hold_seconds")
REST_S = 3.0


@pytest.fixture
def cluster(cluster_factory: ClusterFactory) -> LocalCluster:
    # The broker's default interval (the suite's clusters sample less often).
    return cluster_factory(brokers=1, overrides={
        "metrics.stall.sample.interval.ms": str(round(SAMPLE_INTERVAL_S * 1000))})


def _histograms(address: str) -> tuple[dict[str, dict[str, object]], float]:
    """The three histograms of one scrape, and how long the scrape took (the broker reads
    the histograms one after the other within that time)."""
    began = time.monotonic()
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as response:
        text = response.read().decode()
    took = time.monotonic() - began
    found: dict[str, dict[str, object]] = {}
    for family in text_string_to_metric_families(text):
        if family.name not in HISTOGRAMS:
            continue
        assert family.type == "histogram", family
        buckets = {}
        hist: dict[str, object] = {"buckets": buckets}
        for sample in family.samples:
            if sample.name.endswith("_bucket"):
                buckets[float(sample.labels["le"])] = sample.value
            elif sample.name.endswith("_count"):
                hist["count"] = sample.value
            elif sample.name.endswith("_sum"):
                hist["sum"] = sample.value
        found[family.name] = hist
    return found, took


def test_the_stall_meter_is_served_counts_on_and_stays_small_at_rest(cluster):
    address = cluster.broker_info(1)["metrics"]
    first, took1 = _histograms(address)
    assert set(first) == set(HISTOGRAMS)
    time.sleep(REST_S)
    second, took2 = _histograms(address)
    for name, hist in second.items():
        counts = [hist["buckets"][b] for b in sorted(hist["buckets"])]
        assert counts == sorted(counts), name  # cumulative
        assert counts[-1] == hist["count"], name  # +Inf is every sample
        assert 0.02 in hist["buckets"], name  # the target is a bound
    lag0, lag1 = first["tokensvc_event_loop_lag_seconds"], second["tokensvc_event_loop_lag_seconds"]
    samples = lag1["count"] - lag0["count"]
    # One sample per 5 ms would be 600 in 3 s; a starved host delays the sampling thread.
    assert samples >= 0.1 * REST_S / 0.005, samples
    gil = second["tokensvc_gil_hold_seconds"]["count"] - first["tokensvc_gil_hold_seconds"]["count"]
    # The thread wakes once per sample at least. A scrape reads the three histograms one
    # after the other, and between two reads the meter goes on: the thread wakes at most
    # once per interval (each wake is at a later instant of its grid), so the counts
    # read in one scrape may differ by at most the scrape's time over the interval, plus
    # one sample in flight.
    slack = (took1 + took2) / SAMPLE_INTERVAL_S + 2
    assert gil >= samples - slack, (gil, samples, slack)
    cpu0 = first["tokensvc_event_loop_lag_cpu_seconds"]
    cpu1 = second["tokensvc_event_loop_lag_cpu_seconds"]
    assert abs((cpu1["count"] - cpu0["count"]) - samples) <= slack, (cpu1, cpu0, samples, slack)
    assert cpu1["sum"] - cpu0["sum"] <= lag1["sum"] - lag0["sum"] + 0.05
    mean_lag = (lag1["sum"] - lag0["sum"]) / samples
    assert mean_lag < 0.1, f"mean event-loop lag at rest {mean_lag * 1000:.1f} ms"
