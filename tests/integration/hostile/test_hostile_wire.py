"""Live fuzz of a running broker process: 500 hostile connections, seeded, bounded.

A one-broker ``LocalCluster`` (``request.timeout.ms`` short, so half-sent frames are
cut quickly) gets 500 connections, 25 at a time, each sending one seeded-random
hostile case: random bytes, negative and huge size prefixes, frames too large for an
unauthenticated client, truncated headers, unknown API keys and versions, invalid
UTF-8, tagged-field bombs in the header and the body, SCRAM messages out of order,
valid requests of every API with bytes overwritten, inserted or cut, such mutated
requests sent after a real login, and well-formed requests of every API whose field
values are hostile (extreme integers, odd principals, empty or long strings) sent by a
logged-in super user, so that they reach the handlers. Meanwhile a canary client keeps logging in and
sending requests.

``TOKENSVC_FUZZ_SEED`` and ``TOKENSVC_FUZZ_CONNECTIONS`` change the seed and the count
for longer exploratory runs.

Checked: every hostile connection gets an answer or is closed within a bound (none
hangs); the canary never sees an error; the broker process stays up, logs no
unexpected error (no traceback: a request that decodes must be handled or refused,
never crash a handler) and ends with no connection left open.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import random
import socket
import struct
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.support.local_cluster import broker_address, broker_metric
from tests.unit.protocol.test_protocol_roundtrip import REQUEST_SAMPLES
from tokensvc.cluster import LocalCluster
from tokensvc.protocol import (
    SUPPORTED,
    EncodeError,
    RequestHeader,
    decode_response,
    encode_request,
    frame,
)
from tokensvc.protocol.api import ApiKey
from tokensvc.protocol.primitives import encode_uvarint
from tokensvc.scram.client import ScramClient
from tokensvc.scram.formatter import ScramMechanism

SEED = int(os.environ.get("TOKENSVC_FUZZ_SEED", "20240917"))
CONNECTIONS = int(os.environ.get("TOKENSVC_FUZZ_CONNECTIONS", "500"))
PARALLEL = 25
REQUEST_TIMEOUT_MS = 500
IDLE_MS = 4000
# An answer or a close must come within this (a stall is cut after request.timeout.ms;
# a failed login is answered after the failed-authentication delay).
ANSWER_BOUND_S = 5.0
PRE_AUTH_LIMIT = 524_288  # sasl.server.max.receive.size
MECHANISM = ScramMechanism.SCRAM_SHA_512

Case = tuple[str, list[bytes], bool]  # (name, frames/raw chunks to send, log in first)


def _request(api_key: int, version: int, body: dict, corr: int = 7, client_id: str = "f") -> bytes:
    return frame(encode_request(RequestHeader(api_key, version, corr, client_id), body))


def _header_v2(api_key: int, version: int, tagged: bytes) -> bytes:
    """A flexible request header (v2): the client id stays a classic nullable string."""
    return struct.pack(">hhih", api_key, version, 3, 1) + b"f" + tagged


VALID = [
    (int(key), version, body)
    for key, samples in REQUEST_SAMPLES.items()
    for first, body in samples
    for version in sorted({max(SUPPORTED[key][0], first), SUPPORTED[key][1]})
]


def _mutate(rng: random.Random, payload: bytes) -> bytes:
    data = bytearray(payload)
    for _ in range(rng.randint(1, 4)):
        position = rng.randrange(max(1, len(data)))
        action = rng.choice(["overwrite", "insert", "cut"])
        if action == "overwrite" and data:
            data[position] = rng.randrange(256)
        elif action == "insert":
            data[position:position] = rng.randbytes(rng.randint(1, 8))
        else:
            del data[position:]
    return bytes(data)


def _mutated_valid(rng: random.Random) -> list[bytes]:
    key, version, body = rng.choice(VALID)
    payload = encode_request(RequestHeader(key, version, 11, "fuzz"), body)
    mutated = _mutate(rng, payload)
    if rng.random() < 0.8:
        return [frame(mutated)]
    return [struct.pack(">i", len(payload)) + mutated]  # size prefix of the original


def _hostile_value(rng: random.Random, value: object) -> object:
    if isinstance(value, bool):
        return rng.random() < 0.5
    if isinstance(value, int):
        return rng.choice([0, -1, 1, -(2**15), 2**15 - 1, -(2**31), 2**31 - 1, -(2**63),
                           2**63 - 1, rng.randint(-1000, 1000)])
    if isinstance(value, str):
        return rng.choice(["", "*", ":", "User:", ":x", "User:*", "a" * 300, "ü" * 50,
                           "\x00\x01", "../../x", "%2F", "User:%", rng.randbytes(8).hex()])
    if isinstance(value, bytes):
        return rng.choice([b"", rng.randbytes(rng.randint(1, 128)), b"\x00" * 64])
    if isinstance(value, list):
        if not value or rng.random() < 0.3:
            return rng.choice([[], None])
        return [_hostile_value(rng, item) for item in value * rng.randint(1, 3)]
    if isinstance(value, dict):
        return {k: (_hostile_value(rng, v) if rng.random() < 0.6 else v) for k, v in value.items()}
    return value


def _hostile_values(rng: random.Random) -> list[bytes]:
    """A request that decodes, with hostile field values: it reaches the handler."""
    for _ in range(50):
        key, version, body = rng.choice(VALID)
        try:
            return [_request(key, version, _hostile_value(rng, body), corr=13)]
        except EncodeError:  # a value the version cannot encode: draw again
            continue
    return [_request(ApiKey.API_VERSIONS, 3, {})]


def _scram_out_of_order(rng: random.Random) -> list[bytes]:
    client = ScramClient(MECHANISM, "admin", "not-the-password")
    first = client.first_message()
    handshake = _request(ApiKey.SASL_HANDSHAKE, 1, {"Mechanism": MECHANISM.mechanism_name})
    final_like = b"c=biws,r=" + b"x" * 40 + b",p=" + b"A" * 88
    scripts = [
        [_request(ApiKey.SASL_AUTHENTICATE, 2, {"AuthBytes": first})],
        [handshake, _request(ApiKey.SASL_AUTHENTICATE, 2, {"AuthBytes": final_like})],
        [handshake, handshake],
        [handshake, _request(ApiKey.SASL_AUTHENTICATE, 2, {"AuthBytes": first}),
         _request(ApiKey.SASL_AUTHENTICATE, 2, {"AuthBytes": first})],
        [handshake, _request(ApiKey.SASL_AUTHENTICATE, 2, {"AuthBytes": first}),
         _request(ApiKey.SASL_AUTHENTICATE, 2, {"AuthBytes": final_like})],
        [_request(ApiKey.SASL_HANDSHAKE, 0, {"Mechanism": MECHANISM.mechanism_name}),
         frame(rng.randbytes(rng.randint(0, 64)))],
        [handshake, _request(ApiKey.SASL_AUTHENTICATE, 2, {"AuthBytes": b"\xff\xfe" * 20})],
        [handshake, _request(ApiKey.SASL_AUTHENTICATE, 2, {"AuthBytes": rng.randbytes(9000)})],
        [_request(ApiKey.SASL_HANDSHAKE, 1, {"Mechanism": "GSSAPI"})],
        [_request(ApiKey.METADATA, 12, {"Topics": None, "AllowAutoTopicCreation": False,
                                 "IncludeTopicAuthorizedOperations": False})],
    ]
    return rng.choice(scripts)


def _tagged_bomb(rng: random.Random) -> list[bytes]:
    many = 50_000
    pairs = b"".join(encode_uvarint(rng.randint(0, 2**20)) + b"\x00" for _ in range(many))
    body = b"\x01\x01"  # ApiVersions v3: two empty compact strings
    variants = [
        _header_v2(ApiKey.API_VERSIONS, 3, encode_uvarint(0xFFFFFFFF)) + body + b"\x00",
        _header_v2(ApiKey.API_VERSIONS, 3, encode_uvarint(many) + pairs) + body + b"\x00",
        _header_v2(ApiKey.API_VERSIONS, 3,
                   b"\x01\x05" + encode_uvarint(0xFFFFFFFF)) + body + b"\x00",
        _header_v2(ApiKey.API_VERSIONS, 3, b"\x00") + body + encode_uvarint(many) + pairs,
        _header_v2(ApiKey.API_VERSIONS, 3, b"\x00") + body + encode_uvarint(2**31),
    ]
    return [frame(rng.choice(variants))]


def _bad_size(rng: random.Random) -> list[bytes]:
    size = rng.choice([-1, -(2**31), 2**31 - 1, 10**9, PRE_AUTH_LIMIT + 1, 3 * PRE_AUTH_LIMIT])
    return [struct.pack(">i", size) + rng.randbytes(rng.randint(0, 4096))]


def _unknown_api(rng: random.Random) -> list[bytes]:
    key = rng.choice([-1, 99, 1000, 32767, 58])
    version = rng.choice([-1, 0, 99, 32767])
    if key == 58:  # Envelope, before authentication
        version = 0
    return [frame(struct.pack(">hhih", key, version, 5, 1) + b"f" + rng.randbytes(8))]


def _unknown_version(rng: random.Random) -> list[bytes]:
    key = rng.choice([ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE, ApiKey.METADATA])
    return [frame(struct.pack(">hhih", key, rng.choice([99, 32767, -5]), 5, 1) + b"f")]


def _truncated_header(rng: random.Random) -> list[bytes]:
    header = struct.pack(">hhih", ApiKey.API_VERSIONS, 3, 5, 4) + b"fuzz"
    return [frame(header[: rng.randint(0, len(header) - 1)])]


def _invalid_utf8(rng: random.Random) -> list[bytes]:
    bad = rng.choice([b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\xf8\x88\x80\x80\x80"])
    header = struct.pack(">hhih", ApiKey.SASL_HANDSHAKE, 1, 5, len(bad)) + bad
    body = struct.pack(">h", len(bad) + 5) + b"SCRAM" + bad
    return [frame(rng.choice([header + b"\x00\x0dSCRAM-SHA-512",
                              struct.pack(">hhih", ApiKey.SASL_HANDSHAKE, 1, 5, 1) + b"f" + body]))]


def _random_bytes(rng: random.Random) -> list[bytes]:
    return [rng.randbytes(rng.randint(0, 300))]


def _pipelined_garbage(rng: random.Random) -> list[bytes]:
    return [b"".join(frame(rng.randbytes(rng.randint(0, 40))) for _ in range(50))]


GENERATORS: list[tuple[str, Callable[[random.Random], list[bytes]], bool]] = [
    ("random bytes", _random_bytes, False),
    ("bad size prefix", _bad_size, False),
    ("unknown api key", _unknown_api, False),
    ("unknown version", _unknown_version, False),
    ("truncated header", _truncated_header, False),
    ("invalid utf-8", _invalid_utf8, False),
    ("tagged-field bomb", _tagged_bomb, False),
    ("scram out of order", _scram_out_of_order, False),
    ("pipelined garbage", _pipelined_garbage, False),
    ("mutated request", _mutated_valid, False),
    ("mutated request after login", _mutated_valid, True),
    ("hostile values after login", _hostile_values, True),
    ("hostile values after login", _hostile_values, True),
]


def cases(count: int, seed: int) -> list[Case]:
    rng = random.Random(seed)
    out = []
    for i in range(count):
        name, make, login = GENERATORS[i % len(GENERATORS)]
        out.append((name, make(rng), login))
    return out


# -- running the cases --------------------------------------------------------------------


async def _call(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, corr: int,
                api_key: int, version: int, body: dict) -> dict:
    writer.write(_request(api_key, version, body, corr=corr))
    await writer.drain()
    size = struct.unpack(">i", await reader.readexactly(4))[0]
    got, response = decode_response(api_key, version, await reader.readexactly(size))
    assert got == corr
    assert not response.get("ErrorCode"), response
    return response


async def _login(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, password: str,
                 cache: dict) -> None:
    corr = itertools.count(100)
    await _call(reader, writer, next(corr), ApiKey.SASL_HANDSHAKE, 1,
                {"Mechanism": MECHANISM.mechanism_name})
    client = ScramClient(MECHANISM, "admin", password, salted_password_cache=cache)
    first = await _call(reader, writer, next(corr), ApiKey.SASL_AUTHENTICATE, 2,
                        {"AuthBytes": client.first_message()})
    final = await _call(reader, writer, next(corr), ApiKey.SASL_AUTHENTICATE, 2,
                        {"AuthBytes": client.final_message(first["AuthBytes"])})
    client.verify_server_final(final["AuthBytes"])


async def run_case(address: tuple[str, int], case: Case, password: str, cache: dict) -> str:
    """'answered', 'closed' or 'hung'."""
    _name, chunks, login = case
    reader, writer = await asyncio.open_connection(*address)
    try:
        if login:
            await _login(reader, writer, password, cache)
        try:
            for chunk in chunks:
                writer.write(chunk)
            await writer.drain()
        except ConnectionError:
            return "closed"
        received = 0
        deadline = time.monotonic() + ANSWER_BOUND_S
        while time.monotonic() < deadline:
            try:
                data = await asyncio.wait_for(reader.read(65536), deadline - time.monotonic())
            except TimeoutError:
                break
            except ConnectionError:
                return "closed"
            if not data:
                return "closed"
            received += len(data)
            if received >= 4:
                return "answered"
        return "hung"
    finally:
        writer.transport.abort()


@dataclass
class Canary:
    """Logs in and sends requests on a live connection all along; collects any failure."""

    address: tuple[str, int]
    password: str
    failures: list[str] = field(default_factory=list)
    requests: int = 0
    logins: int = 0
    logins_during: int = 0  # the logins done before the hostile connections were all over

    async def run(self, stop: asyncio.Event) -> None:
        """Until ``stop`` and at least 3 logins: the canary shares the test's event loop
        with the 500 connections, and on a busy machine the fuzz may end before it has
        logged in three times; every login, during or after, must succeed."""
        cache: dict = {}
        while not (stop.is_set() and self.logins >= 3):
            try:
                reader, writer = await asyncio.open_connection(*self.address)
                try:
                    await _login(reader, writer, self.password, cache)
                    self.logins += 1
                    for corr in range(1, 11):
                        await _call(reader, writer, corr, ApiKey.DESCRIBE_CLUSTER, 1,
                                    {"IncludeClusterAuthorizedOperations": True})
                        self.requests += 1
                        await asyncio.sleep(0.02)
                finally:
                    writer.transport.abort()
            except (AssertionError, OSError, asyncio.IncompleteReadError) as exc:
                self.failures.append(repr(exc))


async def fuzz(address: tuple[str, int], password: str, all_cases: list[Case]
               ) -> tuple[Counter, dict[str, Counter], Canary]:
    canary = Canary(address, password)
    stop = asyncio.Event()
    canary_task = asyncio.create_task(canary.run(stop))
    limit = asyncio.Semaphore(PARALLEL)
    cache: dict = {}

    async def one(case: Case) -> str:
        async with limit:
            try:
                return await run_case(address, case, password, cache)
            except (AssertionError, OSError, asyncio.IncompleteReadError) as exc:
                return f"login failed: {exc!r}"

    outcomes = await asyncio.gather(*(one(case) for case in all_cases))
    canary.logins_during = canary.logins
    stop.set()
    await asyncio.wait_for(canary_task, 60)
    by_kind: dict[str, Counter] = {}
    for case, outcome in zip(all_cases, outcomes, strict=True):
        by_kind.setdefault(case[0], Counter())[outcome] += 1
    return Counter(outcomes), by_kind, canary


pytestmark = pytest.mark.cluster(brokers=1, overrides={
    "request.timeout.ms": str(REQUEST_TIMEOUT_MS),
    "connections.max.idle.ms": str(IDLE_MS),
})


def test_five_hundred_hostile_connections_leave_the_broker_serving(cluster: LocalCluster) -> None:
    address = broker_address(cluster, 1)
    password = cluster.info["admin"]["password"]
    all_cases = cases(CONNECTIONS, SEED)

    started = time.monotonic()
    totals, by_kind, canary = asyncio.run(fuzz(address, password, all_cases))
    elapsed = time.monotonic() - started
    print(f"\nlive fuzz: {CONNECTIONS} connections in {elapsed:.1f}s: {dict(totals)}; "
          f"canary {canary.logins} logins, {canary.requests} requests")
    for kind, counts in sorted(by_kind.items()):
        print(f"  {kind}: {dict(counts)}")

    assert totals["hung"] == 0, {k: c for k, c in by_kind.items() if c["hung"]}
    assert set(totals) <= {"answered", "closed"}, totals
    assert canary.failures == []
    assert canary.logins_during >= 1 and canary.logins >= 3
    assert cluster.broker_pid(1) is not None
    deadline = time.monotonic() + IDLE_MS / 1000 + 5
    while broker_metric(cluster, 1, "tokensvc_active_connections") > 0:
        assert time.monotonic() < deadline, "hostile connections were left open"
        time.sleep(0.1)
    log = Path(cluster.broker_info(1)["log"]).read_text(errors="replace")
    assert "Traceback" not in log, log[log.find("Traceback") - 300:][:3000]
    assert "unexpected error" not in log


def _closed_within(sock: socket.socket, seconds: float) -> bool:
    sock.settimeout(seconds)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def test_before_login_a_frame_above_the_sasl_receive_size_is_refused_from_its_prefix(
    cluster: LocalCluster,
) -> None:
    host, _, port = cluster.broker_info(1)["listeners"]["SASL_PLAINTEXT"].rpartition(":")
    size = PRE_AUTH_LIMIT + 1000
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        sock.sendall(struct.pack(">i", size))
        assert _closed_within(sock, 5.0)
    # Refused from its size prefix (not cut later as a stalled frame): the broker never
    # waits for, let alone buffers, a body that an unauthenticated client may not send.
    log = Path(cluster.broker_info(1)["log"]).read_text(errors="replace")
    assert f"frame of {size} bytes exceeds the maximum of {PRE_AUTH_LIMIT}" in log


def test_before_login_the_body_of_a_request_not_allowed_yet_is_refused_unread(
    cluster: LocalCluster,
) -> None:
    # A DescribeDelegationToken v3 of 160,000 owners, just under the pre-login frame limit,
    # cut short by its last byte: read, it would cost the event loop half a second of CPU
    # and then fail as truncated (found measuring the cost of the largest frames a
    # stranger may send, for docs/security.md). It is refused from
    # its header: the log names the API, not the truncation.
    owners = 160_000
    body = encode_uvarint(owners + 1) + b"\x01\x01\x00" * owners
    payload = _header_v2(int(ApiKey.DESCRIBE_DELEGATION_TOKEN), 3, b"\x00") + body[:-1]
    assert len(payload) < PRE_AUTH_LIMIT
    host, _, port = cluster.broker_info(1)["listeners"]["SASL_PLAINTEXT"].rpartition(":")
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        client_port = sock.getsockname()[1]
        sock.sendall(frame(payload))
        assert _closed_within(sock, 5.0)
    log = Path(cluster.broker_info(1)["log"]).read_text(errors="replace")
    lines = [line for line in log.splitlines() if f":{client_port}" in line]
    assert any("api 41 not allowed" in line for line in lines), lines
    assert not any("truncated" in line for line in lines), lines
