"""A local tokensvc cluster on loopback: a managed ZooKeeper and N broker processes.

Owns the ``DIR`` layout of ``tokensvc cluster up/down`` and the processes behind it:

- ``DIR/zookeeper/``: the managed ZooKeeper (unless an external ``zookeeper`` is given),
- ``DIR/broker-<id>/server.properties`` (mode 0600: it holds the master key and the
  inter-broker password), ``DIR/broker-<id>/broker.log`` (the broker's stdout and stderr)
  and ``DIR/broker-<id>/snapshot/`` (its token cache snapshot, ``token.cache.snapshot.dir``),
- ``DIR/tls/``: dev certificates (:mod:`tokensvc.devcerts`) when TLS is on,
- ``DIR/audit/``: the brokers' audit logs,
- ``DIR/admin.properties`` (mode 0600): Kafka client properties of the super user ``admin``,
- ``DIR/cluster.json`` (mode 0600): how to reach everything (see ``docs/cluster.md``).

Before any broker starts, the SCRAM credentials of ``admin`` and of the inter-broker user
``broker`` are written straight into ZooKeeper. Brokers run as their own sessions
(``tokensvc broker --config ...``); :meth:`LocalCluster.up` returns once every broker answers
an ApiVersions request on its SASL_PLAINTEXT listener, and fails with the tail of a broker's
log if one exits first. :meth:`LocalCluster.down` stops brokers (SIGTERM, then SIGKILL after
a grace period) and then the managed ZooKeeper; it works from ``cluster.json`` alone, so
another process can stop what ``up`` started.

Must not: write the master key anywhere but the brokers' ``server.properties``, print or log
passwords (they live only in the 0600 files above), or signal a process it cannot prove it
started (a pid is signalled only if its command line still names this cluster's files).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

from tokensvc import devcerts
from tokensvc.core.config import BROKER_CONFIG, SECRET_KEY
from tokensvc.core.configdef import ConfigError
from tokensvc.core.errors import KafkaError
from tokensvc.properties import properties_text, read_properties
from tokensvc.protocol import RequestHeader, decode_response, encode_request, frame
from zk.brokers import BrokerRegistry
from zk.client import ZkSettings, ZooKeeperUnavailable, open_client
from zk.credential_store import bootstrap_user
from zk.server import (
    DEFAULT_HEAP_MB,
    DEFAULT_MAX_SESSION_TIMEOUT_MS,
    ManagedZooKeeper,
    ZooKeeperStartError,
    free_port,
)
from zk.token_store import StoreError

HOST = "127.0.0.1"
ADMIN_USER = "admin"
INTER_BROKER_USER = "broker"
SCRAM_ITERATIONS = 4096
READY_TIMEOUT_S = 60.0
STOP_GRACE_S = 10.0
CLUSTER_FILE = "cluster.json"
ADMIN_PROPERTIES = "admin.properties"

# Keys the cluster sets per broker; --set may not change them (the cluster would lose
# track of its brokers).
MANAGED_KEYS = frozenset({"broker.id", "listeners", "zookeeper.connect", "metrics.listener"})
# Any of these names the master key: when --set gives one, no key is generated.
MASTER_KEY_SOURCES = (
    "delegation.token.secret.key",
    "delegation.token.master.key",
    "delegation.token.secret.key.file",
    "delegation.token.secret.key.env",
)
_SCRAM_LOGIN = "org.apache.kafka.common.security.scram.ScramLoginModule"
_API_VERSIONS = 18
_MAX_PROBE_RESPONSE = 1 << 20


class ClusterError(RuntimeError):
    """The local cluster could not be started or stopped; the message says why."""


# -- files -----------------------------------------------------------------------------


def _write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` with mode 0600 from the first byte on."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(text)
    os.chmod(path, 0o600)


def check_overrides(overrides: Mapping[str, str]) -> None:
    """Refuse ``--set`` values the brokers would refuse (type, range, a typo of a key),
    before anything is started or written."""
    try:
        BROKER_CONFIG.ignored_keys(overrides)
        for key, value in overrides.items():
            if key in BROKER_CONFIG.keys:
                BROKER_CONFIG[key].parse(value)
    except ConfigError as exc:
        raise ClusterError(f"--set {exc}") from None


def _previous_master_key(directory: Path) -> str | None:
    """The master key of an earlier cluster in ``directory``, so its tokens stay valid."""
    path = directory / "broker-1" / "server.properties"
    if not path.is_file():
        return None
    try:
        return read_properties(path).get(SECRET_KEY) or None
    except ConfigError:
        return None


def load_info(directory: str | os.PathLike) -> dict[str, Any] | None:
    """The ``cluster.json`` of ``directory``, or None if there is none."""
    path = Path(directory) / CLUSTER_FILE
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise ClusterError(f"{path} is not readable cluster state: {exc}") from exc


# -- processes ---------------------------------------------------------------------------


_PR_SET_PDEATHSIG = 1
# Loaded in the parent: the child between fork and exec only makes one foreign call.
_LIBC = ctypes.CDLL(None, use_errno=True)


def _die_with_parent() -> None:  # runs in the child between fork and exec
    _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _reap(pid: int) -> bool:
    """Reap ``pid`` if it is an exited child of ours; True if it was."""
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return False
    return done == pid


def _cmdline(pid: int) -> str | None:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return raw.replace(b"\0", b" ").decode("utf-8", "replace")


def _alive(pid: int, marker: str) -> bool:
    """True if ``pid`` runs and its command line contains ``marker`` (a file of ours)."""
    if _reap(pid):
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    if stat.rsplit(")", 1)[-1].split()[0] == "Z":  # a zombie has exited already
        return False
    cmdline = _cmdline(pid)
    return cmdline is not None and marker in cmdline


def _wait_gone(pid: int, marker: str, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _alive(pid, marker):
            return True
        time.sleep(0.05)
    return not _alive(pid, marker)


def _terminate(process: subprocess.Popen, grace: float) -> None:
    """Stop a child of ours: SIGTERM and ``grace`` seconds to exit (none: SIGKILL), then SIGKILL."""
    if process.poll() is not None:
        return
    if grace > 0:
        process.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(grace)
            return
    process.kill()
    process.wait(10)


def stop_process(pid: int | None, marker: str, grace: float = STOP_GRACE_S) -> bool:
    """SIGTERM ``pid``, then SIGKILL after ``grace`` seconds (at once when 0). Does nothing
    (False) unless the process is alive and its command line contains ``marker``. True if it
    was stopped."""
    if pid is None or not _alive(pid, marker):
        return False
    if grace > 0:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        if _wait_gone(pid, marker, grace):
            return True
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    if not _wait_gone(pid, marker, 10.0):
        raise ClusterError(f"process {pid} survived SIGKILL")
    return True


def _log_tail(path: str | Path, lines: int = 20) -> str:
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:]) or "(empty log)"


def _broker_command(config: Path) -> list[str]:
    return [sys.executable, "-m", "cli.tokensvc", "broker", "--config", str(config)]


# -- readiness -----------------------------------------------------------------------------


def _recv_exact(sock: socket.socket, size: int) -> bytes:
    chunks = []
    while size:
        chunk = sock.recv(size)
        if not chunk:
            raise ConnectionError("connection closed by the broker")
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def answers_api_versions(address: str, timeout: float = 2.0) -> bool:
    """True if the broker at ``host:port`` answers ApiVersions v0 without error."""
    host, _, port = address.rpartition(":")
    correlation_id = secrets.randbelow(2**31)
    request = frame(encode_request(RequestHeader(_API_VERSIONS, 0, correlation_id, "cluster-up"), {}))
    try:
        with socket.create_connection((host, int(port)), timeout=timeout) as sock:
            sock.sendall(request)
            size = int.from_bytes(_recv_exact(sock, 4), "big", signed=True)
            if not 0 < size <= _MAX_PROBE_RESPONSE:
                return False
            payload = _recv_exact(sock, size)
    except OSError:
        return False
    try:
        got_id, body = decode_response(_API_VERSIONS, 0, payload)
    except KafkaError:
        return False
    return got_id == correlation_id and body.get("ErrorCode") == 0


# -- the cluster -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Placement:
    """Where a broker runs when not on loopback: the address its listeners bind (with
    Kafka's usual ports, see :data:`PLACED_PORTS`) and the command prefix that starts it
    there (``ip netns exec NAME``: the partition harness, ``faults.netns``)."""

    host: str
    prefix: tuple[str, ...] = ()


# plain, inter-broker, metrics, TLS: the ports of a broker that has an address of its own.
PLACED_PORTS = (9092, 9093, 9404, 9094)


@dataclass
class _Broker:
    broker_id: int
    config: Path
    log: Path
    process: subprocess.Popen | None = None
    prefix: tuple[str, ...] = ()


class LocalCluster:
    """A running (or stopped) local cluster described by ``DIR/cluster.json``.

    ``up`` starts one; ``open`` attaches to one started by another process (pids from
    ``cluster.json``). Use as a context manager to stop it on exit.
    """

    def __init__(
        self,
        directory: Path,
        info: dict[str, Any],
        *,
        zookeeper: ManagedZooKeeper | None = None,
        die_with_parent: bool = False,
    ) -> None:
        self.directory = Path(directory).resolve()
        self.info = info
        self._zookeeper = zookeeper
        self._die_with_parent = die_with_parent
        self._brokers = {
            b["id"]: _Broker(b["id"], Path(b["config"]), Path(b["log"]),
                             prefix=tuple(b.get("prefix", ())))
            for b in info["brokers"]
        }

    # -- construction ------------------------------------------------------------------

    @classmethod
    def open(cls, directory: str | os.PathLike) -> LocalCluster:
        """Attach to the cluster whose ``cluster.json`` is in ``directory``."""
        info = load_info(directory)
        if info is None:
            raise ClusterError(f"no cluster in {directory}: {CLUSTER_FILE} not found")
        return cls(Path(directory), info)

    @classmethod
    def up(
        cls,
        directory: str | os.PathLike,
        brokers: int = 3,
        zookeeper: str | None = None,
        overrides: Mapping[str, str] | None = None,
        tls: bool = False,
        *,
        die_with_parent: bool = False,
        timeout: float = READY_TIMEOUT_S,
        zookeeper_heap_mb: int = DEFAULT_HEAP_MB,
        placements: Mapping[int, Placement] | None = None,
    ) -> LocalCluster:
        """Start ZooKeeper (unless ``zookeeper`` is a connect string) and ``brokers`` brokers
        in ``directory``; return once all answer. ``die_with_parent`` ties every process to
        the calling thread's life (foreground mode, tests); otherwise they outlive it.
        ``zookeeper_heap_mb`` is the managed ZooKeeper's heap; its session limits always
        grant the brokers' ``zookeeper.session.timeout.ms``."""
        if brokers < 1:
            raise ClusterError("a cluster needs at least one broker")
        overrides = dict(overrides or {})
        managed = sorted(MANAGED_KEYS & overrides.keys())
        if managed:
            raise ClusterError(
                f"--set cannot change {', '.join(managed)}: the cluster assigns "
                "them (use --zookeeper for the ZooKeeper connect string)"
            )
        check_overrides(overrides)
        directory = Path(directory).resolve()
        directory.mkdir(parents=True, exist_ok=True)
        running = load_info(directory)
        if running is not None and cls(directory, running).running_pids():
            raise ClusterError(
                f"a cluster is already running in {directory}; "
                f"stop it first with `tokensvc cluster down --dir {directory}`"
            )
        zk_server: ManagedZooKeeper | None = None
        cluster: LocalCluster | None = None
        if zookeeper is None:
            zk_server = ManagedZooKeeper(
                directory / "zookeeper",
                heap_mb=zookeeper_heap_mb,
                max_session_timeout_ms=_max_session_timeout_ms(overrides),
                die_with_parent=die_with_parent,
            )
            try:
                zk_server.start()
            except ZooKeeperStartError as exc:
                raise ClusterError(f"managed ZooKeeper did not start: {exc}") from exc
            zookeeper = zk_server.connect
        try:
            info = _prepare(directory, brokers, zookeeper, zk_server, overrides, tls,
                            dict(placements or {}))
            cluster = cls(directory, info, zookeeper=zk_server, die_with_parent=die_with_parent)
            for broker_id in cluster._brokers:
                cluster._spawn(broker_id)
            cluster._save()
            cluster._wait_ready(list(cluster._brokers), timeout)
        except BaseException:
            if cluster is not None:
                cluster.down()
            elif zk_server is not None:
                zk_server.stop()
            raise
        return cluster

    # -- queries ---------------------------------------------------------------------

    def zk_settings(self, **overrides: Any) -> ZkSettings:
        """What a tool needs to open this cluster's ZooKeeper as the brokers do (connect
        string and, when the cluster has them, its ZooKeeper TLS and SASL settings).
        ``overrides`` are ZkSettings fields (timeouts)."""
        return ZkSettings(self.info["zookeeper"]["connect"], **overrides)

    def broker_ids(self) -> list[int]:
        return sorted(self._brokers)

    def broker_info(self, broker_id: int) -> dict[str, Any]:
        for entry in self.info["brokers"]:
            if entry["id"] == broker_id:
                return entry
        raise ClusterError(f"no broker {broker_id} in this cluster")

    def broker_pid(self, broker_id: int) -> int | None:
        """The broker's pid while its process runs, else None."""
        process = self._brokers[broker_id].process
        if process is not None:
            return process.pid if process.poll() is None else None
        pid = self.broker_info(broker_id)["pid"]
        if pid is None or not _alive(pid, str(self._brokers[broker_id].config)):
            return None
        return pid

    def zookeeper_pid(self) -> int | None:
        """The managed ZooKeeper's pid while it runs; None if it is stopped or external."""
        if self._zookeeper is not None:
            process = self._zookeeper.process
            return process.pid if process is not None and process.poll() is None else None
        pid = self.info["zookeeper"]["pid"]
        if pid is None or not _alive(pid, str(self.directory / "zookeeper")):
            return None
        return pid

    def running_pids(self) -> list[int]:
        pids = [self.broker_pid(b) for b in self.broker_ids()] + [self.zookeeper_pid()]
        return [p for p in pids if p is not None]

    # -- broker lifecycle -------------------------------------------------------------------

    def kill_broker(self, broker_id: int) -> None:
        """SIGKILL the broker: a crash."""
        self.stop_broker(broker_id, grace=0.0)

    def stop_broker(self, broker_id: int, grace: float = STOP_GRACE_S) -> None:
        """SIGTERM the broker (a clean shutdown), SIGKILL after ``grace`` seconds
        (at once when ``grace`` is 0)."""
        broker = self._brokers[broker_id]
        if broker.process is not None:
            _terminate(broker.process, grace)
            broker.process = None
        else:
            stop_process(self.broker_info(broker_id)["pid"], str(broker.config), grace)
        if self.broker_info(broker_id)["pid"] is not None:
            self.broker_info(broker_id)["pid"] = None
            self._save()

    def start_broker(self, broker_id: int, timeout: float = READY_TIMEOUT_S, *,
                     before_spawn: Callable[[], None] | None = None) -> None:
        """Start the broker again with its existing config; wait until it answers.

        After a crash its ZooKeeper registration lives until its session expires, and a
        broker refuses to start while its id is registered (as Kafka does): this waits for
        the registration to go first. ``before_spawn`` is called right before the process
        is started (a benchmark's clock)."""
        if self.broker_pid(broker_id) is not None:
            raise ClusterError(f"broker {broker_id} is already running")
        self._wait_unregistered(broker_id, timeout)
        if before_spawn is not None:
            before_spawn()
        self._spawn(broker_id)
        self._save()
        self._wait_ready([broker_id], timeout)

    def restart_broker(self, broker_id: int, timeout: float = READY_TIMEOUT_S) -> None:
        self.stop_broker(broker_id)
        self.start_broker(broker_id, timeout)

    def down(self, grace: float = STOP_GRACE_S) -> None:
        """Stop every broker, then the managed ZooKeeper. Idempotent."""
        for broker_id in self.broker_ids():
            self.stop_broker(broker_id, grace)
        if self._zookeeper is not None:
            self._zookeeper.stop()
        else:
            stop_process(self.info["zookeeper"]["pid"], str(self.directory / "zookeeper"), grace)
        if self.info["zookeeper"]["pid"] is not None:
            self.info["zookeeper"]["pid"] = None
        self._save()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.down()

    # -- internals -------------------------------------------------------------------------

    def _spawn(self, broker_id: int) -> None:
        broker = self._brokers[broker_id]
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        with open(broker.log, "ab") as log:
            broker.process = subprocess.Popen(
                [*broker.prefix, *_broker_command(broker.config)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=self.directory,
                start_new_session=True,
                # Only a prctl call runs between fork and exec: nothing that takes a lock.
                preexec_fn=_die_with_parent if self._die_with_parent else None,  # noqa: PLW1509
            )
        self.broker_info(broker_id)["pid"] = broker.process.pid

    def _wait_unregistered(self, broker_id: int, timeout: float) -> None:
        client = open_client(self.zk_settings())
        try:
            registry = BrokerRegistry(client)
            deadline = time.monotonic() + timeout
            while broker_id in registry.brokers():
                if time.monotonic() > deadline:
                    raise ClusterError(
                        f"broker {broker_id} is still registered in ZooKeeper after "
                        f"{timeout:.0f}s: is another process running with broker.id={broker_id}?"
                    )
                time.sleep(0.2)
        finally:
            client.stop()
            client.close()

    def _wait_ready(self, broker_ids: list[int], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        waiting = set(broker_ids)
        while waiting:
            for broker_id in sorted(waiting):
                entry = self.broker_info(broker_id)
                process = self._brokers[broker_id].process
                if process is not None and process.poll() is not None:
                    raise ClusterError(
                        f"broker {broker_id} exited with status {process.returncode} before "
                        f"answering; last lines of {entry['log']}:\n{_log_tail(entry['log'])}"
                    )
                if answers_api_versions(entry["listeners"]["SASL_PLAINTEXT"]):
                    waiting.discard(broker_id)
            if not waiting:
                return
            if time.monotonic() > deadline:
                first = self.broker_info(min(waiting))
                raise ClusterError(
                    f"broker(s) {sorted(waiting)} did not answer ApiVersions within "
                    f"{timeout:.0f}s; last lines of {first['log']}:\n{_log_tail(first['log'])}"
                )
            time.sleep(0.1)

    def _save(self) -> None:
        _write_private(self.directory / CLUSTER_FILE, json.dumps(self.info, indent=2) + "\n")


def _max_session_timeout_ms(overrides: Mapping[str, str]) -> int:
    """The managed ZooKeeper's maxSessionTimeout: at least what the brokers will ask for."""
    asked = overrides.get("zookeeper.session.timeout.ms", "")
    wanted = int(asked) if asked.strip().isdigit() else 0
    return max(DEFAULT_MAX_SESSION_TIMEOUT_MS, wanted)


def _free_ports(count: int, taken: set[int]) -> list[int]:
    ports: list[int] = []
    while len(ports) < count:
        port = free_port(HOST)
        if port not in taken:
            taken.add(port)
            ports.append(port)
    return ports


def _prepare(
    directory: Path,
    brokers: int,
    zookeeper: str,
    zk_server: ManagedZooKeeper | None,
    overrides: dict[str, str],
    tls: bool,
    placements: Mapping[int, Placement] | None = None,
) -> dict[str, Any]:
    """Users in ZooKeeper, TLS material, every broker's server.properties, admin.properties;
    returns the cluster.json dict (pids not yet known)."""
    admin_password = secrets.token_urlsafe(24)
    broker_password = secrets.token_urlsafe(24)
    for user, password in ((ADMIN_USER, admin_password), (INTER_BROKER_USER, broker_password)):
        try:
            bootstrap_user(ZkSettings(zookeeper), user, password, iterations=SCRAM_ITERATIONS)
        except (ZooKeeperUnavailable, StoreError) as exc:
            raise ClusterError(f"could not write the {user} user to ZooKeeper: {exc}") from exc

    certs = devcerts.generate(directory / "tls") if tls else None
    audit_dir = directory / "audit"
    audit_dir.mkdir(exist_ok=True)
    master_key: str | None = None
    if not any(key in overrides for key in MASTER_KEY_SOURCES):
        master_key = _previous_master_key(directory) or secrets.token_urlsafe(32)

    taken: set[int] = set()
    entries = []
    for broker_id in range(1, brokers + 1):
        broker_dir = directory / f"broker-{broker_id}"
        broker_dir.mkdir(exist_ok=True)
        placement = (placements or {}).get(broker_id)
        host = placement.host if placement else HOST
        plain, inter, metrics, ssl_port = PLACED_PORTS if placement else _free_ports(4, taken)
        listeners = {
            "SASL_PLAINTEXT": f"{host}:{plain}",
            "BROKER": f"{host}:{inter}",
        }
        if tls:
            listeners["SASL_SSL"] = f"{host}:{ssl_port}"
        props = {
            "broker.id": str(broker_id),
            "listeners": ",".join(f"{name}://{addr}" for name, addr in listeners.items()),
            "listener.security.protocol.map": (
                "SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL,BROKER:SASL_PLAINTEXT"
            ),
            "inter.broker.listener.name": "BROKER",
            "inter.broker.sasl.mechanism": "SCRAM-SHA-512",
            "inter.broker.sasl.username": INTER_BROKER_USER,
            "inter.broker.sasl.password": broker_password,
            "zookeeper.connect": zookeeper,
            "sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512",
            "super.users": f"User:{ADMIN_USER};User:{INTER_BROKER_USER}",
            "authorizer.class.name": "tokensvc.authz.AclAuthorizer",
            "allow.everyone.if.no.acl.found": "false",
            "audit.log.dir": str(audit_dir),
            "metrics.listener": f"{host}:{metrics}",
            # A restart loads the token cache from this snapshot, caught up from ZooKeeper.
            "token.cache.snapshot.dir": str(broker_dir / "snapshot"),
        }
        if master_key is not None:
            props["delegation.token.secret.key"] = master_key
        if certs is not None:
            props.update(
                {
                    "ssl.keystore.type": "PEM",
                    "ssl.keystore.location": str(certs.broker),
                    "ssl.truststore.type": "PEM",
                    "ssl.truststore.location": str(certs.ca),
                }
            )
        props.update(overrides)
        config = broker_dir / "server.properties"
        _write_private(config, properties_text(props))
        log = broker_dir / "broker.log"
        entries.append(
            {
                "id": broker_id,
                "listeners": listeners,
                "config": str(config),
                "log": str(log),
                "pid": None,
                "metrics": f"{host}:{metrics}",
                "prefix": list(placement.prefix) if placement else [],
            }
        )

    admin_properties = directory / ADMIN_PROPERTIES
    _write_private(admin_properties, properties_text(_admin_client_properties(admin_password, certs)))
    tls_info = None
    if certs is not None:
        tls_info = {
            "ca": str(certs.ca),
            "bootstrap_servers": ",".join(e["listeners"]["SASL_SSL"] for e in entries),
        }
    return {
        "bootstrap_servers": ",".join(e["listeners"]["SASL_PLAINTEXT"] for e in entries),
        "zookeeper": {
            "connect": zookeeper,
            "pid": zk_server.pid if zk_server else None,
            "heap_mb": zk_server.heap_mb if zk_server else None,
        },
        "brokers": entries,
        "audit_dir": str(audit_dir),
        "admin": {
            "principal": f"User:{ADMIN_USER}",
            "username": ADMIN_USER,
            "password": admin_password,
            "properties": str(admin_properties),
        },
        "tls": tls_info,
        "inter_broker": {"username": INTER_BROKER_USER},
    }


def _admin_client_properties(
    password: str, certs: devcerts.DevCertificates | None
) -> dict[str, str]:
    props = {
        "security.protocol": "SASL_SSL" if certs is not None else "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": (
            f'{_SCRAM_LOGIN} required username="{ADMIN_USER}" password="{password}";'
        ),
    }
    if certs is not None:
        props["ssl.truststore.type"] = "PEM"
        props["ssl.truststore.location"] = str(certs.ca)
    return props


def down(directory: str | os.PathLike, grace: float = STOP_GRACE_S) -> bool:
    """Stop the cluster of ``directory``; False if there is no cluster.json there."""
    if load_info(directory) is None:
        return False
    LocalCluster.open(directory).down(grace)
    return True
