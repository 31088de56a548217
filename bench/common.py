"""What several benchmarks share: the login mechanism, limits, a process's memory, and
the cold start of a 1-broker cluster (B4, B9).

Owns the helpers a benchmark would otherwise import from another benchmark: the SCRAM
mechanism the suite logs in with, the override that lifts the per-owner token limit,
the resident memory of this process, one token login (:func:`login_once`,
:func:`try_login`), and the pieces of a timed
restart (:class:`OwnedCluster` keeps the broker processes on one thread, the address
read from ``cluster.json``, the first successful login, the figures of the broker's
log). Benchmarks import from here, never from each other.

It must not measure a benchmark's figure or judge a target: each benchmark does.
"""

from __future__ import annotations

import asyncio
import json
import queue
import re
import threading
import time
from pathlib import Path

from bench.wire import WireConnection, WireError, login
from tokensvc.cluster import CLUSTER_FILE, LocalCluster
from tokensvc.scram.formatter import ScramMechanism

MECHANISM = ScramMechanism.SCRAM_SHA_256
POLL_S = 0.02

#: The clusters of B2 and B5 create far more tokens for one owner than the default limit.
UNLIMITED = {"delegation.token.max.per.owner": "0"}


def rss_bytes() -> int:
    """This process's resident memory, from ``/proc/self/status``."""
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


async def login_once(address: str, token_id: str, password: str, salted: dict) -> None:
    """One token login on a fresh connection (``salted``: the salted-password cache)."""
    host, _, port = address.rpartition(":")
    conn = await WireConnection.open(host, int(port))
    try:
        await login(conn, MECHANISM, token_id, password, token=True, salted_cache=salted)
    finally:
        conn.close()


async def try_login(address: str, token_id: str, password: str, salted: dict) -> bool:
    """One token login on a fresh connection to ``address``: whether it succeeded."""
    try:
        await login_once(address, token_id, password, salted)
    except WireError:
        return False
    return True


_RESYNC = re.compile(r"token cache resynchronised: (\d+) tokens in (\d+) ms")
_READY = re.compile(r"broker \d+ ready in ([0-9.]+)s")


def address_when_written(directory: Path, deadline: float) -> str:
    """The broker's SASL_PLAINTEXT address, as soon as ``cluster.json`` names it."""
    path = directory / CLUSTER_FILE
    while time.monotonic() < deadline:
        try:
            info = json.loads(path.read_text(encoding="utf-8"))
            return info["brokers"][0]["listeners"]["SASL_PLAINTEXT"]
        except (OSError, ValueError, KeyError, IndexError):
            time.sleep(POLL_S / 2)
    raise RuntimeError("the cold-start cluster never wrote cluster.json")


async def attempts_until_login(address: str, token_id: str, password: str, deadline: float) -> int:
    """Try the login every POLL_S until it succeeds; how many attempts it took."""
    salted: dict = {}
    attempts = 0
    while time.monotonic() < deadline:
        attempts += 1
        try:
            if await try_login(address, token_id, password, salted):
                return attempts
        except OSError:
            pass  # not listening yet
        await asyncio.sleep(POLL_S)
    raise RuntimeError("no successful token login before the timeout")


_SNAPSHOT = re.compile(r"token cache loaded from snapshot \S+: (\d+) tokens at notification "
                       r"(-?\d+), (\d+) changed since, in (\d+) ms")
_REFUSED = re.compile(r"token cache snapshot \S+ (?:refused|not used)")


def broker_log_figures(path: str, *, last: bool = False) -> dict:
    """Figures of the broker's log: of its first start, or (``last``) of its latest."""
    text = Path(path).read_text(encoding="utf-8", errors="replace")
    found: dict = {}

    def pick(pattern: re.Pattern[str]) -> re.Match[str] | None:
        matches = list(pattern.finditer(text))
        return (matches[-1] if last else matches[0]) if matches else None

    if match := pick(_RESYNC):
        found["cache_load_tokens"] = int(match.group(1))
        found["cache_load_ms"] = int(match.group(2))
    if match := pick(_READY):
        found["broker_ready_s"] = float(match.group(1))
    if last:
        if match := pick(_SNAPSHOT):
            found["snapshot_tokens"] = int(match.group(1))
            found["snapshot_changes_applied"] = int(match.group(3))
            found["snapshot_load_ms"] = int(match.group(4))
        found["snapshot_refusals"] = len(_REFUSED.findall(text))
    return found


class OwnedCluster:
    """A 1-broker local cluster whose broker processes are started by one thread that
    lives until :meth:`close` (they die with the thread that started them:
    ``die_with_parent``), so a restart must be asked of that thread."""

    def __init__(self, directory: Path, zk_connect: str, overrides: dict, timeout: float,
                 name: str = "b4-cluster") -> None:
        self.directory = directory
        self._args = (directory, zk_connect, overrides, timeout)
        self.cluster: LocalCluster | None = None
        self.error: BaseException | None = None
        self.ready = threading.Event()
        self._requests: queue.Queue = queue.Queue()
        self.thread = threading.Thread(target=self._own, name=name, daemon=True)

    def start(self) -> OwnedCluster:
        self.thread.start()
        return self

    def _own(self) -> None:
        directory, zk_connect, overrides, timeout = self._args
        try:
            self.cluster = LocalCluster.up(directory, brokers=1, zookeeper=zk_connect,
                                           overrides=overrides, die_with_parent=True,
                                           timeout=timeout)
        except BaseException as exc:  # noqa: BLE001 - re-raised by the measuring thread
            self.error = exc
            return
        finally:
            self.ready.set()
        try:
            while (request := self._requests.get()) is not None:
                request()
        finally:
            self.cluster.down()

    def restart(self, timeout: float) -> tuple[float, threading.Event, dict]:
        """Stop the broker cleanly (it writes its snapshot), then start it again on the
        owning thread. Returns the monotonic time just before its process was started,
        an event set once the start returned, and a dict holding its error if any."""
        began, done, outcome = threading.Event(), threading.Event(), {}

        def restart() -> None:
            try:
                assert self.cluster is not None
                self.cluster.stop_broker(1)

                def clock() -> None:
                    outcome["t0"] = time.monotonic()
                    began.set()

                self.cluster.start_broker(1, timeout, before_spawn=clock)
            except BaseException as exc:  # noqa: BLE001 - handed to the measuring thread
                outcome["error"] = exc
            finally:
                began.set()
                done.set()

        self._requests.put(restart)
        if not began.wait(timeout) or "t0" not in outcome:
            raise RuntimeError(f"the broker could not be restarted: {outcome.get('error')}")
        return outcome["t0"], done, outcome

    def close(self, timeout: float) -> None:
        self._requests.put(None)
        self.thread.join(timeout)


def timed_restart(owned: OwnedCluster, address: str, token_id: str, password: str,
                  timeout: float) -> tuple[float, int]:
    """Seconds from asking the stopped broker to start again to its first token login,
    and the attempts that took."""
    t0, done, outcome = owned.restart(timeout)
    try:
        attempts = asyncio.run(attempts_until_login(address, token_id, password, t0 + timeout))
    except RuntimeError:
        done.wait(timeout)
        if "error" in outcome:
            raise outcome["error"] from None
        raise
    restart = time.monotonic() - t0
    done.wait(timeout)
    if "error" in outcome:
        raise outcome["error"]
    return restart, attempts
