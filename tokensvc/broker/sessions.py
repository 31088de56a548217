"""Live token sessions follow their token.

Owns the index from token id to the connections that logged in with it. When
the token cache reports a token removed (expired on purpose, or swept), every
such connection is closed and audited as a revocation; when it reports a
renewal, their lifetime is extended to the new expiry (capped by
``connections.max.reauth.ms``). Cache listeners run on ZooKeeper sync threads,
so connections are closed through the event loop (``call_soon_threadsafe``).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Protocol

from tokensvc.broker.session import Session
from tokensvc.core.token import TokenInformation


class LiveConnection(Protocol):
    session: Session

    def abort(self, reason: str) -> None: ...


class SessionRegistry:
    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        *,
        reauth_ms: int,
        on_revoked: Callable[[Session, str], None],
    ) -> None:
        self._loop = loop
        self._reauth_ms = reauth_ms
        self._on_revoked = on_revoked
        self._lock = threading.Lock()
        self._by_token: dict[str, set[LiveConnection]] = {}
        self._connections: dict[int, LiveConnection] = {}

    def attach(self, conn: LiveConnection) -> None:
        with self._lock:
            self._connections[id(conn.session)] = conn

    def detach(self, conn: LiveConnection) -> None:
        with self._lock:
            self._connections.pop(id(conn.session), None)
            for token_id, conns in list(self._by_token.items()):
                conns.discard(conn)
                if not conns:
                    del self._by_token[token_id]

    def bind(self, session: Session) -> None:
        """Called after a successful (re-)authentication."""
        with self._lock:
            conn = self._connections.get(id(session))
            if conn is None:
                return
            for conns in self._by_token.values():
                conns.discard(conn)
            if session.token_id:
                self._by_token.setdefault(session.token_id, set()).add(conn)

    def count(self) -> int:
        with self._lock:
            return sum(1 for c in self._connections.values() if c.session.principal is not None)

    def token_sessions(self, token_id: str) -> int:
        with self._lock:
            return len(self._by_token.get(token_id, ()))

    def on_token_change(self, kind: str, info: TokenInformation) -> None:
        """TokenCache listener (any thread)."""
        with self._lock:
            conns = list(self._by_token.get(info.token_id, ()))
        if not conns:
            return
        if kind == "remove":
            self._loop.call_soon_threadsafe(self._revoke, conns, "token removed")
        else:
            self._loop.call_soon_threadsafe(self._extend, conns, info)

    def _revoke(self, conns: list[LiveConnection], reason: str) -> None:
        for conn in conns:
            self._on_revoked(conn.session, reason)
            conn.abort(reason)

    def _extend(self, conns: list[LiveConnection], info: TokenInformation) -> None:
        for conn in conns:
            deadline = min(info.expiry_timestamp, info.max_timestamp)
            if self._reauth_ms > 0:
                deadline = min(deadline, conn.session.authenticated_at_ms + self._reauth_ms)
            conn.session.expires_at_ms = deadline
