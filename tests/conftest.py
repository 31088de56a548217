"""Shared fixtures: a real ZooKeeper server for the whole session, and a fresh
chroot per test so tests never see each other's znodes; and where tests run under
pytest-xdist.

Each xdist worker is its own process with its own session ZooKeeper (chroots are named
by pid as well), its own temporary directories and its own Spark session. A module's
tests run on one worker (its module-scoped cluster starts once); tests marked ``spark``
all go to one worker (one Spark JVM for the run, not one per worker); modules marked
``heavy`` (the quick benchmark suite, chaos) are handed out first.
"""

from __future__ import annotations

import itertools
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest

from zk.server import ManagedZooKeeper

_chroots = itertools.count(1)

# Markers whose tests are handed out first, in this order: heavy modules (minutes each),
# then the Spark tests, which share one xdist_group (one worker, one Spark session).
_FIRST = ("heavy", "spark")
_SHARED_GROUPS = {"spark"}


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups into the node ids
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Give every test an xdist_group: ``spark`` for the Spark tests, else its module (so
    a module's tests, and its module-scoped cluster, stay on one worker). Heavy modules
    and the Spark group come first (setup.cfg keeps this order for xdist): they are the
    longest units of work, and the worker that starts one last ends the run last."""
    rank: dict[str, int] = {}
    for item in items:
        marker = next((m for m in _FIRST if item.get_closest_marker(m) is not None), None)
        group = marker if marker in _SHARED_GROUPS else item.nodeid.split("::")[0]
        item.add_marker(pytest.mark.xdist_group(group))
        if marker is not None:
            rank[item.nodeid] = _FIRST.index(marker)
    items.sort(key=lambda item: rank.get(item.nodeid, len(_FIRST)))


@pytest.fixture(scope="session")
def zookeeper() -> ManagedZooKeeper:
    """One real ZooKeeper server on loopback, started by the project's own code."""
    base = Path(tempfile.mkdtemp(prefix="tokensvc-zk-"))
    server = ManagedZooKeeper(base)
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def zk_chroot_factory(zookeeper: ManagedZooKeeper) -> Callable[[], str]:
    """A function returning a new connect string with a chroot of its own
    (``host:port/t<pid>-<n>``) on the session ZooKeeper."""
    return lambda: f"{zookeeper.connect}/t{os.getpid()}-{next(_chroots)}"


@pytest.fixture
def zk_connect(zk_chroot_factory: Callable[[], str]) -> str:
    """A connect string with a chroot of its own (``host:port/t<pid>-<n>``)."""
    return zk_chroot_factory()
