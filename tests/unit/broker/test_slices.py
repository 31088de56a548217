"""Work over many items given back to the event loop in slices of time
(``tokensvc.broker.loop.slices``): the pure budget on a fake clock, and the async walks
counted in loop turns."""

from __future__ import annotations

import asyncio

import pytest

from tests.support.loopturns import PerTurn
from tokensvc.broker.loop import slices
from tokensvc.broker.loop.slices import SliceBudget, sliced, sliced_filter


class Ticks:
    """A clock that moves by ``step`` each time it is read."""

    def __init__(self, step: float = 0.0) -> None:
        self.now = 0.0
        self.step = step

    def __call__(self) -> float:
        self.now += self.step
        return self.now


def test_a_slice_is_spent_once_its_budget_has_run_and_the_next_begins_then():
    clock = Ticks()
    budget = SliceBudget(0.002, clock)
    clock.now = 0.0019
    assert not budget.spent()
    clock.now = 0.002
    assert budget.spent()
    assert not budget.spent()  # a new slice began at 0.002
    clock.now = 0.0041
    assert budget.spent()
    budget.restart()
    assert not budget.spent()


def test_a_budget_must_be_positive_and_defaults_to_the_module_value(monkeypatch):
    with pytest.raises(ValueError, match="positive"):
        SliceBudget(0)
    monkeypatch.setattr(slices, "SLICE_BUDGET_S", 5.0)
    clock = Ticks()
    budget = SliceBudget(clock=clock)
    clock.now = 4.9
    assert not budget.spent()
    clock.now = 5.0
    assert budget.spent()


async def _turns_while(work) -> tuple[object, int]:
    """Run ``work`` and count the loop turns meanwhile."""
    with PerTurn(lambda: 0) as turns:
        return await work, len(turns.growth)


def test_a_walk_yields_between_slices_and_keeps_the_order():
    async def scenario():
        # Every read of the clock spends the budget: a yield every 64 items.
        result, turns = await _turns_while(
            sliced(range(1_000), lambda n: n * 2, budget=SliceBudget(1.0, Ticks(1.0))))
        assert result == [n * 2 for n in range(1_000)]
        assert turns >= 1_000 // 64
        # A budget never spent: one step, no turn given.
        result, turns = await _turns_while(
            sliced(range(1_000), str, budget=SliceBudget(1.0, Ticks(0.0))))
        assert result == [str(n) for n in range(1_000)]
        assert turns <= 1
    asyncio.run(scenario())


def test_a_filtering_walk_keeps_what_is_not_none_in_order():
    async def scenario():
        kept, turns = await _turns_while(sliced_filter(
            range(500), lambda n: n if n % 3 == 0 else None,
            budget=SliceBudget(1.0, Ticks(1.0)), every=10))
        assert kept == list(range(0, 500, 3))
        assert turns >= 500 // 10
    asyncio.run(scenario())
