"""SessionRegistry: live token sessions follow their token (no network, fake loop and clock)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tokensvc.broker.sessions.registry import REASON_EXPIRED, REASON_REMOVED, SessionRegistry
from tokensvc.broker.sessions.session import Session, State, session_deadline
from tokensvc.core.clock import FakeClock
from tokensvc.core.principal import KafkaPrincipal
from tokensvc.core.token import TokenInformation

ALICE = KafkaPrincipal.user("alice")
ALICE_TOKEN = KafkaPrincipal("User", "alice", token_authenticated=True)
START = 1_000_000


@dataclass
class _Timer:
    when_ms: float
    callback: Callable[..., Any]
    args: tuple
    cancelled: bool = False

    def cancel(self) -> None:
        self.cancelled = True


@dataclass
class FakeLoop:
    """call_soon_threadsafe queues; call_later fires when the fake clock reaches it."""

    clock: FakeClock
    ready: list[tuple[Callable[..., Any], tuple]] = field(default_factory=list)
    timers: list[_Timer] = field(default_factory=list)
    threads: set[str] = field(default_factory=set)

    def call_soon_threadsafe(self, callback: Callable[..., Any], *args: Any) -> None:
        self.threads.add(threading.current_thread().name)
        self.ready.append((callback, args))

    def call_later(self, delay: float, callback: Callable[..., Any], *args: Any) -> _Timer:
        timer = _Timer(self.clock.now_ms() + delay * 1000.0, callback, args)
        self.timers.append(timer)
        return timer

    def run(self) -> None:
        """Run queued callbacks, then every timer due at the clock's time."""
        while self.ready:
            callback, args = self.ready.pop(0)
            callback(*args)
        for timer in sorted(self.timers, key=lambda t: t.when_ms):
            if not timer.cancelled and timer.when_ms <= self.clock.now_ms():
                self.timers.remove(timer)
                timer.callback(*timer.args)

    def pending(self) -> list[_Timer]:
        return [t for t in self.timers if not t.cancelled]


class FakeConnection:
    def __init__(self, session: Session) -> None:
        self.session = session
        self.aborted: list[str] = []

    def abort(self, reason: str) -> None:
        self.aborted.append(reason)
        self.session.close()


def token(token_id: str = "tok1", expiry: int = START + 10_000, max_ts: int = START + 60_000):
    return TokenInformation(
        token_id=token_id,
        owner=ALICE,
        token_requester=ALICE,
        renewers=(),
        issue_timestamp=START,
        expiry_timestamp=expiry,
        max_timestamp=max_ts,
        key_id="k",
    )


class Harness:
    def __init__(self, reauth_ms: int = 0) -> None:
        self.clock = FakeClock(START)
        self.loop = FakeLoop(self.clock)
        self.revoked: list[tuple[str | None, str]] = []
        self.registry = SessionRegistry(
            self.loop,
            reauth_ms=reauth_ms,
            on_revoked=lambda s, reason: self.revoked.append((s.token_id, reason)),
            clock=self.clock,
        )
        self.reauth_ms = reauth_ms

    def login(self, info: TokenInformation | None, *, current: Any = "same") -> FakeConnection:
        """A connection that logs in (token login when ``info`` is given)."""
        session = Session.for_listener("SASL_PLAINTEXT", "SASL_PLAINTEXT", "127.0.0.1", 4000)
        conn = FakeConnection(session)
        self.registry.attach(conn)
        self._authenticate(session, info)
        if info is not None:
            self.registry.follow(session, info if current == "same" else current)
        return conn

    def reauth(self, conn: FakeConnection, info: TokenInformation | None) -> None:
        self._authenticate(conn.session, info)
        if info is not None:
            self.registry.follow(conn.session, info)

    def _authenticate(self, session: Session, info: TokenInformation | None) -> None:
        now = self.clock.now_ms()
        deadline = min(info.expiry_timestamp, info.max_timestamp) if info else None
        session.on_handshake(1)
        session.on_sasl_success(
            ALICE_TOKEN if info else ALICE,
            "SCRAM-SHA-256",
            info.token_id if info else None,
            session_deadline(deadline, now, self.reauth_ms),
            now,
        )
        self.registry.bind(session)


