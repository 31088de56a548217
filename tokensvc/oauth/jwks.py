"""Where an issuer's public keys come from: a JWKS file, or an HTTPS JWKS endpoint.

Owns :class:`KeySet` (a parsed JWKS: public signing keys by ``kid``), the refetch rule
(:class:`RefetchLimiter`, pure) and the two sources:

- :class:`FileJwks`: a local file (``file:`` URL, as Kafka's
  ``sasl.oauthbearer.jwks.endpoint.url`` accepts, or ``jwks_file`` in the mappings
  file). Read at start (an unreadable or empty file is an error then); read again
  when its modification time changes, looked at no more than once a second, so a
  key rotated into the file is picked up without a restart.
- :class:`HttpsJwks`: an HTTPS endpoint (plain HTTP only to a loopback address, for
  tests). Fetched at start and every ``sasl.oauthbearer.jwks.endpoint.refresh.ms``;
  a failed fetch is retried from ``...retry.backoff.ms`` doubling up to
  ``...retry.backoff.max.ms``. A ``kid`` the set lacks triggers a refetch at once, as
  in Kafka's ``RefreshingHttpsJwks`` at most once a minute per ``kid`` (16 remembered),
  and, beyond Kafka, at most one such refetch per second in all, so random key ids
  cannot make the broker hammer the issuer. While the endpoint is down the last good
  set keeps serving; before any set was fetched, logins are refused
  (``jwks_unavailable``).

Fetches run in a thread (``asyncio.to_thread``), never on the event loop; concurrent
logins that need a fetch share one. Must not log key material or tokens.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import logging
import os
import ssl
import time
import urllib.parse
import urllib.request
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from joserfc.errors import JoseError
from joserfc.jwk import ECKey, OKPKey, RSAKey, import_key

from tokensvc.oauth.refusals import OAuthRefusal
from tokensvc.oauth.validator import PublicKey

log = logging.getLogger("tokensvc.oauth.jwks")

MAX_JWKS_BYTES = 1_048_576
FETCH_TIMEOUT_S = 10.0
# Kafka's RefreshingHttpsJwks: a missing kid is refetched at most once per minute,
# and 16 missing kids are remembered.
MISSING_KID_INTERVAL_MS = 60_000
MISSING_KID_ENTRIES = 16
MAX_KID_CHARS = 1000
# tokensvc's floor between two on-demand refetches of one source, whatever the kid.
REFETCH_FLOOR_MS = 1000
FILE_CHECK_INTERVAL_S = 1.0

_KEY_TYPES = {"RSA": ("RS", "PS"), "EC": ("ES",), "OKP": ("EdDSA",)}


class JwksError(Exception):
    """A JWKS that cannot be read or used (the message names the source, never a key)."""


@dataclass(frozen=True)
class KeySet:
    """The public signing keys of one JWKS, by ``kid``; keys without one apart."""

    by_kid: dict[str, PublicKey]
    without_kid: tuple[PublicKey, ...]

    @classmethod
    def parse(cls, text: str | bytes, source: str) -> KeySet:
        """Parse a JWKS document. Private members are dropped (only the public key is
        kept); symmetric keys, encryption keys and keys of unknown types are skipped.
        JwksError when the document is not a JWKS or holds no usable key."""
        try:
            document = json.loads(text)
        except (ValueError, UnicodeDecodeError):
            raise JwksError(f"{source}: not JSON") from None
        if not isinstance(document, dict) or not isinstance(document.get("keys"), list):
            raise JwksError(f"{source}: not a JWKS (no \"keys\" list)")
        by_kid: dict[str, PublicKey] = {}
        without: list[PublicKey] = []
        for entry in document["keys"]:
            if not isinstance(entry, dict) or entry.get("kty") not in _KEY_TYPES:
                continue
            if entry.get("use", "sig") != "sig":
                continue
            public = {k: v for k, v in entry.items() if k not in ("d", "p", "q", "dp", "dq", "qi")}
            try:
                key = import_key(public)
            except (JoseError, ValueError, TypeError):
                continue
            if not isinstance(key, RSAKey | ECKey | OKPKey):
                continue
            kid = entry.get("kid")
            if isinstance(kid, str):
                by_kid[kid] = key
            else:
                without.append(key)
        if not by_kid and not without:
            raise JwksError(f"{source}: no usable public signing key")
        return cls(by_kid, tuple(without))

    def find(self, kid: str | None, algorithm: str) -> PublicKey | None:
        """The key for a JWT's ``kid`` (with none: the only key of the algorithm's type)."""
        if kid is not None:
            return self.by_kid.get(kid)
        fitting = [k for k in (*self.by_kid.values(), *self.without_kid)
                   if algorithm.startswith(_KEY_TYPES.get(k.key_type, ()))]
        return fitting[0] if len(fitting) == 1 else None

    def __len__(self) -> int:
        return len(self.by_kid) + len(self.without_kid)


class RefetchLimiter:
    """Whether a missing ``kid`` may trigger a refetch now (pure: the caller passes now)."""

    def __init__(self, kid_interval_ms: int = MISSING_KID_INTERVAL_MS,
                 floor_ms: int = REFETCH_FLOOR_MS, entries: int = MISSING_KID_ENTRIES) -> None:
        self._kid_interval_ms = kid_interval_ms
        self._floor_ms = floor_ms
        self._entries = entries
        self._kids: OrderedDict[str, int] = OrderedDict()
        self._last_ms: int | None = None

    def allow(self, kid: str | None, now_ms: int) -> bool:
        name = (kid or "")[:MAX_KID_CHARS]
        if self._last_ms is not None and now_ms - self._last_ms < self._floor_ms:
            return False
        seen = self._kids.get(name)
        if seen is not None and now_ms - seen < self._kid_interval_ms:
            return False
        self._kids.pop(name, None)
        self._kids[name] = now_ms
        while len(self._kids) > self._entries:
            self._kids.popitem(last=False)
        self._last_ms = now_ms
        return True


class KeySource(Protocol):
    """An issuer's keys as a login asks for them."""

    description: str

    async def key_for(self, kid: str | None, algorithm: str) -> PublicKey: ...

    def start(self) -> None: ...

    async def close(self) -> None: ...


