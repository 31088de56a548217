"""Where tokensvc's clients (the admin client, the CLI, the agent) get the JWT they log in
with: a file (a projected service-account token, read again at every login), or an
OpenID provider's token endpoint (an OAuth 2.0 client-credentials grant, RFC 6749 4.4).

Owns :class:`ClientCredentials` (the grant's settings, as Kafka's
``OAuthBearerLoginModule`` takes them: ``clientId``, ``clientSecret``, ``scope`` and the
endpoint's CA) and its token cache: a token is used until 80 % of its ``expires_in`` has
passed, as librdkafka and Kafka's Java login refresh theirs. Blocking I/O (the admin
client is blocking). Errors name the endpoint and the client id, never the secret or a
token.
"""

from __future__ import annotations

import base64
import json
import ssl
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field

REFRESH_SHARE = 0.8
FETCH_TIMEOUT_S = 10.0
MAX_RESPONSE_BYTES = 65_536


class TokenUnavailable(Exception):
    """No token could be had; the message names the source, never a secret."""


def read_token_file(path: str) -> str:
    """The JWT in ``path`` (surrounding blanks removed); TokenUnavailable if unreadable."""
    try:
        with open(path, encoding="ascii") as f:
            token = f.read().strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise TokenUnavailable(f"cannot read a JWT from {path}: "
                               f"{getattr(exc, 'strerror', None) or exc}") from None
    if not token:
        raise TokenUnavailable(f"{path} is empty")
    return token


@dataclass(frozen=True)
class ClientCredentials:
    """A client-credentials grant at ``token_url``; tokens cached (see the module)."""

    token_url: str
    client_id: str
    client_secret: str = field(repr=False)
    scope: str | None = None
    ca_file: str | None = None
    now: Callable[[], float] = field(default=time.monotonic, repr=False, compare=False)
    _cache: dict = field(default_factory=dict, repr=False, compare=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def token(self) -> str:
        """A token that has not yet reached 80 % of its lifetime (fetched when needed)."""
        with self._lock:
            cached = self._cache.get("token")
            if cached is not None and self.now() < cached[1]:
                return cached[0]
            started = self.now()
            token, expires_in = self._fetch()
            self._cache["token"] = (token, started + expires_in * REFRESH_SHARE)
            return token

    def _fetch(self) -> tuple[str, float]:
        fields = {"grant_type": "client_credentials"}
        if self.scope:
            fields["scope"] = self.scope
        basic = base64.b64encode(
            f"{urllib.parse.quote(self.client_id)}:{urllib.parse.quote(self.client_secret)}"
            .encode()).decode()
        request = urllib.request.Request(
            self.token_url, data=urllib.parse.urlencode(fields).encode(),
            headers={"Authorization": f"Basic {basic}", "Accept": "application/json",
                     "Content-Type": "application/x-www-form-urlencoded"})
        context = (ssl.create_default_context(cafile=self.ca_file)
                   if self.token_url.startswith("https") else None)
        where = f"the token endpoint {self.token_url} (client {self.client_id!r})"
        try:
            with urllib.request.urlopen(request, timeout=FETCH_TIMEOUT_S,
                                        context=context) as response:
                body = json.loads(response.read(MAX_RESPONSE_BYTES))
        except urllib.error.HTTPError as exc:
            raise TokenUnavailable(f"{where} refused the grant: HTTP {exc.code}") from None
        except (OSError, ValueError) as exc:
            raise TokenUnavailable(f"{where}: {getattr(exc, 'reason', None) or exc}") from None
        token = body.get("access_token") if isinstance(body, dict) else None
        if not isinstance(token, str) or not token:
            raise TokenUnavailable(f"{where} answered without an access_token")
        expires_in = body.get("expires_in")
        if not isinstance(expires_in, int | float) or expires_in <= 0:
            expires_in = 60.0  # no lifetime given: ask again within a minute
        return token, float(expires_in)
