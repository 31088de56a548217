"""A real ZooKeeper server managed by tokensvc, on loopback: ZooKeeper's own configuration.

Owns: which of the jars the pyspark wheel ships make ZooKeeper's classpath, a node's
``zoo.cfg``, ``myid``, JAAS and log4j2 files, the TLS and SASL settings of a secured
node, the quorum's, the four-letter words, waiting until a node serves, and an
ensemble of nodes. Java, the command line, ports and the process itself (start, stop,
kill, pause) come from the JVM room (:mod:`tokensvc.jvm`), as for every JVM tokensvc
runs. A :class:`ZooKeeperEnsemble` runs three (or N) nodes as one quorum so tests can
kill single nodes.

It never downloads anything and never listens beyond 127.0.0.1, except on the
addresses an ensemble is given (the partition harness's network namespaces,
``faults.netns``), where a command prefix starts each node. Start-up fails
with :class:`ZooKeeperStartError` and a message a person can act on (Java
missing, port in use, a key or trust store missing, unreadable or expired, the
server died, it did not answer in time) instead of hanging.

Security: given a :class:`ZkServerSecurity`, a node serves only a TLS client port
(``secureClientPort``, Netty) that requires a client certificate signed by the
trust store's CA, registers the x509 and SASL authentication providers, and
refuses every request of a session that has not logged in with SASL
(``enforce.auth``); an ensemble's nodes also speak TLS to each other. The SASL
users live in a JAAS file (mode 0600) in the node's directory, never in
``zoo.cfg``, a log or an error. No super user is configured: not
``superDigest``, not an x509 super user. Without it the node is plain, as it
always was.

Sizing: the heap is a setting (``heap_mb``; :data:`DEFAULT_HEAP_MB` holds a
million delegation tokens, see docs/operations.md), the data directory stays
bounded (ZooKeeper's autopurge keeps the newest :data:`SNAP_RETAIN_COUNT`
snapshots and their logs, hourly), and the session limits grant any session
timeout up to ``max_session_timeout_ms`` (ZooKeeper's own default caps sessions
at 20 ticks, 10 s with our 500 ms tick, below the brokers' 18 s).

Leader election: a node that is looking for a leader sends its vote again after a wait
that doubles each round, up to ZooKeeper's ``zookeeper.fastleader.maxNotificationInterval``
(60 s by default). When the peers miss each other's votes (one was frozen or starved of
CPU when the leader died), that wait, not the election, keeps the ensemble without a
leader: kill -9 of the leader with the other follower frozen for 8 s (``./dev chaos
--faults zk-quorum``) gave a leader 21.2 s after the kill, and 13.6-13.7 s with a 2 s cap
(docs/operations.md). Every node started here caps it at :data:`MAX_VOTE_INTERVAL_MS`;
an election on a working network still ends on the first exchange of votes.

JVM flags: every node this module starts also gets the flags of the environment variable
:data:`JVMFLAGS_ENV` (split as a shell would), after its own, as ZooKeeper's
``zkServer.sh`` takes ``JVMFLAGS`` (:class:`tokensvc.jvm.JavaCommand`). The test suite uses it to start its hundreds of
short-lived servers with a class-data archive and the client compiler only
(tests/support/jvm_start.py), which halves each start's CPU.
"""

from __future__ import annotations

import datetime
import os
import re
import socket
import ssl
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Self

from cryptography import x509

from tokensvc.jvm import (
    JavaCommand,
    JvmError,
    SupervisedProcess,
    classpath,
    env_flags,
    free_port,
    installed_jars,
    port_in_use,
    require_java,
)

# Extra JVM flags for every node started here (see the module's doc).
JVMFLAGS_ENV = "TOKENSVC_ZOOKEEPER_JVMFLAGS"
# The longest a node looking for a leader waits before it sends its vote again.
MAX_VOTE_INTERVAL_MS = 2000


def extra_jvm_flags(environ: Mapping[str, str] = os.environ) -> list[str]:
    """The flags of :data:`JVMFLAGS_ENV`, split as a shell would; none when unset."""
    return env_flags(JVMFLAGS_ENV, environ)


