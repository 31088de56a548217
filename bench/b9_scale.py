"""B9: one broker at 10k, 100k and 1M tokens in one run, and each figure's 1M / 100k ratio.

Set-up: one managed ZooKeeper with its default settings (heap included; with ``--quick``
the server the suite's quick run shares, :func:`bench.env.zookeeper`). For each
size in turn, tokens are added straight into ZooKeeper in Kafka's layout (pipelined
transactions, :func:`bench.zkraw.write_tokens`) until it holds that many: most owned
by 1,000 owners, and 100 owned by ``User:b9-probe`` at every size, so "describe one
owner" asks for the same 100 tokens each time. Then, per size:

* ``fill_s``: seconds to write this size's new tokens (set-up speed, for the record);
* ``cold_start_s`` (**first start, no snapshot**): from ``LocalCluster.up`` of a fresh
  1-broker cluster on that ZooKeeper to the first successful SCRAM login of a
  preloaded token (retried every 20 ms, as B4 does; the broker answers no token login
  before its cache is complete); the broker's own log adds ``cache_load_ms`` (listing,
  reads, decode and fill) and ``broker_ready_s`` (process start to serving), and
  ``broker_cpu_s_at_first_login`` is the CPU time the broker process had used by then
  (user + system: on a shared machine, the cost of the cold start apart from the wait
  for a CPU);
* ``restart_s`` (**restart from snapshot**, what the cold-start targets are judged on):
  that broker is then stopped cleanly (it writes its token cache snapshot,
  ``token.cache.snapshot.dir``) and started again; from right before its new process
  starts to its first successful token login, as above. ``restart_cpu_s`` is its CPU
  time by then, ``snapshot_load_ms`` the log's "loaded from snapshot" duration
  (reading and checking the file, the catch-up from ZooKeeper, the fill),
  ``snapshot_write_s`` how long the clean stop's snapshot took (taken, encoded,
  written; from the log) and ``snapshot_mb`` its size;
* ``broker_rss_mb``: the broker's resident set after the restart's first login;
* ``cache_mb_per_100k`` without and with credentials: B7's method (a fresh process
  decodes the tokens from their JSON with the bulk decoder, fills a cache, then
  derives both SCRAM credentials for every token, 1 PBKDF2 iteration), the growth of
  its resident set, per 100k tokens;
* ``describe_owner_ms``: median of 20 DescribeDelegationToken v3 of ``b9-probe``;
* ``describe_all_s``: one describe of every token by the super user, until its last
  byte arrived (read raw, not decoded; its token count is checked from its head), by a
  client in a process of its own;
* ``login_during_describe_ms``: the slowest of the token logins (new connection and
  SCRAM, one after another) made while that describe-all was being built and sent;
  they run in another process than the describe's reader, so reading its 137 MB never
  delays them (a first version read both in one event loop, a second in two threads of
  one process, and each timed the reader's copies of the answer, which hold the GIL);
  ``timer_gc_pause_max_ms`` and ``timer_gc_full_collections`` are the timing process's
  own garbage collections meanwhile (it holds every token written: a full collection
  there would be timed as a slow login; none was seen);
* ``sweep_s``: 1% of the tokens are rewritten (with change notifications) to expire
  together; from the first to the last deletion of those znodes, seen by exists
  watches of a separate session (sweep every 500 ms, the controller is this broker);
* ``logins_per_s``: 16 loops of connect + token login + close for 3 s (1 s with
  ``--quick``).

Also recorded: the ZooKeeper's heap in use after a full collection (``jcmd``) and
its data directory size. The machine's load average goes with every figure.

Targets (issue #19): cold start (the restart from snapshot; the first start is reported
beside it) <= 10 s at 1M and <= 1 s at 100k; every figure at
1M <= 11x the figure at 100k; cache <= 100 MB per 100k with credentials and <= 50 MB
without; describe of one owner <= 5 ms at 1M; a login during describe-all <= 50 ms
at 1M; sweep <= 2 s at 1M. ``--quick`` runs 1k, 2k and 5k tokens (a smoke test).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import multiprocessing
import os
import re
import statistics
import subprocess
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from bench import env, zkraw
from bench.common import (
    MECHANISM,
    OwnedCluster,
    address_when_written,
    attempts_until_login,
    broker_log_figures,
    login_once,
    rss_bytes,
    timed_restart,
)
from bench.suite import BenchContext, Outcome, Target
from bench.wire import WireError
from tokensvc.core.keys import key_id
from tokensvc.core.principal import KafkaPrincipal
from tokensvc.core.token import TokenInformation
from tokensvc.protocol import RequestHeader, decode_response, encode_request, frame
from tokensvc.protocol.api import ApiKey
from tokensvc.scram.client import ScramClient
from tokensvc.scram.formatter import ScramMechanism
from zk.server import ManagedZooKeeper

ID = "B9"
TITLE = "scale: one broker at 10k / 100k / 1M tokens"
PROBE = KafkaPrincipal.user("b9-probe")
PROBE_TOKENS = 100
OWNERS = 1_000
START_TIMEOUT_S = 300.0
SWEEP_INTERVAL_MS = 500
LOGIN_SECONDS = 3.0
LOGIN_LOOPS = 16
# How far ahead of the rewrite the swept tokens fall due: the rewrite's time to spare.
SWEEP_LEAD_S = 5.0
# --quick (a smoke test of a few thousand tokens): the same, shorter.
QUICK_LOGIN_SECONDS = 1.0
QUICK_SWEEP_LEAD_S = 1.0
DESCRIBE_OWNER_SAMPLES = 20
MB = 1024 * 1024


def _sizes(quick: bool) -> tuple[int, ...]:
    return (1_000, 2_000, 5_000) if quick else (10_000, 100_000, 1_000_000)


def _tokens(master_key: str, start: int, count: int, now_ms: int) -> list[TokenInformation]:
    kid = key_id(master_key)
    out = []
    for i in range(start, start + count):
        owner = PROBE if i < PROBE_TOKENS else KafkaPrincipal.user(f"owner-{i % OWNERS}")
        out.append(TokenInformation(env.new_token_id(), owner, owner, (), now_ms,
                                    now_ms + env.DAY_MS, now_ms + 7 * env.DAY_MS, kid))
    return out


def _load() -> float:
    return round(os.getloadavg()[0], 2)


def _rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return round(int(line.split()[1]) / 1024, 1)
    return float("nan")


def _cpu_s(pid: int) -> float:
    """CPU seconds (user + system) the process has used so far."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return round((int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK"), 2)


