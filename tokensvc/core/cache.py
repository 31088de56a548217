"""The broker's in-memory token cache: indexes, expiry order, lazy SCRAM credentials.

This module owns every token a broker knows, indexed four ways: by token id,
by HMAC (how Renew/Expire requests name a token), by deadline
(:class:`ExpiryIndex`, so the expiry sweep finds due tokens without a scan) and
by principal (owner, requester and renewers: what a describe filters on, so
describing one owner costs that owner's tokens). Every change (upsert, remove,
resync) maintains all four. It also owns the SCRAM credentials of tokens,
derived from the HMAC on a token's first authentication and kept until the
token is removed or re-keyed; renewals keep them. It recomputes HMACs from the
master keys; ZooKeeper never has them.

Entries are compact, for a million tokens per broker: one slotted record per
token holding its details, its HMAC and its credentials packed as one bytes
object per mechanism in a slot of its own (a derived salt is not stored);
``DelegationToken`` and ``ScramCredential`` objects are built when asked for,
not kept.

It must not do I/O or read a clock (callers pass ``now_ms``), and it holds its
one lock only for dictionary and heap work: PBKDF2 and listener callbacks run
outside it. It does not apply token rules (see :mod:`tokensvc.core.manager`)
and does not know where tokens come from (``zk.sync`` feeds it).
"""

from __future__ import annotations

import gc
import heapq
import logging
import threading
from collections.abc import Callable, Iterable

from tokensvc.core.keys import SCRAM_SALT_LABEL, MasterKeys, UnknownKeyError, derived_secret
from tokensvc.core.principal import KafkaPrincipal
from tokensvc.core.token import DelegationToken, TokenInformation
from tokensvc.scram.formatter import (
    MIN_ITERATIONS,
    ScramCredential,
    ScramMechanism,
    TokenSalt,
    derive_credential,
    derived_salt,
)

log = logging.getLogger("tokensvc.core.cache")

Listener = Callable[[str, TokenInformation], None]
BatchListener = Callable[[list[TokenInformation], list[TokenInformation]], None]

# A resync that adds or changes at least this many tokens freezes the collector's
# view of the heap afterwards (gc.freeze): a cold start of many tokens.
FREEZE_AFTER = 50_000
# Tokens compared per hold of the lock while a resync looks for what changed.
RESYNC_CHUNK = 10_000

UPSERT = "upsert"
REMOVE = "remove"


def deadline_of(info: TokenInformation) -> int:
    """The last millisecond at which ``info`` is still valid: min(expiry, max)."""
    return min(info.expiry_timestamp, info.max_timestamp)


class ExpiryIndex:
    """Token ids ordered by deadline (min of expiry and max timestamp).

    A binary heap of ``(deadline, token_id)`` with lazy invalidation: ``put``
    and ``discard`` only update the live map, stale heap entries are skipped
    and dropped when they surface, and the heap is rebuilt when stale entries
    outnumber live ones. ``put`` is O(log n), ``discard`` O(1), ``due`` O(k)
    plus the stale entries it meets, for k due tokens. Not thread-safe: the
    cache calls it under its lock.
    """

    __slots__ = ("_heap", "_live")

    _COMPACT_SLACK = 64

    def __init__(self) -> None:
        self._heap: list[tuple[int, str]] = []
        self._live: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self._live)

    def put(self, token_id: str, deadline: int) -> None:
        if self._live.get(token_id) == deadline:
            return
        self._live[token_id] = deadline
        heapq.heappush(self._heap, (deadline, token_id))
        self._maybe_compact()

    def put_many(self, items: Iterable[tuple[int, str]]) -> None:
        """``put`` for many ``(deadline, token_id)`` at once: one heapify when they are
        many (a cold start), single pushes when they are few (a resync's changes)."""
        heap, live = self._heap, self._live
        fresh = []
        for deadline, token_id in items:
            if live.get(token_id) != deadline:
                live[token_id] = deadline
                fresh.append((deadline, token_id))
        if len(fresh) * 16 > len(heap):
            heap.extend(fresh)
            heapq.heapify(heap)
        else:
            for item in fresh:
                heapq.heappush(heap, item)
        self._maybe_compact()

    def discard(self, token_id: str) -> None:
        if self._live.pop(token_id, None) is not None:
            self._maybe_compact()

    def clear(self) -> None:
        self._heap.clear()
        self._live.clear()

    def due(self, now_ms: int) -> list[str]:
        """Ids whose deadline is strictly before ``now_ms``, earliest first."""
        heap, live = self._heap, self._live
        while heap and live.get(heap[0][1]) != heap[0][0]:
            heapq.heappop(heap)
        found: list[tuple[int, str]] = []
        # Every entry below now_ms is reachable from the root through entries
        # that are also below now_ms (heap order), so walk only that subtree.
        stack = [0] if heap else []
        while stack:
            i = stack.pop()
            deadline, token_id = heap[i]
            if deadline >= now_ms:
                continue
            if live.get(token_id) == deadline:
                found.append((deadline, token_id))
            for child in (2 * i + 1, 2 * i + 2):
                if child < len(heap):
                    stack.append(child)
        found.sort()
        return [token_id for _, token_id in found]

    def next_deadline(self) -> int | None:
        """The earliest live deadline, or None when empty."""
        heap, live = self._heap, self._live
        while heap and live.get(heap[0][1]) != heap[0][0]:
            heapq.heappop(heap)
        return heap[0][0] if heap else None

    def _maybe_compact(self) -> None:
        if len(self._heap) > 2 * len(self._live) + self._COMPACT_SLACK:
            self._heap = [(d, t) for t, d in self._live.items()]
            heapq.heapify(self._heap)