def _monotonic_ms() -> int:
    return int(time.monotonic() * 1000)


class FileJwks:
    """A JWKS file, read again when it changes (see the module's docstring)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.description = f"JWKS file {path}"
        self._keys, self._mtime = self._read()
        self._checked = time.monotonic()
        self._lock = asyncio.Lock()

    def _read(self) -> tuple[KeySet, float]:
        try:
            with open(self.path, "rb") as f:
                mtime = os.fstat(f.fileno()).st_mtime
                text = f.read(MAX_JWKS_BYTES + 1)
        except OSError as exc:
            raise JwksError(f"{self.description}: {exc.strerror or exc}") from None
        if len(text) > MAX_JWKS_BYTES:
            raise JwksError(f"{self.description}: larger than {MAX_JWKS_BYTES} bytes")
        return KeySet.parse(text, self.description), mtime

    def start(self) -> None:
        """Nothing to start: the file was read when the source was built."""

    async def close(self) -> None:
        """Nothing to close: no file stays open."""

    async def key_for(self, kid: str | None, algorithm: str) -> PublicKey:
        key = self._keys.find(kid, algorithm)
        if key is None or time.monotonic() - self._checked >= FILE_CHECK_INTERVAL_S:
            await self._reload_if_changed()
            key = self._keys.find(kid, algorithm)
        if key is None:
            raise OAuthRefusal("unknown_key", detail=f"kid {(kid or '')[:64]!r}")
        return key

    async def _reload_if_changed(self) -> None:
        async with self._lock:
            if time.monotonic() - self._checked < FILE_CHECK_INTERVAL_S:
                return
            self._checked = time.monotonic()
            try:
                mtime = (await asyncio.to_thread(os.stat, self.path)).st_mtime
                if mtime == self._mtime:
                    return
                self._keys, self._mtime = await asyncio.to_thread(self._read)
                log.info("%s changed: %d key(s)", self.description, len(self._keys))
            except (OSError, JwksError) as exc:
                log.warning("%s could not be read again, keeping its last keys: %s",
                            self.description, exc)


def check_url(url: str) -> None:
    """JwksError unless ``url`` is HTTPS, or HTTP to a loopback address."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme == "https" and parts.hostname:
        return
    if parts.scheme == "http" and parts.hostname:
        host = parts.hostname
        try:
            loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
        except ValueError:
            loopback = False
        if loopback:
            return
        raise JwksError(f"{url}: plain HTTP is allowed to a loopback address only; use HTTPS")
    raise JwksError(f"{url}: not an https:// (or file:) URL")


