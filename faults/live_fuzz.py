"""``python -m faults.live_fuzz --minutes M``: hostile frames on real connections to a
running 3-broker cluster, with a checker (run by ``./dev fuzz`` after the harnesses).

Owns the live fuzzer. On a ``faults.cluster.FaultCluster`` (3 ZooKeeper nodes, 3
brokers) it sets up a user ``fuzzer`` (SCRAM), a token of another owner, a few ACLs, then
for ``--minutes`` runs ``--workers`` threads that each open connections from 127.0.0.2 (so
the per-address connection limit is the attacker's, not the probe's) to a random broker,
log in as nobody, as the user or with the token, and send frames made from the seed
corpus of real clients' requests (``tests/fuzz/protocol/corpus/request_header``):
mutated (bytes flipped, inserted, erased, an integer set to an extreme), truncated,
split into small pieces sent apart, oversized (a size prefix beyond
``sasl.server.max.receive.size`` or ``socket.request.max.bytes``, or of 2 GiB), random,
or pipelined many at a time. Every so often a burst of connections opens at once and
stays open, half a frame sent.

First, for ``BASELINE_S`` seconds, the probe alone (what the machine gives without
fuzzing). Throughout, once a second: each broker process must be alive; a probe user logs
in on one broker (in turn) from 127.0.0.1, which must succeed within ``PROBE_BOUND_MS``; each
broker's resident memory and open file descriptors are sampled. At the end: no broker
log holds a traceback; every token, user and ACL is as before (tokens the fuzzer's own
user created are listed apart: creating its own tokens is its right); descriptors and
memory are compared with the start. Any breach is a finding (exit status 1).

It must not print a password or an HMAC; the frames it sends carry only this run's
throwaway credentials.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import random
import socket
import struct
import sys
import tempfile
import threading
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, Self

from faults.cluster import MECHANISM, FaultCluster, token_password
from tokensvc.admin import AdminClient
from tokensvc.authz.acl import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from tokensvc.client_config import ClientConfig
from tokensvc.protocol import ApiKey, RequestHeader, decode_response, encode_request, frame
from tokensvc.scram import ScramClient

ROOT = Path(__file__).resolve().parents[1]
SEEDS = ROOT / "tests" / "fuzz" / "protocol" / "corpus" / "request_header"
PROBE_BOUND_MS = 100.0
BASELINE_S = 30  # probe logins before any fuzzing: what this machine gives without it
FUZZ_SOURCE = "127.0.0.2"
FUZZ_USER, FUZZ_PASSWORD = "fuzzer", "fuzzer-password-0123456789"
PROBE_USER, PROBE_PASSWORD = "probe", "probe-password-0123456789"
TOKEN_OWNER = "User:tokenowner"
FD_SLACK = 50
RSS_SLACK_MB = 256
KINDS = ("mutate", "mutate", "mutate", "extreme", "truncate", "split", "oversized", "random",
         "pipeline")


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise ConnectionError("closed")
        out += chunk
    return bytes(out)


class RawSession:
    """A socket to a broker, logged in (or not) with tokensvc's codec and SCRAM client."""

    def __init__(self, address: tuple[str, int], source: str, timeout: float = 10.0) -> None:
        self.sock = socket.create_connection(address, timeout=timeout,
                                             source_address=(source, 0))
        self._correlation = 0

    def call(self, api_key: ApiKey, version: int, body: dict) -> dict:
        self._correlation += 1
        header = RequestHeader(int(api_key), version, self._correlation, "live-fuzz")
        self.sock.sendall(frame(encode_request(header, body)))
        size = struct.unpack(">i", _recv_exact(self.sock, 4))[0]
        return decode_response(int(api_key), version, _recv_exact(self.sock, size))[1]

    def login(self, username: str, password: str, *, token: bool, cache: dict) -> None:
        answer = self.call(ApiKey.SASL_HANDSHAKE, 1, {"Mechanism": MECHANISM.mechanism_name})
        if answer["ErrorCode"]:
            raise ConnectionError(f"handshake refused: {answer['ErrorCode']}")
        client = ScramClient(MECHANISM, username, password,
                             extensions={"tokenauth": "true"} if token else None,
                             salted_password_cache=cache)
        first = self.call(ApiKey.SASL_AUTHENTICATE, 2, {"AuthBytes": client.first_message()})
        if first["ErrorCode"]:
            raise ConnectionError(f"login refused: {first['ErrorCode']}")
        final = self.call(ApiKey.SASL_AUTHENTICATE, 2,
                          {"AuthBytes": client.final_message(first["AuthBytes"])})
        if final["ErrorCode"]:
            raise ConnectionError(f"login refused: {final['ErrorCode']}")
        client.verify_server_final(final["AuthBytes"])

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()


