"""Opening kazoo clients for tokensvc.

Owns: parsing a Kafka-style ``zookeeper.connect`` (``h:p,h:p/chroot``), creating
the chroot when missing, session/connection timeouts, and optional digest
credentials with the ACLs that go with them. Callers get a started
``KazooClient``; everything else about ZooKeeper lives in the stores.

It also says which session timeout ZooKeeper granted: a server caps the requested
timeout to its ``minSessionTimeout``/``maxSessionTimeout``, and a broker that asked for
18 s but got 10 s loses its session, and its controller role, sooner than its operator
expects. ``open_client`` logs the negotiated timeout once the session is up and warns
when it is lower than the configured one. It must not log session passwords or digest
credentials.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from kazoo.client import KazooClient
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.serialization import Connect
from kazoo.retry import KazooRetry

log = logging.getLogger("zk.client")


class ZooKeeperUnavailable(RuntimeError):
    """ZooKeeper could not be reached within the connection timeout."""


@dataclass(frozen=True)
class ZkSettings:
    connect: str
    session_timeout_ms: int = 18_000
    connection_timeout_ms: int = 18_000
    # "user:password" for digest authentication, or None.
    digest: str | None = None

    @property
    def hosts(self) -> str:
        return self.connect.split("/", 1)[0]

    @property
    def chroot(self) -> str:
        if "/" not in self.connect:
            return ""
        return "/" + self.connect.split("/", 1)[1].strip("/")


def _make(settings: ZkSettings, hosts: str) -> KazooClient:
    auth = [("digest", settings.digest)] if settings.digest else None
    return KazooClient(
        hosts=hosts,
        timeout=settings.session_timeout_ms / 1000.0,
        connection_retry=KazooRetry(max_tries=-1, delay=0.1, max_delay=1.0),
        command_retry=KazooRetry(max_tries=3, delay=0.1, max_delay=1.0),
        auth_data=auth,
    )


class _NegotiatedTimeout:
    """The session timeout ZooKeeper granted to one client, seen at each handshake.

    kazoo reads it from the ConnectResponse during its connection handler's handshake and
    keeps only timeouts derived from it; no attribute holds it. This wraps the handler's
    handshake call (``_invoke``, used only while a connection is being established) and
    keeps ``time_out`` from the reply to ``Connect``. The reply is read before kazoo
    reports the connection, so the value is set when ``start`` returns. The test of the
    start-up log line fails if a kazoo release changes this.
    """

    def __init__(self, client: KazooClient) -> None:
        self.ms: int | None = None
        handler = client._connection
        invoke = handler._invoke

        def _invoke(timeout: float, request: object, xid: int | None = None) -> object:
            result = invoke(timeout, request, xid)
            if isinstance(request, Connect) and isinstance(result, tuple):
                self.ms = int(result[0].time_out)
            return result

        handler._invoke = _invoke


def negotiated_session_timeout_ms(client: KazooClient) -> int | None:
    """The session timeout (ms) ZooKeeper granted at the client's last handshake; None for
    a client not opened by ``open_client`` or not yet connected."""
    watcher = getattr(client, "_tokensvc_negotiated", None)
    return watcher.ms if watcher is not None else None


def _log_session_timeout(client: KazooClient, settings: ZkSettings) -> None:
    negotiated = negotiated_session_timeout_ms(client)
    configured = settings.session_timeout_ms
    if negotiated is None:
        log.warning("ZooKeeper session timeout: configured %d ms, negotiated value unknown",
                    configured)
    elif negotiated < configured:
        log.warning("ZooKeeper granted a session timeout of %d ms, lower than the configured "
                    "%d ms (zookeeper.session.timeout.ms): the server's maxSessionTimeout "
                    "caps it, so this session expires after %d ms without contact",
                    negotiated, configured, negotiated)
    else:
        log.info("ZooKeeper session timeout: %d ms negotiated (configured %d ms)",
                 negotiated, configured)


def open_client(settings: ZkSettings) -> KazooClient:
    """A started client rooted at the chroot (created if missing)."""
    timeout = settings.connection_timeout_ms / 1000.0
    if settings.chroot:
        root = _make(settings, settings.hosts)
        try:
            root.start(timeout=timeout)
            root.ensure_path(settings.chroot)
        except KazooTimeoutError as exc:
            raise ZooKeeperUnavailable(
                f"could not connect to ZooKeeper at {settings.hosts} within {timeout:.0f}s"
            ) from exc
        finally:
            root.stop()
            root.close()
    client = _make(settings, settings.hosts + settings.chroot)
    client._tokensvc_negotiated = _NegotiatedTimeout(client)
    try:
        client.start(timeout=timeout)
    except KazooTimeoutError as exc:
        client.close()
        raise ZooKeeperUnavailable(
            f"could not connect to ZooKeeper at {settings.connect} within {timeout:.0f}s"
        ) from exc
    _log_session_timeout(client, settings)
    return client


# ZooKeeperServer derives a session's password from its id with java.util.Random seeded
# with ``id ^ 0xB3415C00`` (16 bytes): ZooKeeper's own behaviour since 3.0, relied on only
# by :func:`expire_session` below (benchmarks that expire another process's session).
_PASSWORD_SECRET = 0xB3415C00
_JAVA_MULTIPLIER = 0x5DEECE66D
_JAVA_MASK = (1 << 48) - 1


def _session_password(session_id: int) -> bytes:
    seed = ((session_id ^ _PASSWORD_SECRET) ^ _JAVA_MULTIPLIER) & _JAVA_MASK
    out = bytearray()
    while len(out) < 16:
        seed = (seed * _JAVA_MULTIPLIER + 0xB) & _JAVA_MASK
        value = seed >> 16  # Random.next(32)
        for _ in range(min(16 - len(out), 4)):
            out.append(value & 0xFF)
            value >>= 8
    return bytes(out)


def expire_session(settings: ZkSettings, session_id: int) -> None:
    """Expire the session ``session_id`` (another process's, e.g. a broker's: the
    ephemeral owner of its ``/brokers/ids`` znode) for real: a client takes the session
    over with its password and closes it, so the owner's next contact is told the session
    expired. For benchmarks and tests; a broker never calls it."""
    thief = KazooClient(hosts=settings.hosts, client_id=(session_id, _session_password(session_id)),
                        timeout=settings.session_timeout_ms / 1000.0)
    try:
        thief.start(timeout=settings.connection_timeout_ms / 1000.0)
    finally:
        thief.stop()
        thief.close()
