"""SerialWorker: the single thread each ``zk`` recipe runs its ZooKeeper work on.

Owns nothing but a queue of named tasks and one daemon thread, so that kazoo's event
thread never waits on ZooKeeper or on a cache. Must not know any znode layout.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)


class SerialWorker:
    """One daemon thread running submitted tasks in order.

    A task is named by a key; submitting a key that is already pending does not queue
    it twice (a pending "resync" absorbs every later request for one). Exceptions from
    a task are logged; retrying is the task's own business.
    """

    def __init__(self, name: str) -> None:
        self._name = name
        self._cond = threading.Condition()
        self._pending: dict[str, Callable[[], None]] = {}
        self._running = False
        self._closed = False
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        with self._cond:
            if self._thread is not None:
                return
            self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
        self._thread.start()

    def submit(self, key: str, task: Callable[[], None]) -> None:
        with self._cond:
            if self._closed:
                return
            self._pending.setdefault(key, task)
            self._cond.notify_all()

    def idle(self) -> bool:
        """True when no task is pending or running."""
        with self._cond:
            return not self._pending and not self._running

    @property
    def closed(self) -> bool:
        return self._closed

    def sleep(self, seconds: float) -> bool:
        """Wait up to ``seconds`` unless closed meanwhile; True when closed."""
        with self._cond:
            self._cond.wait_for(lambda: self._closed, timeout=seconds)
            return self._closed

    def close(self, timeout: float = 5.0) -> None:
        with self._cond:
            self._closed = True
            self._pending.clear()
            self._cond.notify_all()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    def _run(self) -> None:
        while True:
            with self._cond:
                self._running = False
                self._cond.notify_all()
                self._cond.wait_for(lambda: self._closed or self._pending)
                if self._closed:
                    return
                key = next(iter(self._pending))
                task = self._pending.pop(key)
                self._running = True
            try:
                task()
            except Exception:
                log.exception("%s: task %s failed", self._name, key)
