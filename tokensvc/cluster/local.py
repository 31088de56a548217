"""LocalCluster: a running (or stopped) local cluster, its lifecycle (up, open, down,
stop/start/kill/restart a broker) and its queries. Files, processes, the managed ZooKeeper
and the probe live in the sibling modules; this one puts them in order.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

from tokensvc.admin.client import AdminClient
from tokensvc.client_config import load_client_config
from tokensvc.cluster.errors import ClusterError
from tokensvc.cluster.files import _write_private, check_overrides, load_info
from tokensvc.cluster.kafka import (
    kafka_info,
    kafka_secret_key,
    make_kafka_brokers,
    start_kafka_brokers,
    write_token_properties,
    write_tool_scripts,
)
from tokensvc.cluster.layout import (
    CLUSTER_FILE,
    MANAGED_KEYS,
    READY_TIMEOUT_S,
    STOP_GRACE_S,
    Placement,
)
from tokensvc.cluster.prepare import _prepare
from tokensvc.cluster.probe import answers_api_versions
from tokensvc.cluster.processes import (
    _alive,
    _broker_command,
    _log_tail,
    _terminate,
    stop_process,
)
from tokensvc.cluster.zookeeper import (
    _managed_zookeeper,
    _max_session_timeout_ms,
    _secure_zookeeper_files,
    _write_zk_client_config,
)
from tokensvc.core.config import KAFKA_SHARED
from tokensvc.core.configdef import ConfigError
from tokensvc.core.zk_security import ZK_KEY_NAMES
from tokensvc.jvm.process import die_with_parent
from tokensvc.kafka import KafkaBroker
from tokensvc.properties import read_properties
from zk.brokers import BrokerRegistry
from zk.client import ZkSettings, open_client, settings_from_file
from zk.layout import Coordination, coordination
from zk.server import (
    DEFAULT_HEAP_MB,
    ManagedZooKeeper,
    ZooKeeperEnsemble,
    ZooKeeperStartError,
)


@dataclass
class _Broker:
    broker_id: int
    config: Path
    log: Path
    process: subprocess.Popen | None = None
    prefix: tuple[str, ...] = ()
    # Extra environment of this broker's process (e.g. libfaketime's, for a wrong clock);
    # kept by this LocalCluster object only, not in cluster.json.
    env: Mapping[str, str] | None = None


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
        self._kafka: list[KafkaBroker] = []
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
        insecure_zookeeper: bool = False,
        zookeeper_nodes: int = 1,
        broker_env: Mapping[int, Mapping[str, str]] | None = None,
        one_by_one: bool = False,
        kafka_brokers: int = 0,
        kafka_reauth_ms: int | None = None,
        kafka_overrides: Mapping[str, str] | None = None,
    ) -> LocalCluster:
        """Start ZooKeeper (unless ``zookeeper`` is a connect string) and ``brokers`` brokers
        in ``directory``; return once all answer. ``die_with_parent`` ties every process to
        the calling thread's life (foreground mode, tests); otherwise they outlive it.
        ``zookeeper_heap_mb`` is the managed ZooKeeper's heap; its session limits always
        grant the brokers' ``zookeeper.session.timeout.ms``. The managed ZooKeeper
        (``zookeeper_nodes`` nodes: 1, or an ensemble of 3 or more) is secure unless
        ``insecure_zookeeper``: TLS only, client certificates, SASL enforced, ACLs.
        ``broker_env`` adds variables to the environment of some brokers' processes (by
        broker id). ``one_by_one`` starts each broker once the one before it answers
        (each loads its cache alone: at a million tokens, three first listings at once
        can outlast ZooKeeper's request cap on a small host); ``timeout`` is then per
        broker.

        ``kafka_brokers`` Apache Kafka 3.9 brokers (ids 101, 102, ...: see
        :mod:`tokensvc.cluster.kafka`) start once tokensvc's answer, on the same ZooKeeper
        with the same master key; tokensvc's brokers then get
        ``kafka.zookeeper.shared=true``. ``kafka_reauth_ms`` is their
        ``connections.max.reauth.ms``; ``kafka_overrides`` are keys of their
        ``server.properties``, applied last. With ``brokers=0`` only ZooKeeper, the users
        and the Kafka brokers start."""
        if brokers < 0 or brokers + kafka_brokers < 1:
            raise ClusterError("a cluster needs at least one broker")
        overrides = dict(overrides or {})
        if kafka_brokers and brokers:
            overrides.setdefault(KAFKA_SHARED, "true")
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
        zk_server: ManagedZooKeeper | ZooKeeperEnsemble | None = None
        cluster: LocalCluster | None = None
        zk_props = {k: v for k, v in overrides.items() if k in ZK_KEY_NAMES}
        if zookeeper is None:
            security = None
            if not insecure_zookeeper:
                security, managed_props = _secure_zookeeper_files(directory)
                zk_props = {**managed_props, **zk_props}
            zk_server = _managed_zookeeper(directory, zookeeper_nodes, zookeeper_heap_mb,
                                           _max_session_timeout_ms(overrides),
                                           die_with_parent, security)
            try:
                zk_server.start()
            except ZooKeeperStartError as exc:
                raise ClusterError(f"managed ZooKeeper did not start: {exc}") from exc
            zookeeper = zk_server.connect
        try:
            client_config = _write_zk_client_config(directory, zookeeper, zk_props)
            info = _prepare(directory, brokers, zookeeper, zk_server, overrides, tls,
                            dict(placements or {}), zk_props, client_config)
            cluster = cls(directory, info, zookeeper=zk_server, die_with_parent=die_with_parent)
            for broker_id, env in (broker_env or {}).items():
                cluster._brokers[broker_id].env = dict(env)
            if one_by_one:
                for broker_id in cluster._brokers:
                    cluster._spawn(broker_id)
                    cluster._save()
                    cluster._wait_ready([broker_id], timeout)
            else:
                for broker_id in cluster._brokers:
                    cluster._spawn(broker_id)
                cluster._save()
                cluster._wait_ready(list(cluster._brokers), timeout)
            if kafka_brokers:
                cluster._start_kafka(kafka_brokers, overrides, kafka_reauth_ms, timeout,
                                     kafka_overrides or {})
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
        string and, when the cluster has them, its ZooKeeper TLS and SASL settings from
        ``zookeeper-client.properties``). ``overrides`` are ZkSettings fields (timeouts)."""
        zk = self.info["zookeeper"]
        try:
            return settings_from_file(zk["connect"], zk.get("client_config"), **overrides)
        except ConfigError as exc:
            raise ClusterError(f"cannot read this cluster's ZooKeeper settings: {exc}") from None

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
        """The managed ZooKeeper's pid (an ensemble's first node) while it runs; None if it
        is stopped or external."""
        pids = self.zookeeper_pids()
        return pids[0] if pids else None

    def zookeeper_pids(self) -> list[int]:
        """The pids of the managed ZooKeeper's nodes that run."""
        if self._zookeeper is not None:
            nodes = getattr(self._zookeeper, "nodes", [self._zookeeper])
            return [n.process.pid for n in nodes
                    if n.process is not None and n.process.poll() is None]
        zk = self.info["zookeeper"]
        pids = zk.get("pids") or ([zk["pid"]] if zk["pid"] is not None else [])
        return [p for p in pids if _alive(p, str(self.directory / "zookeeper"))]

    def kafka_brokers(self) -> list[KafkaBroker]:
        """The Kafka brokers this object started (empty for a cluster opened from its
        directory)."""
        return list(self._kafka)

    def kafka_pids(self) -> list[int]:
        """The pids of the cluster's Kafka brokers that run."""
        if self._kafka:
            return [b.pid for b in self._kafka if b.pid is not None]
        entries = (self.info.get("kafka") or {}).get("brokers", [])
        return [e["pid"] for e in entries if e["pid"] is not None and _alive(e["pid"], e["config"])]

    def running_pids(self) -> list[int]:
        pids = [self.broker_pid(b) for b in self.broker_ids()] + self.zookeeper_pids()
        return [p for p in pids if p is not None] + self.kafka_pids()

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
                     before_spawn: Callable[[], None] | None = None,
                     env: Mapping[str, str] | None = None) -> None:
        """Start the broker again with its existing config; wait until it answers.

        After a crash its ZooKeeper registration lives until its session expires, and a
        broker refuses to start while its id is registered (as Kafka does): this waits for
        the registration to go first. ``before_spawn`` is called right before the process
        is started (a benchmark's clock). ``env``, when given, replaces the variables
        this broker's process gets on top of this process's environment."""
        if self.broker_pid(broker_id) is not None:
            raise ClusterError(f"broker {broker_id} is already running")
        self._wait_unregistered(broker_id, timeout)
        if env is not None:
            self._brokers[broker_id].env = dict(env)
        if before_spawn is not None:
            before_spawn()
        self._spawn(broker_id)
        self._save()
        self._wait_ready([broker_id], timeout)

    def restart_broker(self, broker_id: int, timeout: float = READY_TIMEOUT_S) -> None:
        self.stop_broker(broker_id)
        self.start_broker(broker_id, timeout)

    def down(self, grace: float = STOP_GRACE_S) -> None:
        """Stop the Kafka brokers, every tokensvc broker, then the managed ZooKeeper.
        Idempotent."""
        self._stop_kafka(grace)
        for broker_id in self.broker_ids():
            self.stop_broker(broker_id, grace)
        zk = self.info["zookeeper"]
        if self._zookeeper is not None:
            self._zookeeper.stop()
        else:
            for pid in zk.get("pids") or [zk["pid"]]:
                stop_process(pid, str(self.directory / "zookeeper"), grace)
        zk["pid"] = None
        if "pids" in zk:
            zk["pids"] = []
        self._save()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.down()

    # -- internals -------------------------------------------------------------------------

    def _start_kafka(self, count: int, overrides: Mapping[str, str], reauth_ms: int | None,
                     timeout: float, kafka_overrides: Mapping[str, str]) -> None:
        """Start ``count`` Kafka brokers, record them, and leave what a person needs to
        try them: Kafka's tools as scripts and a client login with a fresh token."""
        admin = self.info["admin"]
        self._kafka = make_kafka_brokers(
            self.directory, count, self.zk_settings(), (admin["username"], admin["password"]),
            kafka_secret_key(self.directory, overrides),
            die_with_parent=self._die_with_parent, reauth_ms=reauth_ms,
            overrides=kafka_overrides)
        try:
            for broker in self._kafka:
                broker.spawn()
        finally:
            self.info["kafka"] = kafka_info(self._kafka)
            self._save()
        start_kafka_brokers(self._kafka, timeout)
        write_tool_scripts(self.directory)
        bootstrap = self.info["bootstrap_servers"] or self.info["kafka"]["bootstrap_servers"]
        with AdminClient(bootstrap, load_client_config(admin["properties"])) as client:
            token = client.create_token(max_lifetime_ms=-1)
        self.info["kafka"]["token_properties"] = str(write_token_properties(
            self.directory, token.token_id, base64.b64encode(token.hmac).decode()))
        self._save()

    def _stop_kafka(self, grace: float) -> None:
        kafka = self.info.get("kafka")
        if not kafka:
            return
        if self._kafka:
            for broker in self._kafka:
                broker.stop(grace)
        else:
            for entry in kafka["brokers"]:
                stop_process(entry["pid"], entry["config"], grace)
        for entry in kafka["brokers"]:
            entry["pid"] = None
        self._save()

    def _spawn(self, broker_id: int) -> None:
        broker = self._brokers[broker_id]
        env = dict(os.environ, PYTHONUNBUFFERED="1", **(broker.env or {}))
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
                preexec_fn=die_with_parent if self._die_with_parent else None,  # noqa: PLW1509
            )
        self.broker_info(broker_id)["pid"] = broker.process.pid

    def coordination(self, broker_id: int) -> Coordination:
        """Where broker ``broker_id`` registers and elects (its ``kafka.zookeeper.shared``)."""
        props = read_properties(self.broker_info(broker_id)["config"])
        return coordination(props.get(KAFKA_SHARED, "").strip().lower() == "true")

    def _wait_unregistered(self, broker_id: int, timeout: float) -> None:
        client = open_client(self.zk_settings())
        try:
            registry = BrokerRegistry(client, paths=self.coordination(broker_id))
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


def down(directory: str | os.PathLike, grace: float = STOP_GRACE_S) -> bool:
    """Stop the cluster of ``directory``; False if there is no cluster.json there."""
    if load_info(directory) is None:
        return False
    LocalCluster.open(directory).down(grace)
    return True
