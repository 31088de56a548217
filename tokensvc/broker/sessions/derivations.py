"""SCRAM's PBKDF2 derivations, off the event loop.

Owns :class:`DerivationPool`: one worker thread that runs the two derivations a SCRAM
exchange may need -- a token's first derivation on this broker
(:meth:`tokensvc.scram.server.ScramServer.prepare`) and the equal-cost derivation a
failed exchange spends so that a token's first login cannot be told from a failure by
its duration (:meth:`~tokensvc.scram.server.ScramServer.spend_one_derivation`).

Why a thread, and one: a derivation is 4,096 iterations of HMAC-SHA-256 or -512 (a few
milliseconds); on the event loop, a stream of failed logins would hold the loop for one
derivation each, and every other connection of the broker would wait. ``hashlib``
releases the GIL while it derives, so a worker thread costs the loop nothing but the
hand-off. One worker bounds what a flood of failed logins can take to one core of the
machine, whatever its rate; the exchanges queue in arrival order, so a flood delays the
failing clients themselves and the first logins of tokens queued behind them (same
queue, same cost: no timing difference between the two), never the loop, other logins
or other requests.

Must not: decide anything about authentication, or run anything but derivations.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor


class DerivationPool:
    """Runs blocking derivations in one worker thread. Stats: ``runs``, ``queued``."""

    def __init__(self) -> None:
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="scram-derive")
        self.runs = 0
        self.queued = 0

    async def run(self, derivation: Callable[[], None]) -> None:
        """Run ``derivation`` in the worker; return when it is done."""
        self.queued += 1
        try:
            await asyncio.wrap_future(self._executor.submit(derivation))
        finally:
            self.queued -= 1
            self.runs += 1

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