def test_session_deadline_is_token_deadline_capped_by_max_reauth():
    assert session_deadline(None, 1_000, 0) == 0
    assert session_deadline(None, 1_000, 500) == 1_500
    assert session_deadline(9_000, 1_000, 0) == 9_000
    assert session_deadline(9_000, 1_000, 500) == 1_500
    assert session_deadline(1_200, 1_000, 500) == 1_200


def test_removed_token_closes_its_sessions_and_reports_a_revocation():
    h = Harness()
    a, b = h.login(token()), h.login(token())
    other = h.login(token("tok2"))
    h.registry.on_token_change("remove", token())
    assert a.aborted == [] and b.aborted == []  # applied on the loop, not the caller's thread
    h.loop.run()
    assert a.aborted == [REASON_REMOVED] and b.aborted == [REASON_REMOVED]
    assert h.revoked == [("tok1", REASON_REMOVED), ("tok1", REASON_REMOVED)]
    assert other.aborted == [] and other.session.state is State.AUTHENTICATED
    assert h.registry.token_sessions("tok1") == 0 and h.registry.token_sessions("tok2") == 1


def test_renewal_extends_the_lifetime_of_live_sessions():
    h = Harness()
    conn = h.login(token(expiry=START + 10_000))
    assert conn.session.expires_at_ms == START + 10_000
    h.clock.advance(5_000)
    h.registry.on_token_change("upsert", token(expiry=START + 40_000))
    h.loop.run()
    assert conn.session.expires_at_ms == START + 40_000
    h.clock.advance(10_000)  # past the old expiry
    h.loop.run()
    assert conn.aborted == [] and not conn.session.expired(h.clock.now_ms())


def test_renewal_stays_capped_by_max_reauth_from_the_last_login():
    h = Harness(reauth_ms=3_000)
    conn = h.login(token(expiry=START + 10_000))
    assert conn.session.expires_at_ms == START + 3_000
    h.registry.on_token_change("upsert", token(expiry=START + 40_000))
    h.loop.run()
    assert conn.session.expires_at_ms == START + 3_000


def test_renewal_never_extends_past_the_max_lifetime():
    h = Harness()
    conn = h.login(token(expiry=START + 10_000, max_ts=START + 20_000))
    h.registry.on_token_change("upsert", token(expiry=START + 40_000, max_ts=START + 20_000))
    h.loop.run()
    assert conn.session.expires_at_ms == START + 20_000


def test_expiry_moved_closer_shrinks_the_lifetime_then_closes_at_the_new_expiry():
    h = Harness()
    conn = h.login(token(expiry=START + 60_000))
    h.registry.on_token_change("upsert", token(expiry=START + 2_000))
    h.loop.run()
    assert conn.session.expires_at_ms == START + 2_000
    h.clock.advance(2_000)  # at the expiry the token is still valid
    h.loop.run()
    assert conn.aborted == []
    h.clock.advance(1)
    h.loop.run()
    assert conn.aborted == [REASON_EXPIRED]
    assert h.revoked == [("tok1", REASON_EXPIRED)]
    assert h.loop.pending() == []


def test_sessions_are_closed_at_the_token_deadline_without_waiting_for_the_sweep():
    h = Harness()
    conn = h.login(token(expiry=START + 10_000))
    h.clock.advance(10_001)
    h.loop.run()
    assert conn.aborted == [REASON_EXPIRED]


def test_a_timer_that_runs_ahead_of_the_clock_is_scheduled_again():
    h = Harness()
    conn = h.login(token(expiry=START + 10_000))
    (timer,) = h.loop.pending()
    h.loop.timers.remove(timer)
    timer.callback(*timer.args)  # fired early: clock still at START
    assert conn.aborted == []
    assert len(h.loop.pending()) == 1
    h.clock.advance(10_001)
    h.loop.run()
    assert conn.aborted == [REASON_EXPIRED]


