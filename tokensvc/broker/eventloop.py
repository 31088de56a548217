"""Which asyncio event loop a broker runs on: uvloop when it is installed, else asyncio's.

uvloop (libuv underneath) is part of the default install (``setup.cfg``); the
fallback keeps the broker working where it cannot be installed. Both run the
same code: the broker uses only the asyncio API. One log line at start says
which loop runs. Must not change anything else about the loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

log = logging.getLogger("tokensvc.broker")

T = TypeVar("T")


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
    """``asyncio.run`` on the broker's loop."""
    with asyncio.Runner(loop_factory=new_event_loop) as runner:
        return runner.run(main)
