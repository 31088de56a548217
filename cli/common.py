"""Plumbing shared by the admin commands (kafka-acls, kafka-delegation-tokens): checking
--bootstrap-server, loading --command-config, the ZooKeeper options every command that
opens ZooKeeper takes (``--zk-tls-config-file``, Kafka's name: the file of
``zookeeper.ssl.*``, ``zookeeper.sasl.*`` and ``zookeeper.set.acl`` keys the brokers
use), and turning failures into one-line click errors.

Owns only that plumbing; it must not know about any one command's options or output.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import click

from tokensvc.admin import AdminError
from tokensvc.admin.connection import split_address
from tokensvc.client_config import (
    ClientConfig,
    ClientConfigError,
    load_client_config,
    oauth_overrides,
)
from tokensvc.core.configdef import ConfigError
from zk.client import ZkSettings, settings_from_file

T = TypeVar("T")

zk_config_option = click.option(
    "--zk-tls-config-file", "zk_config", default=None, type=click.Path(dir_okay=False),
    help="Properties file with the ZooKeeper security keys the brokers use "
         "(zookeeper.ssl.*, zookeeper.sasl.jaas.file, zookeeper.set.acl); a broker's "
         "server.properties will do. A local cluster writes one: cluster.json's "
         "zookeeper.client_config.",
)


def zk_settings(connect: str | None, zk_config: str | None, **timeouts: int) -> ZkSettings:
    """The ZooKeeper settings of a command's options; a bad file is one line."""
    try:
        return settings_from_file(connect, zk_config, **timeouts)
    except ConfigError as exc:
        raise click.ClickException(f"--zk-tls-config-file: {exc}") from None


def validate_bootstrap(ctx: click.Context, param: click.Parameter, value: str) -> str:
    """click callback: every comma-separated ``host:port`` in ``value`` must parse."""
    for address in value.split(","):
        try:
            split_address(address)
        except ValueError as exc:
            raise click.BadParameter(str(exc)) from None
    return value


def command_config(path: str | None, oauth_token_file: str | None = None) -> ClientConfig:
    """The client settings from the --command-config file; defaults without one.
    ``oauth_token_file`` (--oauthbearer-token-file): log in with OAUTHBEARER and the JWT
    in that file, whatever SASL login the file names."""
    if oauth_token_file is None:
        return load_client_config(path) if path else ClientConfig()
    if path is None:
        raise click.UsageError("--oauthbearer-token-file needs --command-config with "
                               "security.protocol=SASL_SSL (or SASL_PLAINTEXT)")
    config = load_client_config(path, oauth_overrides(oauth_token_file))
    if not config.uses_sasl:
        raise click.UsageError("--oauthbearer-token-file needs security.protocol=SASL_SSL "
                               "(or SASL_PLAINTEXT) in --command-config")
    return config


def run_as_click_command(action: Callable[..., T], *args: object) -> T:
    """``action(*args)``, with every failure but a click exception turned into a
    one-line ClickException (the user never sees a traceback)."""
    try:
        return action(*args)
    except click.ClickException:
        raise
    except AdminError as exc:
        raise click.ClickException(exc.message) from None
    except ClientConfigError as exc:
        raise click.ClickException(f"--command-config: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - the user gets one line, never a traceback
        raise click.ClickException(f"unexpected {exc.__class__.__name__}: {exc}") from None
