"""The broker's in-memory token cache: indexes, expiry order, lazy SCRAM credentials.

This module owns every token a broker knows, indexed five ways: by token id,
by HMAC (how Renew/Expire requests name a token), by deadline
(:class:`ExpiryIndex`, so the expiry sweep finds due tokens without a scan), by
principal (owner, requester and renewers: what a describe filters on, so
describing one owner costs that owner's tokens) and by label set (a labelled
token's ids under its shared label tuple: a selector is matched once per
distinct label set, not once per token; unlabelled tokens are not in it). Every
change (upsert, remove, resync) maintains all five. It also owns the SCRAM credentials of tokens,
derived from the HMAC on a token's first authentication and kept until the
token is removed or re-keyed; renewals keep them. It recomputes HMACs from the
master keys; ZooKeeper never has them.

Entries are compact, for a million tokens per broker (docs/performance.md, B9):
a token is held as its ``TokenInformation`` and one entry in each index, nothing
more. Its HMAC is not kept: it is computed again from the master key when a
lookup returns the token (one HMAC-SHA512, about 2 us). The HMAC index is keyed
by the HMAC's first 60 bits as an int and checks the whole HMAC on lookup. The
expiry index holds one dict entry per token in minute buckets. Credentials, once
derived, are packed as one bytes object per mechanism (a derived salt is not
stored) in a map of their own. ``DelegationToken`` and ``ScramCredential``
objects are built when asked for, not kept.

It must not do I/O or read a clock (callers pass ``now_ms``), and it holds its
one lock only for dictionary and heap work: PBKDF2 and listener callbacks run
outside it. It does not apply token rules (see :mod:`tokensvc.core.manager`)
and does not know where tokens come from (``zk.token_sync`` feeds it).
"""

from __future__ import annotations

import gc
import heapq
import hmac as hmac_lib
import logging
import threading
import time
from collections.abc import Callable, Iterable
from itertools import islice

from tokensvc.core import collector
from tokensvc.core.keys import SCRAM_SALT_LABEL, MasterKeys, UnknownKeyError, derived_secret
from tokensvc.core.labels import Labels, matches
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
    """Token ids by deadline (min of expiry and max timestamp), in buckets of
    :attr:`BUCKET_MS`.

    One dict per bucket maps each token id to its deadline (the int the token
    already holds: no tuple, no second map). ``put`` and ``discard`` are O(1),
    ``due`` costs the buckets' keys plus the tokens of the buckets it reads, and an
    empty bucket is dropped. The caller names the deadline it put when it discards
    (the cache knows it from the token), which is what keeps this index at one dict
    entry per token: a heap of ``(deadline, id)`` tuples and a map of live
    deadlines held about 100 bytes per token, this about 40. Not thread-safe: the
    cache calls it under its lock.
    """

    __slots__ = ("_buckets", "_count")

    BUCKET_MS = 60_000

    def __init__(self) -> None:
        self._buckets: dict[int, dict[str, int]] = {}
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def put(self, token_id: str, deadline: int) -> None:
        """Index ``token_id`` at ``deadline`` (discard its previous deadline first)."""
        key = deadline // self.BUCKET_MS
        bucket = self._buckets.get(key)
        if bucket is None:
            self._buckets[key] = {token_id: deadline}
            self._count += 1
            return
        if token_id not in bucket:
            self._count += 1
        bucket[token_id] = deadline

    def put_many(self, items: Iterable[tuple[int, str]]) -> None:
        """``put`` for many ``(deadline, token_id)``."""
        put = self.put
        for deadline, token_id in items:
            put(token_id, deadline)

    def discard(self, token_id: str, deadline: int) -> None:
        """Forget ``token_id``, indexed at ``deadline`` (nothing if it is not there)."""
        key = deadline // self.BUCKET_MS
        bucket = self._buckets.get(key)
        if bucket is not None and bucket.get(token_id) == deadline:
            del bucket[token_id]
            self._count -= 1
            if not bucket:
                del self._buckets[key]

    def clear(self) -> None:
        self._buckets.clear()
        self._count = 0

    def due(self, now_ms: int) -> list[str]:
        """Ids whose deadline is strictly before ``now_ms``, earliest first (ties by id)."""
        last = (now_ms - 1) // self.BUCKET_MS
        buckets = self._buckets
        found = [
            (deadline, token_id)
            for key in sorted(k for k in buckets if k <= last)
            for token_id, deadline in buckets[key].items()
            if deadline < now_ms
        ]
        found.sort()
        return [token_id for _, token_id in found]

    def next_deadline(self) -> int | None:
        """The earliest deadline, or None when empty."""
        if not self._buckets:
            return None
        return min(self._buckets[min(self._buckets)].values())


