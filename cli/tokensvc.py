"""`tokensvc`: run brokers and the local cluster, manage users, ACLs, audit reports."""

from __future__ import annotations

import importlib
from typing import Any

import click


class _LazyGroup(click.Group):
    """A group whose sub-commands are imported when one is used or listed: ``tokensvc
    broker`` starts without importing the cluster, audit and admin modules (a broker's
    restart waits for its imports)."""

    def __init__(self, *args: Any, lazy: dict[str, tuple[str, str]], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._lazy = lazy

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self._lazy})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self._lazy and cmd_name not in self.commands:
            module, attr = self._lazy[cmd_name]
            self.add_command(getattr(importlib.import_module(module), attr), cmd_name)
        return super().get_command(ctx, cmd_name)


# name -> (module, attribute) of each sub-command; every module is a thin click shell.
_COMMANDS = {
    "broker": ("cli.broker_cmd", "broker"),
    "cluster": ("cli.cluster_cmd", "cluster"),
    "users": ("cli.users_cmd", "users"),
    "acls": ("cli.acls_cmd", "acls"),
    "audit": ("cli.audit_cmd", "audit"),
    "tokens": ("cli.tokens_cmd", "tokens"),
    "zookeeper": ("cli.zookeeper_cmd", "zookeeper"),
}


@click.group(cls=_LazyGroup, lazy=_COMMANDS)
@click.version_option(package_name="tokensvc")
def main() -> None:
    """tokensvc: Kafka-style delegation tokens with SCRAM, on ZooKeeper."""


if __name__ == "__main__":
    main()
