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

Also in the details, to tell the broker's cost from the wire's: the same logins
as KIP-368 re-authentications on open connections (no TCP set-up), and the
transport floor -- the same client pattern (connect, three round trips of
login-sized frames, close) against a server process that answers without doing
anything.

Also measured: the broker process's CPU time per login inside the window (less
sensitive to a shared machine than the wall rate), and the login rate while a
second client process holds ``IDLE_CONNECTIONS`` logged-in idle connections to the
same broker (50 with ``--quick``).

Targets: >= 2,000 logins/s and >= 0.3 of the in-process rate.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import multiprocessing
import os
import socket
import time
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from bench import env
from bench.common import MECHANISM, login_once
from bench.load import (
    CpuWindow,
    Window,
    WorkerReport,
    run_processes,
    run_worker,
    until,
)
from bench.suite import BenchContext, Outcome, Target, ratio
from bench.wire import (
    BENCH_LABELS,
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
from tokensvc.jvm import free_port
from tokensvc.protocol import frame
from tokensvc.protocol.api import ApiKey
from tokensvc.scram.client import ScramClient
from tokensvc.scram.formatter import ScramMechanism
from tokensvc.scram.server import ScramServer

ID = "B1"
TITLE = "token SCRAM logins/s, one broker, loopback"
TOKEN_POOL = 64
TARGET_RATE = 2_000
TARGET_RATIO = 0.3
IDLE_CONNECTIONS = 1_000


async def create_tokens(address: str, user: str, password: str, count: int,
                        labels: dict[str, str] | None = None) -> list[dict]:
    """Create ``count`` tokens (with ``labels``) through the broker at ``address``; their
    CreateDelegationToken responses (token id and HMAC)."""
    conn = await open_logged_in(address, user, password)
    try:
        body = create_token_body(labels=labels)
        responses = await asyncio.gather(
            *(conn.request(ApiKey.CREATE_DELEGATION_TOKEN, 3, body) for _ in range(count))
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


async def reauth_workload(window: Window, params: dict[str, Any]) -> WorkerReport:
    """Worker: ``concurrency`` connections, each logging in again and again (KIP-368
    re-authentication: the same SaslHandshake + SaslAuthenticate exchange, no new TCP
    connection) until the window ends."""
    address: str = params["address"]
    tokens: list[tuple[str, str]] = params["tokens"]
    salted: dict = {}
    report = WorkerReport()
    host, _, port = address.rpartition(":")

    async def loop(n: int) -> None:
        token_id, password = tokens[n % len(tokens)]
        conn = await WireConnection.open(host, int(port))
        try:
            while time.time() < window.end:
                started = time.perf_counter()
                await login(conn, MECHANISM, token_id, password, token=True,
                            salted_cache=salted)
                if window.holds(time.time()):
                    report.done += 1
                    report.latencies.append(time.perf_counter() - started)
        except (WireError, OSError) as exc:
            report.errors += 1
            report.error_samples.append(str(exc))
        finally:
            conn.close()

    await asyncio.gather(*(loop(n) for n in range(params["concurrency"])))
    await until(window.end)
    return report


async def idle_workload(window: Window, params: dict[str, Any]) -> WorkerReport:
    """Worker: open ``count`` connections, log each in once, then hold them silent until the
    window ends; ``done`` is how many were open and logged in before the window opened."""
    address: str = params["address"]
    tokens: list[tuple[str, str]] = params["tokens"]
    salted: dict = {}
    host, _, port = address.rpartition(":")
    report = WorkerReport()
    conns: list[WireConnection] = []
    try:
        for n in range(params["count"]):
            conn = await WireConnection.open(host, int(port))
            conns.append(conn)
            token_id, password = tokens[n % len(tokens)]
            await login(conn, MECHANISM, token_id, password, token=True, salted_cache=salted)
            if time.time() < window.start:
                report.done = len(conns)
        await until(window.end)
    except (WireError, OSError) as exc:
        report.errors += 1
        report.error_samples.append(str(exc))
    finally:
        for conn in conns:
            conn.close()
    return report


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` so far (Linux ``/proc``)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measured_logins(
    address: str, tokens: list[tuple[str, str]], pid: int | None, sizes: Any,
    idle: int = 0,
) -> tuple[WorkerReport, float, float | None, int]:
    """Run the login workload (with ``idle`` held connections when > 0); the report, the
    window, the broker's CPU seconds in the window, and the idle connections held."""
    # The holder opens and logs in its connections before the window: 2 ms each, and
    # never less than 2 s (its process starts beside the load's).
    start = time.time() + sizes.spawn_allowance_s + sizes.warmup_s + (
        max(2.0, idle / 500.0) if idle else 0.0)
    cpu = (CpuWindow(lambda: process_cpu_seconds(pid), start, start + sizes.b1_seconds)
           if pid else None)
    holder = None
    if idle:
        pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))
        holder = pool.submit(
            run_worker, "bench.b1_logins:idle_workload",
            Window(start, start + sizes.b1_seconds),
            {"address": address, "tokens": tokens, "count": idle},
        )
    try:
        report, seconds = run_processes(
            "bench.b1_logins:login_workload",
            {"address": address, "tokens": tokens, "concurrency": sizes.b1_concurrency},
            processes=sizes.b1_processes, warmup_s=sizes.warmup_s, seconds=sizes.b1_seconds,
            start_at=start,
        )
        held = holder.result(timeout=120).done if holder else 0
    finally:
        if holder:
            pool.shutdown()
    return report, seconds, cpu.join() if cpu else None, held


class _FloorServer(asyncio.Protocol):
    """Answers every size-prefixed frame with a fixed small frame: the transport alone."""

    REPLY = frame(b"\x00" * 40)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        self.buffer = bytearray()

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while len(self.buffer) >= 4:
            size = int.from_bytes(self.buffer[:4], "big")
            if len(self.buffer) < 4 + size:
                return
            del self.buffer[: 4 + size]
            self.transport.write(self.REPLY)


def serve_floor(port: int, seconds: float) -> None:
    """Run the transport-floor server on ``port`` for ``seconds`` (in its own process)."""

    async def main() -> None:
        server = await asyncio.get_running_loop().create_server(_FloorServer, "127.0.0.1", port)
        async with server:
            await asyncio.sleep(seconds)

    asyncio.run(main())


class _FloorClient(asyncio.Protocol):
    def __init__(self) -> None:
        self.waiter: asyncio.Future | None = None
        self.received = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.received += len(data)
        if self.received >= len(_FloorServer.REPLY) and self.waiter and not self.waiter.done():
            self.received = 0
            self.waiter.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.waiter and not self.waiter.done():
            self.waiter.set_exception(ConnectionError("closed"))


async def floor_workload(window: Window, params: dict[str, Any]) -> WorkerReport:
    """Worker: connect, three request/response round trips of login-sized frames, close --
    the wire pattern of one login, against the do-nothing server."""
    loop = asyncio.get_running_loop()
    report = WorkerReport()
    request = frame(b"\x00" * 120)

    async def one() -> None:
        while time.time() < window.end:
            transport, client = await loop.create_connection(
                _FloorClient, "127.0.0.1", params["port"]
            )
            try:
                for _ in range(3):
                    client.waiter = loop.create_future()
                    transport.write(request)
                    await client.waiter
            finally:
                transport.close()
            if window.holds(time.time()):
                report.done += 1

    await asyncio.gather(*(one() for _ in range(params["concurrency"])))
    return report


def _wait_listening(port: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"the transport-floor server never listened on port {port}")


def transport_floor(concurrency: int, seconds: float, sizes: Any) -> float:
    """Connect + 3 round trips + close per second against a server that does nothing."""
    port = free_port()
    server = multiprocessing.get_context("spawn").Process(
        target=serve_floor, args=(port, seconds + 30), daemon=True
    )
    server.start()
    try:
        _wait_listening(port)
        report, window = run_processes(
            "bench.b1_logins:floor_workload", {"port": port, "concurrency": concurrency},
            processes=1, warmup_s=sizes.warmup_s, seconds=seconds,
            spawn_allowance_s=sizes.spawn_allowance_s,
        )
    finally:
        server.terminate()
        server.join(10)
    return report.done / window


class _Lookup:
    """The broker's CredentialLookup for tokens, without users."""

    def __init__(self, cache: TokenCache) -> None:
        self._cache = cache

    def user_credential(self, username: str, mechanism: ScramMechanism) -> None:
        return None

    def token_salt(self, token_id, mechanism):
        return self._cache.scram_salt(token_id, mechanism)

    def token_credential(self, token_id: str, mechanism: ScramMechanism):
        return self._cache.scram_credential(token_id, mechanism)

    def derived_count(self) -> int:
        return self._cache.derived_count()


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
        create_tokens(address, handle.admin_user, handle.admin_password, TOKEN_POOL,
                      labels=BENCH_LABELS if ctx.label_tokens else None)
    )
    tokens = credentials_of(responses)
    asyncio.run(wait_until_login_works(address, tokens))

    pid = handle.cluster.broker_info(broker_id).get("pid")
    report, seconds, cpu, _ = measured_logins(address, tokens, pid, sizes)
    measured = report.done / seconds
    idle_count = 50 if ctx.quick else IDLE_CONNECTIONS
    idle_report, idle_seconds, idle_cpu, held = measured_logins(
        address, tokens, pid, sizes, idle=idle_count
    )
    reauth, reauth_window = run_processes(
        "bench.b1_logins:reauth_workload",
        {"address": address, "tokens": tokens, "concurrency": sizes.b1_concurrency},
        processes=sizes.b1_processes,
        warmup_s=sizes.warmup_s,
        seconds=min(sizes.b1_seconds, 5.0),
        spawn_allowance_s=sizes.spawn_allowance_s,
    )
    floor = transport_floor(sizes.b1_concurrency, min(sizes.b1_seconds, 5.0), sizes)
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
            "reauth_logins_per_s": round(reauth.done / reauth_window, 1),
            "reauth_errors": reauth.errors,
            "reauth_latency": env.summary(reauth.latencies),
            "transport_floor_per_s": round(floor, 1),
            "broker_cpu_us_per_login": (
                round(cpu / report.done * 1e6, 1) if cpu is not None and report.done else None
            ),
            # The load generator's share of the machine, beside the broker's.
            "client_cpu_us_per_login": (
                round(report.cpu_s / report.done * 1e6, 1) if report.done else None
            ),
            "client_cpu_cores": round(report.cpu_s / seconds, 2),
            "broker_cpu_cores": round(cpu / seconds, 2) if cpu is not None else None,
            "idle_connections_held": held,
            "logins_per_s_with_idle": round(idle_report.done / idle_seconds, 1),
            "broker_cpu_us_per_login_with_idle": (
                round(idle_cpu / idle_report.done * 1e6, 1)
                if idle_cpu is not None and idle_report.done else None
            ),
            "errors_with_idle": idle_report.errors,
            "load_average": [round(x, 2) for x in os.getloadavg()],
        },
    )

