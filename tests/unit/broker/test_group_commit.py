"""Group commit on the controller, with a fake store: no ZooKeeper, no sleeps, no clock.

The fake ``commit_many`` blocks until the test releases it (a future per batch), so a
test decides exactly which writes arrive while a batch is in flight. It commits like a
ZooKeeper multi with the store's rule: one failing write is taken out and the rest
committed again, each write keeping its own outcome.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections import deque
from types import SimpleNamespace

import pytest

from tests.support.loopturns import PerTurn
from tokensvc.broker.context import RequestContext, WriteTicket
from tokensvc.broker.services import TokenService
from tokensvc.broker.writes.groupcommit import DELIVER_SLICE, GroupCommit, Pending, take_batch
from tokensvc.broker.writes.path import AlreadyApplied, OutcomeUnknown, WritePath
from tokensvc.core.errors import Errors, KafkaError
from tokensvc.core.principal import KafkaPrincipal
from tokensvc.core.token import TokenInformation
from tokensvc.protocol import RequestHeader
from tokensvc.protocol.api import ApiKey

GUARD = ("/controller_epoch", 3)


class TokenExists(KafkaError):
    def __init__(self) -> None:
        super().__init__(Errors.UNKNOWN_SERVER_ERROR, "token exists")


class KeyExists(Exception):
    """The fake store's 'request key already recorded'."""


class Unavailable(Exception):
    """The fake store's connection loss (outcome unknown)."""


class FakeBatchStore:
    """Writes are ``(token id, request key)``. A token id in ``existing`` or a key in
    ``keys`` fails that write alone (as ZooKeeper's per-op results show); the others get
    consecutive notification sequences, in batch order. ``gate`` makes each batch wait
    for the test (``release``)."""

    def __init__(self, *, gate: bool = False) -> None:
        self.existing: set[str] = set()
        self.keys: set[str] = set()
        self.sequence = 0
        self.batches: list[list[tuple[str, str]]] = []
        self.transactions = 0
        self.down = False
        self._gate = gate
        self._releases: deque[concurrent.futures.Future] = deque()

    def commit_many(self, writes, *, guard):
        self.batches.append(list(writes))
        if self._gate:
            release: concurrent.futures.Future = concurrent.futures.Future()
            self._releases.append(release)
            release.result(timeout=30)
        if self.down:
            return [Unavailable("connection loss") for _ in writes]
        outcomes: list = [None] * len(writes)
        pending = list(range(len(writes)))
        while pending:
            self.transactions += 1
            bad = next((i for i in pending
                        if writes[i][0] in self.existing or writes[i][1] in self.keys), None)
            if bad is None:
                for i in pending:
                    self.sequence += 1
                    self.existing.add(writes[i][0])
                    self.keys.add(writes[i][1])
                    outcomes[i] = self.sequence
                return outcomes
            outcomes[bad] = TokenExists() if writes[bad][0] in self.existing else KeyExists()
            pending.remove(bad)
        return outcomes

    async def release(self) -> None:
        """Let the oldest batch in flight finish (waits until it has started)."""
        while not self._releases:
            await asyncio.sleep(0)
        self._releases.popleft().set_result(None)


def _group(store: FakeBatchStore, **bounds) -> GroupCommit:
    return GroupCommit(store.commit_many, size_of=lambda w: 100, **bounds)


async def _until(predicate) -> None:
    while not predicate():
        await asyncio.sleep(0)


def _writes(lo: int, hi: int) -> list[tuple[str, str]]:
    return [(f"t{i}", f"k{i}") for i in range(lo, hi)]


async def _behind_a_batch(group: GroupCommit, store: FakeBatchStore, writes):
    """Write ``t0`` alone (its batch held at the store's gate), then queue ``writes``
    behind it; returns the first write's future and theirs."""
    first = asyncio.ensure_future(group.submit(("t0", "k0"), GUARD))
    await _until(lambda: store.batches)
    queued = [asyncio.ensure_future(group.submit(w, GUARD)) for w in writes]
    await _until(lambda: group.queued == len(writes))
    return first, queued


