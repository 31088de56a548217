"""Process supervision for the local cluster: starting a child that dies with its parent,
telling whether a pid still runs one of our commands (its command line names a file of
this cluster), and stopping it (SIGTERM, then SIGKILL). Must not signal a process it
cannot prove it started.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tokensvc.cluster.errors import ClusterError
from tokensvc.cluster.layout import (
    STOP_GRACE_S,
)


def _reap(pid: int) -> bool:
    """Reap ``pid`` if it is an exited child of ours; True if it was."""
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return False
    return done == pid


def _cmdline(pid: int) -> str | None:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return raw.replace(b"\0", b" ").decode("utf-8", "replace")


def _alive(pid: int, marker: str) -> bool:
    """True if ``pid`` runs and its command line contains ``marker`` (a file of ours)."""
    if _reap(pid):
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    if stat.rsplit(")", 1)[-1].split()[0] == "Z":  # a zombie has exited already
        return False
    cmdline = _cmdline(pid)
    return cmdline is not None and marker in cmdline


def _wait_gone(pid: int, marker: str, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _alive(pid, marker):
            return True
        time.sleep(0.05)
    return not _alive(pid, marker)


def _terminate(process: subprocess.Popen, grace: float) -> None:
    """Stop a child of ours: SIGTERM and ``grace`` seconds to exit (none: SIGKILL), then SIGKILL."""
    if process.poll() is not None:
        return
    if grace > 0:
        process.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(grace)
            return
    process.kill()
    process.wait(10)


def stop_process(pid: int | None, marker: str, grace: float = STOP_GRACE_S) -> bool:
    """SIGTERM ``pid``, then SIGKILL after ``grace`` seconds (at once when 0). Does nothing
    (False) unless the process is alive and its command line contains ``marker``. True if it
    was stopped."""
    if pid is None or not _alive(pid, marker):
        return False
    if grace > 0:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        if _wait_gone(pid, marker, grace):
            return True
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    if not _wait_gone(pid, marker, 10.0):
        raise ClusterError(f"process {pid} survived SIGKILL")
    return True


def _log_tail(path: str | Path, lines: int = 20) -> str:
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:]) or "(empty log)"


def _broker_command(config: Path) -> list[str]:
    return [sys.executable, "-m", "cli.tokensvc", "broker", "--config", str(config)]