_MECHANISMS = tuple(ScramMechanism)
# A derived token's credentials: one packed bytes object per mechanism, in this order.
_MECHANISM_INDEX = {m: i for i, m in enumerate(_MECHANISMS)}
# What scram_salt looks at for an id the cache does not hold, so that path does the
# same work as a live token's (key_id "" resolves like a real one).
_NOBODY = KafkaPrincipal("User", "")
_ABSENT = TokenInformation("", _NOBODY, _NOBODY, (), 0, 0, 0, "")
_NOT_DERIVED: list[bytes | None] = [None] * len(_MECHANISMS)


def hmac_key(hmac: bytes) -> int:
    """The HMAC index's key for ``hmac``: its first 60 bits as an int (two 30-bit
    digits, the smallest int object that holds them; the full HMAC is compared on
    every lookup, so two tokens sharing a key only share a dict slot)."""
    return int.from_bytes(hmac[:8], "big") >> 4


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


def principals_of(info: TokenInformation) -> tuple[KafkaPrincipal, ...]:
    """Whom a describe filter matches the token by: its owner, requester and renewers,
    each once (the common cases build no set: hashing a principal is not free)."""
    owner, requester, renewers = info.owner, info.token_requester, info.renewers
    if not renewers:
        return (owner,) if requester is owner or requester == owner else (owner, requester)
    return tuple({owner: None, requester: None, **dict.fromkeys(renewers)})


# Tokens copied per hold of the cache's lock by TokenCache.infos_in_slices (1-3 ms at 1M).
COPY_SLICE = 65_536


