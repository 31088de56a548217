"""Writes the generated seeds of the harnesses into their corpus directories:
``python -m tests.fuzz.seeds [ROOM/NAME ...]`` (default: every harness that has any).

A harness may define ``seeds()``, a mapping of file names to inputs made by tokensvc's
own encoders (a valid SCRAM exchange, a token znode as ``zk.layout`` writes it, a
snapshot as the broker saves it), so that the fuzzer starts from inputs that pass every
check. Seeds captured from other clients and servers are written by
``tests/fuzz/capture.py`` instead. Files already there are overwritten, none removed; the directory's README.md says\nwhere its seeds come from.
"""

from __future__ import annotations

import importlib
import sys

from tests.fuzz.runner import corpus_dir, harness_module, targets

# The README's line on the files tests/fuzz/capture_znodes.py writes, kept when a README is
# written again.
KAFKA_LIVE_NOTE = ("`kafka-live-*`: znodes written by a live Apache Kafka 3.9.1 broker "
                   "(ZooKeeper mode) and its tools, in this harness's input format; captured "
                   "by `python -m tests.fuzz.capture_znodes`.")


def write_seeds(target: str) -> int:
    """Write ``target``'s generated seeds; returns how many (0 when it has none)."""
    harness = importlib.import_module(harness_module(target))
    make = getattr(harness, "seeds", None)
    if make is None:
        return 0
    directory = corpus_dir(target)
    directory.mkdir(parents=True, exist_ok=True)
    made = make()
    for name, data in made.items():
        (directory / f"gen-{name}").write_bytes(data)
    origin = " ".join((make.__doc__ or "").split())
    live = f"\n{KAFKA_LIVE_NOTE}\n" if any(directory.glob("kafka-live-*")) else ""
    (directory / "README.md").write_text(
        f"# Seed corpus of tests/fuzz/{target.partition('/')[0]}/fuzz_"
        f"{target.partition('/')[2]}.py\n\n"
        f"`gen-*`: {origin}\n\nWritten by `python -m tests.fuzz.seeds {target}` (the "
        f"harness's `seeds()`); the first byte of some inputs picks the harness's mode "
        f"(its docstring says which).\n{live}")
    return len(made)


def main(argv: list[str]) -> None:
    for target in argv or targets():
        count = write_seeds(target)
        if count:
            print(f"{target}: {count} generated seeds in {corpus_dir(target)}")


if __name__ == "__main__":
    main(sys.argv[1:])
