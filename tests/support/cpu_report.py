"""What each test module costs in CPU: an opt-in pytest plugin.

    ./dev test -p tests.support.cpu_report

The suite runs on two cores that its tests share with the processes they start (ZooKeeper,
brokers, Spark), so its length follows its CPU more than its waits. This plugin charges
each test, from its setup to its teardown, with the CPU that its worker's process tree used
meanwhile: the worker itself, the children it has reaped (a module's cluster is reaped in
the last test's teardown), and the children still running (with what they reaped in turn).
A process that left the tree (a cluster started in the background and re-parented) is not
counted; a worker's session ZooKeeper and Spark session are charged to the tests that
ran while they worked.

Every worker appends one JSON line per test to ``<dir>/<pid>.jsonl`` (``<dir>``: the
environment variable ``TOKENSVC_CPU_REPORT_DIR``, default ``.cpu-report`` under the root);
at the end of the run the first process prints the modules by CPU, with their wall time,
and the total. Pure bookkeeping: it never changes what a test does.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest

_TICK = os.sysconf("SC_CLK_TCK")
SHOWN = 40  # modules printed at the end


def _report_dir(config: pytest.Config) -> Path:
    return Path(os.environ.get("TOKENSVC_CPU_REPORT_DIR", config.rootpath / ".cpu-report"))


def tree_cpu_s() -> float:
    """CPU seconds of this process, its reaped children and its running children
    (``getrusage`` answers for the calling process only, so no other pid is asked)."""
    pid = os.getpid()
    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        usage = resource.getrusage(who)
        total += usage.ru_utime + usage.ru_stime
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:  # gone meanwhile
            continue
        if int(fields[1]) == pid:  # utime, stime, cutime, cstime
            total += sum(int(f) for f in fields[11:15]) / _TICK
    return total


def pytest_configure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):  # the first process: a fresh report
        shutil.rmtree(_report_dir(config), ignore_errors=True)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    began, cpu = time.monotonic(), tree_cpu_s()
    yield
    line = {"test": item.nodeid, "module": item.nodeid.split("::")[0],
            "wall_s": round(time.monotonic() - began, 3), "cpu_s": round(tree_cpu_s() - cpu, 3)}
    directory = _report_dir(item.config)
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / f"{os.getpid()}.jsonl", "a", encoding="utf-8") as out:
        out.write(json.dumps(line) + "\n")


def summarize(directory: Path) -> list[tuple[str, float, float, int]]:
    """``(module, CPU s, wall s, tests)``, most CPU first."""
    modules: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0])
    for path in directory.glob("*.jsonl"):
        for text in path.read_text(encoding="utf-8").splitlines():
            line = json.loads(text)
            entry = modules[line["module"]]
            entry[0] += line["cpu_s"]
            entry[1] += line["wall_s"]
            entry[2] += 1
    return sorted(((m, c, w, int(n)) for m, (c, w, n) in modules.items()),
                  key=lambda row: -row[1])


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    config = terminalreporter.config
    if hasattr(config, "workerinput"):
        return
    rows = summarize(_report_dir(config))
    if not rows:
        return
    write = terminalreporter.write_line
    terminalreporter.section("CPU per module (tests.support.cpu_report)")
    write(f"{'CPU s':>9} {'wall s':>9} {'tests':>6}  module")
    for module, cpu, wall, tests in rows[:SHOWN]:
        write(f"{cpu:9.1f} {wall:9.1f} {tests:6d}  {module}")
    write(f"{sum(r[1] for r in rows):9.1f} {sum(r[2] for r in rows):9.1f} "
          f"{sum(r[3] for r in rows):6d}  all {len(rows)} modules")
