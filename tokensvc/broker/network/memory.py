"""The broker-wide request memory pool (``queued.max.request.bytes``), without I/O.

Owns how many request bytes the broker's connections hold beyond their own receive
buffers, and the line of connections waiting for some (served in arrival order).
Must not: read sockets or know frames; a connection that waits is told through the
callback it registered.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable


class RequestMemoryPool:
    """The broker-wide budget for request bytes held beyond the connections' own buffers.

    ``queued.max.request.bytes`` (``capacity``; -1 = no cap). A connection
    that cannot reserve what its next frame needs registers a callback with
    :meth:`wait` and is not read; :meth:`release` calls the waiters in arrival
    order while they obtain their memory (each callback reserves and returns
    True, or returns False to stay first in line).
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.used = 0
        self._waiters: deque[Callable[[], bool]] = deque()

    @property
    def waiting(self) -> int:
        return len(self._waiters)

    def try_reserve(self, nbytes: int) -> bool:
        """Reserve ``nbytes`` unless that passes the cap or someone is already waiting."""
        if self._waiters:
            return False
        return self.reserve_for_waiter(nbytes)

    def reserve_for_waiter(self, nbytes: int) -> bool:
        """``try_reserve`` for the waiter at the head of the line."""
        if self.capacity >= 0 and self.used + nbytes > self.capacity:
            return False
        self.used += nbytes
        return True

    def release(self, nbytes: int) -> None:
        self.used -= nbytes
        while self._waiters:
            if not self._waiters[0]():
                break
            self._waiters.popleft()

    def wait(self, callback: Callable[[], bool]) -> None:
        self._waiters.append(callback)

    def cancel(self, callback: Callable[[], bool]) -> None:
        try:
            self._waiters.remove(callback)
        except ValueError:
            pass
