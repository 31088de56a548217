"""The controller's exactly-once ledger and write path, with fakes and a fake clock: no
ZooKeeper, no sockets. A fake store commits in memory and can lose the answer of a commit
(as a ConnectionLoss after ZooKeeper applied it does)."""

from __future__ import annotations

import asyncio
import concurrent.futures
from dataclasses import dataclass, field
from types import SimpleNamespace

from tokensvc.broker.context import RequestContext, WriteTicket
from tokensvc.broker.handlers.base import ApiHandler, replay_recorded
from tokensvc.broker.writes.ledger import WriteLedger
from tokensvc.broker.writes.path import WritePath
from tokensvc.core.clock import FakeClock
from tokensvc.core.errors import Errors
from tokensvc.core.principal import KafkaPrincipal
from tokensvc.protocol import RequestHeader, decode_response
from tokensvc.protocol.api import ApiKey


class Unavailable(Exception):
    """The fake store's ConnectionLoss."""


class Exists(Exception):
    """The fake store's 'request key already recorded'."""


@dataclass
class Record:
    api: int
    outcome: dict


@dataclass
class FakeStore:
    """Commits a renew (expiry) with its record atomically; ``lose_answers`` commits and
    then raises Unavailable, ``down`` raises before committing."""

    expiry: int = 0
    applied: int = 0
    records: dict[str, Record] = field(default_factory=dict)
    lose_answers: int = 0
    down: int = 0
    sequence: int = 0

    def renew(self, expiry: int, *, guard, record) -> tuple[None, list]:
        if self.down:
            self.down -= 1
            raise Unavailable("connection loss before the commit")
        if record is not None and record[0] in self.records:
            raise Exists("recorded")
        self.expiry = expiry
        self.applied += 1
        self.sequence += 1
        if record is not None:
            self.records[record[0]] = Record(ApiKey.RENEW_DELEGATION_TOKEN, record[1])
        if self.lose_answers:
            self.lose_answers -= 1
            raise Unavailable("connection loss after the commit")
        return None, [("tokens", self.sequence)]


class FakeFollowers:
    """Applies versions when told to (``applied``), setting the waiters' futures."""

    def __init__(self) -> None:
        self.applied = 0
        self.waiting: list[tuple[int, concurrent.futures.Future]] = []
        self.auto = True

    def wait_for(self, versions):
        fut: concurrent.futures.Future = concurrent.futures.Future()
        target = max(seq for _, seq in versions)
        if self.auto or self.applied >= target:
            fut.set_result(None)
        else:
            self.waiting.append((target, fut))
        return [fut]

    def latest(self):
        return [("tokens", self.applied)]


class FakeRecords:
    def __init__(self, store: FakeStore) -> None:
        self.store = store

    def op(self, key, api, outcome):
        return (key, outcome)

    def put(self, op):
        self.store.records[op[0]] = Record(ApiKey.RENEW_DELEGATION_TOKEN, op[1])


def _ctx(key: str, first: bool = True) -> RequestContext:
    return RequestContext(
        header=RequestHeader(ApiKey.RENEW_DELEGATION_TOKEN, 2, 77, "client"),
        principal=KafkaPrincipal.user("alice"),
        listener="BROKER",
        security_protocol="SASL_PLAINTEXT",
        client_host="127.0.0.1",
        client_port=0,
        payload=b"",
        forwarded=True,
        write=WriteTicket(key, first_attempt=first),
    )


class Harness:
    def __init__(self, timeout_ms: int = 10_000, refuse=None) -> None:
        self.clock = FakeClock(0)
        self.store = FakeStore()
        self.followers = FakeFollowers()
        self.audit: list[dict] = []
        self.handled = 0
        self.writes = WritePath(
            guard=lambda: ("/controller_epoch", 1),
            followers=self.followers,
            records=FakeRecords(self.store),
            cache_timeout_s=1.0,
            unknown=(Unavailable,),
            exists=Exists,
        )
        self.services = SimpleNamespace(
            audit=SimpleNamespace(required=False, refusal=lambda: None, emit=lambda kind, **f: self.audit.append({"type": kind, **f})),
        )

        async def handle(services, ctx, body):
            self.handled += 1
            expiry = body["expiry"]
            outcome = {"ErrorCode": 0, "ExpiryTimestampMs": expiry, "ThrottleTimeMs": 0}
            await self.writes.commit(ctx, self.store.renew, expiry,
                                     record=self.writes.record(ctx, ApiKey.RENEW_DELEGATION_TOKEN, outcome))
            return outcome

        handler = ApiHandler(
            "RenewDelegationToken", handle,
            lambda v, e: {"ErrorCode": int(e), "ExpiryTimestampMs": -1, "ThrottleTimeMs": 0},
            write=True, replay=replay_recorded,
        )

        async def sleep(seconds: float) -> None:
            self.clock.advance(int(seconds * 1000))

        self.ledger = WriteLedger(
            {ApiKey.RENEW_DELEGATION_TOKEN: handler}, self.writes,
            lambda key: self.store.records.get(key), lambda key: True,
            request_timeout_ms=timeout_ms,
            monotonic=lambda: self.clock.now_ms() / 1000.0,
            sleep=sleep,
            refuse=refuse,
        )

    def apply(self, ctx: RequestContext, expiry: int) -> dict:
        encoded, _error = asyncio.run(self.ledger.apply(self.services, ctx, {"expiry": expiry}))
        return decode_response(ApiKey.RENEW_DELEGATION_TOKEN, 2, encoded)[1]


