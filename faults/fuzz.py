"""``python -m faults.fuzz [--target T] [--minutes N]``: the fuzzing campaign (``./dev fuzz``).

Owns the campaign: each harness of ``tests/fuzz`` (``tests.fuzz.runner``, atheris) runs
until it has spent ``--minutes`` minutes of CPU (not wall-clock time: on a shared
machine a niced process may get a fraction of a core), in segments that share a working
corpus; then the live fuzzer (``faults.live_fuzz``) runs ``--live-minutes`` minutes
against a 3-broker cluster. It prints, per harness, the executions, the CPU seconds, the
coverage libFuzzer reports (``cov``: edges of Python bytecode reached in ``tokensvc`` and
``zk``; ``ft``: features), the corpus size and the findings, and writes the same to
``<work>/results.json``.

A finding stops its harness (as OSS-Fuzz does): the input is kept under
``<work>/findings/`` for a unit test to hold before the parser is fixed. The working
corpus and the logs stay under ``<work>`` (default ``.fuzz/``), never in the committed
seed corpora.

It judges nothing itself: the exit status is 1 when any harness or the live fuzzer has a
finding.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from tests.fuzz.runner import corpus_dir, targets

ROOT = Path(__file__).resolve().parents[1]
PER_INPUT_TIMEOUT_S = 10
MIN_SEGMENT_S = 10
_STATUS = re.compile(r"cov: (\d+) ft: (\d+) corp: (\d+)/")
_EXECUTED = re.compile(r"stat::number_of_executed_units: (\d+)")


@dataclass
class HarnessResult:
    target: str
    executions: int = 0
    cpu_s: float = 0.0
    wall_s: float = 0.0
    coverage: int = 0
    features: int = 0
    corpus: int = 0
    seeds: int = 0
    segments: int = 0
    findings: list[str] = field(default_factory=list)


def _count_files(directory: Path) -> int:
    return sum(1 for p in directory.iterdir() if p.is_file() and p.name != "README.md") \
        if directory.is_dir() else 0


def run_harness(target: str, cpu_seconds: float, work: Path, nice: int = 0) -> HarnessResult:
    """Fuzz ``target`` until it has used ``cpu_seconds`` of CPU or found something."""
    slug = target.replace("/", "-")
    corpus = work / "corpus" / slug
    findings = work / "findings"
    logs = work / "logs"
    for directory in (corpus, findings, logs):
        directory.mkdir(parents=True, exist_ok=True)
    seeds = corpus_dir(target)
    result = HarnessResult(target, seeds=_count_files(seeds))
    started = time.monotonic()
    while result.cpu_s < cpu_seconds and not result.findings:
        # At least MIN_SEGMENT_S of wall time: a niced segment may get a fraction of a
        # core, and each one pays for the interpreter's start and the corpus's replay.
        remaining = max(MIN_SEGMENT_S, int(cpu_seconds - result.cpu_s + 0.999))
        before = set(findings.glob(f"{slug}-*"))
        command = [
            *(["nice", "-n", str(nice)] if nice else []), sys.executable, "-m", "tests.fuzz.runner", target,
            f"-max_total_time={remaining}", f"-timeout={PER_INPUT_TIMEOUT_S}",
            "-print_final_stats=1", f"-artifact_prefix={findings}/{slug}-",
            str(corpus), *([str(seeds)] if seeds.is_dir() else []),
        ]
        log = logs / f"{slug}.{result.segments}.log"
        with open(log, "wb") as out:
            process = subprocess.Popen(command, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
            _, status, usage = os.wait4(process.pid, 0)
            process.returncode = os.waitstatus_to_exitcode(status)
        result.segments += 1
        result.cpu_s += usage.ru_utime + usage.ru_stime
        text = log.read_text(errors="replace")
        executed = _EXECUTED.findall(text)
        result.executions += int(executed[-1]) if executed else 0
        status_lines = _STATUS.findall(text)
        if status_lines:
            cov, ft, corp = (int(x) for x in status_lines[-1])
            result.coverage = max(result.coverage, cov)
            result.features = max(result.features, ft)
            result.corpus = corp
        new = sorted(set(findings.glob(f"{slug}-*")) - before)
        result.findings += [p.name for p in new]
        if process.returncode != 0 and not new:
            result.findings.append(f"exit status {process.returncode} (see {log})")
    result.wall_s = time.monotonic() - started
    return result


def run_harnesses(names: list[str], cpu_seconds: float, work: Path, jobs: int,
                  nice: int) -> list[HarnessResult]:
    """Every harness of ``names``, ``jobs`` at a time, in order of ``names``."""
    results: dict[str, HarnessResult] = {}
    pending = list(names)
    lock = threading.Lock()

    def worker() -> None:
        while True:
            with lock:
                if not pending:
                    return
                name = pending.pop(0)
            result = run_harness(name, cpu_seconds, work, nice)
            with lock:
                results[name] = result
                print(_row(result), flush=True)

    threads = [threading.Thread(target=worker) for _ in range(max(1, jobs))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return [results[name] for name in names]


_HEADER = (f"{'harness':32} {'executions':>11} {'cpu s':>7} {'cov':>5} {'ft':>6} "
           f"{'corpus':>6} {'seeds':>5}  findings")


def _row(r: HarnessResult) -> str:
    return (f"{r.target:32} {r.executions:>11} {r.cpu_s:>7.0f} {r.coverage:>5} {r.features:>6} "
            f"{r.corpus:>6} {r.seeds:>5}  {len(r.findings)} {' '.join(r.findings)}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m faults.fuzz",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--target", action="append", default=[],
                        help="a harness, ROOM/NAME (repeatable; default: every one; "
                             "'none': only the live fuzzer)")
    parser.add_argument("--minutes", type=float, default=1.0,
                        help="CPU minutes per harness (default 1)")
    parser.add_argument("--live-minutes", type=float, default=None,
                        help="minutes of the live fuzzer (default: --minutes; 0: skip it)")
    parser.add_argument("--jobs", type=int, default=1, help="harnesses run at once")
    parser.add_argument("--nice", type=int, default=0, help="niceness of the harnesses")
    parser.add_argument("--work", type=Path, default=ROOT / ".fuzz",
                        help="working corpus, findings and logs (default .fuzz/)")
    parser.add_argument("--list", action="store_true", help="list the harnesses and exit")
    args = parser.parse_args(argv)
    every = targets()
    if args.list:
        print("\n".join(every))
        return 0
    chosen = [] if args.target == ["none"] else (args.target or every)
    unknown = sorted(set(chosen) - set(every))
    if unknown:
        parser.error(f"unknown harness {', '.join(unknown)} (--list shows them)")
    args.work.mkdir(parents=True, exist_ok=True)
    found = False
    summary: dict[str, object] = {"minutes": args.minutes}
    if chosen:
        print(_HEADER, flush=True)
        results = run_harnesses(chosen, args.minutes * 60, args.work, args.jobs, args.nice)
        summary["harnesses"] = [asdict(r) for r in results]
        found = any(r.findings for r in results)
        total = sum(r.executions for r in results)
        print(f"{len(results)} harnesses, {total} executions, "
              f"{sum(r.cpu_s for r in results) / 60:.1f} CPU minutes, "
              f"{sum(len(r.findings) for r in results)} findings", flush=True)
    live_minutes = args.minutes if args.live_minutes is None else args.live_minutes
    if live_minutes > 0:
        from faults.live_fuzz import run_live_fuzzer

        live = run_live_fuzzer(live_minutes * 60, args.work / "live")
        summary["live"] = live
        found = found or bool(live.get("findings"))
    (args.work / "results.json").write_text(json.dumps(summary, indent=2) + "\n")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
