"""Which asyncio event loop a broker runs on: uvloop when it is installed, else asyncio's.

uvloop (libuv underneath) is part of the default install (``setup.cfg``); the
fallback keeps the broker working where it cannot be installed. Both run the
same code: the broker uses only the asyncio API. One log line at start says
which loop runs. Must not change anything else about the loop.

While a broker runs, the interpreter hands the GIL to a waiting thread after
:data:`GIL_SWITCH_INTERVAL_S` instead of CPython's 5 ms. The loop thread can be busy
for seconds in slices that yield only to the loop (a describe of a million tokens),
and kazoo's I/O and callback threads then waited up to 5 ms for the GIL at every
step of every ZooKeeper reply. The freshness gate's confirmation round (eight
requests and their callbacks) took 1-3.4 s during such a describe, the view went
stale and token logins waited for it: 1.7-4.4 s in B9 at 1M tokens. With 0.5 ms the
same describe left the slowest login at 35-50 ms (docs/performance.md, B9).
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

log = logging.getLogger("tokensvc.broker")

T = TypeVar("T")

GIL_SWITCH_INTERVAL_S = 0.0005


def loop_factory() -> tuple[Callable[[], asyncio.AbstractEventLoop], str]:
    """A factory of new event loops, and the name of the loop it makes."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop, "asyncio (uvloop is not installed)"
    return uvloop.new_event_loop, f"uvloop {uvloop.__version__}"


def new_event_loop() -> asyncio.AbstractEventLoop:
    """A new loop for a broker (uvloop when installed); logs which one."""
    factory, name = loop_factory()
    log.info("event loop: %s", name)
    return factory()


def run(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run`` on the broker's loop, with the broker's GIL switch interval
    (the interpreter's own is restored afterwards)."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)
    try:
        with asyncio.Runner(loop_factory=new_event_loop) as runner:
            return runner.run(main)
    finally:
        sys.setswitchinterval(before)
