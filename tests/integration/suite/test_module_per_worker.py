"""The suite's own promise to its modules: under ``./dev test`` (pytest-xdist with the
project's setup.cfg) every test of a module runs on one worker, so a module-scoped
cluster or Spark set-up is built once, and modules are handed out in the order
tests/conftest.py sorts them.

Checked by running pytest with the project's configuration on two small generated
modules, each test writing its worker's pid and its module fixture's set-ups to a file.
A pytest or xdist upgrade that loses the grouping (pytest 9 did: xdist's ``loadgroup``
could no longer mark a node's id) fails here, not as a suite twice as slow.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

MODULE = '''
import os
import pytest

@pytest.fixture(scope="module")
def built():
    with open({log!r}, "a") as out:
        out.write(f"setup {{__name__}} {{os.getpid()}}\\n")
    return True

@pytest.mark.parametrize("n", range(6))
def test_one(built, n):
    with open({log!r}, "a") as out:
        out.write(f"test {{__name__}} {{os.getpid()}}\\n")
'''


def test_each_module_runs_whole_on_one_worker_with_its_fixture_built_once(
        tmp_path: Path) -> None:
    log = tmp_path / "log"
    suite = tmp_path / "suite"
    suite.mkdir()
    for name in ("test_left", "test_right", "test_third"):
        (suite / f"{name}.py").write_text(MODULE.format(log=str(log)))
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-c", str(ROOT / "setup.cfg"), "--rootdir",
         str(suite), "-n", "2", "-p", "no:cacheprovider", "-q", str(suite)],
        cwd=suite, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "18 passed" in done.stdout, done.stdout[-2000:]
    lines = [line.split() for line in log.read_text().splitlines()]
    workers: dict[str, set[str]] = {}
    for _, module, pid in lines:
        workers.setdefault(module, set()).add(pid)
    setups = [module for kind, module, _ in lines if kind == "setup"]
    assert sorted(setups) == ["test_left", "test_right", "test_third"], lines
    assert all(len(pids) == 1 for pids in workers.values()), workers
    assert len({pid for _, _, pid in lines}) == 2, lines  # both workers were used