_MECHANISMS = tuple(ScramMechanism)
# One slot of _Entry per mechanism (left unset until that credential is derived).
_CREDENTIAL_SLOTS = tuple(f"credential{i}" for i in range(len(_MECHANISMS)))
_SLOT = dict(zip(_MECHANISMS, _CREDENTIAL_SLOTS, strict=True))


def _pack(credential: ScramCredential, salt_derived: bool) -> bytes:
    """salt | stored key | server key, the salt's length first (one byte); a derived
    salt is left out (length 0): it is computed again from the token id when needed."""
    salt = b"" if salt_derived else credential.salt
    return bytes((len(salt),)) + salt + credential.stored_key + credential.server_key


def _unpack(blob: bytes, iterations: int, derived: bytes | None) -> ScramCredential:
    salt_end = 1 + blob[0]
    half = (len(blob) - salt_end) // 2
    salt = blob[1:salt_end] if salt_end > 1 or derived is None else derived
    return ScramCredential(salt, blob[salt_end:salt_end + half], blob[salt_end + half:], iterations)


class _Entry:
    """One token as the cache holds it. ``hmac`` is None when its key is unknown;
    ``credential0``, ``credential1``, ... hold the packed credential of each SCRAM
    mechanism once derived (unset until then: no tuple, no placeholder)."""

    __slots__ = ("hmac", "info", *_CREDENTIAL_SLOTS)

    def __init__(self, info: TokenInformation, hmac: bytes | None) -> None:
        self.info = info
        self.hmac = hmac

    @property
    def token(self) -> DelegationToken | None:
        return DelegationToken(self.info, self.hmac) if self.hmac is not None else None

    def keep_credentials(self, old: _Entry) -> None:
        """Take over ``old``'s derived credentials (same HMAC: a renewal)."""
        for name in _CREDENTIAL_SLOTS:
            packed = getattr(old, name, None)
            if packed is not None:
                setattr(self, name, packed)


def principals_of(info: TokenInformation) -> tuple[KafkaPrincipal, ...]:
    """Whom a describe filter matches the token by: its owner, requester and renewers,
    each once (the common cases build no set: hashing a principal is not free)."""
    owner, requester, renewers = info.owner, info.token_requester, info.renewers
    if not renewers:
        return (owner,) if requester is owner or requester == owner else (owner, requester)
    return tuple({owner: None, requester: None, **dict.fromkeys(renewers)})


