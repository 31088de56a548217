"""``bench.pinning`` on a real process: every thread it runs is moved (as ``taskset -a``
does), and a thread started after the pin inherits the set."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from bench import pinning

CHILD = """
import sys, threading, time
threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
print("ready", flush=True)
sys.stdin.readline()                     # pinned meanwhile
threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
print("again", flush=True)
sys.stdin.readline()
"""


def _wait_threads(pid: int, count: int) -> None:
    deadline = time.monotonic() + 10
    while len(pinning.threads(pid)) < count:
        assert time.monotonic() < deadline, "the child's threads did not start"
        time.sleep(0.01)


def test_every_thread_is_pinned_and_a_later_thread_inherits_the_set():
    target = {max(os.sched_getaffinity(0))}
    child = subprocess.Popen([sys.executable, "-c", CHILD], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "ready"
        _wait_threads(child.pid, 2)
        before = pinning.affinity(child.pid)
        assert len(before) >= 2
        pinning.pin(child.pid, target)
        assert set(pinning.affinity(child.pid).values()) == {frozenset(target)}
        child.stdin.write("\n")
        child.stdin.flush()
        assert child.stdout.readline().strip() == "again"
        _wait_threads(child.pid, 3)
        after = pinning.affinity(child.pid)
        assert len(after) >= 3 and set(after.values()) == {frozenset(target)}
    finally:
        child.kill()
        child.wait()


def test_a_process_that_is_gone_is_named():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    with pytest.raises(ProcessLookupError):
        pinning.pin(child.pid, os.sched_getaffinity(0))