# --- the batch rule --------------------------------------------------------------------


def _pending(loop, n: int, size: int = 10, guard=GUARD) -> list[Pending]:
    return [Pending(f"w{i}", guard, size, loop.create_future()) for i in range(n)]


def test_a_batch_takes_at_most_max_writes():
    loop = asyncio.new_event_loop()
    queue = deque(_pending(loop, 10))
    assert [p.write for p in take_batch(queue, 4, 10_000)] == ["w0", "w1", "w2", "w3"]
    assert len(queue) == 6
    loop.close()


def test_a_batch_takes_at_most_max_bytes_but_always_one_write():
    loop = asyncio.new_event_loop()
    queue = deque(_pending(loop, 5, size=400))
    assert len(take_batch(queue, 100, 1_000)) == 2
    huge = deque(_pending(loop, 2, size=5_000))
    assert len(take_batch(huge, 100, 1_000)) == 1
    loop.close()


def test_a_batch_never_mixes_guards_and_skips_cancelled_waiters():
    loop = asyncio.new_event_loop()
    items = _pending(loop, 3) + _pending(loop, 2, guard=("/controller_epoch", 4))
    items[1].future.cancel()
    queue = deque(items)
    assert [p.write for p in take_batch(queue, 100, 10_000)] == ["w0", "w2"]
    assert [p.guard for p in take_batch(queue, 100, 10_000)] == [("/controller_epoch", 4)] * 2
    assert not queue
    loop.close()


# --- the queue ---------------------------------------------------------------------------


def test_a_lone_write_goes_at_once_without_waiting_for_company():
    async def scenario():
        store = FakeBatchStore()
        group = _group(store)
        assert await group.submit(("t1", "k1"), GUARD) == 1
        assert store.batches == [[("t1", "k1")]]

    asyncio.run(scenario())


def test_writes_queued_while_a_batch_is_in_flight_go_together_in_the_next_batch():
    async def scenario():
        store = FakeBatchStore(gate=True)
        group = _group(store)
        first, rest = await _behind_a_batch(group, store, _writes(1, 6))
        assert len(store.batches) == 1  # nothing else sent while the first is in flight
        await store.release()
        await store.release()
        assert await first == 1
        assert await asyncio.gather(*rest) == [2, 3, 4, 5, 6]
        assert [len(b) for b in store.batches] == [1, 5]
        assert (group.batches, group.committed, group.largest) == (2, 6, 5)

    asyncio.run(scenario())


def test_the_size_bound_splits_what_queued_into_several_batches():
    async def scenario():
        store = FakeBatchStore(gate=True)
        group = _group(store, max_writes=3)
        first, rest = await _behind_a_batch(group, store, _writes(1, 8))
        for _ in range(4):
            await store.release()
        await asyncio.gather(first, *rest)
        assert [len(b) for b in store.batches] == [1, 3, 3, 1]

    asyncio.run(scenario())


def test_one_failed_write_does_not_fail_the_others_each_keeps_its_outcome():
    async def scenario():
        store = FakeBatchStore(gate=True)
        store.existing.add("taken")
        store.keys.add("recorded")
        group = _group(store)
        writes = [("t1", "k1"), ("taken", "k2"), ("t3", "k3"), ("t4", "recorded"), ("t5", "k5")]
        blocker, futures = await _behind_a_batch(group, store, writes)
        await store.release()
        await store.release()
        await blocker
        results = await asyncio.gather(*futures, return_exceptions=True)
        assert results[0] == 2 and results[2] == 3 and results[4] == 4
        assert isinstance(results[1], TokenExists)
        assert isinstance(results[3], KeyExists)
        # One batch of five: the two failures were taken out one by one, the rest retried.
        assert [len(b) for b in store.batches] == [1, 5]
        assert store.transactions == 1 + 3

    asyncio.run(scenario())


def test_a_cancelled_waiter_is_not_sent():
    async def scenario():
        store = FakeBatchStore(gate=True)
        group = _group(store)
        blocker, (gone, kept) = await _behind_a_batch(group, store, _writes(1, 3))
        gone.cancel()
        await store.release()
        await store.release()
        await blocker
        assert await kept == 2
        assert store.batches[1] == [("t2", "k2")]

    asyncio.run(scenario())