def test_a_write_commits_its_record_and_reports_its_versions():
    h = Harness()
    ctx = _ctx("k1")
    answer = h.apply(ctx, 500)
    assert answer["ExpiryTimestampMs"] == 500
    assert h.store.records["k1"].outcome["ExpiryTimestampMs"] == 500
    assert ctx.write.committed == [("tokens", 1)]


def test_a_retry_with_a_recorded_key_replays_the_first_outcome_and_applies_nothing():
    h = Harness()
    h.apply(_ctx("k1"), 500)
    retry = h.apply(_ctx("k1", first=False), 900)
    assert retry["ExpiryTimestampMs"] == 500
    assert (h.store.applied, h.handled, h.ledger.replayed) == (1, 1, 1)
    assert h.audit[-1]["api"] == "RenewDelegationToken.replay"


def test_a_lost_commit_answer_is_looked_up_and_replayed_not_applied_twice():
    h = Harness()
    h.store.lose_answers = 1
    answer = h.apply(_ctx("k1"), 500)
    assert answer["ExpiryTimestampMs"] == 500
    assert h.store.applied == 1
    assert h.ledger.retried_unknown == 1 and h.ledger.replayed == 1


def test_a_commit_that_never_happened_is_retried_and_applied_once():
    h = Harness()
    h.store.down = 3
    answer = h.apply(_ctx("k1"), 500)
    assert answer["ErrorCode"] == 0 and h.store.applied == 1
    assert h.ledger.retried_unknown == 3
    assert h.clock.now_ms() == 50 + 100 + 200  # the backoff, on the fake clock


def test_an_unknown_outcome_past_the_request_timeout_is_request_timed_out():
    h = Harness(timeout_ms=1_000)
    h.store.down = 100
    answer = h.apply(_ctx("k1"), 500)
    assert answer["ErrorCode"] == Errors.REQUEST_TIMED_OUT
    assert h.store.applied == 0
    assert h.clock.now_ms() <= 1_000


def test_a_key_wrongly_marked_first_is_still_applied_once():
    h = Harness()
    h.apply(_ctx("k1"), 500)
    again = h.apply(_ctx("k1", first=True), 900)
    assert again["ExpiryTimestampMs"] == 500
    assert h.store.applied == 1


def test_a_write_waits_for_this_brokers_cache_before_answering():
    h = Harness()
    h.followers.auto = False

    async def run() -> tuple[bool, dict]:
        task = asyncio.ensure_future(h.ledger.apply(h.services, _ctx("k1"), {"expiry": 500}))
        await asyncio.sleep(0)
        await asyncio.sleep(0.01)
        done_before = task.done()
        h.followers.applied = 1
        for _, fut in h.followers.waiting:
            fut.set_result(None)
        encoded, _ = await task
        return done_before, decode_response(ApiKey.RENEW_DELEGATION_TOKEN, 2, encoded)[1]

    done_before, answer = asyncio.run(run())
    assert not done_before
    assert answer["ExpiryTimestampMs"] == 500


def test_a_refused_write_is_answered_at_once_and_nothing_is_written():
    # The controller's clock is not trusted (issue #36): the broker's refusal is the answer.
    refused = {"ErrorCode": int(Errors.REQUEST_TIMED_OUT), "ExpiryTimestampMs": -1,
               "ThrottleTimeMs": 0}
    h = Harness(refuse=lambda services, ctx, handler, body: refused)
    answer = h.apply(_ctx("k1"), 500)
    assert answer["ErrorCode"] == int(Errors.REQUEST_TIMED_OUT)
    assert (h.store.applied, h.handled, h.store.records) == (0, 0, {})
