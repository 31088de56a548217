"""`tokensvc users`: SCRAM users written straight into ZooKeeper.

A thin shell over :func:`zk.credential_store.bootstrap_user`. This is how the first
super user comes to exist before any broker runs (Kafka's ``kafka-configs --zookeeper``
does the same); once brokers run, use AlterUserScramCredentials through a broker instead.
The password is read from an option or a file and never printed.
"""

from __future__ import annotations

import click

from cli.common import zk_config_option, zk_settings
from tokensvc.scram.formatter import MAX_ITERATIONS, MIN_ITERATIONS, ScramMechanism
from zk.client import ZooKeeperUnavailable
from zk.credential_store import bootstrap_user
from zk.errors import StoreError

_MECHANISMS = [m.mechanism_name for m in ScramMechanism]


@click.group("users")
def users() -> None:
    """Manage SCRAM users in ZooKeeper."""


def _read_password(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            first = f.readline()
    except OSError as exc:
        raise click.BadParameter(f"cannot read {path}: {exc.strerror}", param_hint="--password-file")
    password = first.rstrip("\r\n")
    if not password:
        raise click.BadParameter(f"{path} has an empty first line", param_hint="--password-file")
    return password


@users.command("bootstrap")
@click.option("--zookeeper", "connect", required=True, metavar="CONNECT",
              help="ZooKeeper connect string, host:port[,host:port][/chroot].")
@click.option("--user", required=True, help="User name (the principal is User:<name>).")
@click.option("--password", default=None, help="The user's password.")
@click.option("--password-file", default=None, type=click.Path(dir_okay=False),
              help="File whose first line is the password.")
@click.option("--mechanism", "mechanisms", multiple=True,
              type=click.Choice(_MECHANISMS), help="SCRAM mechanism (repeatable; default: both).")
@click.option("--iterations", default=MIN_ITERATIONS, show_default=True,
              type=click.IntRange(MIN_ITERATIONS, MAX_ITERATIONS),
              help="PBKDF2 iterations of the stored credential.")
@click.option("--zookeeper-timeout-ms", "timeout_ms", default=18_000, show_default=True,
              type=click.IntRange(100), help="How long to try to reach ZooKeeper.")
@zk_config_option
def bootstrap(
    connect: str,
    user: str,
    password: str | None,
    password_file: str | None,
    mechanisms: tuple[str, ...],
    iterations: int,
    timeout_ms: int,
    zk_config: str | None,
) -> None:
    """Write USER's SCRAM credentials straight into ZooKeeper (no broker needed)."""
    if (password is None) == (password_file is None):
        raise click.UsageError("give exactly one of --password and --password-file")
    if not user:
        raise click.BadParameter("must not be empty", param_hint="--user")
    secret = password if password is not None else _read_password(password_file or "")
    chosen = [ScramMechanism.from_name(m) for m in dict.fromkeys(mechanisms or _MECHANISMS)]
    try:
        bootstrap_user(zk_settings(connect, zk_config, connection_timeout_ms=timeout_ms), user,
                       secret, chosen, iterations)
    except ZooKeeperUnavailable as exc:
        raise click.ClickException(str(exc)) from None
    except StoreError as exc:
        raise click.ClickException(f"could not write the credentials of {user}: {exc}") from None
    names = ", ".join(m.mechanism_name for m in chosen)
    click.echo(f"wrote {names} credentials of User:{user} ({iterations} iterations) to {connect}")
