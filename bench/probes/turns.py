"""Long turns of a broker's event loop, and what ran in them.

A turn is one pass of the loop over its ready callbacks. A login waits for the turn in
progress, so a long turn is a stall, whichever of its callbacks made it: 128 short task
steps are as long as one long one. uvloop runs its turns in C, so the probe switches the
broker to asyncio's own loop (the same code runs on both: ``tokensvc.broker.loop.eventloop``)
and times every callback of every turn. A turn whose callbacks took ``limit_s`` or more is
written as one line: when, its callbacks' time, the loop thread's CPU time in it, and the
callbacks grouped by what they run (a task's coroutine, or the function), longest first.
The figures are those of asyncio's loop with a timer around each callback, slower than
uvloop's: read them for what a turn is made of, not for its length on uvloop.

``summarize`` is the pure part (unit-tested); ``install`` patches asyncio in this process.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections import Counter
from collections.abc import Callable
from typing import TextIO


def callback_name(callback: Callable) -> str:
    """What a ready callback runs: ``task:<coroutine>`` for a task's step or wake-up,
    else the callback's qualified name."""
    owner = getattr(callback, "__self__", None)
    if isinstance(owner, asyncio.Future) and hasattr(owner, "get_coro"):
        coro = owner.get_coro()
        return "task:" + getattr(coro, "__qualname__", type(coro).__name__)
    return getattr(callback, "__qualname__", None) or type(callback).__name__


def summarize(started: float, cpu_s: float, spent: Counter, counts: Counter,
              top: int = 6) -> str:
    """One line for a long turn: ``spent`` and ``counts`` by callback name."""
    total = sum(spent.values())
    parts = ", ".join(f"{name} x{counts[name]} {seconds * 1000:.1f} ms"
                      for name, seconds in spent.most_common(top))
    return (f"{started:.3f} turn {total * 1000:.1f} ms, {sum(counts.values())} callbacks, "
            f"loop thread CPU {cpu_s * 1000:.1f} ms: {parts}")


def install(limit_s: float, out: TextIO) -> None:
    """Use asyncio's loop in this process and write its turns of ``limit_s`` or more."""
    import asyncio.base_events
    import asyncio.events

    sys.modules["uvloop"] = None  # type: ignore[assignment]  (the broker falls back)
    spent: Counter = Counter()
    counts: Counter = Counter()
    run_handle = asyncio.events.Handle._run
    run_once = asyncio.base_events.BaseEventLoop._run_once

    def timed_run(handle: asyncio.events.Handle) -> None:
        began = time.perf_counter()
        try:
            run_handle(handle)
        finally:
            name = callback_name(handle._callback)
            spent[name] += time.perf_counter() - began
            counts[name] += 1

    def timed_turn(loop: asyncio.base_events.BaseEventLoop) -> None:
        spent.clear()
        counts.clear()
        started, cpu = time.time(), time.thread_time()
        run_once(loop)
        if sum(spent.values()) >= limit_s:
            out.write(summarize(started, time.thread_time() - cpu, spent, counts) + "\n")
            out.flush()

    asyncio.events.Handle._run = timed_run  # type: ignore[method-assign]
    asyncio.base_events.BaseEventLoop._run_once = timed_turn  # type: ignore[method-assign]
