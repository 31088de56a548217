"""Opening kazoo clients for tokensvc.

Owns: parsing a Kafka-style ``zookeeper.connect`` (``h:p,h:p/chroot``), creating
the chroot when missing, session/connection timeouts, how the session proves who it
is (TLS with a client certificate, through the context and handler of :mod:`zk.tls`,
SASL DIGEST-MD5, the legacy digest: a
:class:`tokensvc.core.zk_security.ZkSecurity`), and the ACL of every znode the client
creates: :class:`AclClient` asks the declared table (:mod:`zk.znode_acls`) for the ACL
of each path it creates, through ``create``, ``ensure_path`` and transactions alike,
so no store names an ACL. Callers get a started ``KazooClient``; everything else about
ZooKeeper lives in the stores.

A start that cannot work fails within the connection timeout with one line naming
the cause (:class:`ZooKeeperUnavailable`): nothing listening, a TLS handshake refused
(which side's certificate), a SASL login refused, a server that demands
authentication the settings do not give.

It also says which session timeout ZooKeeper granted: a server caps the requested
timeout to its ``minSessionTimeout``/``maxSessionTimeout``, and a broker that asked for
18 s but got 10 s loses its session, and its controller role, sooner than its operator
expects. ``open_client`` logs the negotiated timeout once the session is up and warns
when it is lower than the configured one. It must not log session passwords, SASL or
digest credentials, or key passwords.

It is the one module that reaches into kazoo's internals, each reach a documented
adapter that a test fails on if a kazoo release changes it: the SASL refusal
(:func:`_refusal_ends_the_session`), the negotiated timeout (:class:`_NegotiatedTimeout`)
ZooKeeper's multi-read (:func:`multi_get_data`, which kazoo has no public call for;
:mod:`zk.reads` batches and falls back with it), and a listing whose reply is decoded in
a few C calls when its names share one length (:func:`list_children`: the change
notifications' listings, thousands of names each during a bulk write). Nothing else in
``zk`` calls a private kazoo name.
"""

from __future__ import annotations

