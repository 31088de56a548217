"""B14: from a token created through tokensvc to its first successful login on every
Kafka broker, beside B8's figure on the tokensvc brokers of the same run.

Measured: tokensvc beside Kafka (:func:`bench.env.beside_kafka`: three tokensvc brokers
with ``kafka.zookeeper.shared=true``, two Apache Kafka 3.9 brokers, one ZooKeeper). A super
user creates a token on a tokensvc non-controller (forwarded to the controller); from the
moment the response arrives, every broker of both kinds is asked, all at once and each on
fresh connections, to log the token in (SCRAM-SHA-512 with ``tokenauth=true``), again and
again, until each has succeeded. A Kafka broker learns of the token from the controller's
change notification, reads its znode and derives its SCRAM credentials before it can
answer. The sample is the time of the last Kafka broker's first success; the reference is
the same for the last tokensvc broker (B8's measurement, in the same loop).

Target: p99 <= 1 s: a job that gets a token from tokensvc can use it on the Kafka cluster
within a second.
"""

from __future__ import annotations

import asyncio

from bench import env
from bench.propagation import first_login, sample_creates
from bench.suite import BenchContext, Outcome, Target, ratio

ID = "B14"
TITLE = "tokensvc token usable on every Kafka broker: create acked -> login works"
TARGET_P99_MS = 1_000.0


def run(ctx: BenchContext) -> Outcome:
    samples = 10 if ctx.quick else 200
    beside = env.beside_kafka(ctx)
    handle = beside.handle
    _controller, others = handle.roles()
    kafka = beside.kafka_addresses()
    tokensvc = beside.tokensvc_addresses()

    async def on_all(token_id: str, password: str, salted: dict,
                     acked: float) -> tuple[float, float]:
        firsts = await asyncio.gather(*(
            first_login(a, token_id, password, salted, acked) for a in kafka + tokensvc))
        seconds = [s for s, _ in firsts]
        return max(seconds[:len(kafka)]), max(seconds[len(kafka):])

    results = asyncio.run(sample_creates(handle.address(others[0]), handle.admin_user,
                                         handle.admin_password, samples, on_all))
    on_kafka = env.summary([k for k, _ in results])
    on_tokensvc = env.summary([t for _, t in results])
    measured, reference = on_kafka.get("p99_ms"), on_tokensvc.get("p99_ms")
    return Outcome(
        ID, TITLE,
        measured=measured, unit="ms p99",
        reference=reference, reference_unit="ms p99",
        reference_label="B8: the same creates, every tokensvc broker",
        ratio=ratio(measured, reference),
        targets=[Target(f"p99 <= {TARGET_P99_MS:.0f} ms",
                        measured is not None and measured <= TARGET_P99_MS)],
        details={"kafka_brokers": on_kafka, "tokensvc_brokers": on_tokensvc,
                 "p50_kafka_ms": on_kafka.get("p50_ms"),
                 "p50_tokensvc_ms": on_tokensvc.get("p50_ms")},
    )
