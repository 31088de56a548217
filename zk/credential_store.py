"""SCRAM user credentials in ZooKeeper, in Kafka's layout, and a cache that follows them.

Owns the user-config znodes and their change notifications, exactly as Kafka's
``AdminZkClient``/``ConfigEntityChangeNotification`` write them (under the client's chroot):

- ``/config/users/<sanitized user>``:
  ``{"version":1,"config":{"SCRAM-SHA-256":"salt=...,stored_key=...,server_key=...,iterations=4096"}}``.
  The config map may hold other keys (Kafka keeps user quotas there): they are left untouched.
  Deleting a user's last credential leaves the znode with an empty ``config``, as Kafka does.
- ``/config/changes/config_change_<10-digit seq>``: ``{"version":2,"entity_path":"users/<sanitized user>"}``,
  created in the SAME transaction as the config write (Kafka writes the two one after the other;
  here a reader can never see one without the other).

:class:`CredentialStore` reads and writes those znodes. Writes are optimistic
(``set_data`` at the version read, retried on a concurrent change) and accept a ``guard``
``(path, version)``: a ``check`` op in the same transaction, so a broker that lost the
controllership cannot write (:class:`zk.token_store.NotControllerError`). Failures are the
token store's errors: ``StoreUnavailable`` (retriable) and ``StoreError``.
:class:`UserCredentialCache` is the thread-safe in-memory view the SCRAM server reads
(``user_credential(username, mechanism)``). :class:`CredentialSync` keeps a cache equal to
ZooKeeper: a full load at start, then the notifications in sequence order (each one re-reads
that user's znode), and a full resync after every reconnect.

:func:`bootstrap_user` derives and writes a user's credentials without any broker (the
first super user; ``tokensvc users bootstrap`` and ``tokensvc cluster up`` use it).

Must not: log credential material (salts, stored or server keys), store or log a password or
salted password (only :func:`bootstrap_user` takes a password, and only to derive the stored
credential), or be imported by pure code.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import (
    BadVersionError,
    ConnectionLoss,
    KazooException,
    NodeExistsError,
    NoNodeError,
    OperationTimeoutError,
    SessionExpiredError,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import KazooState
from kazoo.recipe.watchers import ChildrenWatch

from tokensvc.core.principal import desanitize, sanitize
from tokensvc.scram.formatter import (
    MAX_ITERATIONS,
    MIN_ITERATIONS,
    ScramCredential,
    ScramMechanism,
    derive_credential,
)
from zk.client import ZkSettings, open_client
from zk.token_store import Guard, NotControllerError, StoreError, StoreUnavailable

log = logging.getLogger("tokensvc.zk.credentials")

USERS_PATH = "/config/users"
CHANGES_PATH = "/config/changes"
CHANGE_PREFIX = "config_change_"
USER_ENTITY_TYPE = "users"
CONFIG_VERSION = 1
CHANGE_VERSION = 2
# Kafka's ZkNodeChangeNotificationListener drops notifications older than 15 minutes.
CHANGE_EXPIRATION_MS = 15 * 60 * 1000
_WRITE_ATTEMPTS = 10

Credentials = dict[ScramMechanism, ScramCredential]


_UNAVAILABLE = (
    ConnectionLoss,
    SessionExpiredError,
    OperationTimeoutError,
    KazooTimeoutError,
)


def user_path(user: str) -> str:
    return f"{USERS_PATH}/{sanitize(user)}"


def entity_path(user: str) -> str:
    """The ``entity_path`` of a user's change notification: ``users/<sanitized user>``."""
    return f"{USER_ENTITY_TYPE}/{sanitize(user)}"


def encode_user_config(config: Mapping[str, str]) -> bytes:
    """Kafka's ConfigEntityZNode JSON (compact, keys of ``config`` sorted for stable bytes)."""
    body = {"version": CONFIG_VERSION, "config": dict(sorted(config.items()))}
    return json.dumps(body, separators=(",", ":")).encode("utf-8")