def _woken_per_turn(group: GroupCommit, store: FakeBatchStore, n: int):
    """Submit ``n`` writes behind a gated first one, release both batches, and count the
    writers woken in each turn of the loop (a callback that runs once per turn)."""
    async def scenario():
        woken: list[int] = []

        async def writer(i: int):
            result = await group.submit((f"t{i}", f"k{i}"), GUARD)
            woken.append(i)
            return result

        blocker = asyncio.ensure_future(writer(-1))
        await _until(lambda: store.batches)
        writers = [asyncio.ensure_future(writer(i)) for i in range(n)]
        await _until(lambda: group.queued == n)
        with PerTurn(lambda: len(woken)) as turns:
            await store.release()
            await store.release()
            results = await asyncio.gather(blocker, *writers)
        return results, turns.growth

    return asyncio.run(scenario())


def test_a_batchs_outcomes_wake_a_slice_of_its_writers_per_turn_of_the_loop():
    store = FakeBatchStore(gate=True)
    results, per_turn = _woken_per_turn(_group(store), store, 100)
    assert results == list(range(1, 102))  # each write its own outcome, in order
    assert [len(b) for b in store.batches] == [1, 100]
    # 100 writers woken at once ran in one turn of the loop (a revocation's deletes each
    # apply a state and submit the next): no more than a slice of them now.
    assert max(per_turn) == DELIVER_SLICE


def test_a_batch_cancelled_while_its_outcomes_are_handed_out_still_hands_out_every_one():
    async def scenario():
        store = FakeBatchStore(gate=True)
        group = _group(store)
        blocker, futures = await _behind_a_batch(group, store, _writes(1, 3 * DELIVER_SLICE + 1))
        await store.release()
        await store.release()
        await _until(lambda: any(f.done() for f in futures))
        assert not all(f.done() for f in futures)  # handed out in slices
        (batch,) = [t for t in asyncio.all_tasks()
                    if t.get_coro().__qualname__ == "GroupCommit._run"]
        batch.cancel()  # between two slices (a broker stopping)
        for _ in range(50):
            await asyncio.sleep(0)
        # The writes were committed: every waiter got its own outcome, none a cancel.
        assert await blocker == 1
        assert [f.result() for f in futures] == list(range(2, 3 * DELIVER_SLICE + 2))

    asyncio.run(scenario())


def test_the_next_batch_goes_before_a_batchs_outcomes_are_all_handed_out():
    # Handing outcomes out in slices must not hold the next batch back: it is sent as
    # soon as the one before it committed, not once every writer of that one woke.
    async def scenario():
        loop = asyncio.get_running_loop()
        gates: list[asyncio.Future] = []
        sent: list[tuple[int, int]] = []  # (batch size, writers woken when it was sent)
        woken = [0]

        async def run_blocking(fn, writes, *, guard):
            sent.append((len(writes), woken[0]))
            gate = loop.create_future()
            gates.append(gate)
            await gate
            return list(range(len(writes)))

        group = GroupCommit(lambda writes, guard: None, size_of=lambda w: 1,
                            run_blocking=run_blocking)

        async def writer(i: int) -> int:
            result = await group.submit(i, GUARD)
            woken[0] += 1
            return result

        tasks = [asyncio.ensure_future(writer(0))]
        await _until(lambda: gates)
        tasks += [asyncio.ensure_future(writer(i)) for i in range(1, 101)]
        await _until(lambda: group.queued == 100)
        gates[0].set_result(None)
        await _until(lambda: len(gates) == 2)
        tasks += [asyncio.ensure_future(writer(i)) for i in range(101, 111)]
        await _until(lambda: group.queued == 10)
        gates[1].set_result(None)
        await _until(lambda: len(gates) == 3)
        gates[2].set_result(None)
        results = await asyncio.gather(*tasks)
        return sent, results

    sent, results = asyncio.run(scenario())
    assert [size for size, _ in sent] == [1, 100, 10]
    assert results == [0] + list(range(100)) + list(range(10))
    # The third batch went while the second's 100 writers were still being woken.
    assert sent[2][1] <= 1 + DELIVER_SLICE


