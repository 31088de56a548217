"""1,000 concurrent client connections on one broker process: zero errors, p99 printed.

A one-broker ``LocalCluster`` (its own process) and, in the test process, one asyncio
loop holding 1,000 connections. Half log in with a password (user ``alice``) and
describe her tokens; the other half log in with one of alice's tokens and describe
the cluster (a token session may not describe tokens). Every 8th request a
connection is closed and replaced by a new one that logs in again, so logins go on
for the whole window. Alongside, a few clients send half a request frame and stall:
each must be cut off after ``request.timeout.ms`` while the others see no error.

The window is ``TOKENSVC_LOAD_SECONDS`` seconds (20 by default so CI stays in budget;
the acceptance run uses 60). Latency percentiles of logins and requests are printed
(``-s``); nothing asserts on speed.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import os
import random
import resource
import struct
import time
from dataclasses import dataclass, field

import pytest

from tests.support.client import WireClient
from tests.support.local_cluster import ClusterFactory
from tokensvc.cluster import LocalCluster
from tokensvc.protocol import RequestHeader, decode_response, encode_request, frame
from tokensvc.protocol.api import ApiKey
from tokensvc.scram.client import ScramClient
from tokensvc.scram.formatter import ScramMechanism
from zk.client import ZkSettings
from zk.credential_store import bootstrap_user

pytestmark = pytest.mark.slow  # real processes and faults: tens of seconds

CONNECTIONS = 1000
STALLED = 10
SECONDS = float(os.environ.get("TOKENSVC_LOAD_SECONDS", "20"))
REQUEST_TIMEOUT_MS = 3000
RELOGIN_EVERY = 8
PACE_S = 0.5
MECHANISM = ScramMechanism.SCRAM_SHA_256


class LoadError(Exception):
    """A request failed, a login was refused or a connection broke."""


class Connection:
    """One client connection; one request at a time."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.correlation = itertools.count(1)

    @classmethod
    async def open(cls, address: tuple[str, int]) -> Connection:
        reader, writer = await asyncio.open_connection(*address)
        return cls(reader, writer)

    async def call(self, api_key: int, version: int, body: dict) -> dict:
        corr = next(self.correlation)
        self.writer.write(frame(encode_request(RequestHeader(api_key, version, corr, "load"), body)))
        await self.writer.drain()
        size = struct.unpack(">i", await self.reader.readexactly(4))[0]
        got, response = decode_response(api_key, version, await self.reader.readexactly(size))
        if got != corr:
            raise LoadError(f"correlation id {got} for request {corr}")
        if response.get("ErrorCode"):
            raise LoadError(f"api {api_key}: error {response['ErrorCode']}")
        return response

    async def login(self, username: str, password: str, token: bool, cache: dict) -> None:
        await self.call(ApiKey.SASL_HANDSHAKE, 1, {"Mechanism": MECHANISM.mechanism_name})
        client = ScramClient(MECHANISM, username, password,
                             extensions={"tokenauth": "true"} if token else {},
                             salted_password_cache=cache)
        first = await self.call(ApiKey.SASL_AUTHENTICATE, 2, {"AuthBytes": client.first_message()})
        final = await self.call(ApiKey.SASL_AUTHENTICATE, 2, {
            "AuthBytes": client.final_message(first["AuthBytes"])})
        client.verify_server_final(final["AuthBytes"])

    def close(self) -> None:
        self.writer.transport.abort()


@dataclass
class Stats:
    login_s: list[float] = field(default_factory=list)
    request_s: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    stalled_cut_s: list[float] = field(default_factory=list)


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))] * 1000 if ordered else 0.0


@dataclass
class Credentials:
    user: tuple[str, str]
    tokens: list[tuple[str, str]]


async def worker(index: int, address: tuple[str, int], creds: Credentials, start: float,
                 end: float, stats: Stats, cache: dict) -> None:
    token = index % 2 == 1
    username, password = creds.tokens[index % len(creds.tokens)] if token else creds.user
    api, body = ((ApiKey.DESCRIBE_CLUSTER, {"IncludeClusterAuthorizedOperations": False}) if token
                 else (ApiKey.DESCRIBE_DELEGATION_TOKEN, {"Owners": None}))
    rng = random.Random(index)
    await asyncio.sleep(max(0.0, start - time.monotonic()) + rng.uniform(0, PACE_S))
    conn: Connection | None = None
    sent = 0
    try:
        while time.monotonic() < end:
            if conn is None:
                began = time.monotonic()
                conn = await Connection.open(address)
                await conn.login(username, password, token, cache)
                stats.login_s.append(time.monotonic() - began)
            began = time.monotonic()
            await conn.call(api, 1 if api == ApiKey.DESCRIBE_CLUSTER else 3, body)
            stats.request_s.append(time.monotonic() - began)
            sent += 1
            if sent % RELOGIN_EVERY == 0:
                conn.close()
                conn = None
            await asyncio.sleep(rng.uniform(0.5 * PACE_S, 1.5 * PACE_S))
    except (LoadError, OSError, asyncio.IncompleteReadError) as exc:
        stats.errors.append(f"connection {index}: {exc!r}")
    finally:
        if conn is not None:
            conn.close()


