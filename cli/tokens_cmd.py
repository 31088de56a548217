"""`tokensvc tokens export`: a token snapshot from ZooKeeper for the audit report.

The snapshot is JSON lines without any HMAC (ZooKeeper holds none), in the format of
:mod:`tokensvc.audit.token_export`: ``token_id``, ``owner``, ``requester``, ``renewers``,
``issue_ms``, ``expiry_ms``, ``max_ms``, plus ``labels`` for a token that has labels (the
audit report resolves the labels of tokens created before the range it reads from here).
"""

from __future__ import annotations

import sys

import click

from cli.common import zk_config_option, zk_settings
from tokensvc.audit.token_export import from_token, write_tokens


@click.group("tokens")
def tokens() -> None:
    """Read delegation tokens straight from ZooKeeper."""


@tokens.command("export")
@click.option("--zookeeper", "connect", required=True, help="ZooKeeper connect string (h:p[/chroot]).")
@click.option("--out", "out", type=click.Path(dir_okay=False, writable=True), default="-",
              show_default=True, help="File to write, or - for standard output.")
@click.option("--zookeeper-timeout-ms", default=10_000, show_default=True, type=click.IntRange(min=1))
@zk_config_option
def export(connect: str, out: str, zookeeper_timeout_ms: int, zk_config: str | None) -> None:
    """Write every token's details (never its HMAC) as JSON lines."""
    from zk.client import ZooKeeperUnavailable, open_client
    from zk.errors import StoreError
    from zk.token_store import TokenStore

    try:
        client = open_client(zk_settings(connect, zk_config,
                                         connection_timeout_ms=zookeeper_timeout_ms))
    except ZooKeeperUnavailable as exc:
        raise click.ClickException(str(exc)) from None
    try:
        infos = TokenStore(client).load_all()
    except StoreError as exc:
        raise click.ClickException(f"could not read tokens: {exc}") from None
    finally:
        client.stop()
        client.close()
    exported = [from_token(info) for info in sorted(infos, key=lambda i: i.token_id)]
    if out == "-":
        write_tokens(exported, sys.stdout)
    else:
        with open(out, "w", encoding="utf-8") as fh:
            write_tokens(exported, fh)
        click.echo(f"exported {len(exported)} tokens to {out}", err=True)
