"""`tokensvc zookeeper --dir DIR`: run one standalone ZooKeeper server in the foreground;
`tokensvc zookeeper security-migration`: set the declared ACL on every znode of tokensvc.

A thin shell over :class:`zk.server.ZooKeeperNode` (the same server ``tokensvc cluster up``
manages, from the jars the pyspark wheel ships): it writes the node's configuration under
``--dir`` and replaces itself with the JVM, so a service manager (deploy/systemd) watches
and signals ZooKeeper itself. For an ensemble, run ZooKeeper's own distribution.

``security-migration`` takes the options of Kafka's ``zookeeper-security-migration.sh``
(``--zookeeper.acl secure|unsecure``, ``--zookeeper.connect``, ``--zk-tls-config-file``)
and calls :func:`zk.migration.migrate`; the rolling procedure around it is in
docs/operations.md.
"""

from __future__ import annotations

import os
from pathlib import Path

import click

from cli.common import zk_config_option, zk_settings
from zk.server import DEFAULT_HEAP_MB, ZooKeeperNode, ZooKeeperStartError


@click.group("zookeeper", invoke_without_command=True)
@click.option("--dir", "data_dir", default=None, type=click.Path(file_okay=False),
              help="Data, configuration and log directory (created if missing).")
@click.option("--port", type=click.IntRange(1, 65535), default=2181, show_default=True,
              help="Client port.")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on.")
@click.option("--heap-mb", type=click.IntRange(min=64), default=DEFAULT_HEAP_MB,
              show_default=True, help="JVM heap (about 700 MB per million tokens).")
@click.option("--tick-ms", type=click.IntRange(min=100), default=2000, show_default=True,
              help="ZooKeeper's tickTime; sessions may be 2 to 20 ticks long.")
@click.pass_context
def zookeeper(ctx: click.Context, data_dir: str | None, port: int, host: str, heap_mb: int,
              tick_ms: int) -> None:
    """Run one ZooKeeper server until it is stopped (or run a subcommand)."""
    if ctx.invoked_subcommand is not None:
        return
    if data_dir is None:
        raise click.UsageError("Missing option '--dir'.")
    node = ZooKeeperNode(data_dir=Path(data_dir), client_port=port, host=host,
                         heap_mb=heap_mb, tick_ms=tick_ms, die_with_parent=False)
    try:
        command = node.command()
    except (ZooKeeperStartError, OSError) as exc:
        raise click.ClickException(str(exc)) from None
    os.execv(command[0], command)


@zookeeper.command("security-migration")
@click.option("--zookeeper.acl", "acl", required=True, type=click.Choice(["secure", "unsecure"]),
              help="secure: the brokers' identity ALL, the world READ except sensitive paths; "
                   "unsecure: the world ALL.")
@click.option("--zookeeper.connect", "connect", default=None, metavar="CONNECT",
              help="host:port[,host:port][/chroot] (else the file's zookeeper.connect).")
@click.option("--zookeeper.session.timeout", "session_timeout_ms", default=30_000,
              show_default=True, type=click.IntRange(1000), help="Session timeout (ms).")
@click.option("--zookeeper.connection.timeout", "connection_timeout_ms", default=30_000,
              show_default=True, type=click.IntRange(100), help="Connection timeout (ms).")
@zk_config_option
def security_migration(acl: str, connect: str | None, session_timeout_ms: int,
                       connection_timeout_ms: int, zk_config: str | None) -> None:
    """Set the declared ACL on every existing znode of tokensvc (idempotent; run it
    again to resume after an interruption)."""
    from dataclasses import replace

    from kazoo.exceptions import KazooException

    from zk.client import ZooKeeperUnavailable, open_client
    from zk.migration import migrate, migrate_chroot_parents

    secure = acl == "secure"
    settings = zk_settings(connect, zk_config, session_timeout_ms=session_timeout_ms,
                           connection_timeout_ms=connection_timeout_ms)
    if secure and not settings.security.has_identity:
        raise click.ClickException(
            "--zookeeper.acl secure needs the brokers' ZooKeeper identity: give "
            "--zk-tls-config-file with zookeeper.sasl.jaas.file or zookeeper.ssl.* keys")
    # The walk sets every ACL itself; the chroot, if missing, is not created open.
    settings = replace(settings, security=replace(settings.security, set_acl=secure))
    try:
        client = open_client(settings)
    except ZooKeeperUnavailable as exc:
        raise click.ClickException(str(exc)) from None
    try:
        result = migrate(client, secure)
        parents = 0
        if settings.chroot:
            root = open_client(replace(settings, connect=settings.hosts))
            try:
                parents = migrate_chroot_parents(root, settings.chroot, secure)
            finally:
                root.stop()
                root.close()
    except (KazooException, ZooKeeperUnavailable) as exc:
        raise click.ClickException(
            f"migration interrupted ({type(exc).__name__}): run it again to resume") from None
    finally:
        client.stop()
        client.close()
    click.echo(f"{acl}: {result.znodes} znodes read, {result.changed + parents} ACLs set, "
               f"{result.vanished} deleted meanwhile")
