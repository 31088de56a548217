"""The benchmark suite's shared set-ups: one that names its users is undone once none of
them is left to run, so no idle cluster takes CPU from a later benchmark; one that names
none lives until the suite closes. No process is started: the set-ups are callbacks."""

from __future__ import annotations

from pathlib import Path

from bench.suite import BenchContext


def test_a_set_up_is_undone_after_its_last_user_and_started_again_if_asked(tmp_path: Path):
    ctx = BenchContext(True, workdir=tmp_path)
    undone: list[str] = []

    def start(name: str):
        def started(stack):
            stack.callback(undone.append, name)
            return object()
        return started

    first = ctx.shared("cluster3", start("cluster3"), users=("B1", "B8"))
    assert ctx.shared("cluster3", start("again")) is first  # the same set-up while in use
    ctx.shared("b12", start("b12"), users=("B12",))
    ctx.shared("forever", start("forever"))
    ctx.finished(["B8", "B12", "B13"])
    assert undone == []
    ctx.finished(["B12", "B13"])
    assert undone == ["cluster3"]
    assert ctx.shared("cluster3", start("cluster3"), users=("B1",)) is not first
    ctx.finished(["B13"])
    assert sorted(undone) == ["b12", "cluster3", "cluster3"]
    ctx.close()
    assert undone[-1] == "forever" and len(undone) == 4