def decode_user_config(data: bytes | None) -> dict[str, str]:
    """The ``config`` map of a user znode; empty for an empty znode, StoreError for garbage."""
    if not data:
        return {}
    try:
        body = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise StoreError("user config znode is not JSON") from exc
    config = body.get("config") if isinstance(body, dict) else None
    if config is None:
        return {}
    if not isinstance(config, dict):
        raise StoreError("user config znode has a non-object 'config'")
    return {str(k): str(v) for k, v in config.items()}


def encode_change(user: str) -> bytes:
    body = {"version": CHANGE_VERSION, "entity_path": entity_path(user)}
    return json.dumps(body, separators=(",", ":")).encode("utf-8")


def decode_change_user(data: bytes | None) -> str | None:
    """The user a config change notification names, or None if it is about another entity
    (topics, clients, quotas of ``users/<u>/clients/<c>``) or unreadable."""
    try:
        body = json.loads((data or b"").decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None
    path = body.get("entity_path") if isinstance(body, dict) else None
    if not isinstance(path, str):
        return None
    entity_type, _, name = path.partition("/")
    if entity_type != USER_ENTITY_TYPE or not name or "/" in name:
        return None
    return desanitize(name)


def credentials_from_config(config: Mapping[str, str]) -> Credentials:
    """The SCRAM credentials of a user config map; other keys and unreadable values are skipped."""
    creds: Credentials = {}
    for mechanism in ScramMechanism:
        text = config.get(mechanism.mechanism_name)
        if text is None:
            continue
        try:
            creds[mechanism] = ScramCredential.from_kafka_string(text)
        except ValueError:
            log.warning("ignoring a malformed %s credential in ZooKeeper", mechanism.mechanism_name)
    return creds


def sequence_of(child: str) -> int | None:
    if not child.startswith(CHANGE_PREFIX):
        return None
    digits = child[len(CHANGE_PREFIX):]
    return int(digits) if digits.isdigit() else None


class CredentialStore:
    """Reads and writes SCRAM user credentials under ``/config/users``."""

    def __init__(self, client: KazooClient) -> None:
        self._client = client

    # -- reads ---------------------------------------------------------------

    def ensure_paths(self) -> None:
        self._call(self._client.ensure_path, USERS_PATH)
        self._call(self._client.ensure_path, CHANGES_PATH)

    def get(self, user: str) -> Credentials:
        """The user's SCRAM credentials (empty when the user has none)."""
        try:
            data, _ = self._call(self._client.get, user_path(user))
        except NoNodeError:
            return {}
        return credentials_from_config(decode_user_config(data))

    def users(self) -> list[str]:
        """Users holding at least one SCRAM credential, sorted."""
        return sorted(self.load_all())

    def load_all(self) -> dict[str, Credentials]:
        """Every user with a SCRAM credential. The reads are pipelined: one ``get_children``,
        then all ``get`` requests sent before the first answer is awaited."""
        try:
            children = self._call(self._client.get_children, USERS_PATH)
        except NoNodeError:
            return {}
        pending = [(child, self._client.get_async(f"{USERS_PATH}/{child}")) for child in children]
        result: dict[str, Credentials] = {}
        for child, async_result in pending:
            try:
                data, _ = self._call(async_result.get)
            except NoNodeError:
                continue  # deleted between the listing and the read
            creds = credentials_from_config(decode_user_config(data))
            if creds:
                result[desanitize(child)] = creds
        return result

    def change_sequences(self) -> list[int]:
        """Sequence numbers of the config change notifications present now, ascending."""
        try:
            children = self._call(self._client.get_children, CHANGES_PATH)
        except NoNodeError:
            return []
        return sorted(s for s in map(sequence_of, children) if s is not None)

    def change_user(self, sequence: int) -> str | None:
        """The user named by notification ``sequence``; None if it is gone or not about a user."""
        try:
            data, _ = self._call(self._client.get, f"{CHANGES_PATH}/{CHANGE_PREFIX}{sequence:010d}")
        except NoNodeError:
            return None
        return decode_change_user(data)

    # -- writes --------------------------------------------------------------

    def upsert(
        self,
        user: str,
        mechanism: ScramMechanism,
        credential: ScramCredential,
        *,
        guard: Guard | None = None,
    ) -> None:
        """Set the user's credential for ``mechanism`` (creating the znode if needed)."""
        if not user:
            raise ValueError("user name must not be empty")

        def change(config: dict[str, str]) -> bool:
            config[mechanism.mechanism_name] = credential.to_kafka_string()
            return True

        self._modify(user, change, guard)

    def delete(self, user: str, mechanism: ScramMechanism, *, guard: Guard | None = None) -> bool:
        """Remove the user's credential for ``mechanism``; False (and no write) if it had none.
        Other config keys stay; a znode left with no keys stays too, with an empty config."""

        def change(config: dict[str, str]) -> bool:
            return config.pop(mechanism.mechanism_name, None) is not None

        return self._modify(user, change, guard)

    def purge_notifications(self, now_ms: int, older_than_ms: int = CHANGE_EXPIRATION_MS) -> int:
        """Delete config change notifications created more than ``older_than_ms`` before
        ``now_ms`` (Kafka purges them after 15 minutes). Returns how many were deleted."""
        try:
            children = self._call(self._client.get_children, CHANGES_PATH)
        except NoNodeError:
            return 0
        names = [c for c in children if sequence_of(c) is not None]
        stats = [(c, self._client.exists_async(f"{CHANGES_PATH}/{c}")) for c in names]
        removed = 0
        for child, async_stat in stats:
            stat = self._call(async_stat.get)
            if stat is None or stat.ctime > now_ms - older_than_ms:
                continue
            try:
                self._call(self._client.delete, f"{CHANGES_PATH}/{child}")
                removed += 1
            except NoNodeError:
                continue
        return removed

    def _modify(
        self, user: str, change: Callable[[dict[str, str]], bool], guard: Guard | None
    ) -> bool:
        path = user_path(user)
        self.ensure_paths()
        for _ in range(_WRITE_ATTEMPTS):
            try:
                data, stat = self._call(self._client.get, path)
                version: int | None = stat.version
            except NoNodeError:
                data, version = None, None
            config = decode_user_config(data)
            if not change(config):
                return False
            txn = self._client.transaction()
            if guard is not None:
                txn.check(guard[0], guard[1])
            if version is None:
                txn.create(path, encode_user_config(config))
            else:
                txn.set_data(path, encode_user_config(config), version=version)
            txn.create(f"{CHANGES_PATH}/{CHANGE_PREFIX}", encode_change(user), sequence=True)
            results = self._call(txn.commit)
            failure = _transaction_failure(results, guarded=guard is not None)
            if failure is None:
                return True
            if failure == "guard":
                raise NotControllerError(f"guard {guard[0]} changed: not allowed to write {path}")
            # "race": someone changed the user's znode between our read and write: re-read.
        raise StoreError(f"{path} kept changing under {_WRITE_ATTEMPTS} attempts to write it")

    @staticmethod
    def _call(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except _UNAVAILABLE as exc:
            raise StoreUnavailable(f"ZooKeeper unavailable: {type(exc).__name__}") from exc
        except (NoNodeError, NodeExistsError, BadVersionError):
            raise
        except KazooException as exc:
            raise StoreError(f"ZooKeeper request failed: {type(exc).__name__}") from exc


def _transaction_failure(results: list[Any], *, guarded: bool) -> str | None:
    """None if every op succeeded; "guard" if the guard check failed; "race" if the user
    znode was changed or created concurrently. Any other failure raises."""
    errors = [r for r in results if isinstance(r, Exception)]
    if not errors:
        return None
    first = results[0]
    if guarded and isinstance(first, (BadVersionError, NoNodeError)):
        return "guard"
    data_op = results[1] if guarded else results[0]
    if isinstance(data_op, (BadVersionError, NodeExistsError, NoNodeError)):
        return "race"
    if any(isinstance(e, _UNAVAILABLE) for e in errors):
        raise StoreUnavailable("ZooKeeper unavailable during a credential write")
    raise StoreError(f"credential transaction failed: {[type(e).__name__ for e in errors]}")


def bootstrap_user(
    settings: ZkSettings,
    user: str,
    password: str,
    mechanisms: Sequence[ScramMechanism] = tuple(ScramMechanism),
    iterations: int = MIN_ITERATIONS,
) -> None:
    """Write ``user``'s credentials for ``mechanisms`` straight into ZooKeeper, without a
    broker (how the first super user is created, as Kafka's ``kafka-configs --zookeeper``
    allows). Opens and closes its own client; the chroot of the connect string is honored."""
    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise ValueError(f"iterations must be within {MIN_ITERATIONS}..{MAX_ITERATIONS}")
    credentials = {m: derive_credential(password, m, iterations) for m in mechanisms}
    client = open_client(settings)
    try:
        store = CredentialStore(client)
        for mechanism, credential in credentials.items():
            store.upsert(user, mechanism, credential)
    finally:
        client.stop()
        client.close()


class UserCredentialCache:
    """Thread-safe map user -> {mechanism: credential}; the SCRAM server's user lookup."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._users: dict[str, Credentials] = {}

    def user_credential(self, username: str, mechanism: ScramMechanism) -> ScramCredential | None:
        with self._lock:
            return self._users.get(username, {}).get(mechanism)

    def credentials(self, user: str) -> Credentials:
        with self._lock:
            return dict(self._users.get(user, {}))

    def users(self) -> list[str]:
        with self._lock:
            return sorted(self._users)

    def put(self, user: str, mechanism: ScramMechanism, credential: ScramCredential) -> None:
        with self._lock:
            self._users.setdefault(user, {})[mechanism] = credential

    def discard(self, user: str, mechanism: ScramMechanism) -> None:
        with self._lock:
            creds = self._users.get(user)
            if creds is None:
                return
            creds.pop(mechanism, None)
            if not creds:
                del self._users[user]

    def set_user(self, user: str, credentials: Mapping[ScramMechanism, ScramCredential]) -> None:
        """Replace all of ``user``'s credentials (none: forget the user)."""
        with self._lock:
            if credentials:
                self._users[user] = dict(credentials)
            else:
                self._users.pop(user, None)

    def replace_all(self, users: Mapping[str, Mapping[ScramMechanism, ScramCredential]]) -> None:
        with self._lock:
            self._users = {u: dict(c) for u, c in users.items() if c}

    def __len__(self) -> int:
        with self._lock:
            return len(self._users)


_RESYNC = "resync"
_CHANGES = "changes"
_STOP = "stop"


class CredentialSync:
    """Keeps a :class:`UserCredentialCache` equal to ``/config/users``.

    Lifecycle: ``start()`` loads everything (blocking, so a broker authenticates only once
    the cache is full), then follows ``/config/changes`` with a kazoo ``ChildrenWatch``;
    ``close()`` stops following. All ZooKeeper reads happen on one worker thread fed by a
    queue, so kazoo's event thread never blocks.

    Notifications are applied in sequence order, each at most once (those at or below the
    last applied sequence are skipped); applying one re-reads the named user's znode, so
    applying it twice or out of date is harmless.

    Connection loss: on ``SUSPENDED`` or ``LOST`` nothing is dropped from the cache (brokers
    keep authenticating from what they know). On the next ``CONNECTED`` a full resync runs:
    all users are re-read and the cache replaced, because notifications may have been
    purged meanwhile and after a session expiry watches are gone (kazoo's ChildrenWatch
    re-arms itself on reconnect). A read that fails on the worker schedules the same resync,
    retried every ``retry_interval`` seconds while the client is connected.
    """

    def __init__(
        self,
        client: KazooClient,
        store: CredentialStore,
        cache: UserCredentialCache,
        *,
        on_resync: Callable[[], None] | None = None,
        retry_interval: float = 0.5,
    ) -> None:
        self._client = client
        self._store = store
        self._cache = cache
        self._on_resync = on_resync
        self._retry_interval = retry_interval
        self._queue: queue.Queue[tuple[str, Any]] = queue.Queue()
        self._worker: threading.Thread | None = None
        self._closed = False
        self._needs_resync = False
        self._seen_disconnect = False
        self._last_sequence = -1
        self.resync_count = 0
        self.last_resync_ms = 0.0
        self.applied_changes = 0

    @property
    def last_sequence(self) -> int:
        return self._last_sequence

    def start(self) -> None:
        self._store.ensure_paths()
        self._resync()
        self._client.add_listener(self._on_state)
        self._worker = threading.Thread(
            target=self._run, name="credential-sync", daemon=True
        )
        self._worker.start()
        ChildrenWatch(self._client, CHANGES_PATH, self._on_children)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._client.remove_listener(self._on_state)
        self._queue.put((_STOP, None))
        if self._worker is not None:
            self._worker.join(10)

    def wait_caught_up(self, timeout: float) -> bool:
        """True once every notification present in ZooKeeper now has been applied."""
        deadline = time.monotonic() + timeout
        target = max(self._store.change_sequences(), default=-1)
        while time.monotonic() < deadline:
            if self._last_sequence >= target and not self._needs_resync:
                return True
            time.sleep(0.01)
        return False

    # -- kazoo callbacks (never block) -------------------------------------------

    def _on_state(self, state: KazooState) -> None:
        if state in (KazooState.SUSPENDED, KazooState.LOST):
            self._seen_disconnect = True
        elif state == KazooState.CONNECTED and self._seen_disconnect:
            self._seen_disconnect = False
            self._queue.put((_RESYNC, None))

    def _on_children(self, children: list[str]) -> bool:
        if self._closed:
            return False
        self._queue.put((_CHANGES, children))
        return True

    # -- worker --------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            try:
                kind, payload = self._queue.get(timeout=self._retry_interval)
            except queue.Empty:
                if self._needs_resync and self._client.connected:
                    self._guarded(self._resync)
                continue
            if kind == _STOP:
                return
            if kind == _RESYNC or self._needs_resync:
                self._guarded(self._resync)
            else:
                self._guarded(self._apply, payload)

    def _guarded(self, fn: Callable[..., None], *args: Any) -> None:
        try:
            fn(*args)
        except (StoreError, KazooException) as exc:
            log.warning("credential sync will resync: %s", exc)
            self._needs_resync = True

    def _apply(self, children: list[str]) -> None:
        sequences = sorted(s for s in map(sequence_of, children) if s is not None)
        for sequence in sequences:
            if sequence <= self._last_sequence:
                continue
            user = self._store.change_user(sequence)
            if user is not None:
                self._cache.set_user(user, self._store.get(user))
                self.applied_changes += 1
            self._last_sequence = sequence

    def _resync(self) -> None:
        started = time.monotonic()
        # Notifications at or below this mark are covered by the load that follows; one
        # written during the load is applied again afterwards, which is harmless.
        mark = max(self._store.change_sequences(), default=-1)
        self._cache.replace_all(self._store.load_all())
        self._last_sequence = mark
        self._needs_resync = False
        self.resync_count += 1
        self.last_resync_ms = (time.monotonic() - started) * 1000.0
        if self._on_resync is not None:
            self._on_resync()