# The artifacts of pyspark/jars/ that QuorumPeerMain needs.
_ARTIFACTS = (
    "zookeeper",
    "zookeeper-jute",
    "slf4j-api",
    "log4j-api",
    "log4j-core",
    "log4j-slf4j2-impl",
    "audience-annotations",
    "netty-handler",
    "netty-transport",
    "netty-common",
    "netty-buffer",
    "netty-codec",
    "netty-resolver",
    "netty-transport-native-unix-common",
    # The Netty connection factory of a TLS client port asks for epoll (it falls back
    # to NIO without the native library, which the classes jar alone does not load).
    "netty-transport-classes-epoll",
    "metrics-core",
    "commons-io",
    "snappy-java",
)
_MAIN = "org.apache.zookeeper.server.quorum.QuorumPeerMain"

_LOG4J2 = """\
status = error
appender.file.type = File
appender.file.name = file
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = %d{{ISO8601}} %-5p [%t] %c{{1}} - %m%n
rootLogger.level = warn
rootLogger.appenderRef.file.ref = file
appender.audit.type = File
appender.audit.name = audit
appender.audit.fileName = {audit}
appender.audit.layout.type = PatternLayout
appender.audit.layout.pattern = %m%n
logger.audit.name = org.apache.zookeeper.audit
logger.audit.level = info
logger.audit.additivity = false
logger.audit.appenderRef.audit.ref = audit
"""


# Measured (docs/operations.md): about 1 GB of live heap at 1M tokens; twice that
# leaves room for the snapshot being written and for the collector.
DEFAULT_HEAP_MB = 2048
MIN_HEAP_MB = 64
DEFAULT_MAX_SESSION_TIMEOUT_MS = 60_000
SNAP_RETAIN_COUNT = 3


def parse_heap_mb(text: str) -> int:
    """A JVM heap size as megabytes: ``2048``, ``1536m``, ``2g`` (case-insensitive).

    Raises ValueError with a message a person can act on for anything else, or
    for less than :data:`MIN_HEAP_MB`.
    """
    value = text.strip().lower()
    scale = 1
    if value.endswith(("g", "gb", "gib")):
        value, scale = value.rstrip("gib"), 1024
    elif value.endswith(("m", "mb", "mib")):
        value = value.rstrip("mib")
    if not value.isdigit():
        raise ValueError(f"{text!r} is not a heap size: use megabytes (2048, 1536m) or gigabytes (2g)")
    heap = int(value) * scale
    if heap < MIN_HEAP_MB:
        raise ValueError(f"a ZooKeeper heap of {heap} MB is too small: give at least {MIN_HEAP_MB} MB")
    return heap


class ZooKeeperStartError(JvmError):
    """ZooKeeper could not be started; the message says why and what to do."""


# A SASL user name becomes the JAAS option ``user_<name>``: a bare word of the JAAS syntax.
_SASL_USER = re.compile(r"[A-Za-z0-9_.-]+")


