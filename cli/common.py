"""Plumbing shared by the admin commands (kafka-acls, kafka-delegation-tokens): checking
--bootstrap-server, loading --command-config, and turning failures into one-line click
errors.

Owns only that plumbing; it must not know about any one command's options or output.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import click

from tokensvc.admin import AdminError
from tokensvc.admin.connection import split_address
from tokensvc.client_config import ClientConfig, ClientConfigError, load_client_config

T = TypeVar("T")


def validate_bootstrap(ctx: click.Context, param: click.Parameter, value: str) -> str:
    """click callback: every comma-separated ``host:port`` in ``value`` must parse."""
    for address in value.split(","):
        try:
            split_address(address)
        except ValueError as exc:
            raise click.BadParameter(str(exc)) from None
    return value


def command_config(path: str | None) -> ClientConfig:
    """The client settings from the --command-config file; defaults without one."""
    return load_client_config(path) if path else ClientConfig()


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
