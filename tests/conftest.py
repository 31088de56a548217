"""Shared fixtures: a real ZooKeeper server for the whole session, and a fresh
chroot per test so tests never see each other's znodes; and where tests run under
pytest-xdist.

Each xdist worker is its own process with its own session ZooKeeper (chroots are named
by pid as well), its own temporary directories and its own Spark session. A module's
tests run on one worker (its module-scoped cluster starts once); tests marked ``spark``
all go to one worker (one Spark JVM for the run, not one per worker); tests marked
``machine`` (the benchmark suite, chaos, network namespaces) go to one worker too, so
no two of them run at once.
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

# marker -> the xdist_group its tests share, in the order the groups are handed out
_GROUPS = {"machine": "machine", "spark": "spark"}


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups into the node ids
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Give every test an xdist_group: its marker's group, else its module (so a module's
    tests, and its module-scoped cluster, stay on one worker). The marked groups go
    first: they are the longest units of work, and the worker that starts one last ends
    the run last."""
    rank: dict[str, int] = {}
    for item in items:
        group = next(((n, g) for n, (marker, g) in enumerate(_GROUPS.items())
                      if item.get_closest_marker(marker) is not None), None)
        if group is None:
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::")[0]))
        else:
            item.add_marker(pytest.mark.xdist_group(group[1]))
            rank[item.nodeid] = group[0]
    items.sort(key=lambda item: rank.get(item.nodeid, len(_GROUPS)))


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
