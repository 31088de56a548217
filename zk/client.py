"""Opening kazoo clients for tokensvc.

Owns: parsing a Kafka-style ``zookeeper.connect`` (``h:p,h:p/chroot``), creating
the chroot when missing, session/connection timeouts, and optional digest
credentials with the ACLs that go with them. Callers get a started
``KazooClient``; everything else about ZooKeeper lives in the stores.
"""

from __future__ import annotations

from dataclasses import dataclass

from kazoo.client import KazooClient
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.retry import KazooRetry


class ZooKeeperUnavailable(RuntimeError):
    """ZooKeeper could not be reached within the connection timeout."""


@dataclass(frozen=True)
class ZkSettings:
    connect: str
    session_timeout_ms: int = 18_000
    connection_timeout_ms: int = 18_000
    # "user:password" for digest authentication, or None.
    digest: str | None = None

    @property
    def hosts(self) -> str:
        return self.connect.split("/", 1)[0]

    @property
    def chroot(self) -> str:
        if "/" not in self.connect:
            return ""
        return "/" + self.connect.split("/", 1)[1].strip("/")


def _make(settings: ZkSettings, hosts: str) -> KazooClient:
    auth = [("digest", settings.digest)] if settings.digest else None
    return KazooClient(
        hosts=hosts,
        timeout=settings.session_timeout_ms / 1000.0,
        connection_retry=KazooRetry(max_tries=-1, delay=0.1, max_delay=1.0),
        command_retry=KazooRetry(max_tries=3, delay=0.1, max_delay=1.0),
        auth_data=auth,
    )


def open_client(settings: ZkSettings) -> KazooClient:
    """A started client rooted at the chroot (created if missing)."""
    timeout = settings.connection_timeout_ms / 1000.0
    if settings.chroot:
        root = _make(settings, settings.hosts)
        try:
            root.start(timeout=timeout)
            root.ensure_path(settings.chroot)
        except KazooTimeoutError as exc:
            raise ZooKeeperUnavailable(
                f"could not connect to ZooKeeper at {settings.hosts} within {timeout:.0f}s"
            ) from exc
        finally:
            root.stop()
            root.close()
    client = _make(settings, settings.hosts + settings.chroot)
    try:
        client.start(timeout=timeout)
    except KazooTimeoutError as exc:
        client.close()
        raise ZooKeeperUnavailable(
            f"could not connect to ZooKeeper at {settings.connect} within {timeout:.0f}s"
        ) from exc
    return client