def _give_way() -> None:
    """Let the threads waiting for the GIL run (a sleep of zero releases it)."""
    time.sleep(0)


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
        # A token is its TokenInformation and nothing else: its HMAC is computed again
        # from the master key when asked for (about 2 us), never kept.
        self._entries: dict[str, TokenInformation] = {}
        # Tokens added or removed so far (a value replaced in place is not counted): a walk
        # over the entries in slices is valid while this and the dict stay the same.
        self._key_changes = 0
        # hmac_key(HMAC) -> token id, or a tuple of ids in the rare case two share a key.
        self._by_hmac: dict[int, str | tuple[str, ...]] = {}
        # Derived credentials only: token id -> [packed credential or None per mechanism].
        self._credentials: dict[str, list[bytes | None]] = {}
        # Each principal's token ids as the keys of a dict: more compact than a set.
        self._by_principal: dict[KafkaPrincipal, dict[str, None]] = {}
        # Labelled tokens' ids under their (shared) label set.
        self._by_labels: dict[Labels, dict[str, None]] = {}
        # Live tokens per owner (delegation.token.max.per.owner and its gauge).
        self._owned: dict[KafkaPrincipal, int] = {}
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
            changed = self._apply_upsert(info, None if hmac is None else hmac_key(hmac))
        if changed:
            self._notify([info], [])
        return DelegationToken(info, hmac) if hmac is not None else None

    def remove(self, token_id: str) -> TokenInformation | None:
        """Drop a token and its credentials; returns what was removed, if anything."""
        with self._lock:
            info = self._apply_remove(token_id)
        if info is None:
            return None
        self._notify([], [info])
        return info

    def replace_all(self, infos: Iterable[TokenInformation]) -> None:
        """Make the cache hold exactly ``infos`` (a resynchronisation).

        Applies only the difference: ids absent from ``infos`` are removed,
        new or changed tokens upserted, unchanged ones (and their derived
        credentials) left alone. Listeners hear of every change.

        Made for a cold start of a million tokens: HMACs are computed outside the
        lock and only their index keys kept, and the cyclic garbage collector is paused while entries are inserted
        (they all live on, so collections would only walk them again and again:
        at a million tokens that made the fill grow faster than the data). After a
        fill of :data:`FREEZE_AFTER` tokens or more, ``gc.freeze()`` moves the heap
        to the collector's permanent generation (later full collections skip it).
        """
        with collector.paused():
            added = self._replace_all(infos)
            if added >= FREEZE_AFTER:
                # The tokens just loaded live until they expire: move them (and what
                # else exists now) out of the collector's reach, so no later full
                # collection walks a million entries in one pause on the event loop.
                gc.freeze()

    def _replace_all(self, infos: Iterable[TokenInformation]) -> int:
        if not isinstance(infos, list):
            infos = list(infos)  # read twice when a token arrives during a fill
        with self._lock:
            empty = not self._entries
        if empty:
            filled = self._fill(infos)
            if filled is not None:
                return filled
        return self._replace_changes(infos)

    def _fill(self, infos: Iterable[TokenInformation]) -> int | None:
        """:meth:`replace_all` into an empty cache (a start): every index is built apart,
        in loops that do only what an empty cache needs (no comparison with held
        entries, no un-indexing, every HMAC key computed in one loop), then put in
        place in one hold of the lock. None, with nothing changed, if a token arrived
        meanwhile (the caller then applies the difference as usual)."""
        wanted = {info.token_id: info for info in infos}
        tokens = list(wanted.values())
        ids = list(wanted)
        # hmac_key() of each token (the HMAC's first 60 bits), None for an unknown key.
        keys = self._keys.hmac_keys(ids, (info.key_id for info in tokens), bits=60)
        by_hmac: dict[int, str | tuple[str, ...]] = {}
        unknown = 0
        for token_id, key in zip(ids, keys, strict=True):
            if key is None:
                unknown += 1
                continue
            held = by_hmac.setdefault(key, token_id)
            if held is not token_id:  # two tokens share a key (rare): keep both
                by_hmac[key] = (held, token_id) if isinstance(held, str) else (*held, token_id)
        del keys
        owned: dict[KafkaPrincipal, int] = {}
        by_principal: dict[KafkaPrincipal, dict[str, None]] = {}
        by_labels: dict[Labels, dict[str, None]] = {}
        expiry = ExpiryIndex()
        put = expiry.put
        for token_id, info in wanted.items():
            if info.labels:
                labelled = by_labels.get(info.labels)
                if labelled is None:
                    by_labels[info.labels] = {token_id: None}
                else:
                    labelled[token_id] = None
            owner = info.owner
            owned[owner] = owned.get(owner, 0) + 1
            for principal in principals_of(info):
                held_ids = by_principal.get(principal)
                if held_ids is None:
                    by_principal[principal] = {token_id: None}
                else:
                    held_ids[token_id] = None
            put(token_id, deadline_of(info))
        with self._lock:
            if self._entries:
                return None
            self._entries = wanted
            self._by_hmac = by_hmac
            self._owned = owned
            self._by_principal = by_principal
            self._by_labels = by_labels
            self._expiry = expiry
            self._unknown_key = unknown
            self._credentials.clear()
        self._notify(tokens, [])
        return len(tokens)

    def _replace_changes(self, infos: Iterable[TokenInformation]) -> int:
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
                    if (held := entries.get(info.token_id)) is None or held != info
                )
        del fresh
        with self._lock:
            held = list(entries)
        gone = [tid for tid in held if tid not in wanted]
        del held
        key_or_none = self._hmac_key_or_none
        hmacs = [key_or_none(info) for info in changed]
        upserted: list[TokenInformation] = []
        removed: list[TokenInformation] = []
        deadlines: list[tuple[int, str]] = []
        with self._lock:
            for tid in gone:
                info = self._apply_remove(tid)
                if info is not None:
                    removed.append(info)
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
            info = self._entries.get(token_id)
        return self._token(info) if info is not None else None

    def by_hmac(self, hmac: bytes) -> DelegationToken | None:
        hmac = bytes(hmac)
        if len(hmac) < 8:
            return None
        with self._lock:
            found = self._by_hmac.get(hmac_key(hmac))
            ids = () if found is None else (found,) if isinstance(found, str) else found
            infos = [self._entries[token_id] for token_id in ids]
        for info in infos:
            token = self._token(info)
            if token is not None and hmac_lib.compare_digest(token.hmac, hmac):
                return token
        return None

    def info(self, token_id: str) -> TokenInformation | None:
        """The token's details, including tokens whose key is unknown."""
        with self._lock:
            return self._entries.get(token_id)

    def tokens(self) -> list[DelegationToken]:
        """Every token that has an HMAC (i.e. whose key is known).

        Builds one object per token: for large caches use :meth:`token_ids` and
        :meth:`tokens_by_ids` in slices instead.
        """
        with self._lock:
            infos = list(self._entries.values())
        return [t for info in infos if (t := self._token(info)) is not None]

    def infos(self) -> list[TokenInformation]:
        """Every token's details, including tokens whose key is unknown (a copy taken in
        one hold of the lock; a snapshot is made from :meth:`infos_in_slices`)."""
        with self._lock:
            return list(self._entries.values())

    def infos_in_slices(self, slice_size: int = COPY_SLICE, attempts: int = 3,
                        pause: Callable[[], None] = _give_way) -> list[TokenInformation]:
        """Every token's details, like :meth:`infos`, copied ``slice_size`` per hold of
        the lock with ``pause`` (by default a hand-over of the GIL) between two holds:
        one copy of a million tokens held the GIL 22-47 ms, and every thread of the
        broker, its event loop first, waited for it.

        Each token that stays in the cache is in the copy once, in a state it had during
        the copy (a state replaced between two slices shows old or new). A dict's order of
        iteration holds only while no key comes or goes, so a walk that meets an added or
        removed token starts again; after ``attempts`` walks the copy is taken in one
        hold."""
        for _ in range(attempts):
            copied: list[TokenInformation] = []
            with self._lock:
                entries, key_changes = self._entries, self._key_changes
                values = iter(entries.values())
            while True:
                with self._lock:
                    if self._entries is not entries or self._key_changes != key_changes:
                        break  # a key came or went: walk again
                    part = list(islice(values, slice_size))
                copied += part
                if len(part) < slice_size:
                    return copied
                pause()
        return self.infos()

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

    def ids_labelled(self, selector: Labels) -> set[str]:
        """Ids of the tokens that carry every label of ``selector`` (non-empty), from the
        label-set index: the selector is matched once per distinct label set."""
        found: set[str] = set()
        with self._lock:
            for labels, ids in self._by_labels.items():
                if matches(labels, selector):
                    found.update(ids)
        return found

    def owned_count(self, owner: KafkaPrincipal) -> int:
        """Live tokens ``owner`` owns (kept as tokens come and go: no scan)."""
        with self._lock:
            return self._owned.get(owner.without_token_flag(), 0)

    def top_owners(self, n: int) -> list[tuple[KafkaPrincipal, int]]:
        """The ``n`` owners holding the most tokens, largest first (one pass over the
        owners, not the tokens)."""
        with self._lock:
            return heapq.nlargest(n, self._owned.items(), key=lambda item: item[1])

    def tokens_by_ids(self, token_ids: Iterable[str]) -> list[DelegationToken]:
        """The tokens with these ids that are still cached and have an HMAC, in order."""
        with self._lock:
            entries = self._entries
            infos = [info for token_id in token_ids if (info := entries.get(token_id)) is not None]
        return [t for info in infos if (t := self._token(info)) is not None]

    def due(self, now_ms: int) -> list[TokenInformation]:
        """Tokens strictly past their expiry or max lifetime at ``now_ms``, earliest first."""
        with self._lock:
            return [self._entries[tid] for tid in self._expiry.due(now_ms)]

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
        # A live token and an unknown id run the same steps (the same lookups, the
        # same tuple built) and part only at the return: a login probe cannot time the
        # difference (tests/integration/hostile/test_login_oracles.py measures it).
        salt = derived_salt(self._salt_secret or b"", mechanism, token_id)
        slot = _MECHANISM_INDEX[mechanism]
        with self._lock:
            info = self._entries.get(token_id, _ABSENT)
            packed = self._credentials.get(token_id, _NOT_DERIVED)
            key_known = self._keys.knows(info.key_id)
        found = TokenSalt(salt, self._iterations, info, packed[slot] is not None)
        usable = info is not _ABSENT and key_known and self._salt_secret is not None
        return found if usable else None

    def scram_credential(
        self, token_id: str, mechanism: ScramMechanism
    ) -> tuple[ScramCredential, TokenInformation] | None:
        """The token's SCRAM credential for ``mechanism`` and its current details.

        Derived from the HMAC (password = base64 of the HMAC) on first use, with
        the salt :func:`~tokensvc.scram.formatter.derived_salt` gives under the
        master key's SCRAM salt secret, and kept, across renewals, until the
        token is removed. None when the token is unknown or its master key is. Matches ``CredentialLookup.token_credential``.
        """
        slot = _MECHANISM_INDEX[mechanism]
        secret = self._salt_secret
        salt = derived_salt(secret, mechanism, token_id) if secret else None
        with self._lock:
            info = self._entries.get(token_id)
            if info is None:
                return None
            held = self._credentials.get(token_id)
            if held is not None and (packed := held[slot]) is not None:
                return _unpack(packed, self._iterations, salt), info
        token = self._token(info)
        if token is None:
            return None
        credential = derive_credential(token.hmac_b64, mechanism, self._iterations, salt)
        with self._lock:
            info = self._entries.get(token_id)
            # Still there under the same key (a renewal keeps the HMAC, a re-key does not).
            if info is None or info.key_id != token.info.key_id:
                return None
            held = self._credentials.get(token_id)
            if held is None:
                held = self._credentials[token_id] = [None] * len(_MECHANISMS)
            packed = held[slot]
            if packed is None:
                packed = held[slot] = _pack(credential, salt is not None)
                self._derived += 1
            return _unpack(packed, self._iterations, salt), info

    # -- internals (callers hold the lock unless noted) ---------------------------

    def _hmac_or_none(self, info: TokenInformation) -> bytes | None:
        """The token's HMAC, None for an unknown key. Needs no lock."""
        try:
            return self._keys.hmac(info.token_id, info.key_id)
        except UnknownKeyError:
            return None

    def _hmac_key_or_none(self, info: TokenInformation) -> int | None:
        """The HMAC index's key for the token, None for an unknown key."""
        hmac = self._hmac_or_none(info)
        return None if hmac is None else hmac_key(hmac)

    def _token(self, info: TokenInformation) -> DelegationToken | None:
        """The token with its HMAC, None for an unknown key. Needs no lock."""
        hmac = self._hmac_or_none(info)
        return DelegationToken(info, hmac) if hmac is not None else None

    def _apply_upsert(
        self,
        info: TokenInformation,
        key: int | None,
        deadlines: list[tuple[int, str]] | None = None,
    ) -> bool:
        """Store ``info`` (``key``: its :func:`hmac_key`, None for an unknown key);
        False when the cache already held exactly it. The expiry index is updated
        here, or later from ``deadlines`` when the caller batches."""
        token_id = info.token_id
        entries = self._entries
        old = entries.get(token_id)
        if old is not None:
            if old == info:
                return False
            self._unindex(old, keep_hmac=old.key_id == info.key_id)
        entries[token_id] = info
        if old is None:
            self._key_changes += 1
        owned = self._owned
        owned[info.owner] = owned.get(info.owner, 0) + 1
        if old is None or old.key_id != info.key_id:
            if key is not None:
                self._index_hmac(key, token_id)
            else:
                self._unknown_key += 1
        by_principal = self._by_principal
        for principal in principals_of(info):
            ids = by_principal.get(principal)
            if ids is None:
                by_principal[principal] = {token_id: None}
            else:
                ids[token_id] = None
        if info.labels:
            labelled = self._by_labels.get(info.labels)
            if labelled is None:
                self._by_labels[info.labels] = {token_id: None}
            else:
                labelled[token_id] = None
        deadline = deadline_of(info)
        if deadlines is None:
            self._expiry.put(token_id, deadline)
        else:
            deadlines.append((deadline, token_id))
        return True

    def _apply_remove(self, token_id: str) -> TokenInformation | None:
        info = self._entries.pop(token_id, None)
        if info is not None:
            self._key_changes += 1
            self._unindex(info, keep_hmac=False)
        return info

    def _unindex(self, info: TokenInformation, *, keep_hmac: bool) -> None:
        """Drop ``info`` from the principal and expiry indexes and, unless ``keep_hmac``
        (a change under the same key: same HMAC, credentials kept), from the HMAC
        index, the unknown-key count and the derived credentials."""
        token_id = info.token_id
        if not keep_hmac:
            self._credentials.pop(token_id, None)
            key = self._hmac_key_or_none(info)
            if key is not None:
                self._unindex_hmac(key, token_id)
            else:
                self._unknown_key -= 1
        by_principal = self._by_principal
        for principal in principals_of(info):
            ids = by_principal.get(principal)
            if ids is not None:
                ids.pop(token_id, None)
                if not ids:
                    del by_principal[principal]
        if info.labels:
            labelled = self._by_labels.get(info.labels)
            if labelled is not None:
                labelled.pop(token_id, None)
                if not labelled:
                    del self._by_labels[info.labels]
        left = self._owned.get(info.owner, 0) - 1
        if left > 0:
            self._owned[info.owner] = left
        else:
            self._owned.pop(info.owner, None)
        self._expiry.discard(token_id, deadline_of(info))

    def _index_hmac(self, key: int, token_id: str) -> None:
        held = self._by_hmac.get(key)
        if held is None or held == token_id:
            self._by_hmac[key] = token_id
        elif isinstance(held, str):
            self._by_hmac[key] = (held, token_id)
        elif token_id not in held:
            self._by_hmac[key] = (*held, token_id)

    def _unindex_hmac(self, key: int, token_id: str) -> None:
        held = self._by_hmac.get(key)
        if held == token_id:
            del self._by_hmac[key]
        elif isinstance(held, tuple) and token_id in held:
            rest = tuple(t for t in held if t != token_id)
            self._by_hmac[key] = rest[0] if len(rest) == 1 else rest

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
