"""B1: token SCRAM logins per second against one broker, next to the in-process rate.

Measured: clients in a separate process open a fresh loopback connection per
login to one broker process of the shared 3-broker cluster (a non-controller)
and run SaslHandshake + two SaslAuthenticate (SCRAM-SHA-256, ``tokenauth=true``)
against a pool of real tokens created through the broker; the connection is
then closed. Clients cache their salted passwords (as a real client with a
stored token would) so PBKDF2 is not the load generator's bottleneck; the broker
derives each token's credential once and keeps it, as designed.

Reference (same run): the same exchange -- ScramClient and ScramServer with a
TokenCache holding the same tokens -- looped in this process with no network.

Targets: >= 2,000 logins/s and >= 0.3 of the in-process rate.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import time
from typing import Any

from bench import env
from bench.load import Window, WorkerReport, run_processes, until
from bench.suite import BenchContext, Outcome, Target, ratio
from bench.wire import (
    CREATE_TOKEN,
    WireConnection,
    WireError,
    create_token_body,
    login,
    open_logged_in,
)
from tokensvc.core.cache import TokenCache
from tokensvc.core.clock import SystemClock
from tokensvc.core.keys import MasterKeys, key_id
from tokensvc.core.token import TokenInformation
from tokensvc.scram.client import ScramClient
from tokensvc.scram.formatter import ScramMechanism
from tokensvc.scram.server import ScramServer

ID = "B1"
TITLE = "token SCRAM logins/s, one broker, loopback"
MECHANISM = ScramMechanism.SCRAM_SHA_256
TOKEN_POOL = 64
TARGET_RATE = 2_000
TARGET_RATIO = 0.3


async def create_tokens(address: str, user: str, password: str, count: int) -> list[dict]:
    """Create ``count`` tokens through the broker at ``address``; their CreateDelegationToken
    responses (token id and HMAC)."""
    conn = await open_logged_in(address, user, password)
    try:
        responses = await asyncio.gather(
            *(conn.request(CREATE_TOKEN, 3, create_token_body()) for _ in range(count))
        )
    finally:
        conn.close()
    failed = [r["ErrorCode"] for r in responses if r["ErrorCode"]]
    if failed:
        raise RuntimeError(f"token creation failed with error codes {sorted(set(failed))}")
    return responses


def credentials_of(responses: list[dict]) -> list[tuple[str, str]]:
    """(token id, SCRAM password) pairs: the password is the base64 of the HMAC."""
    return [(r["TokenId"], base64.b64encode(r["Hmac"]).decode("ascii")) for r in responses]


async def login_once(address: str, token_id: str, password: str, salted: dict) -> None:
    host, _, port = address.rpartition(":")
    conn = await WireConnection.open(host, int(port))
    try:
        await login(conn, MECHANISM, token_id, password, token=True, salted_cache=salted)
    finally:
        conn.close()


async def wait_until_login_works(
    address: str, tokens: list[tuple[str, str]], timeout: float = 30.0
) -> None:
    """Log every token in once (the broker derives and keeps its credential)."""
    salted: dict = {}
    deadline = time.monotonic() + timeout
    for token_id, password in tokens:
        while True:
            try:
                await login_once(address, token_id, password, salted)
                break
            except WireError:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.02)


async def login_workload(window: Window, params: dict[str, Any]) -> WorkerReport:
    """Worker: ``concurrency`` loops of connect + token login + close until the window ends."""
    address: str = params["address"]
    tokens: list[tuple[str, str]] = params["tokens"]
    salted: dict = {}
    report = WorkerReport()
    picks = itertools.cycle(range(len(tokens)))
    # Warm the salted-password cache before load starts.
    for token_id, password in tokens:
        await login_once(address, token_id, password, salted)

    async def loop() -> None:
        while time.time() < window.end:
            token_id, password = tokens[next(picks)]
            started = time.perf_counter()
            try:
                await login_once(address, token_id, password, salted)
            except (WireError, OSError) as exc:
                if window.holds(time.time()):
                    report.errors += 1
                    report.error_samples.append(str(exc))
                continue
            finished = time.time()
            if window.holds(finished):
                report.done += 1
                report.latencies.append(time.perf_counter() - started)

    await asyncio.gather(*(loop() for _ in range(params["concurrency"])))
    await until(window.end)
    return report


class _Lookup:
    """The broker's CredentialLookup for tokens, without users."""

    def __init__(self, cache: TokenCache) -> None:
        self._cache = cache

    def user_credential(self, username: str, mechanism: ScramMechanism) -> None:
        return None

    def token_credential(self, token_id: str, mechanism: ScramMechanism):
        return self._cache.scram_credential(token_id, mechanism)


