"""Work over many items on the event loop, given back to the loop in slices of time.

A handler that walks ten thousand tokens in one step holds the loop for that step: every
login on the broker waits behind it. :class:`SliceBudget` is the pure rule (a slice ends
once it has run :data:`SLICE_BUDGET_S`, the clock read every :data:`CHECK_EVERY` items);
:func:`sliced` and :func:`sliced_filter` are the async shells that yield to the loop
(``asyncio.sleep(0)``) between slices.

What the loop may do between two slices is the caller's to allow: the items are a list
taken before the walk, and each is looked at once, in order.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")

# How long one slice may hold the event loop (as the describe's slices), and how many
# items go between two reads of the clock.
SLICE_BUDGET_S = 0.002
CHECK_EVERY = 64


class SliceBudget:
    """Says when a slice of work has run its budget. Pure: the clock is given."""

    def __init__(self, budget_s: float | None = None,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        budget_s = SLICE_BUDGET_S if budget_s is None else budget_s
        if budget_s <= 0:
            raise ValueError(f"a slice's budget must be positive, got {budget_s}")
        self._budget_s = budget_s
        self._clock = clock
        self._started = clock()

    def spent(self) -> bool:
        """True once the slice begun last has run its budget; the next slice then begins."""
        now = self._clock()
        if now - self._started < self._budget_s:
            return False
        self._started = now
        return True

    def restart(self) -> None:
        """A slice begins now (after the caller gave the loop a turn of its own)."""
        self._started = self._clock()


async def sliced(items: Iterable[T], each: Callable[[T], R], *,
                 budget: SliceBudget | None = None, every: int = CHECK_EVERY) -> list[R]:
    """``[each(item) for item in items]``, yielding to the loop whenever a slice has run
    ``budget``'s time."""
    budget = budget or SliceBudget()
    out: list[R] = []
    append = out.append
    for n, item in enumerate(items, 1):
        append(each(item))
        if n % every == 0 and budget.spent():
            await asyncio.sleep(0)
    return out


async def sliced_filter(items: Iterable[T], keep: Callable[[T], R | None], *,
                        budget: SliceBudget | None = None, every: int = CHECK_EVERY) -> list[R]:
    """The results of ``keep(item)`` that are not None, in order; yields as :func:`sliced`."""
    budget = budget or SliceBudget()
    out: list[R] = []
    append = out.append
    for n, item in enumerate(items, 1):
        kept = keep(item)
        if kept is not None:
            append(kept)
        if n % every == 0 and budget.spent():
            await asyncio.sleep(0)
    return out