def _probe_loop(conn: Connection) -> None:
    """The probe client's process: for each address received, one login as the probe
    user, answered with its milliseconds or the reason it failed; ``None`` ends it."""
    cache: dict = {}
    while (address := conn.recv()) is not None:
        started = time.monotonic()
        try:
            session = RawSession(address, "127.0.0.1", timeout=5.0)
            try:
                session.login(PROBE_USER, PROBE_PASSWORD, token=False, cache=cache)
            finally:
                session.close()
        except (OSError, ConnectionError, ValueError) as exc:
            conn.send(f"{type(exc).__name__}: {exc}")
            continue
        conn.send((time.monotonic() - started) * 1000)


class Prober:
    """The probe is a client of its own, in a process of its own: a login's time is the
    brokers' answer, not the wait for this process's interpreter lock, which the fuzzing
    threads hold most of the time (in one process, a probe waited up to ~40 ms for it on
    each of its round trips)."""

    def __init__(self) -> None:
        context = multiprocessing.get_context("spawn")
        self._conn, child = context.Pipe()
        self._process = context.Process(target=_probe_loop, args=(child,), daemon=True,
                                         name="live-fuzz-probe")

    def __enter__(self) -> Self:
        self._process.start()
        return self

    def __exit__(self, *exc: object) -> None:
        with contextlib.suppress(OSError, ValueError):
            self._conn.send(None)
        self._process.join(timeout=10)
        if self._process.is_alive():
            self._process.kill()

    def login(self, address: tuple[str, int]) -> float | str:
        """Milliseconds of one probe login on ``address``, or why it failed."""
        self._conn.send(address)
        if not self._conn.poll(30):
            return "the probe process did not answer within 30 s"
        return self._conn.recv()


# --- inputs ----------------------------------------------------------------------------


def load_seeds() -> list[bytes]:
    """Request payloads (size prefix removed) real clients sent, from the seed corpus."""
    return [p.read_bytes() for p in sorted(SEEDS.iterdir()) if p.name != "README.md"]


def mutate(rng: random.Random, data: bytes) -> bytes:
    out = bytearray(data)
    for _ in range(rng.randint(1, 8)):
        choice = rng.random()
        at = rng.randrange(len(out) + 1)
        if choice < 0.4 and out:
            out[min(at, len(out) - 1)] ^= 1 << rng.randrange(8)
        elif choice < 0.6:
            out[at:at] = rng.randbytes(rng.randint(1, 16))
        elif choice < 0.8 and out:
            del out[at:at + rng.randint(1, 16)]
        elif out:
            out[min(at, len(out) - 1)] = rng.choice((0, 0x7F, 0x80, 0xFF))
    return bytes(out)


def extreme(rng: random.Random, data: bytes) -> bytes:
    """An int16 or int32 of the payload (a length, a count) set to an extreme value."""
    if len(data) < 4:
        return data
    at = rng.randrange(len(data) - 3)
    width = rng.choice((2, 4))
    value = rng.choice((-1, 0x7FFF, -0x8000) if width == 2 else (-1, 0x7FFFFFFF, -0x80000000))
    packed = struct.pack(">h" if width == 2 else ">i", value)
    return data[:at] + packed + data[at + width:]


def wire_bytes(rng: random.Random, kind: str, seeds: list[bytes]) -> list[bytes]:
    """The pieces to send, in order, for one fuzzed frame of ``kind``."""
    seed = rng.choice(seeds)
    if kind == "mutate":
        return [frame(mutate(rng, seed))]
    if kind == "extreme":
        return [frame(extreme(rng, seed))]
    if kind == "truncate":
        cut = rng.randrange(len(seed) + 1)
        whole = frame(seed)
        return [whole[:4 + cut]] if rng.random() < 0.5 else [frame(seed[:cut])]
    if kind == "split":
        whole = frame(mutate(rng, seed) if rng.random() < 0.5 else seed)
        pieces, at = [], 0
        while at < len(whole):
            step = rng.randint(1, 7)
            pieces.append(whole[at:at + step])
            at += step
        return pieces
    if kind == "oversized":
        size = rng.choice((524_289, 1_048_577, 0x7FFFFFFF, 64 << 20))
        return [struct.pack(">i", size) + seed + rng.randbytes(rng.randint(0, 4096))]
    if kind == "random":
        return [rng.randbytes(rng.randint(0, 256))]
    return [b"".join(frame(mutate(rng, rng.choice(seeds))) for _ in range(rng.randint(2, 50)))]


