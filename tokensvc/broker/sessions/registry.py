"""Live token sessions follow their token.

Owns the index from token id to the connections that logged in with it, and
what happens to those connections when the token changes, as soon as this
broker's token cache learns of the change:

- token removed (expired on purpose with a period < 0, or deleted by the
  expiry sweep): every such connection is closed and audited as a revocation
  (reason ``token removed``);
- token renewed: their lifetime is extended to the new deadline
  (min(expiry, max)), still capped by ``connections.max.reauth.ms`` from the
  last authentication;
- token expiry moved closer (ExpireDelegationToken with a positive period):
  their lifetime shrinks to the new deadline, and when that deadline passes
  they are closed and audited as a revocation (reason ``token expired``).

The deadline close runs for every token that has live sessions, so a session
never outlives its token's expiry, whatever the sweep interval. Sessions that
authenticated with a password (no token) are not watched: like Kafka, the
broker closes them only when a request arrives after their lifetime.

Threads: cache listeners run on ZooKeeper sync threads (or on the loop, for
the controller's own writes); :meth:`on_token_change` only hands the change
to the event loop (``call_soon_threadsafe``). Everything else -- binding,
timers, closing -- runs on the loop. ``count``/``token_sessions`` may be read
from any thread (the metrics endpoint).

Must not: read ZooKeeper, block, or decide token rules (the cache says what
changed; ``TokenInformation`` says when it ends).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any, Protocol

from tokensvc.broker.sessions.session import Session, State
from tokensvc.core.clock import Clock, SystemClock
from tokensvc.core.token import TokenInformation

log = logging.getLogger("tokensvc.broker.sessions")

REASON_REMOVED = "token removed"
REASON_EXPIRED = "token expired"
REASON_CREDENTIAL = "user credential deleted or changed"


class LiveConnection(Protocol):
    session: Session

    def abort(self, reason: str) -> None: ...


class TimerHandle(Protocol):
    def cancel(self) -> None: ...


class EventLoop(Protocol):
    """The part of ``asyncio.AbstractEventLoop`` the registry uses."""

    def call_soon_threadsafe(self, callback: Callable[..., Any], *args: Any) -> Any: ...

    def call_later(self, delay: float, callback: Callable[..., Any], *args: Any) -> TimerHandle: ...


def token_deadline(info: TokenInformation) -> int:
    """The last ms at which the token is still valid (it is expired strictly after)."""
    return min(info.expiry_timestamp, info.max_timestamp)


class SessionRegistry:
    def __init__(
        self,
        loop: EventLoop,
        *,
        reauth_ms: int,
        on_revoked: Callable[[Session, str], None],
        clock: Clock | None = None,
    ) -> None:
        self._loop = loop
        self._reauth_ms = reauth_ms
        self._on_revoked = on_revoked
        self._clock = clock or SystemClock()
        self._lock = threading.Lock()
        self._connections: dict[int, LiveConnection] = {}  # id(session) -> connection
        self._by_token: dict[str, set[LiveConnection]] = {}
        self._token_of: dict[int, str] = {}  # id(session) -> token id it is bound to
        # Loop thread only: each watched token's deadline and the timer that closes at it.
        self._deadlines: dict[str, int] = {}
        self._timers: dict[str, TimerHandle] = {}

    # -- connections (loop thread) ---------------------------------------------------

    def attach(self, conn: LiveConnection) -> None:
        with self._lock:
            self._connections[id(conn.session)] = conn

    def detach(self, conn: LiveConnection) -> None:
        key = id(conn.session)
        with self._lock:
            self._connections.pop(key, None)
            emptied = self._unbind(key, conn)
        if emptied is not None:
            self._unwatch(emptied)

    def bind(self, session: Session) -> None:
        """After a successful (re-)authentication: index the session under its token.

        Call :meth:`follow` next with the cache's current view of the token.
        """
        key = id(session)
        with self._lock:
            conn = self._connections.get(key)
            if conn is None:
                return
            emptied = self._unbind(key, conn)
            if session.token_id:
                self._by_token.setdefault(session.token_id, set()).add(conn)
                self._token_of[key] = session.token_id
        if emptied is not None and emptied != session.token_id:
            self._unwatch(emptied)

    def follow(self, session: Session, current: TokenInformation | None) -> bool:
        """Apply the token's current state (read from the cache *after* :meth:`bind`).

        Reading after binding closes the race with a concurrent removal: either
        the removal's notification finds the session bound, or this read no
        longer finds the token. Returns False when the session was revoked.
        """
        token_id = session.token_id
        if token_id is None:
            return True
        if current is None:
            self._revoke_one(session, REASON_REMOVED)
            return False
        deadline = token_deadline(current)
        session.follow_token(deadline, self._reauth_ms)
        self._watch(token_id, deadline)
        return True

    def count(self) -> int:
        """Authenticated connections (any thread)."""
        with self._lock:
            return sum(1 for c in self._connections.values() if c.session.principal is not None)

    def token_sessions(self, token_id: str | None = None) -> int:
        """Live connections logged in with ``token_id`` (or with any token)."""
        with self._lock:
            if token_id is None:
                return len(self._token_of)
            return len(self._by_token.get(token_id, ()))

    # -- user credential changes ------------------------------------------------------

    def on_user_change(self, user: str) -> None:
        """UserCredentialCache listener (any thread): ``user``'s credentials were deleted
        or changed; their open password sessions on this broker end (on the loop, before
        anything this broker answers after the change: a write that waits for the change
        is answered after these sessions are closed)."""
        try:
            self._loop.call_soon_threadsafe(self._revoke_user, user)
        except RuntimeError:
            log.debug("event loop closed; sessions of a changed user not closed")

    def _revoke_user(self, user: str) -> None:
        # Connections are bounded (max.connections.per.ip, the listeners); credential
        # changes are rare: a look at each connection costs less than an index to keep.
        with self._lock:
            conns = [c for c in self._connections.values()
                     if c.session.token_id is None and c.session.principal is not None
                     and c.session.principal.principal_type == "User"
                     and c.session.principal.name == user and c.session.mechanism]
        for conn in conns:
            self._revoke_one(conn.session, REASON_CREDENTIAL)

    # -- token changes --------------------------------------------------------------

    def on_token_change(self, kind: str, info: TokenInformation) -> None:
        """TokenCache listener (any thread): hand the change to the event loop."""
        if kind == "remove":
            self.on_token_changes([], [info])
        else:
            self.on_token_changes([info], [])

    def on_token_changes(
        self, upserted: list[TokenInformation], removed: list[TokenInformation]
    ) -> None:
        """TokenCache batch listener (any thread): hand the changes of tokens that have
        sessions to the event loop in one call. A cold start's million upserts cost one
        check (no session can exist before the cache is complete)."""
        with self._lock:
            by_token = self._by_token
            if not by_token:
                return
            mine = [("remove", info) for info in removed if info.token_id in by_token]
            mine += [("upsert", info) for info in upserted if info.token_id in by_token]
        if not mine:
            return
        try:
            self._loop.call_soon_threadsafe(self._apply_all, mine)
        except RuntimeError:
            log.debug("event loop closed; %d token changes not applied to sessions", len(mine))

    def _apply_all(self, events: list[tuple[str, TokenInformation]]) -> None:
        for kind, info in events:
            self._apply(kind, info)

    def _apply(self, kind: str, info: TokenInformation) -> None:
        if kind == "remove":
            self._revoke_token(info.token_id, REASON_REMOVED)
            return
        deadline = token_deadline(info)
        with self._lock:
            conns = list(self._by_token.get(info.token_id, ()))
        if not conns:
            return
        for conn in conns:
            conn.session.follow_token(deadline, self._reauth_ms)
        self._watch(info.token_id, deadline)

    # -- deadline timers (loop thread) ------------------------------------------------

    def _watch(self, token_id: str, deadline: int) -> None:
        if self._deadlines.get(token_id) == deadline and token_id in self._timers:
            return
        self._deadlines[token_id] = deadline
        self._schedule(token_id)

    def _schedule(self, token_id: str) -> None:
        old = self._timers.pop(token_id, None)
        if old is not None:
            old.cancel()
        # Expired means strictly past the deadline: fire 1 ms after it.
        delay_ms = self._deadlines[token_id] + 1 - self._clock.now_ms()
        self._timers[token_id] = self._loop.call_later(
            max(0.0, delay_ms / 1000.0), self._deadline_reached, token_id
        )

    def _deadline_reached(self, token_id: str) -> None:
        self._timers.pop(token_id, None)
        deadline = self._deadlines.get(token_id)
        if deadline is None:
            return
        if self._clock.now_ms() <= deadline:
            self._schedule(token_id)  # the loop's timer ran ahead of the clock
            return
        self._revoke_token(token_id, REASON_EXPIRED)

    def _unwatch(self, token_id: str) -> None:
        self._deadlines.pop(token_id, None)
        timer = self._timers.pop(token_id, None)
        if timer is not None:
            timer.cancel()

    # -- closing ----------------------------------------------------------------------

    def _revoke_token(self, token_id: str, reason: str) -> None:
        with self._lock:
            conns = self._by_token.pop(token_id, set())
            for conn in conns:
                self._token_of.pop(id(conn.session), None)
        self._unwatch(token_id)
        for conn in conns:
            self._close(conn, reason)

    def _revoke_one(self, session: Session, reason: str) -> None:
        key = id(session)
        with self._lock:
            conn = self._connections.get(key)
            emptied = self._unbind(key, conn) if conn is not None else None
        if emptied is not None:
            self._unwatch(emptied)
        if conn is not None:
            self._close(conn, reason)

    def _close(self, conn: LiveConnection, reason: str) -> None:
        if conn.session.state is State.CLOSED:
            return  # already closing for another reason: no second audit
        self._on_revoked(conn.session, reason)
        conn.abort(reason)

    def _unbind(self, key: int, conn: LiveConnection) -> str | None:
        """Drop ``conn`` from its token's set (caller holds the lock).

        Returns the token id when that left the token without sessions.
        """
        token_id = self._token_of.pop(key, None)
        if token_id is None:
            return None
        conns = self._by_token.get(token_id)
        if conns is None:
            return token_id
        conns.discard(conn)
        if conns:
            return None
        del self._by_token[token_id]
        return token_id
