"""The fault suite's watch for a new ZooKeeper leader (faults.chaos.LeaderWatch), on
stand-in nodes that answer ``mode()`` from a script: no ZooKeeper, no sockets."""

from __future__ import annotations

import threading
import time

from faults.chaos import LeaderWatch


class ScriptedNode:
    """Answers ``mode()`` from ``modes`` in turn, then the last one for ever."""

    def __init__(self, server_id: int, *modes: str | None) -> None:
        self.server_id = server_id
        self._modes = list(modes)
        self.asked = threading.Event()

    def mode(self) -> str | None:
        self.asked.set()
        return self._modes.pop(0) if len(self._modes) > 1 else self._modes[0]


def test_the_first_survivor_to_lead_is_noted_with_its_time() -> None:
    nodes = [ScriptedNode(1, None, None, "follower"), ScriptedNode(2, None, None, "leader")]
    since = time.monotonic()
    watch = LeaderWatch(nodes, since, poll_s=0.001)
    deadline = time.monotonic() + 10
    while watch.led is None and time.monotonic() < deadline:
        time.sleep(0.001)
    assert watch.led is not None and watch.led[1] == 2
    note = watch.stop()
    assert note.startswith("ZooKeeper node 2 leading ") and note.endswith("s after the kill")


def test_no_leader_is_noted_with_what_each_survivor_said() -> None:
    nodes = [ScriptedNode(2, "follower"), ScriptedNode(1, None)]
    watch = LeaderWatch(nodes, time.monotonic(), poll_s=0.001)
    assert all(n.asked.wait(10) for n in nodes)
    note = watch.stop()
    assert watch.led is None
    assert note.startswith("no ZooKeeper leader ")
    assert note.endswith("after the kill (node 1 not serving, node 2 follower)")
