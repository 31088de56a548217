"""Stopping a background task of the broker's event loop.

Owns :func:`cancel_and_wait`, the one way the gates stop the task they run: cancel it
and wait until it has ended, its cancellation swallowed. Must not start tasks.
"""

from __future__ import annotations

import asyncio
import contextlib


async def cancel_and_wait(task: asyncio.Task | None) -> None:
    """Cancel ``task`` (if it is still running) and wait until it has ended."""
    if task is None or task.done():
        return
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
