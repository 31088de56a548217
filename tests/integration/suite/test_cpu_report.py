"""The suite's CPU report (``tests/support/cpu_report.py``): modules summed from the
workers' lines, most CPU first; and the process tree's CPU counts a child's work, while it
runs and after it is reaped."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from tests.support.cpu_report import summarize, tree_cpu_s


def _lines(path: Path, *lines: dict) -> None:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")


def test_modules_are_summed_across_workers_most_cpu_first(tmp_path: Path) -> None:
    _lines(tmp_path / "101.jsonl",
           {"test": "a.py::t1", "module": "a.py", "wall_s": 1.0, "cpu_s": 2.0},
           {"test": "b.py::t1", "module": "b.py", "wall_s": 5.0, "cpu_s": 1.5})
    _lines(tmp_path / "102.jsonl",
           {"test": "b.py::t2", "module": "b.py", "wall_s": 1.0, "cpu_s": 1.0})
    assert summarize(tmp_path) == [("b.py", 2.5, 6.0, 2), ("a.py", 2.0, 1.0, 1)]
    assert summarize(tmp_path / "none") == []


def test_a_childs_cpu_counts_while_it_runs_and_after_it_is_reaped() -> None:
    before = tree_cpu_s()
    work = ("import time\nend = time.process_time() + 0.5\n"
            "while time.process_time() < end: pass\n"
            "time.sleep(30)")
    child = subprocess.Popen([sys.executable, "-c", work])
    try:
        deadline = time.monotonic() + 30
        while tree_cpu_s() - before < 0.4 and time.monotonic() < deadline:
            time.sleep(0.05)
        running = tree_cpu_s() - before
        assert running >= 0.4, running  # counted while it runs (it sleeps after its work)
    finally:
        child.kill()
        child.wait()
    assert tree_cpu_s() - before >= 0.4  # and once reaped (RUSAGE_CHILDREN)
