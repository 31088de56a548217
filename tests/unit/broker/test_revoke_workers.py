"""TokenService.revoke: a bulk revocation's deletes kept in flight by a pool of workers.

A fake write path completes the deletes queued to it 128 at a time, one batch per turn of
the event loop (as the group commit does a transaction). No ZooKeeper: what is checked is
how the deletes are started, not how they are stored (tests/integration/broker/
test_revocation.py does that on a real cluster)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from tests.support.loopturns import PerTurn
from tokensvc.broker.loop import slices
from tokensvc.broker.services import REVOKE_START_SLICE, REVOKE_WINDOW, TokenService
from tokensvc.core.cache import TokenCache
from tokensvc.core.errors import Errors, KafkaError
from tokensvc.core.keys import MasterKeys
from tokensvc.core.labels import NO_LABELS
from tokensvc.core.principal import KafkaPrincipal
from tokensvc.core.token import TokenInformation

BATCH = 128


class BatchedWrites:
    """commit_token waits for its batch; one batch of up to 128 completes per loop turn."""

    def __init__(self, fail: str | None = None) -> None:
        self.started: list[str] = []
        self.waiting: list[tuple[str, asyncio.Future[None]]] = []
        self.in_flight_max = 0
        self.fail = fail

    async def commit_token(self, ctx, write, token_id, info) -> None:
        self.started.append(token_id)
        done = asyncio.get_running_loop().create_future()
        self.waiting.append((token_id, done))
        self.in_flight_max = max(self.in_flight_max, len(self.waiting))
        await done

    def complete_one_batch(self) -> None:
        batch, self.waiting = self.waiting[:BATCH], self.waiting[BATCH:]
        for token_id, done in batch:
            if token_id == self.fail:
                done.set_exception(KafkaError(Errors.UNKNOWN_SERVER_ERROR, "lost"))
            else:
                done.set_result(None)


def _infos(n: int) -> list[TokenInformation]:
    bulk = KafkaPrincipal.user("bulk")
    return [TokenInformation(f"t{i:05d}", bulk, bulk, (), 0, 10, 10) for i in range(n)]


def _store() -> SimpleNamespace:
    return SimpleNamespace(delete_write=lambda token_id, record: (token_id, record))


async def _revoke_counting_turns(writes: BatchedWrites, infos: list[TokenInformation]):
    """Run the revocation; a callback that runs once per loop turn completes one batch
    and notes how many deletes began since the last turn."""
    service = TokenService(SimpleNamespace(), SimpleNamespace(), _store(), writes)
    with PerTurn(lambda: len(writes.started), each=writes.complete_one_batch) as turns:
        return await service.revoke(None, infos), turns.growth


def test_every_token_is_deleted_once_and_answered_in_the_order_given():
    async def scenario():
        writes = BatchedWrites()
        infos = _infos(3_000)
        done, per_turn = await _revoke_counting_turns(writes, infos)
        assert done == infos
        assert sorted(writes.started) == sorted(i.token_id for i in done)  # each once
        # Several batches stay queued, as before ...
        assert writes.in_flight_max == REVOKE_WINDOW
        # ... but no turn of the loop starts a whole window: at most what one batch's
        # completion frees, plus one slice of new workers (a window started as a whole,
        # 512 at once, held the controller's loop 25-30 ms at 1M tokens).
        assert max(per_turn) <= BATCH + REVOKE_START_SLICE < REVOKE_WINDOW

    asyncio.run(scenario())


def test_after_a_failed_delete_no_other_delete_starts():
    async def scenario():
        writes = BatchedWrites(fail="t00100")
        with pytest.raises(KafkaError):
            await _revoke_counting_turns(writes, _infos(3_000))
        started = len(writes.started)
        for _ in range(20):  # the writes already submitted finish; nothing new begins
            writes.complete_one_batch()
            await asyncio.sleep(0)
        assert len(writes.started) == started < 3_000

    asyncio.run(scenario())


def test_a_revocation_of_nothing_deletes_nothing():
    async def scenario():
        writes = BatchedWrites()
        done, _ = await _revoke_counting_turns(writes, [])
        assert done == [] and writes.started == []

    asyncio.run(scenario())


def test_the_tokens_a_revocation_names_are_looked_up_in_slices_of_the_loops_time(monkeypatch):
    # Looking up 10,000 tokens in one step held the controller's loop for 15-30 ms. With a
    # budget spent at every check, the lookups give the loop a turn every 64 tokens.
    monkeypatch.setattr(slices, "SLICE_BUDGET_S", 1e-12)
    cache = TokenCache(MasterKeys("k"))
    bulk, other = KafkaPrincipal.user("bulk"), KafkaPrincipal.user("other")
    for i in range(2_000):
        owner = bulk if i % 2 == 0 else other
        cache.upsert(TokenInformation(f"t{i:05d}", owner, owner, (), 0, 10**12, 10**12))
    service = TokenService(cache, SimpleNamespace(), _store(), BatchedWrites())
    looked_up: list[int] = []
    info = cache.info

    def counting(token_id: str):
        looked_up.append(1)
        return info(token_id)

    monkeypatch.setattr(cache, "info", counting)

    async def scenario():
        with PerTurn(lambda: len(looked_up)) as turns:
            named = await service.naming(bulk, NO_LABELS)
        return named, turns.growth

    named, steps = asyncio.run(scenario())
    assert sorted(i.token_id for i in named) == [f"t{i:05d}" for i in range(0, 2_000, 2)]
    assert len(looked_up) == 1_000 and max(steps) <= 64