class TokenCache:
    """Every token this broker knows, safe to use from several threads.

    Tokens whose key id names a master key this broker does not hold are kept
    (so they still expire and show in :meth:`info`) but have no HMAC: they are
    absent from :meth:`by_hmac`, :meth:`by_id` and :meth:`tokens`, cannot
    authenticate, and are counted by :meth:`unknown_key_tokens`.

    Listeners get ``("upsert", info)`` or ``("remove", info)`` after each
    change, outside the lock; an upsert that changes nothing is not reported.
    Batch listeners get the same events as two lists per call, ``(upserted,
    removed)``: a resync of a million tokens is one call, not a million, and
    builds no event object per token.
    """

    def __init__(self, keys: MasterKeys, *, scram_iterations: int = MIN_ITERATIONS) -> None:
        self._keys = keys
        self._iterations = scram_iterations
        # Token salts are derived, not random: the same on every broker (docs/security.md).
        self._salt_secret = derived_secret(keys, SCRAM_SALT_LABEL)
        self._lock = threading.Lock()
        self._entries: dict[str, _Entry] = {}
        self._by_hmac: dict[bytes, str] = {}
        # Each principal's token ids as the keys of a dict: more compact than a set.
        self._by_principal: dict[KafkaPrincipal, dict[str, None]] = {}
        self._expiry = ExpiryIndex()
        self._unknown_key = 0
        self._derived = 0
        self._listeners: list[Listener] = []
        self._batch_listeners: list[BatchListener] = []

    # -- changes ---------------------------------------------------------------

    def upsert(self, info: TokenInformation) -> DelegationToken | None:
        """Add or update a token; returns it with its HMAC, or None if its key is unknown."""
        hmac = self._hmac_or_none(info)
        with self._lock:
            changed = self._apply_upsert(info, hmac)
            entry = self._entries[info.token_id]
            token = entry.token
        if changed:
            self._notify([info], [])
        return token

    def remove(self, token_id: str) -> TokenInformation | None:
        """Drop a token and its credentials; returns what was removed, if anything."""
        with self._lock:
            entry = self._apply_remove(token_id)
        if entry is None:
            return None
        self._notify([], [entry.info])
        return entry.info

    def replace_all(self, infos: Iterable[TokenInformation]) -> None:
        """Make the cache hold exactly ``infos`` (a resynchronisation).

        Applies only the difference: ids absent from ``infos`` are removed,
        new or changed tokens upserted, unchanged ones (and their derived
        credentials) left alone. Listeners hear of every change.

        Made for a cold start of a million tokens: the expiry heap is built once,
        and the cyclic garbage collector is paused while entries are inserted
        (they all live on, so collections would only walk them again and again:
        at a million tokens that made the fill grow faster than the data). After a
        fill of :data:`FREEZE_AFTER` tokens or more, ``gc.freeze()`` moves the heap
        to the collector's permanent generation (later full collections skip it).
        """
        paused = gc.isenabled()
        gc.disable()
        try:
            added = self._replace_all(infos)
            if added >= FREEZE_AFTER:
                # The tokens just loaded live until they expire: move them (and what
                # else exists now) out of the collector's reach, so no later full
                # collection walks a million entries in one pause on the event loop.
                gc.freeze()
        finally:
            if paused:
                gc.enable()

    def _replace_all(self, infos: Iterable[TokenInformation]) -> int:
        # No per-token temporaries beyond the lists of pointers: tuples made here for
        # each of a million tokens would be freed after the load, but leave the memory
        # pages they sat on to the broker for good (interleaved with the entries).
        wanted = {info.token_id: info for info in infos}
        # Finding what changed reads the whole cache: in chunks, so a resync of a
        # million unchanged tokens never holds the lock (and the logins) for a second.
        entries = self._entries
        fresh = list(wanted.values())
        changed: list[TokenInformation] = []
        for lo in range(0, len(fresh), RESYNC_CHUNK):
            with self._lock:
                changed.extend(
                    info for info in fresh[lo : lo + RESYNC_CHUNK]
                    if (entry := entries.get(info.token_id)) is None or entry.info != info
                )
        del fresh
        with self._lock:
            held = list(entries)
        gone = [tid for tid in held if tid not in wanted]
        del held
        hmac_or_none = self._hmac_or_none
        hmacs = [hmac_or_none(info) for info in changed]
        upserted: list[TokenInformation] = []
        removed: list[TokenInformation] = []
        deadlines: list[tuple[int, str]] = []
        with self._lock:
            for tid in gone:
                entry = self._apply_remove(tid)
                if entry is not None:
                    removed.append(entry.info)
            del wanted
            apply_upsert = self._apply_upsert
            for i, info in enumerate(changed):
                if apply_upsert(info, hmacs[i], deadlines):
                    upserted.append(info)
            del hmacs
            self._expiry.put_many(deadlines)
        self._notify(upserted, removed)
        return len(changed)

    def add_listener(self, listener: Listener) -> None:
        """Call ``listener(kind, info)`` after each change (kind: "upsert" or "remove")."""
        with self._lock:
            self._listeners.append(listener)

    def add_batch_listener(self, listener: BatchListener) -> None:
        """Call ``listener(upserted, removed)`` after each change with the tokens it
        upserted and removed (one call per upsert or remove, one per resync with all
        of its changes)."""
        with self._lock:
            self._batch_listeners.append(listener)

    # -- lookups ---------------------------------------------------------------

    def by_id(self, token_id: str) -> DelegationToken | None:
        with self._lock:
            entry = self._entries.get(token_id)
            return entry.token if entry is not None else None

    def by_hmac(self, hmac: bytes) -> DelegationToken | None:
        with self._lock:
            token_id = self._by_hmac.get(bytes(hmac))
            return self._entries[token_id].token if token_id is not None else None

    def info(self, token_id: str) -> TokenInformation | None:
        """The token's details, including tokens whose key is unknown."""
        with self._lock:
            entry = self._entries.get(token_id)
            return entry.info if entry is not None else None

    def tokens(self) -> list[DelegationToken]:
        """Every token that has an HMAC (i.e. whose key is known).

        Builds one object per token: for large caches use :meth:`token_ids` and
        :meth:`tokens_by_ids` in slices instead.
        """
        with self._lock:
            return [e.token for e in self._entries.values() if e.hmac is not None]

    def token_ids(self) -> list[str]:
        """The ids of every token, including tokens whose key is unknown (a snapshot)."""
        with self._lock:
            return list(self._entries)

    def ids_of(self, principals: Iterable[KafkaPrincipal]) -> set[str]:
        """Ids of the tokens that any of ``principals`` owns, requested or may renew.

        From the principal index: costs those tokens, not the cache. Principals are
        compared without the token-authenticated flag.
        """
        found: set[str] = set()
        with self._lock:
            for principal in principals:
                ids = self._by_principal.get(principal.without_token_flag())
                if ids:
                    found.update(ids)
        return found

    def tokens_by_ids(self, token_ids: Iterable[str]) -> list[DelegationToken]:
        """The tokens with these ids that are still cached and have an HMAC, in order."""
        out = []
        with self._lock:
            entries = self._entries
            for token_id in token_ids:
                entry = entries.get(token_id)
                if entry is not None and entry.hmac is not None:
                    out.append(DelegationToken(entry.info, entry.hmac))
        return out

    def due(self, now_ms: int) -> list[TokenInformation]:
        """Tokens strictly past their expiry or max lifetime at ``now_ms``, earliest first."""
        with self._lock:
            return [self._entries[tid].info for tid in self._expiry.due(now_ms)]

    def next_deadline(self) -> int | None:
        """The earliest min(expiry, max) of any token, or None when empty."""
        with self._lock:
            return self._expiry.next_deadline()

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def unknown_key_tokens(self) -> int:
        """How many tokens name a master key this broker does not hold."""
        with self._lock:
            return self._unknown_key

    def derived_count(self) -> int:
        """How many SCRAM credentials this cache has derived so far (monotonic)."""
        with self._lock:
            return self._derived

    # -- SCRAM -------------------------------------------------------------------

    def scram_salt(self, token_id: str, mechanism: ScramMechanism) -> TokenSalt | None:
        """The salt and iterations the token's credential has (or will have once
        derived) and its details, without deriving anything. The salt is computed
        whether or not the token exists, so both cost the same. None when the token
        is unknown or its master key is. Matches ``CredentialLookup.token_salt``."""
        salt = derived_salt(self._salt_secret or b"", mechanism, token_id)
        with self._lock:
            entry = self._entries.get(token_id)
            if entry is None or entry.hmac is None or self._salt_secret is None:
                return None
            derived = getattr(entry, _SLOT[mechanism], None) is not None
            return TokenSalt(salt, self._iterations, entry.info, derived)

    def scram_credential(
        self, token_id: str, mechanism: ScramMechanism
    ) -> tuple[ScramCredential, TokenInformation] | None:
        """The token's SCRAM credential for ``mechanism`` and its current details.

        Derived from the HMAC (password = base64 of the HMAC) on first use, with
        the salt :func:`~tokensvc.scram.formatter.derived_salt` gives under the
        master key's SCRAM salt secret, and kept, across renewals, until the
        token is removed. None when the token is unknown or its master key is. Matches ``CredentialLookup.token_credential``.
        """
        slot = _SLOT[mechanism]
        secret = self._salt_secret
        salt = derived_salt(secret, mechanism, token_id) if secret else None
        with self._lock:
            entry = self._entries.get(token_id)
            if entry is None or entry.hmac is None:
                return None
            packed = getattr(entry, slot, None)
            if packed is not None:
                return _unpack(packed, self._iterations, salt), entry.info
            token = DelegationToken(entry.info, entry.hmac)
        credential = derive_credential(token.hmac_b64, mechanism, self._iterations, salt)
        with self._lock:
            entry = self._entries.get(token_id)
            if entry is None or entry.hmac != token.hmac:
                return None
            packed = getattr(entry, slot, None)
            if packed is None:
                packed = _pack(credential, salt is not None)
                setattr(entry, slot, packed)
                self._derived += 1
            return _unpack(packed, self._iterations, salt), entry.info

    # -- internals (callers hold the lock unless noted) ---------------------------

    def _hmac_or_none(self, info: TokenInformation) -> bytes | None:
        """The token's HMAC, None for an unknown key. Runs without the lock."""
        try:
            return self._keys.hmac(info.token_id, info.key_id)
        except UnknownKeyError:
            return None

    def _apply_upsert(
        self,
        info: TokenInformation,
        hmac: bytes | None,
        deadlines: list[tuple[int, str]] | None = None,
    ) -> bool:
        """Store ``info``; False when the cache already held exactly it. The expiry
        index is updated here, or later from ``deadlines`` when the caller batches."""
        token_id = info.token_id
        old = self._entries.get(token_id)
        if old is not None and old.info == info:
            return False
        entry = self._entries[token_id] = _Entry(info, hmac)
        if old is not None:
            if old.hmac is not None and old.hmac == hmac:
                entry.keep_credentials(old)
            self._unindex(old)
        if hmac is not None:
            self._by_hmac[hmac] = token_id
        else:
            self._unknown_key += 1
        by_principal = self._by_principal
        for principal in principals_of(info):
            ids = by_principal.get(principal)
            if ids is None:
                by_principal[principal] = {token_id: None}
            else:
                ids[token_id] = None
        deadline = min(info.expiry_timestamp, info.max_timestamp)
        if deadlines is None:
            self._expiry.put(token_id, deadline)
        else:
            deadlines.append((deadline, token_id))
        return True

    def _apply_remove(self, token_id: str) -> _Entry | None:
        entry = self._entries.pop(token_id, None)
        if entry is not None:
            self._unindex(entry)
            self._expiry.discard(token_id)
        return entry

    def _unindex(self, entry: _Entry) -> None:
        """Drop ``entry`` from the HMAC and principal indexes and the unknown-key count."""
        token_id = entry.info.token_id
        if entry.hmac is not None:
            if self._by_hmac.get(entry.hmac) == token_id:
                del self._by_hmac[entry.hmac]
        else:
            self._unknown_key -= 1
        by_principal = self._by_principal
        for principal in principals_of(entry.info):
            ids = by_principal.get(principal)
            if ids is not None:
                ids.pop(token_id, None)
                if not ids:
                    del by_principal[principal]

    def _notify(self, upserted: list[TokenInformation], removed: list[TokenInformation]) -> None:
        """Tell every listener about the tokens ``upserted`` and ``removed``. Runs
        without the lock."""
        if not upserted and not removed:
            return
        with self._lock:
            listeners = list(self._listeners)
            batch_listeners = list(self._batch_listeners)
        for batch_listener in batch_listeners:
            try:
                batch_listener(upserted, removed)
            except Exception:
                log.exception("token cache batch listener failed on %d changes",
                              len(upserted) + len(removed))
        for kind, infos in ((REMOVE, removed), (UPSERT, upserted)):
            for info in infos:
                for listener in listeners:
                    try:
                        listener(kind, info)
                    except Exception:
                        log.exception("token cache listener failed on %s of %s", kind,
                                      info.token_id)
