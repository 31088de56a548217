"""Holding a token follower's listings back, for tests that must apply writes before the
follower can list them (the order a test on a real ZooKeeper cannot otherwise rely on).

Owns only the hold; the follower and its ZooKeeper stay real.
"""

from __future__ import annotations

import threading

import pytest

from zk.token_sync import TokenSync


def hold_listings(sync: TokenSync, monkeypatch: pytest.MonkeyPatch) -> threading.Event:
    """Make ``sync`` list nothing until the returned event is set (30 s at most).

    The hold starts once every listing already under way has ended: the follower's tasks
    run one at a time on its worker, so a mark queued behind them runs after them. A
    listing begun before the hold (a watch that fired as the follower started) could
    otherwise list the test's first writes before the test applies them; a full run of the
    suite saw that once. The hold is on the one call through which every listing reads
    ZooKeeper's children (a hold on the sorted listing alone let the follower's listings
    of changes through: another full run saw that)."""
    allowed = threading.Event()
    holding = threading.Event()
    list_root = sync._list_unsorted  # every listing's one call: of changes, of a resync

    def held(root):
        if holding.is_set():
            assert allowed.wait(30), "the test never let the follower list"
        return list_root(root)

    monkeypatch.setattr(sync, "_list_unsorted", held)
    sync._worker.submit("test: hold the listings from here", holding.set)
    assert holding.wait(30), "the follower's worker never reached the hold"
    return allowed