def in_process_rate(
    ctx: BenchContext, tokens: list[tuple[str, str]], infos: list[TokenInformation],
    seconds: float,
) -> float:
    """Complete SCRAM exchanges per second, client and server in this thread, no network."""
    cache = TokenCache(MasterKeys(ctx.master_key))
    for info in infos:
        cache.upsert(info)
    lookup = _Lookup(cache)
    clock = SystemClock()
    salted: dict = {}
    secret = b"bench-fake-salt-secret"

    def exchange(token_id: str, password: str) -> None:
        client = ScramClient(MECHANISM, token_id, password, extensions={"tokenauth": "true"},
                             salted_password_cache=salted)
        server = ScramServer(MECHANISM, lookup, clock, fake_salt_secret=secret)
        final = client.final_message(server.evaluate(client.first_message()))
        client.verify_server_final(server.evaluate(final))
        if not server.complete:
            raise RuntimeError("in-process SCRAM exchange did not complete")

    for token_id, password in tokens:  # derive and cache, as the broker does on first login
        exchange(token_id, password)
    picks = itertools.cycle(tokens)
    done = 0
    started = time.perf_counter()
    deadline = started + seconds
    while True:
        for _ in range(100):
            exchange(*next(picks))
        done += 100
        if time.perf_counter() >= deadline:
            break
    return done / (time.perf_counter() - started)


def run(ctx: BenchContext) -> Outcome:
    sizes = ctx.sizes
    handle = env.cluster3(ctx)
    controller, others = handle.roles()
    broker_id = others[0]
    address = handle.address(broker_id)
    responses = asyncio.run(
        create_tokens(address, handle.admin_user, handle.admin_password, TOKEN_POOL)
    )
    tokens = credentials_of(responses)
    asyncio.run(wait_until_login_works(address, tokens))

    report, seconds = run_processes(
        "bench.b1_logins:login_workload",
        {"address": address, "tokens": tokens, "concurrency": sizes.b1_concurrency},
        processes=sizes.b1_processes,
        warmup_s=1.0,
        seconds=sizes.b1_seconds,
    )
    measured = report.done / seconds
    kid = key_id(ctx.master_key)
    infos = [
        TokenInformation(r["TokenId"], env.OWNER, env.OWNER, (), r["IssueTimestampMs"],
                         r["ExpiryTimestampMs"], r["MaxTimestampMs"], kid)
        for r in responses
    ]
    reference = in_process_rate(ctx, tokens, infos, min(sizes.b1_seconds, 5.0))
    r = ratio(measured, reference)
    return Outcome(
        ID,
        TITLE,
        measured=measured,
        unit="logins/s",
        reference=reference,
        reference_unit="logins/s",
        reference_label="in-process exchange",
        ratio=r,
        targets=[
            Target(f">= {TARGET_RATE:,} logins/s", measured >= TARGET_RATE),
            Target(f">= {TARGET_RATIO} of in-process", r is not None and r >= TARGET_RATIO),
        ],
        details={
            "broker_id": broker_id,
            "controller_id": controller,
            "mechanism": MECHANISM.mechanism_name,
            "tokens": len(tokens),
            "client_processes": sizes.b1_processes,
            "concurrent_clients": sizes.b1_processes * sizes.b1_concurrency,
            "window_s": seconds,
            "logins": report.done,
            "errors": report.errors,
            "error_samples": report.error_samples,
            "login_latency": env.summary(report.latencies),
        },
    )