def _zk_heap_used_mb(pid: int) -> float | None:
    """Heap in use after a full collection: the generations' "used" in ``jcmd``'s
    GC.heap_info (None without jcmd)."""
    try:
        subprocess.run(["jcmd", str(pid), "GC.run"], capture_output=True, timeout=120, check=True)
        out = subprocess.run(["jcmd", str(pid), "GC.heap_info"], capture_output=True,
                             text=True, timeout=60, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    used_kb = 0
    for line in out.splitlines():
        if "generation" not in line or "used" not in line:
            continue
        words = line.replace(",", " ").split()
        value = words[words.index("used") + 1]
        if value.endswith("K") and value[:-1].isdigit():
            used_kb += int(value[:-1])
    return round(used_kb / 1024, 1) if used_kb else None


def _dir_mb(path: Path) -> float:
    return round(sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / MB, 1)


# -- the cache's memory, B7's method, in a fresh process ----------------------------------


def _cache_memory(infos: list[TokenInformation], master_key: str) -> dict[str, float]:
    from zk import layout

    znodes = [(info.token_id, layout.encode_token(info)) for info in infos]
    spawn = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(1, mp_context=spawn) as pool:
        reading = pool.submit(_measure_named, znodes, master_key).result(1800)
    per = 100_000 / len(infos)
    return {
        "cache_mb_per_100k": round(reading["cache"] * per / MB, 1),
        "cache_with_credentials_mb_per_100k": round(reading["with_credentials"] * per / MB, 1),
    }


def _measure_named(znodes: list[tuple[str, bytes]], master_key: str) -> dict[str, int]:
    import gc

    from tokensvc.core.cache import TokenCache
    from tokensvc.core.keys import MasterKeys
    from zk import layout

    gc.collect()
    before = rss_bytes()
    cache = TokenCache(MasterKeys(master_key), scram_iterations=1)
    decoded, failed = layout.decode_tokens(znodes)
    del znodes
    cache.replace_all(decoded)
    del decoded
    gc.collect()
    after_load = rss_bytes()
    for token_id in cache.token_ids():
        for mechanism in ScramMechanism:
            cache.scram_credential(token_id, mechanism)
    gc.collect()
    after_credentials = rss_bytes()
    if failed:
        raise RuntimeError(f"{len(failed)} tokens did not decode")
    return {"cache": after_load - before, "with_credentials": after_credentials - before}


# -- wire helpers ------------------------------------------------------------------------


class _Raw:
    """A logged-in connection on asyncio streams that reads responses as raw frames
    (the describe-all answer at 1M is far beyond the bench client's frame limit)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self._corr = 0

    @classmethod
    async def login(cls, address: str, user: str, password: str) -> _Raw:
        host, _, port = address.rpartition(":")
        reader, writer = await asyncio.open_connection(host, int(port), limit=1 << 20)
        raw = cls(reader, writer)
        mechanism = ScramMechanism.SCRAM_SHA_512
        await raw.call(ApiKey.SASL_HANDSHAKE, 1, {"Mechanism": mechanism.mechanism_name})
        client = ScramClient(mechanism, user, password)
        first = await raw.call(ApiKey.SASL_AUTHENTICATE, 2, {"AuthBytes": client.first_message()})
        final = await raw.call(ApiKey.SASL_AUTHENTICATE, 2,
                               {"AuthBytes": client.final_message(first["AuthBytes"])})
        if final["ErrorCode"]:
            raise WireError("admin login refused")
        client.verify_server_final(final["AuthBytes"])
        return raw

    async def send(self, api_key: int, version: int, body: dict) -> None:
        self._corr += 1
        header = RequestHeader(api_key, version, self._corr, "b9")
        self.writer.write(frame(encode_request(header, body)))
        await self.writer.drain()

    async def frame(self) -> bytes:
        size = int.from_bytes(await self.reader.readexactly(4), "big")
        return await self.reader.readexactly(size)

    async def call(self, api_key: int, version: int, body: dict) -> dict:
        await self.send(api_key, version, body)
        return decode_response(api_key, version, await self.frame())[1]

    def close(self) -> None:
        self.writer.close()


def _describe_all_count(payload: bytes) -> int:
    """Token count from a DescribeDelegationToken v3 response's head (no full decode)."""
    pos = 4 + 1  # correlation id, empty tagged fields of the flexible header
    error = int.from_bytes(payload[pos:pos + 2], "big")
    if error:
        raise RuntimeError(f"describe-all failed with error {error}")
    pos += 2
    value = shift = 0
    while True:
        byte = payload[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value - 1


def _describe_all(address: str, user: str, password: str, sent: Any, out: Any) -> None:
    """In a process of its own: describe every token on a connection of its own; puts
    (answer size, token count, seconds from sending to the whole answer read) on ``out``
    and sets ``sent`` once the request is sent."""

    async def describe() -> tuple[int, int, float]:
        raw = await _Raw.login(address, user, password)
        try:
            started = time.perf_counter()
            await raw.send(ApiKey.DESCRIBE_DELEGATION_TOKEN, 3, {"Owners": None})
            sent.set()
            payload = await raw.frame()
            return len(payload), _describe_all_count(payload), time.perf_counter() - started
        finally:
            raw.close()

    out.put(asyncio.run(describe()))


async def _describe(address: str, user: str, password: str, login: tuple[str, str]) -> dict:
    """describe one owner (median of several), then describe-all with logins made while
    it runs."""
    raw = await _Raw.login(address, user, password)
    try:
        owner_body = {"Owners": [{"PrincipalType": "User", "PrincipalName": PROBE.name}]}
        samples = []
        for _ in range(DESCRIBE_OWNER_SAMPLES):
            started = time.perf_counter()
            response = await raw.call(ApiKey.DESCRIBE_DELEGATION_TOKEN, 3, owner_body)
            samples.append(time.perf_counter() - started)
            if response["ErrorCode"] or len(response["Tokens"]) != PROBE_TOKENS:
                raise RuntimeError(f"describe of the probe owner gave {len(response['Tokens'])}")
        salted: dict = {}
        await login_once(address, login[0], login[1], salted)  # credential derived, cached
    finally:
        raw.close()
    # The describe-all is sent and its 137 MB answer read by another client in a process
    # of its own, so reading it (copies of the whole answer, with the GIL held) never
    # delays the logins timed here.
    spawn = multiprocessing.get_context("spawn")
    sent, out = spawn.Event(), spawn.Queue()
    reader = spawn.Process(target=_describe_all, args=(address, user, password, sent, out),
                           daemon=True)
    reader.start()
    pauses = _GcPauses()
    try:
        while not sent.is_set() and reader.is_alive():
            await asyncio.sleep(0.001)
        latencies = []
        while reader.is_alive() and out.empty():
            began = time.perf_counter()
            await login_once(address, login[0], login[1], salted)
            if reader.is_alive() and out.empty():
                latencies.append(time.perf_counter() - began)
        size, count, describe_all = await asyncio.to_thread(out.get, True, 600)
    finally:
        pauses.close()
        reader.join(10)
    return {
        "describe_owner_ms": round(statistics.median(samples) * 1000, 3),
        "describe_all_s": round(describe_all, 3),
        "describe_all_mb": round(size / MB, 1),
        "describe_all_tokens": count,
        "logins_during_describe": len(latencies),
        "login_during_describe_ms": round(max(latencies) * 1000, 1) if latencies else None,
        "timer_gc_pause_max_ms": round(pauses.longest * 1000, 1),
        "timer_gc_full_collections": pauses.full,
    }


class _GcPauses:
    """The garbage collections of this (the timing) process while it is open."""

    def __init__(self) -> None:
        self.longest = 0.0
        self.full = 0
        self._began = 0.0
        gc.callbacks.append(self._seen)

    def _seen(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._began = time.perf_counter()
            return
        self.longest = max(self.longest, time.perf_counter() - self._began)
        self.full += info["generation"] == 2

    def close(self) -> None:
        gc.callbacks.remove(self._seen)


async def _login_rate(address: str, token_id: str, password: str, seconds: float) -> float:
    salted: dict = {}
    await login_once(address, token_id, password, salted)
    done = 0
    stop = time.perf_counter() + seconds

    async def loop() -> None:
        nonlocal done
        while time.perf_counter() < stop:
            await login_once(address, token_id, password, salted)
            done += 1

    started = time.perf_counter()
    await asyncio.gather(*(loop() for _ in range(LOGIN_LOOPS)))
    return round(done / (time.perf_counter() - started), 1)


# -- one size ----------------------------------------------------------------------------


@contextlib.contextmanager
def _broker(ctx: BenchContext, zk_connect: str, name: str) -> Any:
    """A fresh 1-broker cluster on ``zk_connect``, started (and restarted) by a thread
    that lives as long as the block (its processes die with that thread); yields
    (address, owned cluster, the monotonic time it was asked for)."""
    directory = ctx.directory(name)
    extra = {"delegation.token.expiry.check.interval.ms": str(SWEEP_INTERVAL_MS)}
    started = time.monotonic()
    owned = OwnedCluster(directory, zk_connect, env.broker_overrides(ctx, extra),
                         START_TIMEOUT_S, name=name).start()
    try:
        address = address_when_written(directory, started + START_TIMEOUT_S)
        yield address, owned, started
    finally:
        owned.close(START_TIMEOUT_S)
    if owned.error is not None:
        raise owned.error


def _measure_size(ctx: BenchContext, zk: ManagedZooKeeper, connect: str,
                  tokens: list[TokenInformation], fill_s: float) -> dict[str, Any]:
    figures: dict[str, Any] = {"tokens": len(tokens), "fill_s": round(fill_s, 2),
                               "load_avg_1m_before": _load()}
    probe = tokens[len(tokens) // 2]
    password = env.token_password(ctx, probe.token_id)
    with _broker(ctx, connect, f"b9-{len(tokens)}-{time.monotonic_ns()}") as (address, owned,
                                                                               started):
        deadline = started + START_TIMEOUT_S
        asyncio.run(attempts_until_login(address, probe.token_id, password, deadline))
        figures["cold_start_s"] = round(time.monotonic() - started, 3)
        owned.ready.wait(START_TIMEOUT_S)
        if owned.error is not None:
            raise owned.error
        cluster = owned.cluster
        assert cluster is not None
        pid = cluster.broker_pid(1)
        figures["broker_cpu_s_at_first_login"] = _cpu_s(pid) if pid else None
        figures["first_start_rss_mb"] = _rss_mb(pid) if pid else None
        log_path = cluster.broker_info(1)["log"]
        figures.update(broker_log_figures(log_path))
        figures.update(_load_from_log(log_path))
        figures["load_avg_1m_at_restart"] = _load()
        restart, _attempts = timed_restart(owned, address, probe.token_id, password,
                                           START_TIMEOUT_S)
        figures["restart_s"] = round(restart, 3)
        pid = cluster.broker_pid(1)
        figures["restart_cpu_s"] = _cpu_s(pid) if pid else None
        figures["broker_rss_mb"] = _rss_mb(pid) if pid else None
        again = broker_log_figures(log_path, last=True)
        if not again.get("snapshot_tokens"):
            # Never report a full load under the restart's label.
            raise RuntimeError(f"the restart did not load its snapshot (broker log: {again})")
        figures["snapshot_load_ms"] = again.get("snapshot_load_ms")
        figures["snapshot_tokens"] = again.get("snapshot_tokens")
        figures["snapshot_changes_applied"] = again.get("snapshot_changes_applied")
        figures["snapshot_refusals"] = again.get("snapshot_refusals")
        figures["restart_ready_s"] = again.get("broker_ready_s")
        figures["snapshot_mb"] = _dir_mb(Path(log_path).parent / "snapshot")
        figures["snapshot_write_s"] = _snapshot_write_s(log_path)
        admin = cluster.info["admin"]
        figures.update(asyncio.run(_describe(address, admin["username"], admin["password"],
                                             (probe.token_id, password))))
        figures["logins_per_s"] = asyncio.run(_login_rate(
            address, probe.token_id, password,
            QUICK_LOGIN_SECONDS if ctx.quick else LOGIN_SECONDS))
        try:
            figures.update(_sweep(connect, tokens,
                                  QUICK_SWEEP_LEAD_S if ctx.quick else SWEEP_LEAD_S))
        except RuntimeError as exc:
            figures["sweep_error"] = str(exc)
    figures["load_avg_1m_after"] = _load()
    figures["zookeeper_heap_used_mb"] = _zk_heap_used_mb(zk.pid) if zk.pid else None
    figures["zookeeper_data_mb"] = _dir_mb(zk.data_dir / "data")
    figures.update(_cache_memory(tokens, ctx.master_key))
    return figures


_WRITTEN = re.compile(r"token cache snapshot written to \S+: (\d+) bytes in ([0-9.]+)s")


def _snapshot_write_s(log_path: str) -> float | None:
    """Seconds the clean stop's snapshot took to take, encode and write (broker log)."""
    text = Path(log_path).read_text(encoding="utf-8", errors="replace")
    found = _WRITTEN.findall(text)
    return float(found[-1][1]) if found else None


# The token sync's first full load, as the broker logs it (B4's pattern is older).
_SYNC_LOADED = re.compile(r"token-sync resynchronised in (\d+) ms")


def _load_from_log(path: str) -> dict[str, int]:
    """``cache_load_ms``: the token sync's first load (listing, reads, decode, fill)."""
    text = Path(path).read_text(encoding="utf-8", errors="replace")
    match = _SYNC_LOADED.search(text)
    return {"cache_load_ms": int(match.group(1))} if match else {}


@contextlib.contextmanager
def _deletions(connect: str, token_ids: list[str]) -> Any:
    """Wall-clock deletion time of each token znode, from exists watches of a separate
    session that are armed again after each change (a rewrite fires them too)."""
    from zk import layout

    times: dict[str, float] = {}
    with zkraw.client(connect) as zk:
        for token_id in token_ids:
            path = layout.token_path(token_id)

            def on_event(event: Any, token_id: str = token_id, path: str = path) -> None:
                if event.type == "DELETED":
                    times[token_id] = time.time()
                else:
                    zk.exists_async(path, watch=on_event)

            if zk.exists(path, watch=on_event) is None:
                raise RuntimeError(f"token {token_id} is not in ZooKeeper")
        yield times


def _sweep(connect: str, tokens: list[TokenInformation], lead_s: float) -> dict[str, Any]:
    """1% of the tokens (never a probe-owner token) fall due at one instant; seconds
    from the first deletion to the last. The instant, ``lead_s`` and more per token
    ahead, leaves the rewrite time (``rewrite_s``) to spare, then exists watches are set
    on the batch's ends."""
    due = max(1, len(tokens) // 100)
    batch = sorted(tokens[-due:], key=lambda t: t.token_id)
    ends = [batch[0].token_id, batch[-1].token_id]
    started = time.time()
    when = started + lead_s + due / 500
    zkraw.rewrite_tokens(connect, [t.with_expiry(int(when * 1000)) for t in batch])
    rewritten = time.time()
    try:
        with _deletions(connect, ends) as deleted:
            deadline = time.monotonic() + 300
            while len(deleted) < 2 and time.monotonic() < deadline:
                time.sleep(0.05)
    finally:
        del tokens[-due:]  # gone from ZooKeeper: the next size starts without them
    if len(deleted) < 2:
        raise RuntimeError("the sweep did not delete the due tokens")
    return {"sweep_s": round(deleted[ends[1]] - deleted[ends[0]], 3), "due": due,
            "rewrite_s": round(rewritten - started, 2),
            "rewrite_done_before_due": rewritten < when}


def run(ctx: BenchContext) -> Outcome:
    sizes = _sizes(ctx.quick)
    tokens: list[TokenInformation] = []
    per_size: dict[int, dict[str, Any]] = {}
    with env.zookeeper(ctx, "b9-zk") as zk:
        connect = f"{zk.connect}/b9"
        for size in sizes:
            now_ms = int(time.time() * 1000)
            fresh = _tokens(ctx.master_key, len(tokens), size - len(tokens), now_ms)
            started = time.monotonic()
            zkraw.write_tokens(connect, fresh)
            tokens.extend(fresh)
            try:
                per_size[size] = _measure_size(ctx, zk, connect, tokens,
                                               time.monotonic() - started)
            except Exception as exc:  # noqa: BLE001 - reported with the sizes measured
                per_size[size] = {"tokens": size, "error": f"{type(exc).__name__}: {exc}"}
                break
    return _outcome(sizes, per_size)


RATIO_KEYS = ("restart_s", "restart_cpu_s", "snapshot_load_ms", "snapshot_mb",
              "cold_start_s", "broker_cpu_s_at_first_login", "cache_load_ms", "broker_rss_mb", "cache_mb_per_100k",
              "cache_with_credentials_mb_per_100k", "describe_owner_ms", "describe_all_s",
              "login_during_describe_ms", "sweep_s", "logins_per_s", "zookeeper_heap_used_mb",
              "zookeeper_data_mb")


def _outcome(sizes: tuple[int, ...], per_size: dict[int, dict[str, Any]]) -> Outcome:
    small, mid, big = sizes
    top, ref, low = per_size.get(big, {}), per_size.get(mid, {}), per_size.get(small, {})
    ratios = {}
    for key in RATIO_KEYS:
        a, b = top.get(key), ref.get(key)
        ratios[key] = round(a / b, 2) if a is not None and b else None

    def at_most(value: float | None, limit: float) -> bool | None:
        return None if value is None else value <= limit

    grows = [k for k in RATIO_KEYS if k not in ("cache_mb_per_100k",
                                                  "cache_with_credentials_mb_per_100k",
                                                  "logins_per_s")]
    worst = max((ratios[k] for k in grows if ratios[k] is not None), default=None)
    logins_kept = None
    if top.get("logins_per_s") is not None and low.get("logins_per_s"):
        logins_kept = top["logins_per_s"] >= low["logins_per_s"] * 0.9
    targets = [
        Target(f"cold start (restart from snapshot) <= 10 s at {big:,} ({top.get('restart_s')} s; "
               f"first start, no snapshot: {top.get('cold_start_s')} s)",
               at_most(top.get("restart_s"), 10.0)),
        Target(f"cold start (restart from snapshot) <= 1 s at {mid:,} ({ref.get('restart_s')} s; "
               f"first start, no snapshot: {ref.get('cold_start_s')} s)",
               at_most(ref.get("restart_s"), 1.0)),
        Target(f"every figure at {big:,} <= 11x {mid:,} (worst {worst}x)", at_most(worst, 11.0)),
        Target("cache <= 100 MB/100k with credentials "
               f"({top.get('cache_with_credentials_mb_per_100k')})",
               at_most(top.get("cache_with_credentials_mb_per_100k"), 100.0)),
        Target(f"cache <= 50 MB/100k without ({top.get('cache_mb_per_100k')})",
               at_most(top.get("cache_mb_per_100k"), 50.0)),
        Target(f"describe one owner <= 5 ms ({top.get('describe_owner_ms')} ms)",
               at_most(top.get("describe_owner_ms"), 5.0)),
        Target(f"login during describe-all <= 50 ms ({top.get('login_during_describe_ms')} ms)",
               at_most(top.get("login_during_describe_ms"), 50.0)),
        Target(f"sweep of 1% <= 2 s ({top.get('sweep_s')} s)", at_most(top.get("sweep_s"), 2.0)),
        Target(f"logins/s at {big:,} >= 0.9x at {small:,}", logins_kept),
    ]
    errors = [f"{size:,}: {f['error']}" for size, f in per_size.items() if "error" in f]
    return Outcome(
        ID,
        TITLE,
        measured=top.get("restart_s"),
        unit=f"s restart from snapshot at {big:,}",
        reference=ref.get("restart_s"),
        reference_unit="s",
        reference_label=f"restart from snapshot at {mid:,}",
        ratio=ratios["restart_s"],
        targets=targets,
        details={"sizes": {str(k): v for k, v in per_size.items()},
                 f"ratio_{big}_to_{mid}": ratios,
                 "login_mechanism": MECHANISM.mechanism_name},
        error="; ".join(errors) or None,
    )
