"""CI's share of the fuzzing: every harness of tests/fuzz replays its whole seed corpus
and then fuzzes new inputs for a few seconds (``SECONDS``), with the properties of
``tests.fuzz.runner`` (declared errors only, a time and a memory bound per input).

The harnesses run as libFuzzer processes, two at a time, started once for the module;
each test then reads one harness's outcome. A finding fails its test with the
traceback and the input (base64) libFuzzer printed. The long runs are ``./dev fuzz``.
"""

from __future__ import annotations

import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.fuzz.runner import corpus_dir, targets

SECONDS = 3
PARALLEL = 2
TIMEOUT_S = 120
ROOT = Path(__file__).resolve().parents[2]
_EXECUTED = re.compile(r"stat::number_of_executed_units: (\d+)")


@dataclass(frozen=True)
class Outcome:
    returncode: int
    executions: int
    output: str


def _run(target: str, work: Path) -> Outcome:
    corpus = work / target.replace("/", "-")
    corpus.mkdir(parents=True)
    seeds = corpus_dir(target)
    ran = subprocess.run(
        [sys.executable, "-m", "tests.fuzz.runner", target, f"-max_total_time={SECONDS}",
         "-timeout=10", "-print_final_stats=1", f"-artifact_prefix={corpus}/",
         str(corpus), str(seeds)],
        cwd=ROOT, capture_output=True, text=True, timeout=TIMEOUT_S, check=False,
    )
    executed = _EXECUTED.findall(ran.stderr)
    return Outcome(ran.returncode, int(executed[-1]) if executed else 0, ran.stderr)


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Outcome]:
    work = tmp_path_factory.mktemp("fuzz-smoke")
    with ThreadPoolExecutor(PARALLEL) as pool:
        futures = {target: pool.submit(_run, target, work) for target in targets()}
        return {target: future.result() for target, future in futures.items()}


def _seed_count(target: str) -> int:
    return sum(1 for p in corpus_dir(target).iterdir() if p.name != "README.md")


def test_every_harness_has_a_seed_corpus_with_its_origin() -> None:
    for target in targets():
        assert _seed_count(target) > 0, f"{target} has no seeds"
        assert (corpus_dir(target) / "README.md").is_file(), f"{target}'s corpus has no README"


@pytest.mark.parametrize("target", targets())
def test_harness_replays_its_corpus_and_fuzzes_without_a_finding(
    outcomes: dict[str, Outcome], target: str
) -> None:
    outcome = outcomes[target]
    tail = outcome.output[-4000:]
    assert outcome.returncode == 0, f"{target} found something:\n{tail}"
    assert outcome.executions > _seed_count(target), f"{target} ran too few inputs:\n{tail}"