@dataclass(frozen=True)
class ZkServerSecurity:
    """What a secured managed ZooKeeper node needs: PEM key and trust stores and the SASL
    (DIGEST-MD5) users it accepts.

    ``key_store`` holds the node's private key followed by its certificate chain (as
    :func:`tokensvc.devcerts.generate_zookeeper` writes ``server.pem``); it serves the
    client port and, with ``quorum_tls``, the links between ensemble nodes, so its
    certificate must allow server and client authentication and name every address the
    nodes use. ``trust_store`` is the CA that signs the clients' (and the nodes')
    certificates. ``probe_key_store`` is the client certificate the readiness probe shows
    (default: ``key_store``); the probe only sends ``srvr`` and never logs in.
    """

    key_store: Path
    trust_store: Path
    sasl_users: Mapping[str, str] = field(repr=False, hash=False)
    quorum_tls: bool = True
    probe_key_store: Path | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "key_store", Path(self.key_store))
        object.__setattr__(self, "trust_store", Path(self.trust_store))
        if self.probe_key_store is not None:
            object.__setattr__(self, "probe_key_store", Path(self.probe_key_store))
        if not self.sasl_users:
            raise ValueError("a secured ZooKeeper needs at least one SASL user")
        for name, password in self.sasl_users.items():
            if not _SASL_USER.fullmatch(name):
                raise ValueError(
                    f"SASL user name {name!r} must be letters, digits, '_', '.' or '-'"
                )
            # ASCII: the JVM reads the JAAS file in the platform's charset.
            if not password or not (password.isascii() and password.isprintable()):
                raise ValueError(
                    f"the password of SASL user {name!r} must be printable ASCII and not empty"
                )
        object.__setattr__(self, "sasl_users", MappingProxyType(dict(self.sasl_users)))

    def check_stores(self, now: datetime.datetime | None = None) -> None:
        """Raise :class:`ZooKeeperStartError` naming a key or trust store that is missing,
        unreadable or expired: ZooKeeper itself would start without a usable store and
        never serve, so the start would only fail at its timeout."""
        when = now or datetime.datetime.now(datetime.UTC)
        key_stores = [("key store", self.key_store)]
        if self.probe_key_store is not None:
            key_stores.append(("probe key store", self.probe_key_store))
        for what, path in [*key_stores, ("trust store", self.trust_store)]:
            if not path.is_file():
                raise ZooKeeperStartError(f"cannot start ZooKeeper: its {what} {path} does not exist")
        for what, path in key_stores:
            try:
                ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(path)
            except (ssl.SSLError, OSError) as exc:
                raise ZooKeeperStartError(
                    f"cannot start ZooKeeper: its {what} {path} is not a PEM private key "
                    f"followed by its certificate chain ({exc.__class__.__name__})"
                ) from None
            _check_validity(what, path, when)
        try:
            ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_verify_locations(self.trust_store)
        except (ssl.SSLError, OSError) as exc:
            raise ZooKeeperStartError(
                f"cannot start ZooKeeper: its trust store {self.trust_store} holds no PEM "
                f"certificate ({exc.__class__.__name__})"
            ) from None

    def probe_context(self) -> ssl.SSLContext:
        """A TLS client context that trusts the node and shows the probe's certificate."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.load_verify_locations(self.trust_store)
        context.load_cert_chain(self.probe_key_store or self.key_store)
        return context

    def jaas(self) -> str:
        """The JAAS ``Server`` section that holds the SASL users (secret: write it 0600)."""
        options = "".join(
            f'    user_{name}="{_jaas_quote(password)}"\n' for name, password in self.sasl_users.items()
        )
        return (
            "Server {\n"
            "    org.apache.zookeeper.server.auth.DigestLoginModule required\n"
            f"{options.rstrip()};\n"
            "};\n"
        )

    def client_port_config(self, host: str, port: int) -> list[str]:
        """The ``zoo.cfg`` lines of a TLS-only client port that needs a certificate and SASL."""
        return [
            f"secureClientPort={port}",
            f"secureClientPortAddress={host}",
            "serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory",
            f"ssl.keyStore.location={self.key_store}",
            "ssl.keyStore.type=PEM",
            f"ssl.trustStore.location={self.trust_store}",
            "ssl.trustStore.type=PEM",
            "ssl.clientAuth=need",
            # The handshake maps the client certificate to an x509 identity; without the
            # provider registered the server closes every TLS connection.
            "authProvider.x509=org.apache.zookeeper.server.auth.X509AuthenticationProvider",
            "authProvider.sasl=org.apache.zookeeper.server.auth.SASLAuthenticationProvider",
            # A session that has not logged in with SASL gets an error and is closed at
            # its first request (the x509 identity alone is not enough).
            "enforce.auth.enabled=true",
            "enforce.auth.schemes=sasl",
        ]

    def quorum_config(self) -> list[str]:
        """The ``zoo.cfg`` lines of TLS between ensemble nodes (empty without ``quorum_tls``)."""
        if not self.quorum_tls:
            return []
        return [
            "sslQuorum=true",
            "portUnification=false",
            f"ssl.quorum.keyStore.location={self.key_store}",
            "ssl.quorum.keyStore.type=PEM",
            f"ssl.quorum.trustStore.location={self.trust_store}",
            "ssl.quorum.trustStore.type=PEM",
            "ssl.quorum.clientAuth=need",
            # Each node checks its peer's certificate names the address it connected to
            # (or came from): the server certificate lists every node address.
            "ssl.quorum.hostnameVerification=true",
        ]


def _check_validity(what: str, path: Path, now: datetime.datetime) -> None:
    """The first certificate of a PEM key store is valid at ``now``."""
    leaf = x509.load_pem_x509_certificates(path.read_bytes())[0]
    if not leaf.not_valid_before_utc <= now <= leaf.not_valid_after_utc:
        raise ZooKeeperStartError(
            f"cannot start ZooKeeper: the certificate of its {what} {path} is valid only "
            f"from {leaf.not_valid_before_utc:%Y-%m-%d %H:%M} to "
            f"{leaf.not_valid_after_utc:%Y-%m-%d %H:%M} UTC"
        )


def _jaas_quote(text: str) -> str:
    """``text`` inside a JAAS double-quoted value (backslash and quote escaped)."""
    return text.replace("\\", "\\\\").replace('"', '\\"')


def zookeeper_classpath() -> str:
    """The classpath of the ZooKeeper server jars shipped inside the pyspark wheel."""
    try:
        jars = installed_jars("pyspark", "jars", _ARTIFACTS, required=("zookeeper", "zookeeper-jute"))
    except JvmError as exc:
        raise ZooKeeperStartError(str(exc)) from None
    return classpath(jars)


# ZooKeeper's usual ports, for nodes that each have an address of their own.
CLIENT_PORT, QUORUM_PORT, ELECTION_PORT = 2181, 2888, 3888


def four_letter_word(
    host: str, port: int, word: str, timeout: float = 1.0, *, tls: ssl.SSLContext | None = None
) -> str:
    """Send a four-letter word (``srvr``, ``cons``...) and return the reply; over TLS
    (``tls``, with a client certificate) on a secured node's port."""
    with socket.create_connection((host, port), timeout=timeout) as raw:
        s = tls.wrap_socket(raw, server_hostname=host) if tls is not None else raw
        try:
            s.sendall(word.encode("ascii"))
            chunks = []
            while True:
                data = s.recv(4096)
                if not data:
                    break
                chunks.append(data)
        finally:
            if s is not raw:
                s.close()
    return b"".join(chunks).decode("utf-8", "replace")


