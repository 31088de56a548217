"""An Apache Kafka 3.9 broker in ZooKeeper mode, started as tokensvc's tests and
``./dev run`` need it: beside tokensvc, on the same ZooKeeper, with the same ZooKeeper
identity and the same ``delegation.token.secret.key``.

Owns the broker's own configuration: its ``server.properties`` (one ``SASL_PLAINTEXT``
listener on loopback with SCRAM-SHA-256 and -512, inter-broker SCRAM-SHA-512 as the
admin user, Kafka's ``AclAuthorizer``, the ZooKeeper client's TLS and ACL keys, sizes
for a test cluster of one to three brokers), its JAAS file (mode 0600: the admin's
SCRAM login, and the ZooKeeper SASL login as a ``Client`` section), its log4j file, and
when it is ready: it answers ApiVersions on its listener and ``/brokers/ids/<id>`` exists.
Java, the classpath, the command line and the process come from the JVM room
(:mod:`tokensvc.jvm`).

The admin's SCRAM credential must be in ZooKeeper before the broker starts (its
inter-broker login uses it): a tokensvc ``LocalCluster`` writes it with
:func:`zk.credential_store.bootstrap_user`.

Must not: write anything in ZooKeeper (Kafka does, as itself), listen beyond 127.0.0.1,
or put a password anywhere but the 0600 JAAS file. The broker's log is
``<dir>/server.log``; its stdout and stderr (the JVM's own messages) ``<dir>/kafka.out``.

JVM flags: the heap and the flags of :data:`JVMFLAGS_ENV` after the broker's own (the
test suite's cheaper starts, as for ZooKeeper).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from tokensvc.admin.connection import BrokerConnection
from tokensvc.atomicfile import write_atomic
from tokensvc.client_config import ClientConfig
from tokensvc.core.errors import KafkaError
from tokensvc.core.zk_security import DIGEST_LOGIN_MODULE, NETTY_SOCKET
from tokensvc.jvm import JavaCommand, JvmError, SupervisedProcess, free_port, require_java
from tokensvc.kafka.jars import broker_log4j, kafka_jars
from tokensvc.properties import properties_text
from zk import layout
from zk.client import ZkSettings, ZooKeeperUnavailable, open_client

JVMFLAGS_ENV = "TOKENSVC_KAFKA_JVMFLAGS"
HOST = "127.0.0.1"
DEFAULT_HEAP_MB = 512
SCRAM_LOGIN_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
_MAIN = "kafka.Kafka"


def reauth_key(mechanism: str, listener: str = "SASL_PLAINTEXT") -> str:
    """The key of ``connections.max.reauth.ms`` for the sessions of one SASL mechanism on
    one listener (Kafka's listener- and mechanism-prefixed form, KIP-368)."""
    return f"listener.name.{listener.lower()}.{mechanism.lower()}.connections.max.reauth.ms"


class KafkaStartError(JvmError):
    """A Kafka broker could not be started; the message says why and where to look."""


def _jaas_quote(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"')


class KafkaBroker:
    """One Kafka broker process in ``directory`` (its config, data and logs).

    ``zookeeper`` is how tokensvc's brokers reach ZooKeeper (connect string with its
    chroot, TLS stores, SASL login, ACLs); the Kafka broker uses the same. ``admin`` is
    ``(username, password)`` of the super user the brokers log in to each other as.
    ``overrides`` are ``server.properties`` keys applied last.
    """

    def __init__(
        self,
        directory: str | Path,
        broker_id: int,
        zookeeper: ZkSettings,
        *,
        admin: tuple[str, str],
        secret_key: str,
        port: int | None = None,
        super_users: Sequence[str] = (),
        reauth_ms: int | None = None,
        replication_factor: int = 1,
        overrides: Mapping[str, str] | None = None,
        heap_mb: int = DEFAULT_HEAP_MB,
        die_with_parent: bool = True,
    ) -> None:
        self.directory = Path(directory).resolve()
        self.broker_id = broker_id
        self.zookeeper = zookeeper
        self._admin = admin
        self._secret_key = secret_key
        self.port = port or free_port(HOST)
        self.super_users = [f"User:{admin[0]}", *super_users]
        self.reauth_ms = reauth_ms
        self.replication_factor = replication_factor
        self.overrides = dict(overrides or {})
        self.heap_mb = heap_mb
        self.die_with_parent = die_with_parent
        self.process: SupervisedProcess | None = None

    # -- where things are ----------------------------------------------------------------

    @property
    def bootstrap(self) -> str:
        """The listener, as a client's ``bootstrap.servers`` takes it."""
        return f"{HOST}:{self.port}"

    @property
    def config_path(self) -> Path:
        return self.directory / "server.properties"

    @property
    def jaas_path(self) -> Path:
        return self.directory / "kafka.jaas"

    @property
    def log_path(self) -> Path:
        return self.directory / "server.log"

    @property
    def output_path(self) -> Path:
        return self.directory / "kafka.out"

    @property
    def pid(self) -> int | None:
        """The pid while the process runs, else None."""
        return self.process.pid if self.process is not None and self.process.running else None

    # -- configuration -------------------------------------------------------------------

    def properties(self) -> dict[str, str]:
        """This broker's ``server.properties`` (no secret but the token key, which Kafka
        takes from here only; the file is 0600)."""
        listener = f"SASL_PLAINTEXT://{self.bootstrap}"
        rf = str(self.replication_factor)
        props = {
            "broker.id": str(self.broker_id),
            "listeners": listener,
            "advertised.listeners": listener,
            "security.inter.broker.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
            "sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512",
            "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
            "allow.everyone.if.no.acl.found": "false",
            "super.users": ";".join(self.super_users),
            "delegation.token.secret.key": self._secret_key,
            "log.dirs": str(self.directory / "data"),
            # Internal topics and defaults sized for a cluster of one to three brokers.
            "offsets.topic.replication.factor": rf,
            "offsets.topic.num.partitions": "1",
            "transaction.state.log.replication.factor": rf,
            "transaction.state.log.min.isr": "1",
            "default.replication.factor": "1",
            "num.partitions": "1",
            "group.initial.rebalance.delay.ms": "0",
            # A small broker: few threads, a short controlled shutdown.
            "num.network.threads": "2",
            "num.io.threads": "2",
            "background.threads": "2",
            "num.recovery.threads.per.data.dir": "1",
            "controlled.shutdown.max.retries": "1",
            **self._zookeeper_properties(),
        }
        if self.reauth_ms is not None:
            props["connections.max.reauth.ms"] = str(self.reauth_ms)
        props.update(self.overrides)
        return props

    def _zookeeper_properties(self) -> dict[str, str]:
        """Kafka's ZooKeeper client keys for what ``zookeeper`` says (KIP-515 for TLS,
        with PEM stores; SASL through the JAAS file's ``Client`` section)."""
        security = self.zookeeper.security
        props = {
            "zookeeper.connect": self.zookeeper.connect,
            "zookeeper.session.timeout.ms": str(self.zookeeper.session_timeout_ms),
            "zookeeper.connection.timeout.ms": str(self.zookeeper.connection_timeout_ms),
            "zookeeper.set.acl": "true" if security.set_acl else "false",
        }
        tls = security.tls
        if tls is not None:
            props.update({
                "zookeeper.ssl.client.enable": "true",
                "zookeeper.clientCnxnSocket": NETTY_SOCKET,
                # Kafka's ZooKeeper client offers TLSv1.2 only by default; ZooKeeper 3.9
                # (the managed one) speaks TLSv1.3.
                "zookeeper.ssl.protocol": "TLSv1.3",
                "zookeeper.ssl.enabled.protocols": "TLSv1.3,TLSv1.2",
                "zookeeper.ssl.truststore.type": tls.truststore_type,
                "zookeeper.ssl.truststore.location": str(tls.truststore),
                "zookeeper.ssl.endpoint.identification.algorithm":
                    "HTTPS" if tls.check_hostname else "",
            })
            if tls.truststore_password:
                props["zookeeper.ssl.truststore.password"] = tls.truststore_password
            if tls.keystore is not None:
                props["zookeeper.ssl.keystore.type"] = tls.keystore_type
                props["zookeeper.ssl.keystore.location"] = str(tls.keystore)
                if tls.keystore_password:
                    props["zookeeper.ssl.keystore.password"] = tls.keystore_password
        if security.digest is not None:
            raise KafkaStartError("a Kafka broker cannot log in to ZooKeeper with a digest "
                                  "(zookeeper.digest): give it a SASL login or a client certificate")
        return props

    def jaas(self) -> str:
        """The JAAS file: the admin's SCRAM login (``KafkaServer``) and, when ZooKeeper
        wants SASL, the brokers' DIGEST-MD5 login (``Client``)."""
        username, password = self._admin
        text = (
            "KafkaServer {\n"
            f"    {SCRAM_LOGIN_MODULE} required\n"
            f'    username="{_jaas_quote(username)}"\n'
            f'    password="{_jaas_quote(password)}";\n'
            "};\n"
        )
        sasl = self.zookeeper.security.sasl
        if sasl is not None:
            text += (
                "Client {\n"
                f"    {DIGEST_LOGIN_MODULE} required\n"
                f'    username="{_jaas_quote(sasl.username)}"\n'
                f'    password="{_jaas_quote(sasl.password)}";\n'
                "};\n"
            )
        return text

    def write_config(self) -> None:
        """Write ``server.properties``, the JAAS file and log4j's file (0600 each)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        write_atomic(self.config_path, properties_text(self.properties()).encode())
        write_atomic(self.jaas_path, self.jaas().encode())
        write_atomic(self.directory / "log4j.properties", broker_log4j(self.log_path).encode())

    def command(self) -> list[str]:
        """Write the configuration and return the command that runs the broker."""
        try:
            java = require_java(11)
            jars = kafka_jars()
        except JvmError as exc:
            raise KafkaStartError(f"cannot start Kafka broker {self.broker_id}: {exc}") from None
        self.write_config()
        return JavaCommand(
            java=java,
            main=_MAIN,
            classpath=jars,
            args=[str(self.config_path)],
            heap_mb=self.heap_mb,
            # No collector named: the JVM's choice (G1 on a server-class host), which a
            # flag of JVMFLAGS_ENV may replace.
            flags=["-Djava.awt.headless=true"],
            system_properties={
                "log4j.configuration": f"file:{self.directory / 'log4j.properties'}",
                "kafka.logs.dir": str(self.directory),
                "java.security.auth.login.config": str(self.jaas_path),
            },
            flags_env=JVMFLAGS_ENV,
        ).argv()

    # -- lifecycle -----------------------------------------------------------------------

    def spawn(self) -> None:
        """Start the process without waiting for it."""
        if self.process is not None and self.process.running:
            return
        self.process = SupervisedProcess(self.command(), self.output_path,
                                         die_with_parent=self.die_with_parent,
                                         cwd=self.directory)
        self.process.spawn()

    def start(self, timeout: float = 120.0) -> None:
        """Start and return once the broker answers ApiVersions on its listener and is
        registered; on failure the process is killed and :class:`KafkaStartError` says
        why."""
        self.spawn()
        try:
            self.wait_ready(timeout)
        except KafkaStartError:
            self.kill()
            raise

    def wait_ready(self, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        client = None
        try:
            while True:
                if self.process is None or not self.process.running:
                    status = self.process.poll() if self.process is not None else None
                    raise KafkaStartError(
                        f"Kafka broker {self.broker_id} exited with status {status} before it "
                        f"was ready; see {self.log_path} and {self.output_path}")
                if self._answers_api_versions():
                    if client is None:
                        client = self._zk_client()
                    if client.exists(f"{layout.BROKER_IDS}/{self.broker_id}"):
                        return
                if time.monotonic() > deadline:
                    raise KafkaStartError(
                        f"Kafka broker {self.broker_id} was not ready (listening on "
                        f"{self.bootstrap} and registered) within {timeout:.0f}s; see {self.log_path}")
                time.sleep(0.1)
        finally:
            if client is not None:
                client.stop()
                client.close()

    def _answers_api_versions(self) -> bool:
        """Whether Kafka answers ApiVersions on the listener (no login needed): a port
        that only accepts connections may be another process's."""
        connection = BrokerConnection(self.bootstrap, ClientConfig(), client_id="tokensvc-probe")
        try:
            connection.open(time.monotonic() + 2.0)
        except (OSError, KafkaError, ValueError):
            return False
        connection.close()
        return True

    def _zk_client(self):  # a started kazoo client (only zk/ names kazoo's types)
        try:
            return open_client(self.zookeeper)
        except ZooKeeperUnavailable as exc:
            raise KafkaStartError(f"cannot reach ZooKeeper to see Kafka broker "
                                  f"{self.broker_id} registered: {exc}") from None

    def stop(self, grace: float = 30.0) -> None:
        """SIGTERM (a controlled shutdown), then SIGKILL after ``grace`` seconds."""
        if self.process is not None:
            self.process.stop(grace)

    def kill(self) -> None:
        """SIGKILL: a crash."""
        if self.process is not None:
            self.process.kill()
