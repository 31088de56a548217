"""Pinning processes to CPUs, for a benchmark that must show a design's share of a
machine apart from its neighbours' (issue 38: B12 with ZooKeeper and the load generator on
one core and the brokers on the other).

``split_cores`` is the pure rule (which CPUs go to which side); ``pin`` and ``affinity``
are the Linux shell around it. A process's CPU set is a property of each of its threads,
so ``pin`` sets every thread that runs (``/proc/<pid>/task``) as ``taskset -a -p`` does;
threads started later inherit their creator's set.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class CoreSplit:
    """The CPUs of the load side (ZooKeeper, the load generator) and of the brokers."""

    load: frozenset[int]
    brokers: frozenset[int]

    def as_dict(self) -> dict[str, list[int]]:
        return {"load": sorted(self.load), "brokers": sorted(self.brokers)}


def split_cores(cpus: Iterable[int]) -> CoreSplit:
    """The lower half of ``cpus`` (rounded down, at least one) for the load side, the rest
    for the brokers. Refuses fewer than two CPUs: one side would have none."""
    ordered = sorted(set(cpus))
    if len(ordered) < 2:
        raise ValueError(f"pinning needs at least 2 CPUs, this process may use {len(ordered)}")
    half = max(1, len(ordered) // 2)
    return CoreSplit(frozenset(ordered[:half]), frozenset(ordered[half:]))


def threads(pid: int) -> list[int]:
    """The ids of the process's threads that run now."""
    try:
        return [int(name) for name in os.listdir(f"/proc/{pid}/task")]
    except FileNotFoundError:
        raise ProcessLookupError(pid) from None


def pin(pid: int, cpus: Iterable[int]) -> None:
    """Every thread of process ``pid`` on ``cpus`` only. A thread that ends meanwhile is
    skipped; a process that is gone raises ``ProcessLookupError``."""
    allowed = set(cpus)
    for tid in threads(pid):
        try:
            os.sched_setaffinity(tid, allowed)
        except ProcessLookupError:
            continue


def affinity(pid: int) -> dict[int, frozenset[int]]:
    """Each running thread of ``pid`` and the CPUs it may run on."""
    found = {}
    for tid in threads(pid):
        try:
            found[tid] = frozenset(os.sched_getaffinity(tid))
        except ProcessLookupError:
            continue
    return found
