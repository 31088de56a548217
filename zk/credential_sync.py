"""The credential sync: a cache of SCRAM credentials kept equal to ZooKeeper.

Owns :class:`UserCredentialCache`, the thread-safe in-memory view the SCRAM server reads
(``user_credential(username, mechanism)``), and :class:`CredentialSync`, which keeps it
equal to ``/config/users`` on the one notification recipe
(:class:`zk.notifications.ChangeNotifications`): a full load at start, then the
notifications of ``/config/changes`` in sequence order (each one re-reads that user's
znode), and a full resync after every reconnect. The znodes, their bytes and the reads
are :mod:`zk.credential_store`'s (credentials are filed as tokens and ACLs are:
``<kind>_store`` and ``<kind>_sync``).

Must not: write to ZooKeeper (the store does; the recipe only purges notifications on
the controller), log credential material, or call the cache from kazoo's event thread.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping

from tokensvc.scram.formatter import ScramCredential, ScramMechanism
from zk.credential_store import (
    CHANGE_PREFIX,
    CHANGES_PATH,
    Credentials,
    CredentialStore,
    decode_change_user,
)
from zk.errors import StoreError
from zk.notifications import ChangeNotifications, NotificationRoot, OnResync, Purge

CREDENTIALS_ROOT = NotificationRoot("credentials", CHANGES_PATH, CHANGE_PREFIX)


class UserCredentialCache:
    """Thread-safe map user -> {mechanism: credential}; the SCRAM server's user lookup."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._users: dict[str, Credentials] = {}
        self._listeners: list[Callable[[str], None]] = []

    def add_listener(self, listener: Callable[[str], None]) -> None:
        """``listener(user)`` after a user's credentials were deleted or changed (not for a
        user who only got a first credential); called on the thread that applied it."""
        self._listeners.append(listener)

    def _changed(self, users: Iterable[str]) -> None:
        for user in users:
            for listener in self._listeners:
                listener(user)

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
            old = self._users.setdefault(user, {}).get(mechanism)
            self._users[user][mechanism] = credential
        if old is not None and old != credential:
            self._changed([user])

    def discard(self, user: str, mechanism: ScramMechanism) -> None:
        with self._lock:
            creds = self._users.get(user)
            if creds is None or mechanism not in creds:
                return
            creds.pop(mechanism, None)
            if not creds:
                del self._users[user]
        self._changed([user])

    def set_user(self, user: str, credentials: Mapping[ScramMechanism, ScramCredential]) -> None:
        """Replace all of ``user``'s credentials (none: forget the user)."""
        with self._lock:
            old = self._users.get(user, {})
            if credentials:
                self._users[user] = dict(credentials)
            else:
                self._users.pop(user, None)
        if old and _lost_or_changed(old, credentials):
            self._changed([user])

    def replace_all(self, users: Mapping[str, Mapping[ScramMechanism, ScramCredential]]) -> None:
        with self._lock:
            old = self._users
            self._users = {u: dict(c) for u, c in users.items() if c}
        self._changed([u for u, creds in old.items()
                       if _lost_or_changed(creds, self._users.get(u, {}))])

    def __len__(self) -> int:
        with self._lock:
            return len(self._users)


def _lost_or_changed(old: Mapping[ScramMechanism, ScramCredential],
                     new: Mapping[ScramMechanism, ScramCredential]) -> bool:
    """A credential the user had is gone or different (a session may have used it)."""
    return any(new.get(mechanism) != credential for mechanism, credential in old.items())


class CredentialSync(ChangeNotifications):
    """Keeps a :class:`UserCredentialCache` equal to ``/config/users``.

    The follow/resync/purge cycle and its reconnect policy are
    :class:`zk.notifications.ChangeNotifications`' (version name ``"credentials"``);
    this class says what loading means (every user re-read) and what a notification
    means (re-read the named user's znode, so applying it twice or late is harmless;
    notifications about other entities -- topics, clients -- are skipped). The
    controller purges ``/config/changes`` like every other change root.

    The shape of every sync: ``(store, cache, *, purge=None, on_resync=None)``;
    ``on_resync`` gets a :class:`zk.notifications.Resync` (``entries``: users held).
    """

    def __init__(
        self,
        store: CredentialStore,
        cache: UserCredentialCache,
        *,
        purge: Purge | None = None,
        on_resync: OnResync | None = None,
    ) -> None:
        self._store = store
        self._cache = cache
        super().__init__(
            store.client,
            "credential-sync",
            [CREDENTIALS_ROOT],
            load=self._load_users,
            apply=self._apply_users,
            purge=purge,
            on_resync=on_resync,
            recoverable=(StoreError,),
        )

    @property
    def last_sequence(self) -> int:
        return self.applied[CREDENTIALS_ROOT.name]

    def start(self) -> None:
        self._store.ensure_paths()
        super().start()

    def _load_users(self) -> int:
        self._cache.replace_all(self._store.load_all())
        return len(self._cache)

    def _apply_users(self, _root: NotificationRoot, notes: list[tuple[int, bytes]]) -> None:
        users = list(dict.fromkeys(
            u for _, data in notes if (u := decode_change_user(data)) is not None))
        for user, credentials in self._store.get_many(users).items():
            self._cache.set_user(user, credentials)
