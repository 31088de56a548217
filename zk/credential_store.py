"""SCRAM user credentials in ZooKeeper, in Kafka's layout: the credential store.

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
controllership cannot write (:class:`zk.errors.NotControllerError`). Every call is capped
and its failures are the store errors of :mod:`zk.errors` (``StoreUnavailable``, retriable,
and ``StoreError``); many users are read with the one pipelined reader (:mod:`zk.reads`).
A change is a :class:`tokensvc.scram.changes.CredentialChange`. The cache that follows
these znodes and its sync are :mod:`zk.credential_sync` (credentials are filed as tokens
and ACLs are: ``<kind>_store`` and ``<kind>_sync``).

:func:`bootstrap_user` derives and writes a user's credentials without any broker (the
first super user; ``tokensvc users bootstrap`` and ``tokensvc cluster up`` use it).

Must not: log credential material (salts, stored or server keys), store or log a password or
salted password (only :func:`bootstrap_user` takes a password, and only to derive the stored
credential), or be imported by pure code.
"""

from __future__ import annotations

import json
import logging
import random
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import (
    BadVersionError,
    NodeExistsError,
    NoNodeError,
    RolledBackError,
)

from tokensvc.core.principal import desanitize, sanitize
from tokensvc.scram.changes import CredentialChange
from tokensvc.scram.formatter import (
    MAX_ITERATIONS,
    MIN_ITERATIONS,
    ScramCredential,
    ScramMechanism,
    derive_credential,
)
from zk import layout as token_layout
from zk.client import ZkSettings, open_client
from zk.errors import UNAVAILABLE, NotControllerError, StoreError, ZnodeMissing, translate
from zk.reads import ZnodeReads
from zk.requests import RecordOp, RequestKeyExistsError
from zk.token_store import TokenStore
from zk.writes import check_transaction

# (path, version) checked in the same transaction as a write: the controller's guard.
Guard = tuple[str, int]

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
# After the n-th lost race, a random pause of up to 2, 4, 8, 16, then 32 ms before reading again:
# writers that keep colliding on one user's znode fall out of step (four stores upserting
# one user at once once lost ten races in a row without it).
_RACE_BACKOFF_MAX_S = 0.032

Credentials = dict[ScramMechanism, ScramCredential]


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
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
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
    except (UnicodeDecodeError, ValueError, RecursionError):
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


def has_scram(config: Mapping[str, str]) -> bool:
    """Whether a user config map holds a SCRAM credential (other keys -- quotas Kafka's
    ``kafka-configs.sh`` wrote -- do not make a user)."""
    return any(m.mechanism_name in config for m in ScramMechanism)


def sequence_of(child: str) -> int | None:
    if not child.startswith(CHANGE_PREFIX):
        return None
    digits = child[len(CHANGE_PREFIX):]
    return int(digits) if digits.isascii() and digits.isdigit() else None


