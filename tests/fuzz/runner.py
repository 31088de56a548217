"""The one runner of the fuzz harnesses: ``python -m tests.fuzz.runner ROOM/NAME [libFuzzer flags]``.

A harness is ``tests/fuzz/<room>/fuzz_<name>.py`` (the room of the code it fuzzes). It
defines ``ERRORS``, the exception types its parser declares, and ``fuzz_one(data)``,
which calls the parser on ``data`` and asserts the harness's own property (a round
trip, a bound on the answer). It may define ``DICTIONARY``, a libFuzzer dictionary
under tests/fuzz (``json.dict``: the tokens of JSON, for the znode and file harnesses),
whose tokens the mutator splices in. Its seed corpus is ``tests/fuzz/<room>/corpus/<name>/``.

This module adds what every harness shares, on atheris (libFuzzer for Python, with
coverage of the bytecode of ``tokensvc`` and ``zk``):

* only ``ERRORS`` may escape: anything else (an IndexError, a RecursionError, a
  MemoryError, an AssertionError of the harness's property) is a finding, and libFuzzer
  writes the input that raised it as ``crash-<sha1>``;
* every input ends within ``-timeout`` seconds (libFuzzer writes ``timeout-<sha1>``);
* recursion: the stack is bounded at :data:`RECURSION_LIMIT` frames, so input nested
  without bound is a RecursionError (a finding) within a few kilobytes;
* memory: the address space is capped at :data:`MEMORY_HEADROOM` above what the
  process holds once the harness is imported, so a length field that makes a parser
  allocate gigabytes raises MemoryError (a finding) instead of swapping the machine.

It must not know any parser: harnesses do. ``faults/fuzz.py`` runs it per harness and
reads libFuzzer's statistics from its output.
"""

from __future__ import annotations

import importlib
import resource
import sys
from pathlib import Path

FUZZ_ROOT = Path(__file__).resolve().parent
# Packages whose bytecode is instrumented for coverage.
INSTRUMENTED = ("tokensvc", "zk")
MEMORY_HEADROOM = 768 * 1024 * 1024
# The interpreter's stack bound while fuzzing, a third of Python's default: input nested
# deeper than any parser should follow (JSON arrays in arrays...) raises RecursionError
# after 300 levels instead of 1000, which a mutator reaches within its input size.
RECURSION_LIMIT = 300


def harness_module(target: str) -> str:
    """``room/name`` -> the harness's module name."""
    room, _, name = target.partition("/")
    if not room or not name or not (FUZZ_ROOT / room / f"fuzz_{name}.py").is_file():
        raise SystemExit(f"runner: no harness tests/fuzz/{room}/fuzz_{name}.py")
    return f"tests.fuzz.{room}.fuzz_{name}"


def corpus_dir(target: str) -> Path:
    """The committed seed corpus of ``room/name``."""
    room, _, name = target.partition("/")
    return FUZZ_ROOT / room / "corpus" / name


def targets() -> list[str]:
    """Every harness, as ``room/name``, sorted."""
    return sorted(
        f"{path.parent.name}/{path.stem.removeprefix('fuzz_')}"
        for path in FUZZ_ROOT.glob("*/fuzz_*.py")
    )


def _cap_address_space() -> None:
    with open("/proc/self/statm") as statm:
        pages = int(statm.read().split()[0])
    limit = pages * resource.getpagesize() + MEMORY_HEADROOM
    resource.setrlimit(resource.RLIMIT_AS, (limit, resource.RLIM_INFINITY))


def main(argv: list[str]) -> None:
    import atheris

    if not argv:
        raise SystemExit("usage: python -m tests.fuzz.runner ROOM/NAME [libFuzzer flags]")
    target, flags = argv[0], argv[1:]
    with atheris.instrument_imports(include=list(INSTRUMENTED)):
        harness = importlib.import_module(harness_module(target))
    dictionary = getattr(harness, "DICTIONARY", None)
    if dictionary and not any(flag.startswith("-dict=") for flag in flags):
        flags.append(f"-dict={FUZZ_ROOT / dictionary}")
    declared = tuple(harness.ERRORS)
    fuzz_one = harness.fuzz_one

    def one_input(data: bytes) -> None:
        try:
            fuzz_one(data)
        except declared:
            pass

    sys.setrecursionlimit(RECURSION_LIMIT)
    _cap_address_space()
    atheris.Setup([sys.argv[0], *flags], one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main(sys.argv[1:])
