"""`tokensvc zookeeper --dir DIR`: run one standalone ZooKeeper server in the foreground.

A thin shell over :class:`zk.server.ZooKeeperNode` (the same server ``tokensvc cluster up``
manages, from the jars the pyspark wheel ships): it writes the node's configuration under
``--dir`` and replaces itself with the JVM, so a service manager (deploy/systemd) watches
and signals ZooKeeper itself. For an ensemble, run ZooKeeper's own distribution.
"""

from __future__ import annotations

import os
from pathlib import Path

import click

from zk.server import DEFAULT_HEAP_MB, ZooKeeperNode, ZooKeeperStartError


@click.command("zookeeper")
@click.option("--dir", "data_dir", required=True, type=click.Path(file_okay=False),
              help="Data, configuration and log directory (created if missing).")
@click.option("--port", type=click.IntRange(1, 65535), default=2181, show_default=True,
              help="Client port.")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on.")
@click.option("--heap-mb", type=click.IntRange(min=64), default=DEFAULT_HEAP_MB,
              show_default=True, help="JVM heap (about 700 MB per million tokens).")
@click.option("--tick-ms", type=click.IntRange(min=100), default=2000, show_default=True,
              help="ZooKeeper's tickTime; sessions may be 2 to 20 ticks long.")
def zookeeper(data_dir: str, port: int, host: str, heap_mb: int, tick_ms: int) -> None:
    """Run one ZooKeeper server until it is stopped."""
    node = ZooKeeperNode(data_dir=Path(data_dir), client_port=port, host=host,
                         heap_mb=heap_mb, tick_ms=tick_ms, die_with_parent=False)
    try:
        command = node.command()
    except (ZooKeeperStartError, OSError) as exc:
        raise click.ClickException(str(exc)) from None
    os.execv(command[0], command)
