"""Master keys: token HMACs and master-key rotation.

This module owns the one place where a master key touches data: the token
HMAC (``HmacSHA512(key = UTF-8 master key, data = UTF-8 token id)``, exactly as
Kafka computes it) and the key id, a short public name for a key. Kafka has one
master key; tokensvc holds a *current* key, under which new tokens are made,
and any number of *previous* keys, under which older tokens keep their HMAC
until they expire (see docs/tokens.md, "Rotating the master key").

It must never reveal a key: no key appears in a repr, an error message or a
log line, and :func:`key_id` is a one-way, keyed digest. It does no I/O.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable, Sequence
from typing import Any

from tokensvc.core.errors import Errors, KafkaError

_KEY_ID_MESSAGE = b"tokensvc key id v1"
_KEY_ID_HEX_CHARS = 16
# Labels of the secrets derived from the current master key. None can be a token
# id (those are 22 characters of URL-safe base64), so no derived secret is a token HMAC.
SCRAM_SALT_LABEL = "tokensvc-scram-fake-salt-v1"
AUDIT_FINGERPRINT_LABEL = "tokensvc-audit-name-fingerprint-v1"


def token_hmac(master_key: str, token_id: str) -> bytes:
    """Kafka's token HMAC: HmacSHA512 keyed by the master key over the token id."""
    return hmac.digest(master_key.encode("utf-8"), token_id.encode("utf-8"), "sha512")


def key_id(master_key: str) -> str:
    """A stable 16-hex-character name for ``master_key`` that reveals nothing about it."""
    digest = hmac.new(master_key.encode("utf-8"), _KEY_ID_MESSAGE, hashlib.sha256).hexdigest()
    return digest[:_KEY_ID_HEX_CHARS]


def derived_secret(keys: MasterKeys, label: str) -> bytes | None:
    """A 32-byte secret every broker holding the same current key derives alike.

    HMAC-SHA512 of ``label`` under the current master key, truncated; None when
    tokens are disabled (no current key). Used for the SCRAM salts of tokens and
    unknown names (:data:`SCRAM_SALT_LABEL`) and the audit fingerprints of unknown
    names (:data:`AUDIT_FINGERPRINT_LABEL`); it reveals nothing about the key.
    """
    if not keys.enabled:
        return None
    return keys.hmac(label, keys.current_id)[:32]


def _keyed_mac(master_key: str) -> Any:
    """A keyed HMAC-SHA512 to copy per token. With OpenSSL, hmac.HMAC wraps a C object
    whose ``copy`` costs half of the wrapper's (a cold start computes one HMAC per
    token); both have the same copy/update/digest."""
    mac = hmac.new(master_key.encode("utf-8"), digestmod=hashlib.sha512)
    return getattr(mac, "_hmac", None) or mac


class UnknownKeyError(KafkaError):
    """A token names a master key this broker does not hold.

    Such a token cannot authenticate or be managed here, so to a client it is a
    token that cannot be found (DELEGATION_TOKEN_NOT_FOUND).
    """

    def __init__(self, unknown_key_id: str) -> None:
        self.key_id = unknown_key_id
        super().__init__(
            Errors.DELEGATION_TOKEN_NOT_FOUND,
            f"the token's master key {unknown_key_id!r} is not configured on this broker",
        )


class MasterKeys:
    """The current master key and the previous ones kept for rotation.

    An empty ``current`` key disables delegation tokens (``enabled`` is False),
    as in Kafka. Tokens that record no key id (``""``: written by Kafka itself
    or before key ids existed) use the current key.
    """

    __slots__ = ("_current_id", "_keys")

    def __init__(self, current: str, previous: Sequence[str] = ()) -> None:
        if isinstance(previous, str):
            raise TypeError("previous must be a sequence of keys, not one string")
        # key id -> HMAC-SHA512 keyed with that key, not yet fed any data (copied per
        # token, which skips the key schedule); the current key first.
        self._keys: dict[str, Any] = {}
        self._current_id = ""
        if current:
            self._current_id = key_id(current)
            self._keys[self._current_id] = _keyed_mac(current)
        for key in previous:
            if key:
                kid = key_id(key)
                if kid not in self._keys:
                    self._keys[kid] = _keyed_mac(key)

    @property
    def enabled(self) -> bool:
        """True when a current key is configured, i.e. tokens can be made."""
        return bool(self._current_id)

    @property
    def current_id(self) -> str:
        """Key id of the current key; ``""`` when tokens are disabled."""
        return self._current_id

    def ids(self) -> tuple[str, ...]:
        """Every key id held: the current one first, then the previous ones."""
        return tuple(self._keys)

    def knows(self, token_key_id: str) -> bool:
        """True when :meth:`hmac` can compute HMACs for tokens under ``token_key_id``."""
        return self._resolve(token_key_id) is not None

    def hmac(self, token_id: str, token_key_id: str) -> bytes:
        """The HMAC of ``token_id`` under the key named ``token_key_id``.

        ``""`` means the current key. Raises :class:`UnknownKeyError` for a key id
        this instance does not hold (and for ``""`` when tokens are disabled).
        """
        keyed = self._resolve(token_key_id)
        if keyed is None:
            raise UnknownKeyError(token_key_id)
        mac = keyed.copy()
        mac.update(token_id.encode("utf-8"))
        return mac.digest()

    def hmac_keys(self, token_ids: Iterable[str], token_key_ids: Iterable[str],
                  bits: int = 64) -> list[int | None]:
        """For each token (its id and key id, in two parallel iterables), the first
        ``bits`` (at most 64) bits of its HMAC as an int, or None when its key id names no
        key held here: what the token cache indexes HMACs by, for a fill of many tokens
        in one loop (no object kept per token but the int itself)."""
        shift = 64 - bits
        keyed: dict[str, Any] = {}
        out: list[int | None] = []
        append = out.append
        from_bytes = int.from_bytes
        for token_id, kid in zip(token_ids, token_key_ids, strict=True):
            mac = keyed.get(kid)
            if mac is None:
                mac = keyed[kid] = self._resolve(kid) or False
            if mac is False:
                append(None)
                continue
            mac = mac.copy()
            mac.update(token_id.encode("utf-8"))
            append(from_bytes(mac.digest()[:8], "big") >> shift)
        return out

    def _resolve(self, token_key_id: str) -> Any:
        return self._keys.get(token_key_id or self._current_id)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, MasterKeys):
            return NotImplemented
        return self._current_id == other._current_id and self.ids() == other.ids()

    def __hash__(self) -> int:
        return hash(self.ids())

    def __repr__(self) -> str:
        previous = self.ids()[1:] if self.enabled else self.ids()
        return f"MasterKeys(current_id={self._current_id!r}, previous_ids={previous!r})"