def test_renewal_moves_the_deadline_timer():
    h = Harness()
    conn = h.login(token(expiry=START + 10_000))
    h.registry.on_token_change("upsert", token(expiry=START + 30_000))
    h.loop.run()
    h.clock.advance(20_000)
    h.loop.run()
    assert conn.aborted == []
    h.clock.advance(10_001)
    h.loop.run()
    assert conn.aborted == [REASON_EXPIRED]


def test_login_racing_with_removal_is_revoked_when_the_cache_no_longer_has_the_token():
    h = Harness()
    conn = h.login(token(), current=None)
    assert conn.aborted == [REASON_REMOVED]
    assert h.registry.token_sessions("tok1") == 0


def test_changes_to_tokens_without_sessions_do_not_reach_the_loop():
    h = Harness()
    h.login(token("tok1"))
    h.registry.on_token_change("remove", token("other"))
    h.registry.on_token_change("upsert", token("other"))
    assert h.loop.ready == []


def test_a_batch_of_changes_reaches_the_loop_once_with_only_the_tokens_that_have_sessions():
    h = Harness()
    conn = h.login(token("tok1"))
    others = [token(f"other{i}") for i in range(1_000)]
    h.registry.on_token_changes(others, [*others, token("tok1")])
    assert len(h.loop.ready) == 1
    h.loop.run()
    assert conn.aborted == [REASON_REMOVED]


def test_change_from_another_thread_is_applied_on_the_loop():
    h = Harness()
    conn = h.login(token())
    worker = threading.Thread(
        target=h.registry.on_token_change, args=("remove", token()), name="zk-sync"
    )
    worker.start()
    worker.join()
    assert conn.aborted == [] and "zk-sync" in h.loop.threads
    h.loop.run()
    assert conn.aborted == [REASON_REMOVED]


def test_closed_connection_is_not_revoked_twice():
    h = Harness()
    conn = h.login(token())
    conn.session.close()  # closing for another reason, not yet detached
    h.registry.on_token_change("remove", token())
    h.loop.run()
    assert conn.aborted == [] and h.revoked == []


def test_detach_of_the_last_session_cancels_the_deadline_timer():
    h = Harness()
    a, b = h.login(token()), h.login(token())
    h.registry.detach(a)
    assert len(h.loop.pending()) == 1
    h.registry.detach(b)
    assert h.loop.pending() == []
    assert h.registry.token_sessions() == 0 and h.registry.count() == 0


def test_reauthentication_with_another_token_moves_the_session():
    h = Harness()
    conn = h.login(token("tok1"))
    h.reauth(conn, token("tok2", expiry=START + 50_000))
    assert h.registry.token_sessions("tok1") == 0
    assert h.registry.token_sessions("tok2") == 1
    assert conn.session.expires_at_ms == START + 50_000
    h.registry.on_token_change("remove", token("tok1"))
    h.loop.run()
    assert conn.aborted == []
    h.clock.advance(10_001)  # tok1's old deadline: its timer is gone
    h.loop.run()
    assert conn.aborted == []


def test_reauthentication_with_a_password_unbinds_the_token():
    h = Harness()
    conn = h.login(token())
    h.reauth(conn, None)
    assert h.registry.token_sessions() == 0
    h.registry.on_token_change("remove", token())
    h.loop.run()
    assert conn.aborted == []


def test_count_is_authenticated_connections_only():
    h = Harness()
    h.login(token())
    h.login(None)
    anonymous = FakeConnection(
        Session.for_listener("SASL_PLAINTEXT", "SASL_PLAINTEXT", "127.0.0.1", 4001)
    )
    h.registry.attach(anonymous)
    assert h.registry.count() == 2
    assert h.registry.token_sessions() == 1


def test_reauthentication_must_keep_the_mechanism():
    session = Session.for_listener("SASL_PLAINTEXT", "SASL_PLAINTEXT", "127.0.0.1", 4000)
    assert session.reauth_mechanism_allowed("SCRAM-SHA-512")  # first login: any
    session.on_handshake(1)
    session.on_sasl_success(ALICE, "SCRAM-SHA-256", None, 0, START)
    assert session.reauth_mechanism_allowed("SCRAM-SHA-256")
    assert not session.reauth_mechanism_allowed("SCRAM-SHA-512")
