"""B15: revoke 10,000 tokens through tokensvc, until every Kafka broker refuses them.

Measured: tokensvc beside Kafka (:func:`bench.env.beside_kafka`). 10,000 tokens of
``User:kafka-bulk`` (80 with ``--quick``) are created through tokensvc, 16 at a time,
and the run waits until both Kafka brokers serve the last of them. A super user then runs
``revoke_tokens(owner=User:kafka-bulk)`` through a tokensvc non-controller: one request,
the controller's transactions of at most a few hundred deletions each, one change
notification per token. The figure is the time from the request until no Kafka broker
describes any of the tokens (one DescribeDelegationToken per Kafka broker, polled: a
token a Kafka broker no longer has is refused at login); the reference is the same for
the tokensvc brokers, measured in the same run.

Target: at most 30 s. Each Kafka broker follows the notifications one by one (a read of
the znode per notification, Kafka's ``ZkNodeChangeNotificationListener``).
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

from bench import env
from bench.suite import BenchContext, Outcome, Target, ratio
from tokensvc.admin import AdminClient, tokens_absent
from tokensvc.client_config import load_client_config

ID = "B15"
TITLE = "revoke 10,000 tokens through tokensvc: until refused on every Kafka broker"
OWNER = "User:kafka-bulk"
TARGET_S = 30.0


def _served(address: str, config, token_id: str) -> bool:
    with AdminClient(address, config, timeout_s=30) as admin:
        return any(t.token_id == token_id for t in admin.describe_tokens(owners=[OWNER]))


def run(ctx: BenchContext) -> Outcome:
    count = 80 if ctx.quick else 10_000
    beside = env.beside_kafka(ctx)
    cluster = beside.cluster
    config = load_client_config(cluster.info["admin"]["properties"])
    bootstrap = cluster.info["bootstrap_servers"]
    kafka = beside.kafka_addresses()
    _controller, others = beside.handle.roles()

    def create(n: int) -> list[str]:
        with AdminClient(bootstrap, config, timeout_s=60) as admin:
            return [admin.create_token(owner=OWNER).token_id for _ in range(n)]

    workers = 16
    started = time.monotonic()
    with ThreadPoolExecutor(workers) as pool:
        made = [t for part in pool.map(lambda _: create(count // workers), range(workers))
                for t in part]
    fill_s = time.monotonic() - started
    deadline = time.monotonic() + 300
    while not all(_served(a, config, made[-1]) for a in kafka):
        if time.monotonic() > deadline:
            raise RuntimeError("the Kafka brokers never served the last token created")
        time.sleep(0.5)
    followed_s = time.monotonic() - started

    t0 = time.monotonic()
    with AdminClient(beside.handle.address(others[0]), config, timeout_s=120) as admin:
        result = admin.revoke_tokens(owner=OWNER)
        acked_s = time.monotonic() - t0
        gone = tokens_absent([t for t, _ in result.revoked], {o for _, o in result.revoked})
        admin.wait_all_brokers(gone, timeout_s=300)
        tokensvc_s = time.monotonic() - t0
    with AdminClient(",".join(kafka), config, timeout_s=120) as on_kafka:
        on_kafka.wait_all_brokers(gone, timeout_s=300)
    kafka_s = time.monotonic() - t0
    return Outcome(
        ID, TITLE,
        measured=round(kafka_s, 3), unit="s",
        reference=round(tokensvc_s, 3), reference_unit="s",
        reference_label="the same revocation, until refused on every tokensvc broker",
        ratio=ratio(kafka_s, tokensvc_s),
        targets=[Target(f"<= {TARGET_S:.0f} s", kafka_s <= TARGET_S)],
        details={"tokens": len(made), "revoked": len(result.revoked),
                 "acknowledged_s": round(acked_s, 3), "fill_s": round(fill_s, 1),
                 "kafka_followed_the_creates_s": round(followed_s, 1)},
    )