def fetch_url(url: str, ca_file: str | None) -> bytes:
    """GET ``url`` (blocking: run in a thread). JwksError on any failure."""
    context = ssl.create_default_context(cafile=ca_file) if url.startswith("https") else None
    request = urllib.request.Request(url, headers={"Accept": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=FETCH_TIMEOUT_S, context=context) as response:
            body = response.read(MAX_JWKS_BYTES + 1)
    except (OSError, ValueError) as exc:
        raise JwksError(f"{url}: {getattr(exc, 'reason', None) or exc}") from None
    if len(body) > MAX_JWKS_BYTES:
        raise JwksError(f"{url}: larger than {MAX_JWKS_BYTES} bytes")
    return body


class HttpsJwks:
    """A JWKS endpoint, refreshed and refetched on unknown key ids (module docstring)."""

    def __init__(self, url: str, *, refresh_ms: int, backoff_ms: int, backoff_max_ms: int,
                 ca_file: str | None = None, wait_s: float = FETCH_TIMEOUT_S,
                 fetch: Callable[[str, str | None], bytes] = fetch_url,
                 now_ms: Callable[[], int] = _monotonic_ms) -> None:
        check_url(url)
        self.url = url
        self.description = f"JWKS endpoint {url}"
        self._refresh_ms = refresh_ms
        self._backoff_ms = max(1, backoff_ms)
        self._backoff_max_ms = max(self._backoff_ms, backoff_max_ms)
        self._ca_file = ca_file
        self._wait_s = wait_s
        self._fetch = fetch
        self._now_ms = now_ms
        self._keys: KeySet | None = None
        self._limiter = RefetchLimiter()
        self._inflight: asyncio.Future[KeySet] | None = None
        self._task: asyncio.Task | None = None
        self.fetches = 0

    @property
    def keys(self) -> KeySet | None:
        return self._keys

    def start(self) -> None:
        """Start the refresher on the running loop (the first fetch is immediate)."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._refresher())

    async def close(self) -> None:
        task, self._task = self._task, None
        # Cancelled again until it ends: Python 3.11's wait_for can swallow a cancellation
        # that arrives as the awaited fetch completes, and the refresher would go on.
        while task is not None and not task.done():
            task.cancel()
            await asyncio.wait({task}, timeout=0.1)

    async def key_for(self, kid: str | None, algorithm: str) -> PublicKey:
        keys = self._keys
        if keys is None:
            keys = await self._fetch_shared(refuse=True)
        key = keys.find(kid, algorithm)
        if key is None and self._limiter.allow(kid, self._now_ms()):
            try:
                keys = await self._fetch_shared(refuse=False)
            except JwksError:
                pass
            key = (self._keys or keys).find(kid, algorithm)
        if key is None:
            raise OAuthRefusal("unknown_key", detail=f"kid {(kid or '')[:64]!r}")
        return key

    async def _fetch_shared(self, *, refuse: bool) -> KeySet:
        """One fetch for every login waiting on it. ``refuse``: a failure becomes the
        ``jwks_unavailable`` refusal (no set at all to fall back on)."""
        if self._inflight is None or self._inflight.done():
            self._inflight = asyncio.get_running_loop().create_task(self._fetch_once())
        try:
            return await asyncio.wait_for(asyncio.shield(self._inflight), self._wait_s)
        except (JwksError, TimeoutError) as exc:
            if refuse:
                raise OAuthRefusal("jwks_unavailable") from exc
            raise JwksError(str(exc)) from None

    async def _fetch_once(self) -> KeySet:
        self.fetches += 1
        body = await asyncio.to_thread(self._fetch, self.url, self._ca_file)
        keys = KeySet.parse(body, self.description)
        if self._keys is None or keys.by_kid.keys() != self._keys.by_kid.keys():
            log.info("%s: %d key(s), ids %s", self.description, len(keys),
                     ", ".join(sorted(k[:64] for k in keys.by_kid)) or "none")
        self._keys = keys
        return keys

    async def _refresher(self) -> None:
        backoff = self._backoff_ms
        while True:
            try:
                await self._fetch_shared(refuse=False)
            except JwksError as exc:
                log.warning("%s could not be fetched (retry in %d ms): %s",
                            self.description, backoff, exc)
                await asyncio.sleep(backoff / 1000)
                backoff = min(backoff * 2, self._backoff_max_ms)
                continue
            backoff = self._backoff_ms
            await asyncio.sleep(self._refresh_ms / 1000)


def key_source(url: str, *, refresh_ms: int, backoff_ms: int, backoff_max_ms: int,
               ca_file: str | None = None) -> KeySource:
    """The source for a ``sasl.oauthbearer.jwks.endpoint.url`` value (``file:`` or HTTPS)."""
    if url.startswith("file:"):
        return FileJwks(urllib.parse.unquote(urllib.parse.urlsplit(url).path))
    return HttpsJwks(url, refresh_ms=refresh_ms, backoff_ms=backoff_ms,
                     backoff_max_ms=backoff_max_ms, ca_file=ca_file)
