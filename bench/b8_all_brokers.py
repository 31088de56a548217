"""B8: time until usable on all 3 brokers -- a create acknowledged until the token logs in
on every broker of the cluster.

Measured: on the shared 3-broker cluster, a super-user connection creates a token on a
non-controller (the create is forwarded); from the moment the response arrives, each of
the 3 brokers is asked -- all at once, each on fresh connections, again and again -- to
log the token in, until every one has succeeded. The sample is the time of the last
broker's first success. The answering broker serves the token when it answers
(read-your-writes), so its first login always succeeds; the two others learn of it
through ZooKeeper (the controller's change notification). This is what
``--wait-all-brokers`` waits for.

Reference (same run): B3's single-broker propagation is not rerun here; the reference is
the answering broker's own time to a first successful login (a login round trip).

Target: p99 <= 100 ms, B3's propagation target, now for the slowest of the three brokers.
"""

from __future__ import annotations

import asyncio

from bench import env
from bench.propagation import first_login, sample_creates
from bench.suite import BenchContext, Outcome, Target, ratio

ID = "B8"
TITLE = "usable on all 3 brokers: create acked -> login works on every broker"
TARGET_P99_MS = 100.0


async def sample_all_brokers(
    create_at: str, addresses: list[str], user: str, password: str, samples: int
) -> tuple[list[float], list[float]]:
    """Per sample: seconds until every broker logged the token in, and until the
    answering broker did."""

    async def on_all(token_id: str, token_password: str, salted: dict,
                     acked: float) -> list[float]:
        firsts = await asyncio.gather(*(
            first_login(a, token_id, token_password, salted, acked) for a in addresses
        ))
        return [seconds for seconds, _ in firsts]

    results = await sample_creates(create_at, user, password, samples, on_all)
    answering_at = addresses.index(create_at)
    return [max(times) for times in results], [times[answering_at] for times in results]


def run(ctx: BenchContext) -> Outcome:
    samples = ctx.sizes.b3_samples
    handle = env.cluster3(ctx)
    controller, others = handle.roles()
    create_id = others[0]
    addresses = [handle.address(b) for b in sorted([controller, *others])]
    everywhere, answering = asyncio.run(sample_all_brokers(
        handle.address(create_id), addresses, handle.admin_user, handle.admin_password, samples,
    ))
    measured = env.summary(everywhere)
    reference = env.summary(answering)
    return Outcome(
        ID,
        TITLE,
        measured=measured["p99_ms"],
        unit="ms p99",
        reference=reference["p99_ms"],
        reference_unit="ms p99",
        reference_label="answering broker",
        ratio=ratio(measured["p99_ms"], reference["p99_ms"]),
        targets=[Target(f"p99 <= {TARGET_P99_MS:.0f} ms",
                        measured["p99_ms"] <= TARGET_P99_MS)],
        details={
            "create_broker_id": create_id,
            "controller_id": controller,
            "samples": samples,
            "all_brokers": measured,
            "answering_broker": reference,
        },
    )
