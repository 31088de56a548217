"""Shared fixtures: a real ZooKeeper server for the whole session, and a fresh
chroot per test so tests never see each other's znodes; and where tests run under
pytest-xdist.

Each xdist worker is its own process with its own session ZooKeeper (chroots are named
by pid as well), its own temporary directories and its own Spark session (one per
worker that runs Spark tests, ``tests/spark_support.py``). A module's tests run on one
worker (its module-scoped cluster starts once); the longest modules are handed out
first.

Before any worker starts, the run builds (once per Java and ZooKeeper) a class-data
archive for the ZooKeeper servers it will start, and hands every process the flags that
use it (``tests/support/jvm_start.py``): each start costs half the CPU. Spark drivers
get the client compiler only (:func:`pytest_configure`).
"""

from __future__ import annotations

import itertools
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.spark_support import SPARK_CONF_DIR_ENV, spark_conf_dir
from tests.support.jvm_start import use_kafka_archives, zookeeper_flags
from tokensvc.jvm import FAST_COMPILE
from zk.server import JVMFLAGS_ENV, ManagedZooKeeper

_chroots = itertools.count(1)


def pytest_configure(config: pytest.Config) -> None:
    """In the run's first process (the xdist controller, or the only one), before any
    worker is spawned: the JVM flags every process inherits. A run whose environment
    already names flags keeps them.

    * ZooKeeper: a class-data archive, the client compiler and no fsync of the
      transaction log (``jvm_start``).
    * Spark jobs run as processes: settings for small inputs (``SPARK_CONF_DIR``,
      ``tests/spark_support.py``).
    * Spark drivers (``spark-submit`` reads ``SPARK_SUBMIT_OPTS``; pyspark starts its
      JVM through it, as do the audit jobs the tests run as processes) and a standalone
      master and worker (``SPARK_DAEMON_JAVA_OPTS``): the client compiler only.
      Measured on one ingest and three reports of 2,500 events: the driver JVM's CPU
      160 -> 88 s, the wall time 91 -> 82 s (C2 compiles Spark's planner for runs that
      never pay it back on test-sized data).
    """
    if hasattr(config, "workerinput"):
        return
    if JVMFLAGS_ENV not in os.environ:
        os.environ[JVMFLAGS_ENV] = zookeeper_flags()
    os.environ.setdefault("SPARK_SUBMIT_OPTS", FAST_COMPILE)
    os.environ.setdefault("SPARK_DAEMON_JAVA_OPTS", FAST_COMPILE)  # standalone master, worker
    if SPARK_CONF_DIR_ENV not in os.environ:
        os.environ[SPARK_CONF_DIR_ENV] = spark_conf_dir()


WORKERS_ENV = "TOKENSVC_TEST_WORKERS"


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto`` (setup.cfg): two workers more than the machine has cores, or
    ``TOKENSVC_TEST_WORKERS``. Much of the suite's time on two cores is spent waiting
    (fault tests sleeping through partitions and pauses, the agent's three minutes,
    clusters and JVMs starting), so a worker more than the cores keep busy pays. On
    2026-11-29, three workers ran it in 17 min 37 s to 20 min 41 s and four in 17 min
    05-28 s with other work beside; with nothing beside, four in 13 min 26 s and five in
    13 min 38 s (docs/performance.md). Four met time limits of tests under client load,
    which now allow for a busy machine."""
    wanted = os.environ.get(WORKERS_ENV)
    if wanted:
        return max(0, int(wanted))
    return (os.cpu_count() or 1) + 2


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Hand the modules out longest first: modules marked ``heavy(minutes=M)`` by
    decreasing M, then the other Spark modules, then the rest. xdist (setup.cfg:
    ``--dist loadscope --no-loadscope-reorder``) sends each module to one worker whole,
    in this order, so a module's tests share its module-scoped cluster or Spark set-up,
    and a worker that started a long module last does not end the run last."""
    def cost(item: pytest.Item) -> tuple[int, float]:
        heavy = item.get_closest_marker("heavy")
        if heavy is not None:
            return 0, -float(heavy.kwargs.get("minutes", 1))
        return (1, 0.0) if item.get_closest_marker("spark") is not None else (2, 0.0)

    items.sort(key=cost)


@pytest.fixture(scope="session")
def zookeeper() -> ManagedZooKeeper:
    """One real ZooKeeper server on loopback, started by the project's own code."""
    base = Path(tempfile.mkdtemp(prefix="tokensvc-zk-"))
    server = ManagedZooKeeper(base)
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def kafka_jvm() -> None:
    """Kafka brokers and tools started by this worker get the client compiler, the serial
    collector and class-data archives (``tests/support/jvm_start.py``; built by the first
    worker that needs them). Ask for it in every fixture that starts Kafka JVMs."""
    use_kafka_archives()


@pytest.fixture(scope="session")
def zk_chroot_factory(zookeeper: ManagedZooKeeper) -> Callable[[], str]:
    """A function returning a new connect string with a chroot of its own
    (``host:port/t<pid>-<n>``) on the session ZooKeeper."""
    return lambda: f"{zookeeper.connect}/t{os.getpid()}-{next(_chroots)}"


@pytest.fixture
def zk_connect(zk_chroot_factory: Callable[[], str]) -> str:
    """A connect string with a chroot of its own (``host:port/t<pid>-<n>``)."""
    return zk_chroot_factory()
