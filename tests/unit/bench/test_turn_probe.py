"""The turn probe's pure part: naming a turn's callbacks and the line for a long turn."""

from __future__ import annotations

import asyncio
from collections import Counter

from bench.probes.turns import callback_name, summarize


def test_a_tasks_step_is_named_by_its_coroutine_and_a_function_by_its_name():
    async def revoke_worker():
        await asyncio.sleep(0)

    async def scenario():
        task = asyncio.ensure_future(revoke_worker())
        named = callback_name(task.cancel)  # a method of the task, as its wake-up is
        await task
        return named

    assert asyncio.run(scenario()).endswith("revoke_worker")
    assert callback_name(test_a_tasks_step_is_named_by_its_coroutine_and_a_function_by_its_name
                         ).endswith("by_its_name")


def test_a_long_turn_lists_its_callbacks_longest_first():
    spent = Counter({"task:Dispatcher.dispatch": 0.0288, "GroupCommit._batch_done": 0.0008})
    counts = Counter({"task:Dispatcher.dispatch": 1, "GroupCommit._batch_done": 3})
    line = summarize(1795905086.3261, 0.0251, spent, counts)
    assert line == ("1795905086.326 turn 29.6 ms, 4 callbacks, loop thread CPU 25.1 ms: "
                    "task:Dispatcher.dispatch x1 28.8 ms, GroupCommit._batch_done x3 0.8 ms")
