"""Counting what happens in each turn of a running asyncio loop, for unit tests of work
that must give the loop turns (a revocation's slices, a batch's outcomes handed out).

Owns only the counting; it must not know what is measured.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Self


class PerTurn:
    """While the ``with`` block runs, a callback runs once per turn of the running loop:
    it records how much ``measure()`` grew since the turn before (``growth``), then calls
    ``each`` (if given). ``len(growth)`` is the number of turns seen."""

    def __init__(self, measure: Callable[[], int],
                 each: Callable[[], None] | None = None) -> None:
        self._measure = measure
        self._each = each
        self._seen = measure()
        self._running = False
        self.growth: list[int] = []

    def __enter__(self) -> Self:
        self._running = True
        self._loop = asyncio.get_running_loop()
        self._loop.call_soon(self._turn)
        return self

    def __exit__(self, *_exc: object) -> None:
        self._running = False

    def _turn(self) -> None:
        now = self._measure()
        self.growth.append(now - self._seen)
        self._seen = now
        if self._each is not None:
            self._each()
        if self._running:
            self._loop.call_soon(self._turn)