def test_bounds_must_be_positive():
    with pytest.raises(ValueError):
        GroupCommit(lambda w, guard: [], size_of=len, max_writes=0)


# --- through the write path ----------------------------------------------------------------


class FakeFollowers:
    def __init__(self) -> None:
        self.waited: list = []

    def wait_for(self, versions):
        self.waited.append(list(versions))
        fut: concurrent.futures.Future = concurrent.futures.Future()
        fut.set_result(None)
        return [fut]

    def latest(self):
        return []


class WriteStore:
    """The token store's write builders, recording (token id, key) pairs."""

    @staticmethod
    def create_write(info, record):
        return (info.token_id, record)

    update_write = create_write

    @staticmethod
    def delete_write(token_id, record):
        return (token_id, record)

    def get(self, token_id):
        return None


def _ctx(key: str) -> RequestContext:
    return RequestContext(
        header=RequestHeader(ApiKey.CREATE_DELEGATION_TOKEN, 3, 1, "client"),
        principal=KafkaPrincipal.user("alice"),
        listener="BROKER",
        security_protocol="SASL_PLAINTEXT",
        client_host="127.0.0.1",
        client_port=0,
        payload=b"",
        forwarded=True,
        write=WriteTicket(key),
    )


def _info(token_id: str) -> TokenInformation:
    alice = KafkaPrincipal.user("alice")
    return TokenInformation(token_id, alice, alice, (), 0, 10, 10)


def _tokens(store: FakeBatchStore, followers: FakeFollowers, guard=lambda: GUARD) -> TokenService:
    writes = WritePath(
        guard=guard,
        followers=followers,
        records=SimpleNamespace(op=lambda key, api, outcome: key),
        cache_timeout_s=1.0,
        unknown=(Unavailable,),
        exists=KeyExists,
        tokens=_group(store),
    )
    return TokenService(SimpleNamespace(), SimpleNamespace(), WriteStore(), writes)


def test_concurrent_creates_commit_together_and_each_reports_its_own_version():
    async def scenario():
        store = FakeBatchStore(gate=True)
        followers = FakeFollowers()
        tokens = _tokens(store, followers)
        ctxs = [_ctx(f"k{i}") for i in range(4)]
        first = asyncio.ensure_future(tokens.create(ctxs[0], _info("t0")))
        await _until(lambda: store.batches)
        rest = [asyncio.ensure_future(tokens.create(c, _info(f"t{i}")))
                for i, c in enumerate(ctxs[1:], start=1)]
        await _until(lambda: len(store.batches) == 1 and tokens._writes._tokens.queued == 3)
        await store.release()
        await store.release()
        await asyncio.gather(first, *rest)
        assert [c.write.committed for c in ctxs] == [[("tokens", n)] for n in (1, 2, 3, 4)]
        assert followers.waited == [[("tokens", n)] for n in (1, 2, 3, 4)]

    asyncio.run(scenario())


def test_a_recorded_key_in_a_batch_is_already_applied_and_a_lost_batch_is_unknown():
    async def scenario():
        store = FakeBatchStore()
        store.keys.add("k1")
        tokens = _tokens(store, FakeFollowers())
        with pytest.raises(AlreadyApplied):
            await tokens.create(_ctx("k1"), _info("t1"))
        store.down = True
        with pytest.raises(OutcomeUnknown):
            await tokens.create(_ctx("k2"), _info("t2"))

    asyncio.run(scenario())


def test_a_write_on_a_broker_that_is_not_the_controller_is_refused_before_queueing():
    async def scenario():
        store = FakeBatchStore()
        tokens = _tokens(store, FakeFollowers(), guard=lambda: None)
        with pytest.raises(KafkaError) as raised:
            await tokens.create(_ctx("k1"), _info("t1"))
        assert raised.value.error == Errors.NOT_CONTROLLER
        assert store.batches == []

    asyncio.run(scenario())