# --- the run ---------------------------------------------------------------------------


class LiveFuzzer(FaultCluster):
    """The cluster, the fuzzing workers, the probe and the checker."""

    def __init__(self, directory: Path, workers: int, seed: int) -> None:
        super().__init__(directory)
        self.workers = workers
        self.seed = seed
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.counts = {"connections": 0, "frames": 0, "logins": 0, "login_failures": 0,
                       "responses": 0, "closed_by_broker": 0, "bursts": 0}
        self.probe_ms: list[float] = []
        self.probe_failures: list[str] = []
        self.dead: set[int] = set()
        self.samples: dict[int, list[tuple[float, int, int]]] = {}  # (s, RSS MB, fds)
        self.token: tuple[str, str] = ("", "")
        self.seeds = load_seeds()

    # -- set-up and state ------------------------------------------------------------

    def _admin_client(self) -> AdminClient:
        config = ClientConfig(security_protocol="SASL_PLAINTEXT", sasl_mechanism=MECHANISM,
                              username=self.admin[0], password=self.admin[1])
        return AdminClient(",".join(f"{h}:{p}" for h, p in
                                    (self.address(b) for b in self.cluster.broker_ids())),
                           config)

    def set_up(self) -> None:
        admin = self._admin_client()
        try:
            for user, password in ((FUZZ_USER, FUZZ_PASSWORD), (PROBE_USER, PROBE_PASSWORD),
                                   ("tokenowner", "tokenowner-password-0123")):
                admin.upsert_user_scram_credential(user, MECHANISM, password)
            made = admin.create_token(owner=TOKEN_OWNER, renewers=[f"User:{FUZZ_USER}"],
                                      labels={"purpose": "live-fuzz"})
            self.token = (made.token_id, token_password(made.hmac))
            admin.create_acls([
                AclBinding(ResourcePattern(ResourceType.TOPIC, "fuzz", PatternType.PREFIXED),
                           AccessControlEntry(f"User:{FUZZ_USER}", "*", AclOperation.READ,
                                              AclPermissionType.ALLOW)),
                AclBinding(ResourcePattern(ResourceType.GROUP, "g", PatternType.LITERAL),
                           AccessControlEntry("User:someone", "10.0.0.1", AclOperation.ALL,
                                              AclPermissionType.DENY)),
            ])
        finally:
            admin.close()
        cache: dict = {}
        deadline = time.monotonic() + 60
        for broker in self.cluster.broker_ids():
            for user, password, token in ((FUZZ_USER, FUZZ_PASSWORD, False),
                                          (PROBE_USER, PROBE_PASSWORD, False),
                                          (*self.token, True)):
                while True:
                    try:
                        session = RawSession(self.address(broker), "127.0.0.1")
                        session.login(user, password, token=token, cache=cache)
                        session.close()
                        break
                    except (OSError, ConnectionError):
                        if time.monotonic() > deadline:
                            raise
                        time.sleep(0.5)

    def state(self) -> dict[str, Any]:
        """Every token (admin's view), user credential and ACL, comparable."""
        admin = self._admin_client()
        try:
            tokens = {t.token_id: [str(t.owner), str(t.requester), sorted(map(str, t.renewers)),
                                   t.issue_ms, t.expiry_ms, t.max_ms, list(t.labels)]
                      for t in admin.describe_tokens()}
            users = {u: sorted(f"{i.mechanism}:{i.iterations}" for i in infos)
                     for u, infos in admin.describe_user_scram_credentials().items()}
            acls = sorted(str(b) for b in admin.describe_acls(AclBindingFilter()))
        finally:
            admin.close()
        return {"tokens": tokens, "users": users, "acls": acls}

    # -- workers ---------------------------------------------------------------------

    def _count(self, key: str, n: int = 1) -> None:
        with self.lock:
            self.counts[key] += n

    def _worker(self, index: int) -> None:
        rng = random.Random(self.seed * 1000 + index)
        cache: dict = {}
        brokers = self.cluster.broker_ids()
        while not self.stop.is_set():
            broker = rng.choice(brokers)
            mode = rng.choice(("none", "user", "token"))
            try:
                session = RawSession(self.address(broker), FUZZ_SOURCE, timeout=2.0)
            except OSError:
                time.sleep(0.05)
                continue
            self._count("connections")
            try:
                if mode != "none":
                    try:
                        if mode == "user":
                            session.login(FUZZ_USER, FUZZ_PASSWORD, token=False, cache=cache)
                        else:
                            session.login(*self.token, token=True, cache=cache)
                        self._count("logins")
                    except (OSError, ConnectionError, ValueError):
                        self._count("login_failures")
                        continue
                self._fuzz_session(rng, session)
            finally:
                session.close()

    def _fuzz_session(self, rng: random.Random, session: RawSession) -> None:
        session.sock.settimeout(0.2)
        for _ in range(rng.randint(1, 20)):
            if self.stop.is_set():
                return
            kind = rng.choice(KINDS)
            try:
                for piece in wire_bytes(rng, kind, self.seeds):
                    session.sock.sendall(piece)
                    if kind == "split":
                        time.sleep(rng.random() * 0.01)
                self._count("frames")
                try:
                    if session.sock.recv(65536):
                        self._count("responses")
                    else:
                        self._count("closed_by_broker")
                        return
                except TimeoutError:
                    pass
            except OSError:
                self._count("closed_by_broker")
                return

    def _bursts(self) -> None:
        """Every few seconds, 200 connections at once, each with half a frame sent."""
        rng = random.Random(self.seed)
        while not self.stop.wait(5.0):
            held = []
            for _ in range(200):
                try:
                    sock = socket.create_connection(
                        self.address(rng.choice(self.cluster.broker_ids())), timeout=2.0,
                        source_address=(FUZZ_SOURCE, 0))
                    sock.sendall(struct.pack(">i", 64) + rng.randbytes(10))
                    held.append(sock)
                except OSError:
                    break
            self._count("bursts")
            self._count("connections", len(held))
            self.stop.wait(2.0)
            for sock in held:
                sock.close()

    # -- the checker -----------------------------------------------------------------

    def _sample(self, now: float) -> None:
        for broker in self.cluster.broker_ids():
            pid = self.cluster.broker_pid(broker)
            alive = pid is not None and Path(f"/proc/{pid}").exists()
            if not alive:
                self.dead.add(broker)
                continue
            try:
                status = Path(f"/proc/{pid}/status").read_text()
                rss_kb = int(next(line.split()[1] for line in status.splitlines()
                                  if line.startswith("VmRSS:")))
                fds = len(os.listdir(f"/proc/{pid}/fd"))
            except (OSError, StopIteration):
                self.dead.add(broker)
                continue
            self.samples.setdefault(broker, []).append((now, rss_kb // 1024, fds))

    def _probe(self, broker: int, prober: Prober) -> None:
        outcome = prober.login(self.address(broker))
        if isinstance(outcome, str):
            self.probe_failures.append(f"broker {broker}: {outcome}")
        else:
            self.probe_ms.append(outcome)

    def tracebacks(self) -> dict[int, int]:
        out = {}
        for broker in self.cluster.broker_ids():
            log = Path(self.cluster.broker_info(broker)["log"])
            text = log.read_text(errors="replace") if log.exists() else ""
            out[broker] = text.count("Traceback (most recent call last)")
        return out

    def run(self, seconds: float) -> dict[str, Any]:
        brokers = self.cluster.broker_ids()
        with Prober() as prober:
            return self._run(seconds, brokers, prober)

    def _run(self, seconds: float, brokers: list[int], prober: Prober) -> dict[str, Any]:
        for broker in brokers:  # the probe's own salted passwords
            self._probe(broker, prober)
        self.probe_ms.clear()
        started = time.monotonic()
        for turn in range(BASELINE_S):
            self._probe(brokers[turn % len(brokers)], prober)
            time.sleep(max(0.0, turn + 1 - (time.monotonic() - started)))
        baseline_ms = sorted(self.probe_ms)
        self.probe_ms.clear()
        self.probe_failures.clear()
        self._sample(0.0)
        before_tracebacks = self.tracebacks()
        before = self.state()
        threads = [threading.Thread(target=self._worker, args=(i,), daemon=True)
                   for i in range(self.workers)]
        threads.append(threading.Thread(target=self._bursts, daemon=True))
        for thread in threads:
            thread.start()
        started = time.monotonic()
        turn = 0
        while (elapsed := time.monotonic() - started) < seconds:
            self._probe(brokers[turn % len(brokers)], prober)
            turn += 1
            self._sample(elapsed)
            time.sleep(max(0.0, turn - (time.monotonic() - started)))
        self.stop.set()
        for thread in threads:
            thread.join(timeout=30)
        time.sleep(3.0)  # the brokers close what the workers left
        self._sample(seconds + 3)
        after = self.state()
        tracebacks = {b: n - before_tracebacks.get(b, 0) for b, n in self.tracebacks().items()}
        return self._report(seconds, baseline_ms, before, after, tracebacks)

    def _report(self, seconds: float, baseline_ms: list[float], before: dict, after: dict,
                tracebacks: dict[int, int]) -> dict[str, Any]:
        findings = []
        if self.dead:
            findings.append(f"brokers down: {sorted(self.dead)}")
        if self.probe_failures:
            findings.append(f"{len(self.probe_failures)} probe logins failed: "
                            f"{self.probe_failures[:3]}")
        slow = [ms for ms in self.probe_ms if ms > PROBE_BOUND_MS]
        if slow:
            findings.append(f"{len(slow)} probe logins over {PROBE_BOUND_MS:.0f} ms "
                            f"(max {max(slow):.0f} ms)")
        if any(tracebacks.values()):
            findings.append(f"tracebacks in broker logs: {tracebacks}")
        fuzz_owner = f"User:{FUZZ_USER}"
        new_tokens = {t: v for t, v in after["tokens"].items() if t not in before["tokens"]}
        changed = {t for t, v in before["tokens"].items() if after["tokens"].get(t) != v}
        foreign_new = [t for t, v in new_tokens.items() if v[0] != fuzz_owner]
        if changed or foreign_new:
            findings.append(f"tokens changed: {len(changed)}, created for others: "
                            f"{len(foreign_new)}")
        if after["users"] != before["users"]:
            findings.append("user credentials changed")
        if after["acls"] != before["acls"]:
            findings.append("ACLs changed")
        brokers = {}
        for broker, samples in self.samples.items():
            rss = [s[1] for s in samples]
            fds = [s[2] for s in samples]
            brokers[broker] = {"rss_mb": [rss[0], max(rss), rss[-1]],
                               "fds": [fds[0], max(fds), fds[-1]]}
            if fds[-1] > fds[0] + FD_SLACK:
                findings.append(f"broker {broker}: {fds[-1]} fds at the end, {fds[0]} at start")
            if max(rss) > rss[0] + RSS_SLACK_MB:
                findings.append(f"broker {broker}: RSS {max(rss)} MB, {rss[0]} MB at start")
        probes = sorted(self.probe_ms)

        def summary(values: list[float]) -> dict[str, Any]:
            if not values:
                return {}
            return {"median_ms": round(values[len(values) // 2], 1),
                    "p99_ms": round(values[int(len(values) * 0.99)], 1),
                    "max_ms": round(values[-1], 1),
                    "over_bound": sum(v > PROBE_BOUND_MS for v in values)}

        return {
            "seconds": seconds,
            "workers": self.workers,
            **self.counts,
            "probe": {"count": len(probes) + len(self.probe_failures),
                      "failed": len(self.probe_failures), **summary(probes)},
            "probe_before_fuzzing": {"count": len(baseline_ms), **summary(baseline_ms)},
            "brokers": brokers,
            "tracebacks": tracebacks,
            "tokens_before": len(before["tokens"]),
            "tokens_created_by_fuzzer": len(new_tokens),
            "users": len(after["users"]),
            "acls": len(after["acls"]),
            "findings": findings,
        }


def run_live_fuzzer(seconds: float, work: Path, workers: int = 8, seed: int = 1) -> dict:
    """Start the cluster in ``work``, fuzz it ``seconds``, stop it; the report (printed)."""
    work.mkdir(parents=True, exist_ok=True)
    directory = Path(tempfile.mkdtemp(prefix="live-fuzz-", dir=work))
    fuzzer = LiveFuzzer(directory, workers, seed)
    try:
        print(f"live fuzzer: starting 3 ZooKeeper nodes and 3 brokers in {directory}", flush=True)
        fuzzer.start_cluster("livefuzz", {"delegation.token.implicit.login.enable": "true"})
        fuzzer.set_up()
        print(f"live fuzzer: {seconds / 60:.1f} minutes, {workers} workers, "
              f"{len(fuzzer.seeds)} seed frames", flush=True)
        report = fuzzer.run(seconds)
    finally:
        fuzzer.close()
    (work / "live-report.json").write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2), flush=True)
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m faults.live_fuzz",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--work", type=Path, default=ROOT / ".fuzz" / "live")
    args = parser.parse_args(argv)
    report = run_live_fuzzer(args.minutes * 60, args.work, args.workers, args.seed)
    return 1 if report["findings"] else 0


if __name__ == "__main__":
    sys.exit(main())
