"""The kazoo handler of every tokensvc ZooKeeper client: kazoo's threading handler, with
a ``select`` that costs one system call.

kazoo's connection thread waits on its socket before every read and every write (a
response is at least two reads: its length, then its body), and its loop waits for the
next thing to do. Its threading handler answers each wait by building an epoll selector,
registering the sockets, waiting and closing the selector again: four system calls and a
selector's bookkeeping per wait, several waits per ZooKeeper request. In the write path's
expire test (three in-process brokers following a stream of change notifications) that
creation, registration and close were a tenth of the test process's py-spy samples, and
kernel time besides. :func:`poll_select` answers the same question with one
``poll(2)``: a poll object is plain memory until it waits, and poll has no limit on
descriptor numbers (the reason kazoo left ``select(2)``).

Owns :class:`PollHandler` (``KazooClient(handler=PollHandler())``) and
:func:`poll_select`, which keeps ``select.select``'s contract as kazoo uses it: lists of
objects with ``fileno()`` (or descriptors) in, the ready ones out, a timeout in seconds
or None, and a hang-up or error reported as readable and writable (as the selectors
module does). It must not change anything else about the handler.
"""

from __future__ import annotations

import math
import select
from typing import Any

from kazoo.handlers.threading import SequentialThreadingHandler

_READ = select.POLLIN | select.POLLPRI
_WRITE = select.POLLOUT


def _fd(obj: Any) -> int:
    fd = obj if isinstance(obj, int) else int(obj.fileno())
    if fd < 0:
        raise ValueError(f"invalid file descriptor: {fd}")
    return fd


def poll_select(rlist: list[Any], wlist: list[Any], xlist: list[Any],
                timeout: float | None = None) -> tuple[list[Any], list[Any], list[Any]]:
    """``select.select(rlist, wlist, xlist, timeout)`` by one ``poll(2)`` (``xlist`` is
    accepted, as kazoo passes it, and never reported)."""
    if timeout is not None and timeout < 0:
        raise ValueError("timeout must be non-negative")
    masks: dict[int, int] = {}
    for obj in rlist:
        fd = _fd(obj)
        masks[fd] = masks.get(fd, 0) | _READ
    for obj in wlist:
        fd = _fd(obj)
        masks[fd] = masks.get(fd, 0) | _WRITE
    poller = select.poll()
    for fd, mask in masks.items():
        poller.register(fd, mask)
    # Rounded up, as the selectors module does: a wait never ends before it is due.
    ready = dict(poller.poll(None if timeout is None else math.ceil(timeout * 1000)))
    if not ready:
        return [], [], []
    # A hang-up or error (any event beyond the one asked for) wakes both sides.
    readable = [obj for obj in rlist if ready.get(_fd(obj), 0) & ~_WRITE]
    writable = [obj for obj in wlist if ready.get(_fd(obj), 0) & ~_READ]
    return readable, writable, []


class PollHandler(SequentialThreadingHandler):
    """kazoo's threading handler whose ``select`` is :func:`poll_select`."""

    name = "tokensvc_poll_threading_handler"

    def select(self, *args: Any, **kwargs: Any) -> tuple[list[Any], list[Any], list[Any]]:
        return poll_select(*args, **kwargs)