import logging
import socket
import ssl
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from kazoo.client import KazooClient, TransactionRequest
from kazoo.exceptions import (
    AuthFailedError,
    KazooException,
    MarshallingError,
    NoAuthError,
    SessionClosedRequireSaslError,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.interfaces import IAsyncResult
from kazoo.protocol.serialization import Connect, GetChildren2
from kazoo.protocol.states import KeeperState, ZnodeStat
from kazoo.retry import KazooRetry

from tokensvc.core.configdef import ConfigError
from tokensvc.core.zk_security import JAAS_FILE, KEYSTORE, SSL_ENABLE, TRUSTSTORE, ZkSecurity
from zk import znode_acls
from zk.poll_handler import PollHandler
from zk.tls import TlsPollHandler, client_context

log = logging.getLogger("zk.client")


class ZooKeeperUnavailable(RuntimeError):
    """ZooKeeper could not be used: not reachable within the connection timeout, or it
    refused this client's TLS or SASL. The message is one line naming the cause."""


@dataclass(frozen=True)
class ZkSettings:
    connect: str
    session_timeout_ms: int = 18_000
    connection_timeout_ms: int = 18_000
    # "user:password" for digest authentication, or None (a shortcut for security.digest).
    digest: str | None = field(default=None, repr=False)
    security: ZkSecurity = field(default_factory=ZkSecurity)

    def __post_init__(self) -> None:
        if self.digest is not None and self.security.digest is None:
            object.__setattr__(self, "security", replace(self.security, digest=self.digest))

    @property
    def hosts(self) -> str:
        return self.connect.split("/", 1)[0]

    @property
    def chroot(self) -> str:
        if "/" not in self.connect:
            return ""
        return "/" + self.connect.split("/", 1)[1].strip("/")


def settings_from_file(connect: str | None, config_file: str | None, **timeouts: int) -> ZkSettings:
    """A tool's settings: ``connect`` (else the file's ``zookeeper.connect``) and the
    ZooKeeper security keys of ``config_file`` (a ``--zk-tls-config-file``; a broker's
    ``server.properties`` will do). ``timeouts`` are ZkSettings fields; the file's own
    timeouts fill those not given. Raises ConfigError naming the file and the key."""
    from tokensvc.config_loader import load_zk_security
    from tokensvc.core.configdef import ConfigError

    if config_file is None:
        if not connect:
            raise ConfigError("zookeeper.connect", "no ZooKeeper connect string given")
        return ZkSettings(connect, **timeouts)
    values, security = load_zk_security(config_file)
    connect = connect or values["zookeeper.connect"]
    if not connect:
        raise ConfigError("zookeeper.connect", "no ZooKeeper connect string given", config_file)
    for key, name in (("session_timeout_ms", "zookeeper.session.timeout.ms"),
                      ("connection_timeout_ms", "zookeeper.connection.timeout.ms")):
        if key not in timeouts and values[name] is not None:
            timeouts[key] = int(values[name])
    return ZkSettings(str(connect), security=security, **timeouts)


class _AclTransaction(TransactionRequest):
    """A transaction whose creates take the declared ACL of their path."""

    def create(self, path, value=b"", acl=None, ephemeral=False, sequence=False):
        if acl is None:
            acl = self.client.acl_for(path)
        return super().create(path, value, acl=acl, ephemeral=ephemeral, sequence=sequence)


class AclClient(KazooClient):
    """A kazoo client that gives every znode it creates the ACL the table declares for
    its path (relative to the chroot). The one adapter over kazoo's create calls:
    ``create`` and ``ensure_path`` go through ``create_async``; transactions through
    :class:`_AclTransaction`."""

    def __init__(self, *args, secure_acls: bool = False, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.secure_acls = secure_acls
        _refusal_ends_the_session(self)

    def acl_for(self, path: str) -> list:
        return znode_acls.acl_for(path, self.secure_acls)

    def create_async(self, path, value=b"", acl=None, ephemeral=False, sequence=False,
                     makepath=False, include_data=False):
        if acl is None:
            acl = self.acl_for(path)
        return super().create_async(path, value, acl=acl, ephemeral=ephemeral,
                                    sequence=sequence, makepath=makepath,
                                    include_data=include_data)

    def transaction(self) -> _AclTransaction:
        return _AclTransaction(self)


class _StartLogger(logging.LoggerAdapter):
    """kazoo's logger for one client, quiet while the client starts: a refused start is
    said once, by :class:`ZooKeeperUnavailable`, not by kazoo's retry warnings."""

    def __init__(self) -> None:
        super().__init__(logging.getLogger("kazoo.client"), {})
        self.quiet = True

    def log(self, level: int, msg: object, *args: object, **kwargs: object) -> None:
        if self.quiet and level < logging.ERROR:
            return
        super().log(level, msg, *args, **kwargs)


def _refusal_ends_the_session(client: KazooClient) -> None:
    """A refused SASL login ends the session as kazoo's own AUTH_FAILED does.

    kazoo 2.11 authenticates SASL after it reported CONNECTED, and when ZooKeeper
    answers the login with an error (``SessionClosedRequireSaslError`` for a wrong
    password), the exception escapes its connection thread: the thread dies with a
    traceback on stderr and pending requests wait for ever. This wraps the connection
    handler's SASL step (``_authenticate_with_sasl``, called only there) so any refusal
    is raised as ``AuthFailedError``, which kazoo's loop turns into the AUTH_FAILED
    state: pending requests fail with it, the state becomes LOST, and no retry follows.
    The tests of a wrong password at start fail if a kazoo release changes this.
    """
    handler = client._connection
    authenticate = handler._authenticate_with_sasl

    def _authenticate_with_sasl(host: str, timeout: float) -> None:
        try:
            authenticate(host, timeout)
        except AuthFailedError:
            raise
        except KazooException as exc:
            raise AuthFailedError(f"SASL login refused: {type(exc).__name__}") from None

    handler._authenticate_with_sasl = _authenticate_with_sasl


def _make(settings: ZkSettings, hosts: str, context: ssl.SSLContext | None) -> AclClient:
    security = settings.security
    options: dict = {}
    if security.digest:
        options["auth_data"] = [("digest", security.digest)]
    if security.sasl is not None:
        options["sasl_options"] = {
            "mechanism": security.sasl.mechanism,
            "username": security.sasl.username,
            "password": security.sasl.password,
        }
    # One poll(2) per wait (zk/poll_handler.py); TLS connections with the prepared
    # context (zk/tls.py), so kazoo is given no store files.
    handler = PollHandler() if context is None else TlsPollHandler(context)
    if context is not None:
        options.update(use_ssl=True, check_hostname=context.check_hostname)
    return AclClient(
        hosts=hosts,
        handler=handler,
        logger=_StartLogger(),
        timeout=settings.session_timeout_ms / 1000.0,
        connection_retry=KazooRetry(max_tries=-1, delay=0.1, max_delay=1.0),
        command_retry=KazooRetry(max_tries=3, delay=0.1, max_delay=1.0),
        secure_acls=security.set_acl,
        **options,
    )


def _host_ports(hosts: str) -> list[tuple[str, int]]:
    out = []
    for item in hosts.split(","):
        host, _, port = item.strip().rpartition(":")
        out.append((host.strip("[]"), int(port)))
    return out


def _tls_context(settings: ZkSettings) -> ssl.SSLContext:
    tls = settings.security.tls
    assert tls is not None
    try:
        return client_context(tls)
    except ConfigError as exc:
        raise ZooKeeperUnavailable(f"cannot use the ZooKeeper TLS stores: {exc}") from None
    except OSError as exc:  # ssl.SSLError included
        raise ZooKeeperUnavailable(
            f"cannot use the ZooKeeper TLS stores ({SSL_ENABLE}, {KEYSTORE}, {TRUSTSTORE}): "
            f"{getattr(exc, 'reason', None) or exc.strerror or exc}"
        ) from None


def _tls_preflight(settings: ZkSettings, context: ssl.SSLContext, timeout: float) -> None:
    """Fail fast, with the cause, when no ZooKeeper server completes a TLS handshake with
    these settings (kazoo retries a refused handshake until the timeout, silently)."""
    causes = []
    for host, port in _host_ports(settings.hosts):
        try:
            with socket.create_connection((host, port), timeout=min(timeout, 5.0)) as raw, \
                    context.wrap_socket(raw, server_hostname=host) as tls:
                # TLS 1.3 reports a refused client certificate only at the first read.
                tls.settimeout(0.2)
                try:
                    tls.recv(1)
                except TimeoutError:
                    return
                except ssl.SSLError as exc:
                    causes.append(f"{host}:{port}: {_tls_words(exc)}")
                    continue
                return
        except ssl.SSLError as exc:
            causes.append(f"{host}:{port}: {_tls_words(exc)}")
        except OSError as exc:
            causes.append(f"{host}:{port}: {exc.strerror or exc}")
    raise ZooKeeperUnavailable(
        "ZooKeeper refused the TLS connection: " + "; ".join(causes)
    )


def _tls_words(exc: ssl.SSLError) -> str:
    reason = getattr(exc, "reason", None) or str(exc)
    words = {
        "CERTIFICATE_VERIFY_FAILED": "its certificate is not signed by the trust store "
                                     "(or does not name the host)",
        "TLSV13_ALERT_CERTIFICATE_REQUIRED": "it requires a client certificate",
        "SSLV3_ALERT_BAD_CERTIFICATE": "it refused the client certificate",
        "TLSV1_ALERT_UNKNOWN_CA": "it does not trust the client certificate's CA",
        "WRONG_VERSION_NUMBER": "it does not speak TLS on this port",
    }
    return words.get(reason, f"TLS error {reason}")


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


_MULTI_HEADER = struct.Struct("!iBi")
_INT = struct.Struct("!i")
_STAT = struct.Struct("!qqqqiiiqiiq")


class _MultiGetData:
    """ZooKeeper's multi-read request (opcode 22, ZooKeeper 3.6+) of getData operations.

    One request and one response for many znodes; each read succeeds or fails on its
    own. Wire format (jute): per op a MultiHeader (int type, bool done, int err) and a
    GetDataRequest (string path, bool watch); then MultiHeader(-1, true, -1). The reply
    holds per op a MultiHeader and either a GetDataResponse (buffer data, Stat) or, for
    type -1, an ErrorResponse (int err). Results are ``(data, stat)`` or an error code;
    with ``with_stat=False`` the Stat is skipped unparsed and a result is the data alone
    (the cold start reads a million znodes and needs none of their 11-field stats).
    """

    type = 22
    _GET_DATA = 4
    _ERROR = -1

    def __init__(self, paths: list[str], *, with_stat: bool = True) -> None:
        self.paths = paths
        self.with_stat = with_stat

    def __repr__(self) -> str:
        return f"_MultiGetData({len(self.paths)} paths)"

    def serialize(self) -> bytes:
        out = bytearray()
        for path in self.paths:
            encoded = path.encode("utf-8")
            out += _MULTI_HEADER.pack(self._GET_DATA, 0, -1)
            out += _INT.pack(len(encoded)) + encoded + b"\x00"
        out += _MULTI_HEADER.pack(-1, 1, -1)
        return bytes(out)

    def deserialize(
        self, buffer: bytes, offset: int
    ) -> list[tuple[bytes, ZnodeStat] | bytes | int]:
        results: list[tuple[bytes, ZnodeStat] | bytes | int] = []
        with_stat = self.with_stat
        while True:
            op, done, _err = _MULTI_HEADER.unpack_from(buffer, offset)
            offset += _MULTI_HEADER.size
            if done:
                return results
            if op == self._GET_DATA:
                length = _INT.unpack_from(buffer, offset)[0]
                offset += _INT.size
                data = b"" if length < 0 else bytes(buffer[offset : offset + length])
                offset += max(length, 0)
                if with_stat:
                    results.append((data, ZnodeStat._make(_STAT.unpack_from(buffer, offset))))
                else:
                    results.append(data)
                offset += _STAT.size
            elif op == self._ERROR:
                results.append(_INT.unpack_from(buffer, offset)[0])
                offset += _INT.size
            else:
                raise MarshallingError()


def _chrooted(client: KazooClient, path: str) -> str:
    """``path`` (relative to the client's chroot) as the server names it: what kazoo's
    public calls send for an absolute path, done for the requests sent here."""
    return (client.chroot or "") + path


class _Listing(GetChildren2):
    """kazoo's ``GetChildren2`` request (children and the parent's Stat, with an optional
    child watch) whose reply is decoded in a few C calls when every child name has the
    same length and is ASCII -- the sequential notifications of one root, thousands of
    them during a bulk write -- and by kazoo's own per-name loop otherwise.

    Wire format (jute): int count, then per child an int length and its bytes, then the
    Stat. With one length ``n`` for all, record ``k`` starts at ``k * (n + 4)``, so the
    four length bytes of every record are four strided slices of the region, each
    compared with the first record's in one operation, and the names are slices of the
    region decoded once. A subclass, so kazoo registers the child watch as it does for
    its own request (it checks the request's type when the reply arrives).
    """

    @classmethod
    def deserialize(cls, buffer: bytes, offset: int) -> tuple[list[str], ZnodeStat]:
        count = _INT.unpack_from(buffer, offset)[0]
        start = offset + _INT.size
        if count > 0:
            length = _INT.unpack_from(buffer, start)[0]
            stride = length + _INT.size
            end = start + count * stride
            if length > 0 and end + _STAT.size <= len(buffer):
                region = bytes(buffer[start:end])
                head = region[:_INT.size]
                if region.isascii() and all(
                        region[i::stride] == head[i:i + 1] * count for i in range(_INT.size)):
                    text = region.decode("ascii")
                    names = [text[i:i + length] for i in range(_INT.size, len(text), stride)]
                    return names, ZnodeStat._make(_STAT.unpack_from(buffer, end))
        return super().deserialize(buffer, offset)


def list_children(client: KazooClient, path: str, watch: object = None) -> IAsyncResult:
    """``get_children_async(path, watch, include_data=True)`` with :class:`_Listing`'s
    decoding: the async result is ``(names, stat)``, as kazoo's.

    Sent through the client's request queue (``KazooClient._call``, as kazoo's own
    ``get_children_async`` does, with the chroot prefixed as it does); the watch is
    registered by kazoo when the reply arrives. ``tests/integration/zk`` compares it with
    kazoo's call on the same znodes, and fails if a kazoo release changes this.
    """
    if watch is not None and not callable(watch):
        raise TypeError("watch must be callable")
    async_result = client.handler.async_result()
    client._call(_Listing(_chrooted(client, path), watch), async_result)
    return async_result


def multi_get_data(
    client: KazooClient, paths: Sequence[str], *, with_stat: bool = True
) -> IAsyncResult:
    """Send ONE multi-read of ``paths`` (relative to the client's chroot); the async
    result is, per path in order, ``(data, stat)`` (``data`` alone without
    ``with_stat``) or ZooKeeper's error code (an int).

    kazoo has no public multi-read call: this hands the request object to the client's
    request queue (``KazooClient._call``, the method its public ``*_async`` calls use),
    prefixing the chroot as they do. A server without multi-read answers
    ``UnimplementedError`` (or a reply kazoo cannot read: ``MarshallingError``). The
    tests that compare multi-read and pipelined reads fail if a kazoo release changes
    this.
    """
    request = _MultiGetData([_chrooted(client, p) for p in paths], with_stat=with_stat)
    async_result = client.handler.async_result()
    client._call(request, async_result)
    return async_result


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


def _start(client: KazooClient, settings: ZkSettings, where: str, timeout: float) -> None:
    """Start ``client`` and make one read, so that a refused login, or a server that
    demands authentication these settings do not give, is said now, in one line
    (:class:`ZooKeeperUnavailable`), within ``timeout``."""
    try:
        client.start(timeout=timeout)
        client.exists_async("/").get(timeout=timeout)
    except Exception as exc:  # noqa: BLE001 - every failure becomes one line
        # kazoo reports CONNECTED before its SASL exchange, and a refused login moves the
        # state to AUTH_FAILED right after: a start() that wakes only then sees a client
        # no longer connected and raises its time-out. The state says what happened.
        if client.client_state == KeeperState.AUTH_FAILED and not isinstance(exc, AuthFailedError):
            exc = AuthFailedError()
        client.stop()
        client.close()
        raise ZooKeeperUnavailable(_start_failure(exc, settings, where, timeout)) from None
    client.logger.quiet = False


def _start_failure(exc: BaseException, settings: ZkSettings, where: str, timeout: float) -> str:
    sasl = settings.security.sasl
    if isinstance(exc, AuthFailedError) and sasl is not None:
        return (f"ZooKeeper at {where} refused the SASL {sasl.mechanism} login of user "
                f"{sasl.username!r} ({JAAS_FILE}): wrong user name or password")
    if isinstance(exc, SessionClosedRequireSaslError):
        return (f"ZooKeeper at {where} requires SASL authentication: set {JAAS_FILE} "
                "(and zookeeper.sasl.client=true)")
    if isinstance(exc, (AuthFailedError, NoAuthError)):
        return f"ZooKeeper at {where} refused this client's credentials ({type(exc).__name__})"
    if isinstance(exc, KazooTimeoutError) or "time" in type(exc).__name__.lower():
        hint = "" if settings.security.tls is not None else (
            f" (a TLS-only client port needs {SSL_ENABLE}=true and the zookeeper.ssl.* stores)")
        return f"could not connect to ZooKeeper at {where} within {timeout:.0f}s{hint}"
    return f"could not use ZooKeeper at {where}: {type(exc).__name__}"


def open_client(settings: ZkSettings) -> KazooClient:
    """A started client rooted at the chroot (created if missing, with the table's ACL)."""
    timeout = settings.connection_timeout_ms / 1000.0
    context = None
    if settings.security.tls is not None:
        context = _tls_context(settings)
        _tls_preflight(settings, context, timeout)
    if settings.chroot:
        root = _make(settings, settings.hosts, context)
        _start(root, settings, settings.hosts, timeout)
        try:
            root.ensure_path(settings.chroot)
        finally:
            root.stop()
            root.close()
    client = _make(settings, settings.hosts + settings.chroot, context)
    client._tokensvc_negotiated = _NegotiatedTimeout(client)
    _start(client, settings, settings.connect, timeout)
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
