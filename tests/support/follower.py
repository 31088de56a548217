"""Holding a token follower's listings back, for tests that must apply writes before the
follower can list them (the order a test on a real ZooKeeper cannot otherwise rely on).

Owns only the hold; the follower and its ZooKeeper stay real.
"""

from __future__ import annotations

import threading

import pytest

from zk.token_sync import TokenSync


def hold_listings(sync: TokenSync, monkeypatch: pytest.MonkeyPatch) -> threading.Event:
    """Make ``sync`` list nothing until the returned event is set (30 s at most)."""
    allowed = threading.Event()
    list_root = sync._list

    def held(root):
        assert allowed.wait(30), "the test never let the follower list"
        return list_root(root)

    monkeypatch.setattr(sync, "_list", held)
    return allowed