async def stalled_client(address: tuple[str, int], stats: Stats) -> None:
    """Half an ApiVersions frame, then nothing: the broker must close the connection."""
    reader, writer = await asyncio.open_connection(*address)
    request = frame(encode_request(RequestHeader(ApiKey.API_VERSIONS, 3, 1, "stalled"), {}))
    writer.write(request[: len(request) // 2])
    await writer.drain()
    began = time.monotonic()
    try:
        data = await asyncio.wait_for(reader.read(1), REQUEST_TIMEOUT_MS / 1000 * 3)
    except TimeoutError:
        stats.errors.append("a stalled client was not cut off")
        return
    except ConnectionError:
        data = b""
    finally:
        writer.transport.abort()
    if data:
        stats.errors.append("a stalled client got a response")
    stats.stalled_cut_s.append(time.monotonic() - began)


async def run_load(address: tuple[str, int], creds: Credentials) -> Stats:
    stats = Stats()
    cache: dict = {}
    start = time.monotonic() + 2.0
    end = start + SECONDS
    tasks = [asyncio.create_task(worker(i, address, creds, start, end, stats, cache))
             for i in range(CONNECTIONS)]
    await asyncio.sleep(max(0.0, start + SECONDS / 2 - time.monotonic()))
    await asyncio.gather(*(stalled_client(address, stats) for _ in range(STALLED)))
    await asyncio.gather(*tasks)
    return stats


def _raise_fd_limit(needed: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        target = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))


def _eventually_logged_in(address: tuple[str, int], username: str, password: str) -> WireClient:
    """A login as a user just written to ZooKeeper (the broker learns of it by a watch)."""
    deadline = time.monotonic() + 10
    while True:
        try:
            return WireClient(address, username, password)
        except ConnectionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


@pytest.fixture
def cluster(cluster_factory: ClusterFactory, zk_connect: str) -> LocalCluster:
    """A cluster per test on the test's chroot: each fills the broker with connections."""
    # The broker process inherits the limit: raise it before the cluster starts.
    _raise_fd_limit(4 * CONNECTIONS + 1024)
    return cluster_factory(brokers=1, zookeeper=zk_connect,
                           overrides={"request.timeout.ms": str(REQUEST_TIMEOUT_MS)})


def test_thousand_concurrent_connections_log_in_and_describe_without_error(
    cluster: LocalCluster, zk_connect: str
) -> None:
    host, _, port = cluster.broker_info(1)["listeners"]["SASL_PLAINTEXT"].rpartition(":")
    address = (host, int(port))
    bootstrap_user_password = "alice-load-secret"
    bootstrap_user(ZkSettings(zk_connect), "alice", bootstrap_user_password, iterations=4096)
    tokens = []
    with _eventually_logged_in(address, "alice", bootstrap_user_password) as alice:
        for _ in range(10):
            created = alice.request(ApiKey.CREATE_DELEGATION_TOKEN, 3,
                                    {"Renewers": [], "MaxLifetimeMs": -1})
            assert created["ErrorCode"] == 0
            tokens.append((created["TokenId"], base64.b64encode(created["Hmac"]).decode()))
    creds = Credentials(("alice", bootstrap_user_password), tokens)

    stats = asyncio.run(run_load(address, creds))

    print(
        f"\nload: {CONNECTIONS} connections for {SECONDS:.0f}s: {len(stats.login_s)} logins "
        f"(p50 {percentile(stats.login_s, 50):.1f} ms, p99 {percentile(stats.login_s, 99):.1f} ms), "
        f"{len(stats.request_s)} describes ({len(stats.request_s) / SECONDS:.0f}/s, "
        f"p50 {percentile(stats.request_s, 50):.1f} ms, "
        f"p99 {percentile(stats.request_s, 99):.1f} ms), {len(stats.errors)} errors; "
        f"{STALLED} stalled clients cut after "
        f"{max(stats.stalled_cut_s, default=0):.1f}s at most"
    )
    assert stats.errors == []
    assert len(stats.login_s) >= CONNECTIONS
    assert len(stats.request_s) >= CONNECTIONS * 2
    assert len(stats.stalled_cut_s) == STALLED
    with WireClient(address, "alice", bootstrap_user_password) as alice:
        assert alice.request(ApiKey.DESCRIBE_DELEGATION_TOKEN, 3,
                             {"Owners": None})["ErrorCode"] == 0