class CredentialStore:
    """Reads and writes SCRAM user credentials under ``/config/users``.

    The shape of every store: ``(client, *, request_timeout_s=10.0, multi_read=True)``,
    the client as :attr:`client`. Construction does no I/O."""

    def __init__(
        self, client: KazooClient, *, request_timeout_s: float = 10.0, multi_read: bool = True
    ) -> None:
        # Every ZooKeeper call is capped at this (the token store's rule): a partition
        # answers StoreUnavailable in time instead of holding a thread for good (outcome
        # unknown for a write: the ledger looks the request key up).
        self._reads = ZnodeReads(client, request_timeout_s, multi_read=multi_read)
        self._client = client
        # The cascade of a deleted user deletes its tokens as the token store does.
        self._tokens = TokenStore(client, request_timeout_s=request_timeout_s,
                                  multi_read=multi_read)

    @property
    def client(self) -> KazooClient:
        return self._client

    # -- reads ---------------------------------------------------------------

    def ensure_paths(self) -> None:
        for path in (USERS_PATH, CHANGES_PATH):
            self._reads.call(f"create {path}", lambda p=path: self._client.ensure_path_async(p))

    def get(self, user: str) -> Credentials:
        """The user's SCRAM credentials (empty when the user has none)."""
        try:
            data, _ = self._read(user_path(user))
        except ZnodeMissing:
            return {}
        return credentials_from_config(decode_user_config(data))

    def get_many(self, users: Sequence[str]) -> dict[str, Credentials]:
        """Each user's SCRAM credentials (empty when none), read with pipelined requests."""
        values = self._reads.get_many([user_path(user) for user in users], "read users",
                                      with_stat=False)
        return {
            user: {} if value is None else credentials_from_config(decode_user_config(value))
            for user, value in zip(users, values)
        }

    def users(self) -> list[str]:
        """Users holding at least one SCRAM credential, sorted."""
        return sorted(self.load_all())

    def load_all(self) -> dict[str, Credentials]:
        """Every user with a SCRAM credential: one ``get_children``, then the reads in
        multi-read batches (:meth:`zk.reads.ZnodeReads.get_many`)."""
        try:
            children = self._children(USERS_PATH)
        except ZnodeMissing:
            return {}
        values = self._reads.get_many([f"{USERS_PATH}/{child}" for child in children],
                                      "load users", with_stat=False)
        result: dict[str, Credentials] = {}
        for child, value in zip(children, values):
            if value is None:
                continue  # deleted between the listing and the read
            creds = credentials_from_config(decode_user_config(value))
            if creds:
                result[desanitize(child)] = creds
        return result

    def change_sequences(self) -> list[int]:
        """Sequence numbers of the config change notifications present now, ascending."""
        try:
            children = self._children(CHANGES_PATH)
        except ZnodeMissing:
            return []
        return sorted(s for s in map(sequence_of, children) if s is not None)

    def change_user(self, sequence: int) -> str | None:
        """The user named by notification ``sequence``; None if it is gone or not about a user."""
        try:
            data, _ = self._read(f"{CHANGES_PATH}/{CHANGE_PREFIX}{sequence:010d}")
        except ZnodeMissing:
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
    ) -> int:
        """Set the user's credential for ``mechanism`` (creating the znode if needed);
        returns the notification's sequence number."""
        if not user:
            raise ValueError("user name must not be empty")
        return self.alter([CredentialChange(user, mechanism, credential)], guard=guard)[1][0]

    def delete(self, user: str, mechanism: ScramMechanism, *, guard: Guard | None = None) -> bool:
        """Remove the user's credential for ``mechanism``; False (and no write) if it had none.
        Other config keys stay; a znode left with no keys stays too, with an empty config."""
        return self.alter([CredentialChange(user, mechanism, None)], guard=guard)[0][user]

    def alter(
        self,
        changes: Sequence[CredentialChange],
        *,
        guard: Guard | None = None,
        record: Callable[[dict[str, bool]], RecordOp] | None = None,
    ) -> tuple[dict[str, bool], list[int]]:
        """:meth:`alter_with_tokens` without the cascade to tokens."""
        effects, sequences, _ = self.alter_with_tokens(changes, guard=guard, record=record)
        return effects, sequences

    def alter_with_tokens(
        self,
        changes: Sequence[CredentialChange],
        *,
        guard: Guard | None = None,
        record: Callable[[dict[str, bool]], RecordOp] | None = None,
        cascade: Callable[[str], Sequence[str]] | None = None,
    ) -> tuple[dict[str, bool], list[int], list[int]]:
        """:meth:`alter`, and when a change deletes a user's last credential and
        ``cascade`` is given, the tokens ``cascade(user)`` names (the tokens the user owns)
        are deleted **in the same transaction**, each with its token change notification.
        A user with more than :data:`CASCADE_PER_TRANSACTION` tokens has the others
        deleted first, in transactions of that size (guarded too), so the last one -- with
        the credential -- stays bounded; a token gone meanwhile is skipped. Returns also
        the token notification sequences."""
        token_sequences: list[int] = []
        while True:
            doomed = self._doomed_tokens(changes, cascade)
            if len(doomed) <= CASCADE_PER_TRANSACTION:
                break
            token_sequences += self._delete_tokens(doomed[:CASCADE_PER_TRANSACTION], guard)
        effects, sequences, more = self._alter_once(changes, guard, record, cascade)
        return effects, sequences, token_sequences + more

    def _doomed_tokens(self, changes: Sequence[CredentialChange],
                       cascade: Callable[[str], Sequence[str]] | None) -> list[str]:
        """Tokens of the users whose last credential ``changes`` delete (read now)."""
        if cascade is None:
            return []
        doomed: list[str] = []
        for change in changes:
            if change.credential is not None:
                continue
            try:
                data, _ = self._read(user_path(change.user))
            except ZnodeMissing:
                continue
            config = decode_user_config(data)
            config.pop(change.mechanism.mechanism_name, None)
            if not has_scram(config):
                doomed += cascade(change.user)
        return doomed

    def _delete_tokens(self, token_ids: Sequence[str], guard: Guard | None) -> list[int]:
        """Delete ``token_ids`` (those still there) with their notifications, guarded, as
        the token store deletes many (:meth:`zk.token_store.TokenStore.delete_many`);
        their notification sequences."""
        deleted = self._tokens.delete_many([(t, -1) for t in token_ids], guard=guard)
        return [sequence for _, sequence in deleted]

    def _alter_once(
        self,
        changes: Sequence[CredentialChange],
        guard: Guard | None,
        record: Callable[[dict[str, bool]], RecordOp] | None,
        cascade: Callable[[str], Sequence[str]] | None,
    ) -> tuple[dict[str, bool], list[int], list[int]]:
        """Apply every change (one per user) in ONE transaction with one notification per
        changed user and, when given, the request record built from the effects.

        Returns ``({user: changed}, [notification sequence numbers])``; a deletion of a
        credential the user does not have is ``False`` and writes nothing. Every znode is
        written at the version read; a concurrent change re-reads and retries, after a random
        pause of a few milliseconds (:data:`_RACE_BACKOFF_MAX_S`).
        NotControllerError when the guard fails, RequestKeyExistsError when the record
        already exists (nothing written).
        """
        users = [c.user for c in changes]
        if len(set(users)) != len(users):
            raise ValueError("a user may appear once per alter")
        self.ensure_paths()
        for attempt in range(_WRITE_ATTEMPTS):
            if attempt:
                time.sleep(random.uniform(0, min(_RACE_BACKOFF_MAX_S, 0.001 * 2 ** attempt)))
            values = self._reads.pipelined(
                self._client.get_async, [user_path(c.user) for c in changes], "read users")
            effects: dict[str, bool] = {}
            writes: list[tuple[str, bytes, int | None]] = []
            doomed: list[str] = []
            for change, value in zip(changes, values):
                data, version = (None, None) if value is None else (value[0], value[1].version)
                config = decode_user_config(data)
                name = change.mechanism.mechanism_name
                if change.credential is None:
                    changed = config.pop(name, None) is not None
                else:
                    config[name] = change.credential.to_kafka_string()
                    changed = True
                effects[change.user] = changed
                if changed:
                    writes.append((change.user, encode_user_config(config), version))
                if changed and not has_scram(config) and cascade is not None:
                    doomed += [t for t in cascade(change.user)
                               if self._exists(token_layout.token_path(t))]
            txn = self._client.transaction()
            if guard is not None:
                txn.check(guard[0], guard[1])
            for user, data, version in writes:
                if version is None:
                    txn.create(user_path(user), data)
                else:
                    txn.set_data(user_path(user), data, version=version)
            record_op = record(effects) if record is not None else None
            if record_op is not None:
                txn.create(record_op.path, record_op.data)
            for user, _, _ in writes:
                txn.create(f"{CHANGES_PATH}/{CHANGE_PREFIX}", encode_change(user), sequence=True)
            # The deleted users' tokens, in the same transaction (after every other op, so
            # the failure analysis below reads the ops before them as before).
            for token_id in doomed:
                txn.delete(token_layout.token_path(token_id))
            for token_id in doomed:
                txn.create(token_layout.token_change_create_path(), token_id.encode(),
                           sequence=True)
            if not writes and record_op is None:
                return effects, [], []
            check_transaction(txn, "write credentials")
            results = self._reads.call("write credentials", txn.commit_async)
            token_start = len(results) - 2 * len(doomed)
            failed_at = [i for i, r in enumerate(results)
                         if isinstance(r, Exception) and not isinstance(r, RolledBackError)]
            if doomed and failed_at and failed_at[0] >= token_start:
                failure: str | None = "race"  # a token went meanwhile (swept): read again
            else:
                failure = _transaction_failure(
                    results, guarded=guard is not None, writes=len(writes),
                    recorded=record_op is not None,
                )
            if failure is None:
                end = len(results) - 2 * len(doomed)
                created = results[end - len(writes):end]
                tokens = results[len(results) - len(doomed):] if doomed else []
                return (effects, [int(path[-10:]) for path in created],
                        [int(path[-10:]) for path in tokens])
            if failure == "guard":
                raise NotControllerError(f"guard {guard[0]} changed: not allowed to write credentials")
            if failure == "recorded":
                raise RequestKeyExistsError("request key already recorded")
            # "race": someone changed a user's znode between our read and write: re-read.
        raise StoreError(f"credentials kept changing under {_WRITE_ATTEMPTS} attempts to write them")

    def _read(self, path: str) -> Any:
        return self._reads.call(f"read {path}", lambda: self._client.get_async(path))

    def _children(self, path: str) -> list[str]:
        return self._reads.call(f"list {path}", lambda: self._client.get_children_async(path))

    def _exists(self, path: str) -> Any:
        return self._reads.call(f"read {path}", lambda: self._client.exists_async(path))


def _transaction_failure(
    results: list[Any], *, guarded: bool, writes: int, recorded: bool
) -> str | None:
    """None if every op succeeded; "guard" if the guard check failed; "recorded" if the
    request record existed; "race" if a user znode was changed or created concurrently.
    Any other failure raises."""
    errors = [r for r in results if isinstance(r, Exception)]
    if not errors:
        return None
    offset = 1 if guarded else 0
    if guarded and isinstance(results[0], (BadVersionError, NoNodeError)):
        return "guard"
    if recorded and isinstance(results[offset + writes], NodeExistsError):
        return "recorded"
    data_ops = results[offset:offset + writes]
    if any(isinstance(r, (BadVersionError, NodeExistsError, NoNodeError)) for r in data_ops):
        return "race"
    unavailable = next((e for e in errors if isinstance(e, UNAVAILABLE)), None)
    if unavailable is not None:
        raise translate("credential write", unavailable)
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


# Token deletions of a deleted user per transaction (each is a delete and a notification).
CASCADE_PER_TRANSACTION = 500


