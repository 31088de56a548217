"""A supervised child process: started with its output appended to a log file, tied to
its parent's life when asked, stopped with a grace period, killed, paused and resumed.

Owns only processes it started (a :class:`SupervisedProcess` holds the ``Popen``); it
never signals a pid it did not start, and never reads the child's output but through
the log file it names.

Dying with the parent: the child asks the kernel for SIGKILL when the thread that
started it ends (``PR_SET_PDEATHSIG``), in a session of its own. Without it the child
gets a session of its own only and outlives the parent (a cluster started in the
background).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

_PR_SET_PDEATHSIG = 1
# Loaded in the parent: between fork and exec the child makes one foreign call only.
_LIBC = ctypes.CDLL(None, use_errno=True)


def die_with_parent() -> None:  # runs in the child between fork and exec
    """Have the kernel kill this (child) process when the thread that started it ends."""
    _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _own_session_dying_with_parent() -> None:  # runs in the child between fork and exec
    os.setsid()
    die_with_parent()


class SupervisedProcess:
    """One child process run from ``argv``, its stdout and stderr appended to ``output``."""

    def __init__(
        self,
        argv: Sequence[str],
        output: Path,
        *,
        die_with_parent: bool = True,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
    ) -> None:
        self.argv = list(argv)
        self.output = Path(output)
        self.die_with_parent = die_with_parent
        self.env = dict(env) if env is not None else None
        self.cwd = cwd
        self._popen: subprocess.Popen | None = None

    def spawn(self) -> None:
        """Start the process (nothing if it runs already)."""
        if self.running:
            return
        self.output.parent.mkdir(parents=True, exist_ok=True)
        with open(self.output, "ab") as out:
            # preexec_fn runs only setsid/prctl, both async-signal-safe.
            self._popen = subprocess.Popen(
                self.argv,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self.env,
                cwd=self.cwd,
                preexec_fn=_own_session_dying_with_parent if self.die_with_parent else os.setsid,  # noqa: PLW1509
            )

    @property
    def pid(self) -> int | None:
        """The pid of the last start (None before the first); see :attr:`running`."""
        return self._popen.pid if self._popen is not None else None

    @property
    def running(self) -> bool:
        return self._popen is not None and self._popen.poll() is None

    def poll(self) -> int | None:
        """The exit status once the process has exited, else None."""
        return self._popen.poll() if self._popen is not None else None

    @property
    def returncode(self) -> int | None:
        return self.poll()

    def stop(self, grace: float = 10.0) -> None:
        """SIGTERM and ``grace`` seconds to exit, then SIGKILL (at once when 0)."""
        if self._popen is None or self._popen.poll() is not None:
            return
        if grace > 0:
            self._popen.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._popen.wait(grace)
                return
        self._popen.kill()
        self._popen.wait(10)

    def kill(self) -> None:
        """SIGKILL: a crash, as fault tests need."""
        self.stop(grace=0)

    def pause(self, timeout: float = 5.0) -> None:
        """SIGSTOP, then wait (at most ``timeout``) until every thread of the process is
        stopped. The signal stops a thread only when it next leaves the kernel: one busy
        on another core, or finishing a system call, could otherwise still answer a
        request sent after this returns."""
        if not self.running:
            return
        assert self._popen is not None
        self._popen.send_signal(signal.SIGSTOP)
        deadline = time.monotonic() + timeout
        while not _all_threads_stopped(self._popen.pid) and time.monotonic() < deadline:
            time.sleep(0.001)

    def resume(self) -> None:
        """SIGCONT."""
        if self.running:
            assert self._popen is not None
            self._popen.send_signal(signal.SIGCONT)


def _all_threads_stopped(pid: int) -> bool:
    """Whether every thread of ``pid`` is in the stopped state (``/proc``); a process
    that is gone counts as stopped."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return True
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/stat", encoding="ascii") as stat:
                state = stat.read().rsplit(")", 1)[1].split()[0]
        except OSError:  # the thread ended meanwhile
            continue
        if state not in ("T", "t"):
            return False
    return True
