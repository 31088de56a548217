"""Authorizer decision throughput with 10,000 ACLs.

Run: ``python -m bench.authz_bench [--acls N] [--decisions N] [--seed S]``.

Builds a mix of literal, prefixed and wildcard ACLs (with some DENYs and per-host
entries), then times ``AclAuthorizer.authorize`` over a fixed random mix of
allowed, denied and unmatched requests. Prints one line and a JSON dict. Pure
CPU: no ZooKeeper, no network. Nothing here asserts a speed.
"""

from __future__ import annotations

import argparse
import json
import random
import time

from tokensvc.authz.acl import (
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from tokensvc.authz.authorizer import AclAuthorizer
from tokensvc.core.principal import KafkaPrincipal

OPS = (AclOperation.READ, AclOperation.WRITE, AclOperation.DESCRIBE, AclOperation.ALL)
USERS = 500


def build_acls(count: int, rng: random.Random) -> list[AclBinding]:
    """60% literal topics, 20% prefixed topics, 10% literal groups, 10% wildcard ('*')
    and User-resource ACLs; about 5% DENY and 5% pinned to one host. Exactly ``count``
    distinct bindings."""
    out: dict[AclBinding, None] = {}
    i = -1
    while len(out) < count:
        i += 1
        kind = i % 10
        user = f"User:u{rng.randrange(USERS)}"
        if kind < 6:
            pattern = ResourcePattern(ResourceType.TOPIC, f"topic-{i}", PatternType.LITERAL)
        elif kind < 8:
            pattern = ResourcePattern(ResourceType.TOPIC, f"team{i % 97}.app{i}", PatternType.PREFIXED)
        elif kind == 8:
            pattern = ResourcePattern(ResourceType.GROUP, f"group-{i}", PatternType.LITERAL)
        elif i % 20 == 9:
            pattern = ResourcePattern(ResourceType.TOPIC, "*", PatternType.LITERAL)
        else:
            pattern = ResourcePattern(ResourceType.USER, f"User:owner{i}", PatternType.LITERAL)
        perm = AclPermissionType.DENY if rng.random() < 0.05 else AclPermissionType.ALLOW
        host = "10.0.0.7" if rng.random() < 0.05 else "*"
        op = (AclOperation.CREATE_TOKENS if pattern.resource_type is ResourceType.USER
              else rng.choice(OPS))
        out[AclBinding(pattern, AccessControlEntry(user, host, op, perm))] = None
    return list(out)


def build_requests(count: int, acl_count: int, rng: random.Random) -> list[tuple]:
    requests = []
    for _ in range(count):
        principal = KafkaPrincipal.user(f"u{rng.randrange(USERS)}")
        roll = rng.random()
        if roll < 0.5:
            name = f"topic-{rng.randrange(acl_count)}"
        elif roll < 0.8:
            i = rng.randrange(acl_count)
            name = f"team{i % 97}.app{i}.events"
        else:
            name = f"unknown-{rng.randrange(1_000_000)}"
        requests.append((principal, rng.choice(("10.0.0.7", "10.0.0.8")),
                         rng.choice(OPS[:3]), ResourceType.TOPIC, name))
    return requests


def run(acl_count: int, decisions: int, seed: int) -> dict:
    rng = random.Random(seed)
    bindings = build_acls(acl_count, rng)
    authorizer = AclAuthorizer(["User:admin"])
    started = time.perf_counter()
    authorizer.load(bindings)
    load_s = time.perf_counter() - started
    authorizer.mark_ready()
    requests = build_requests(decisions, acl_count, rng)
    authorize = authorizer.authorize
    allowed = 0
    started = time.perf_counter()
    for principal, host, op, rtype, name in requests:
        allowed += authorize(principal, host, op, rtype, name)
    elapsed = time.perf_counter() - started
    return {
        "acls": authorizer.acl_count,
        "resources": len({b.pattern for b in bindings}),
        "decisions": decisions,
        "allowed": allowed,
        "seconds": round(elapsed, 4),
        "decisions_per_second": int(decisions / elapsed),
        "mean_us_per_decision": round(elapsed / decisions * 1e6, 3),
        "load_ms": round(load_s * 1000, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--acls", type=int, default=10_000)
    parser.add_argument("--decisions", type=int, default=200_000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    result = run(args.acls, args.decisions, args.seed)
    print(
        f"authz: {result['decisions_per_second']:,} decisions/s with {result['acls']:,} ACLs "
        f"({result['mean_us_per_decision']} us each, load {result['load_ms']} ms)"
    )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
