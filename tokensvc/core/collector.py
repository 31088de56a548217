"""The cyclic garbage collector paused around bulk work on the token cache.

A broker holds up to millions of tokens. Code that builds or walks them all at once
(a cold start's decode and fill, a snapshot's copy of the cache) makes containers of a
million items; a collection started meanwhile (any thread's allocations can start one)
walks every item while it holds the GIL, and so stalls the event loop: at a million
tokens one young collection during a snapshot's encode took 53 ms (docs/performance.md,
B13). :func:`paused` turns the collector off for such a stretch. Reference counting still
frees everything that is not in a cycle meanwhile.

Threads overlap: the collector's switch is one per process, so the pauses are counted,
and it is switched back on when the last one ends, and only if it was on when the first
began. No I/O, no clock: the only state it touches is the collector's switch.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_depth = 0
_was_enabled = False


@contextmanager
def paused() -> Iterator[None]:
    """No cyclic collection from entry to exit, in any thread of the process."""
    global _depth, _was_enabled
    with _lock:
        if _depth == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _was_enabled:
                gc.enable()
