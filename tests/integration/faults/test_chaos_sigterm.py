"""``python -m faults.chaos`` stopped with SIGTERM in the middle of a fault, with a
ZooKeeper node frozen: real processes, real signals."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow


def _processes_naming(text: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if text in (entry / "cmdline").read_bytes().decode(errors="replace"):
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


@pytest.mark.timeout(180)
def test_sigterm_during_a_freeze_leaves_no_process_and_no_scratch_directory() -> None:
    run = subprocess.Popen(
        [sys.executable, "-m", "faults.chaos", "--faults", "zk-quorum", "--seconds", "8",
         "--clients", "1", "--session-timeout-ms", "4000"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        first = run.stdout.readline()
        scratch = Path(re.search(r" in (\S+);", first).group(1))
        assert scratch.is_dir(), first
        # Warm-up 2 s, then the leader is killed and a follower frozen for 8 s.
        time.sleep(4)
        assert _processes_naming(str(scratch)), "no ZooKeeper or broker of the run is up"
        run.send_signal(signal.SIGTERM)
        code = run.wait(60)
    finally:
        if run.poll() is None:
            run.kill()
    output = first + run.stdout.read()
    assert code == 130, output
    assert "Traceback" not in output, output
    assert not scratch.exists(), output
    deadline = time.monotonic() + 10
    while _processes_naming(str(scratch)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _processes_naming(str(scratch)) == [], output
