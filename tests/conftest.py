"""Shared fixtures: a real ZooKeeper server for the whole session, and a fresh
chroot per test so tests never see each other's znodes."""

from __future__ import annotations

import itertools
import os
import tempfile
from pathlib import Path

import pytest

from zk.server import ManagedZooKeeper

_chroots = itertools.count(1)


@pytest.fixture(scope="session")
def zookeeper() -> ManagedZooKeeper:
    """One real ZooKeeper server on loopback, started by the project's own code."""
    base = Path(tempfile.mkdtemp(prefix="tokensvc-zk-"))
    server = ManagedZooKeeper(base)
    server.start()
    yield server
    server.stop()


@pytest.fixture
def zk_connect(zookeeper: ManagedZooKeeper) -> str:
    """A connect string with a chroot of its own (``host:port/t<pid>-<n>``)."""
    return f"{zookeeper.connect}/t{os.getpid()}-{next(_chroots)}"
