"""Finishing a coroutine in a task after it was started outside one.

The login path runs a request's coroutine on the spot (``coro.send(None)``) so that a
login that never waits allocates no task. When the coroutine does wait, what it
yielded (the future it waits for) must be handed to a task that then drives the rest:
:func:`continue_in_task` is that task's body, and ``_Reyield`` passes the future on to
the event loop as if the task had yielded it itself. Cancellation of the task is
thrown into the coroutine.

Must not: know requests or connections.
"""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any


class _Reyield:
    """Hands a future a coroutine yielded on to the task now running that coroutine."""

    __slots__ = ("future",)

    def __init__(self, future: Any) -> None:
        self.future = future

    def __await__(self):
        return (yield self.future)


async def continue_in_task(coro: Coroutine[Any, Any, Any], waiting: Any) -> Any:
    """Run the rest of ``coro``, which was started outside a task and yielded ``waiting``."""
    while True:
        try:
            await _Reyield(waiting)
        except BaseException as exc:  # noqa: BLE001 - cancellation is passed on to coro
            try:
                waiting = coro.throw(exc)
            except StopIteration as done:
                return done.value
        else:
            try:
                waiting = coro.send(None)
            except StopIteration as done:
                return done.value
