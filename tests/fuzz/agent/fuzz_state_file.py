"""The agent's state file (tokensvc.agent.state.StateFile.load), read at every start.

The input is the file's content, written to a file in memory-backed storage and loaded
as the agent does. Properties: only StateError escapes; a state read is saved and
loaded again the same.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from pathlib import Path

from tokensvc.agent.schedule import Held
from tokensvc.agent.state import AgentState, HeldToken, StateError, StateFile

ERRORS = (StateError,)
DICTIONARY = "json.dict"
_DIR = Path(tempfile.mkdtemp(prefix="fuzz-agent-state-",
                             dir="/dev/shm" if os.path.isdir("/dev/shm") else None))
_FILE = StateFile(_DIR / "state.json")


def fuzz_one(data: bytes) -> None:
    assert _FILE.path is not None
    _FILE.path.write_bytes(data)
    try:
        state = _FILE.load(_owner(data))
    finally:
        _FILE.path.unlink(missing_ok=True)
    _FILE.save(state)
    assert _FILE.load(state.owner) == state, "state round trip differs"


def _owner(data: bytes) -> str:
    """The owner the file names, when it names one (else the load refuses it anyway)."""
    match = re.search(rb'"owner"\s*:\s*"([^"\\]*)"', data)
    return match.group(1).decode("utf-8", "replace") if match else "User:nobody"


def seeds() -> dict[str, bytes]:
    """State files as the agent saves them."""
    held = HeldToken(Held("Zl0YT9kvSLaHtdxp5pMVbA", 1, 100, 1000, 50, None), b"\x01" * 32)
    old = HeldToken(Held("old", 0, 10, 100, None, 20), b"\x02" * 64)
    states = {
        "empty": AgentState(owner="User:alice"),
        "full": AgentState("User:alice", 86_400_000, held, None, [old], 5, -3, 2, {"job": "etl"}),
    }
    return {name: (json.dumps(s.to_json(), indent=2) + "\n").encode() for name, s in states.items()}