def _write_secret(path: Path, text: str) -> None:
    """Create (or replace) ``path`` readable by its owner only, from the start."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, text.encode("utf-8"))
    finally:
        os.close(fd)
    os.chmod(path, 0o600)


@dataclass
class ZooKeeperNode:
    """One ZooKeeper server process (standalone, or a member of an ensemble)."""

    data_dir: Path
    client_port: int
    host: str = "127.0.0.1"
    server_id: int = 1
    peers: list[tuple[int, int, int]] = field(default_factory=list)  # (id, quorum, election)
    # Each peer's address when the nodes do not share ``host`` (one network namespace each).
    peer_hosts: dict[int, str] = field(default_factory=dict)
    # A command that runs the server somewhere else (``ip netns exec NAME``); empty: here.
    prefix: list[str] = field(default_factory=list)
    tick_ms: int = 500
    heap_mb: int = DEFAULT_HEAP_MB
    max_session_timeout_ms: int = DEFAULT_MAX_SESSION_TIMEOUT_MS
    die_with_parent: bool = True
    # ZooKeeper's own audit log of every write (session, auth id, operation, path).
    audit: bool = False
    # TLS-only client port, client certificates, SASL enforced; None: plain, open.
    security: ZkServerSecurity | None = None
    process: SupervisedProcess | None = None

    @property
    def connect(self) -> str:
        return f"{self.host}:{self.client_port}"

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    @property
    def log_path(self) -> Path:
        return self.data_dir / "zookeeper.log"

    @property
    def audit_log_path(self) -> Path:
        return self.data_dir / "zookeeper-audit.log"

    @property
    def jaas_path(self) -> Path:
        return self.data_dir / "jaas.conf"

    def _write_config(self) -> Path:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        (self.data_dir / "data").mkdir(exist_ok=True)
        lines = [
            f"tickTime={self.tick_ms}",
            "initLimit=20",
            "syncLimit=10",
            f"dataDir={self.data_dir / 'data'}",
            *(
                [f"clientPort={self.client_port}", f"clientPortAddress={self.host}"]
                if self.security is None
                else self.security.client_port_config(self.host, self.client_port)
            ),
            "admin.enableServer=false",
            "4lw.commands.whitelist=ruok,srvr,stat,mntr,cons,conf",
            "maxClientCnxns=0",
            # Sessions may be as short as 2 ticks; tests expire sessions quickly.
            f"minSessionTimeout={2 * self.tick_ms}",
            f"maxSessionTimeout={max(self.max_session_timeout_ms, 2 * self.tick_ms)}",
            # Keep the data directory bounded: hourly purge of all but the newest
            # snapshots and the transaction logs they make obsolete.
            f"autopurge.snapRetainCount={SNAP_RETAIN_COUNT}",
            "autopurge.purgeInterval=1",
        ]
        if self.audit:
            lines.append("audit.enable=true")
        if self.peers:
            if self.security is not None:
                lines.extend(self.security.quorum_config())
            for sid, quorum, election in self.peers:
                host = self.peer_hosts.get(sid, self.host)
                lines.append(f"server.{sid}={host}:{quorum}:{election}")
            (self.data_dir / "data" / "myid").write_text(f"{self.server_id}\n")
        cfg = self.data_dir / "zoo.cfg"
        cfg.write_text("\n".join(lines) + "\n")
        (self.data_dir / "log4j2.properties").write_text(
            _LOG4J2.format(log=self.log_path, audit=self.audit_log_path)
        )
        if self.security is not None:
            _write_secret(self.jaas_path, self.security.jaas())
        return cfg

    def spawn(self) -> None:
        """Start the process without waiting for it to serve."""
        if self.process is not None and self.process.running:
            return
        self.process = SupervisedProcess(self.command(), self.data_dir / "zookeeper.out",
                                         die_with_parent=self.die_with_parent)
        self.process.spawn()

    def command(self) -> list[str]:
        """Write this node's configuration and return the command that runs it (for
        :meth:`spawn`, and for ``tokensvc zookeeper``, which execs it under a service
        manager)."""
        try:
            java = require_java(11)
        except JvmError as exc:
            raise ZooKeeperStartError(str(exc)) from None
        # With a prefix the port is in another network namespace: it cannot be probed here.
        if not self.prefix and port_in_use(self.client_port, self.host):
            raise ZooKeeperStartError(
                f"cannot start ZooKeeper: port {self.host}:{self.client_port} is already in use"
            )
        if self.security is not None:
            self.security.check_stores()
        cfg = self._write_config()
        properties = {
            "zookeeper.admin.enableServer": "false",
            "zookeeper.fastleader.maxNotificationInterval": str(MAX_VOTE_INTERVAL_MS),
            "log4j2.configurationFile": str(self.data_dir / "log4j2.properties"),
        }
        if self.security is not None:
            properties["java.security.auth.login.config"] = str(self.jaas_path)
        return JavaCommand(
            java=java,
            main=_MAIN,
            classpath=[zookeeper_classpath()],
            args=[str(cfg)],
            heap_mb=self.heap_mb,
            flags=[
                "-XX:+UseSerialGC",
                # Its collections, for the operator (docs/operations.md): five files of 10 MB.
                f"-Xlog:gc:file={self.data_dir / 'gc.log'}:time,uptime:filecount=5,filesize=10m",
            ],
            system_properties=properties,
            flags_env=JVMFLAGS_ENV,
            prefix=self.prefix,
        ).argv()

    def four_letter_word(self, word: str, timeout: float = 1.0) -> str:
        """Ask this node a four-letter word, over TLS with the probe's certificate when
        the node is secured."""
        tls = self.security.probe_context() if self.security is not None else None
        return four_letter_word(self.host, self.client_port, word, timeout, tls=tls)

    @property
    def probe_timeout(self) -> float:
        """How long one ``srvr`` probe may take. A TLS handshake with a JVM that has just
        started takes seconds on a busy machine; a probe cut off in the middle wastes
        the node's work and makes it log a failed handshake."""
        return 0.5 if self.security is None else 5.0

    def serving(self, timeout: float | None = None) -> bool:
        try:
            reply = self.four_letter_word("srvr", timeout=timeout or self.probe_timeout)
        except OSError:  # ssl.SSLError is one too
            return False
        return "Mode:" in reply

    def is_ours(self) -> bool:
        """Whether the server answering on this node's port is this node: its ``conf``
        names this node's data directory. Another ZooKeeper that took the port between
        the check and the bind answers ``srvr`` before this one has even started (seen
        once in a parallel test run); it must not pass for this node."""
        try:
            reply = self.four_letter_word("conf", timeout=self.probe_timeout)
        except OSError:
            return False
        ours = str(self.data_dir / "data")
        return any(line.startswith("dataDir=") and line.split("=", 1)[1].startswith(ours)
                   for line in reply.splitlines())

    def mode(self) -> str | None:
        try:
            reply = self.four_letter_word("srvr", timeout=self.probe_timeout)
        except OSError:
            return None
        for line in reply.splitlines():
            if line.startswith("Mode:"):
                return line.split(":", 1)[1].strip()
        return None

    def wait_serving(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise ZooKeeperStartError(
                    f"ZooKeeper on port {self.client_port} exited with status "
                    f"{self.process.poll()}; see {self.data_dir / 'zookeeper.out'}"
                )
            if (self.serving(min(self.probe_timeout, max(0.1, deadline - time.monotonic())))
                    and self.is_ours()):
                return
            time.sleep(0.1)
        raise ZooKeeperStartError(
            f"ZooKeeper on {self.connect} did not start serving within {timeout:.0f}s; "
            f"see {self.log_path}"
        )

    def start(self, timeout: float = 30.0) -> None:
        self.spawn()
        try:
            self.wait_serving(timeout)
        except ZooKeeperStartError:
            self.kill()
            raise

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM, then SIGKILL if it does not exit in time."""
        if self.process is not None:
            self.process.stop(timeout)
        self.process = None

    def kill(self) -> None:
        """SIGKILL: a crash, as fault tests need."""
        if self.process is not None:
            self.process.kill()
        self.process = None

    def pause(self, timeout: float = 5.0) -> None:
        """SIGSTOP, returning once every thread of the process is stopped (at most
        ``timeout``): a request sent after this returns is never answered until
        :meth:`resume` (a create answered by a paused server was seen once in a full
        run of the suite before it waited for every thread)."""
        if self.process is not None:
            self.process.pause(timeout)

    def resume(self) -> None:
        if self.process is not None:
            self.process.resume()


class ManagedZooKeeper(ZooKeeperNode):
    """A standalone ZooKeeper server on a free loopback port."""

    def __init__(
        self,
        data_dir: str | os.PathLike,
        port: int | None = None,
        *,
        tick_ms: int = 500,
        heap_mb: int = DEFAULT_HEAP_MB,
        max_session_timeout_ms: int = DEFAULT_MAX_SESSION_TIMEOUT_MS,
        die_with_parent: bool = True,
        audit: bool = False,
        security: ZkServerSecurity | None = None,
    ) -> None:
        super().__init__(
            data_dir=Path(data_dir),
            client_port=port or free_port(),
            tick_ms=tick_ms,
            heap_mb=heap_mb,
            max_session_timeout_ms=max_session_timeout_ms,
            die_with_parent=die_with_parent,
            audit=audit,
            security=security,
        )
        self._port_chosen = port is None
        self._started = False

    def start(self, timeout: float = 30.0) -> None:
        """Start and wait until it serves. On its first start, a free port that another
        process took before the server bound it is replaced by another free port (twice
        at most); later starts keep the port its clients know."""
        for attempt in range(3):
            try:
                super().start(timeout)
            except ZooKeeperStartError:
                if (self._started or not self._port_chosen or attempt == 2
                        or not port_in_use(self.client_port, self.host)):
                    raise
                self.client_port = free_port()
                continue
            self._started = True
            return

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class ZooKeeperEnsemble:
    """N ZooKeeper servers forming one quorum (N is odd, usually 3): on loopback with free
    ports, or, given ``hosts`` (one address each) and ``prefixes`` (the command that runs
    each one there, as ``ip netns exec NAME``), on those addresses with ZooKeeper's usual
    ports."""

    def __init__(
        self,
        base_dir: str | os.PathLike,
        size: int = 3,
        *,
        tick_ms: int = 500,
        die_with_parent: bool = True,
        hosts: list[str] | None = None,
        prefixes: list[list[str]] | None = None,
        security: ZkServerSecurity | None = None,
    ) -> None:
        if size < 1:
            raise ValueError("an ensemble needs at least one node")
        if hosts is not None and len(hosts) != size:
            raise ValueError(f"{size} nodes need {size} hosts, got {len(hosts)}")
        base = Path(base_dir)
        if hosts is None:
            peers = [(i + 1, free_port(), free_port()) for i in range(size)]
            client_ports = [free_port() for _ in range(size)]
            host_of = {sid: "127.0.0.1" for sid, _, _ in peers}
        else:
            peers = [(i + 1, QUORUM_PORT, ELECTION_PORT) for i in range(size)]
            client_ports = [CLIENT_PORT] * size
            host_of = {i + 1: host for i, host in enumerate(hosts)}
        self.nodes = [
            ZooKeeperNode(
                data_dir=base / f"zk{sid}",
                client_port=client_ports[sid - 1],
                host=host_of[sid],
                server_id=sid,
                peers=peers,
                peer_hosts=dict(host_of) if hosts is not None else {},
                prefix=list(prefixes[sid - 1]) if prefixes else [],
                tick_ms=tick_ms,
                die_with_parent=die_with_parent,
                security=security,
            )
            for sid, _, _ in peers
        ]

    @property
    def connect(self) -> str:
        return ",".join(node.connect for node in self.nodes)

    def start(self, timeout: float = 60.0) -> None:
        for node in self.nodes:
            node.spawn()
        try:
            for node in self.nodes:
                node.wait_serving(timeout)
        except ZooKeeperStartError:
            self.stop()
            raise

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
