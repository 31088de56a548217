"""Local clusters of broker processes for the integration tests.

Owns how a test gets a ``tokensvc.cluster.LocalCluster``: its brokers are separate
processes (tied to the test process by ``die_with_parent``), under a temporary
directory of the test run, on the session ZooKeeper (``tests/conftest.py``) in a chroot
of their own unless the test names another ZooKeeper or asks for the cluster's own
managed one; stopped when their scope ends.

Three ways in, by how long the cluster lives:

* ``cluster`` -- one cluster for a whole module, described by the module's marker
  ``pytestmark = pytest.mark.cluster(brokers=3, overrides={...}, tls=False, users=[...])``
  (``users``: ``(name, mechanism, password)`` credentials the admin creates once it is
  up, and every broker serves before the tests run). For modules whose tests do not stop brokers or change what the others rely on;
* ``module_cluster_factory`` -- the same lifetime, for a module-scoped fixture that must
  do more than the marker says (write credentials straight to ZooKeeper, ...);
* ``cluster_factory`` -- a cluster per test, for tests that break it (stop or freeze
  brokers, expire sessions, lose ZooKeeper nodes) or whose settings depend on the test.

It must not start in-process brokers (``tests.support.inproc`` does) nor judge anything.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack
from pathlib import Path

import pytest

from tests.support.broker_defaults import TEST_BROKER_DEFAULTS
from tests.support.local_cluster import (
    ClusterFactory,
    admin_client,
    user_config,
    wait_served_everywhere,
)
from tokensvc.cluster import ClusterError, LocalCluster


def _factory(stack: ExitStack, directory: Callable[[], Path],
             chroot: Callable[[], str]) -> ClusterFactory:
    def up(*, brokers: int = 1, overrides: Mapping[str, str] | None = None, tls: bool = False,
           zookeeper: str | None = None, own_zookeeper: bool = False,
           users: Sequence[tuple[str, str, str]] = (),
           broker_env: Mapping[int, Mapping[str, str]] | None = None) -> LocalCluster:
        """Start a cluster of ``brokers`` on ``zookeeper`` (default: a new chroot of the
        session ZooKeeper; ``own_zookeeper``: a managed ZooKeeper of the cluster's own,
        in its directory), with ``overrides`` in every broker's properties and
        ``broker_env`` in the environment of the brokers it names; the users given are
        created through the admin client before it is handed out."""
        if own_zookeeper and zookeeper is not None:
            raise ValueError("own_zookeeper and zookeeper exclude each other")
        for attempt in range(2):
            connect = None if own_zookeeper else zookeeper or chroot()
            try:
                cluster = stack.enter_context(LocalCluster.up(
                    directory(), brokers=brokers, zookeeper=connect,
                    overrides={**TEST_BROKER_DEFAULTS, **(overrides or {})}, tls=tls,
                    die_with_parent=True,
                    broker_env=broker_env))
                break
            except ClusterError as exc:
                # A free port chosen for a broker can be taken by another process of a
                # parallel run before the broker binds it (seen once in a full run):
                # start once more, in a new directory with new ports.
                if attempt or "Address already in use" not in str(exc):
                    raise
        if users:
            with admin_client(cluster, timeout_s=20) as admin:
                for name, mechanism, password in users:
                    admin.upsert_user_scram_credential(name, mechanism, password)
            for name, mechanism, password in users:
                wait_served_everywhere(cluster, user_config(name, password, mechanism))
        return cluster

    return up


@pytest.fixture(scope="module")
def module_cluster_factory(request: pytest.FixtureRequest,
                           tmp_path_factory: pytest.TempPathFactory,
                           zk_chroot_factory: Callable[[], str]) -> Iterator[ClusterFactory]:
    """Starts clusters that live until the module's last test has run."""
    name = request.module.__name__.rpartition(".")[2].removeprefix("test_")
    with ExitStack() as stack:
        yield _factory(stack, lambda: tmp_path_factory.mktemp(name), zk_chroot_factory)


@pytest.fixture
def cluster_factory(tmp_path_factory: pytest.TempPathFactory,
                    zk_chroot_factory: Callable[[], str]) -> Iterator[ClusterFactory]:
    """Starts clusters that live until the end of the test."""
    with ExitStack() as stack:
        yield _factory(stack, lambda: tmp_path_factory.mktemp("cluster"), zk_chroot_factory)


@pytest.fixture(scope="module")
def cluster(request: pytest.FixtureRequest,
            module_cluster_factory: ClusterFactory) -> LocalCluster:
    """The module's cluster, as its ``cluster`` marker describes it."""
    marker = request.node.get_closest_marker("cluster")
    if marker is None:
        raise pytest.UsageError(f"{request.module.__name__} uses the cluster fixture without "
                                "a pytest.mark.cluster(...) marker saying which cluster")
    return module_cluster_factory(**marker.kwargs)
