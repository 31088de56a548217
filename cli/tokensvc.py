"""`tokensvc`: run brokers and the local cluster, manage users, ACLs, audit reports."""

from __future__ import annotations

import importlib

import click


@click.group()
@click.version_option(package_name="tokensvc")
def main() -> None:
    """tokensvc: Kafka-style delegation tokens with SCRAM, on ZooKeeper."""


# (module, attribute) of each sub-command; every module is a thin click shell.
_COMMANDS = [
    ("cli.broker_cmd", "broker"),
    ("cli.cluster_cmd", "cluster"),
    ("cli.users_cmd", "users"),
    ("cli.acls_cmd", "acls"),
    ("cli.audit_cmd", "audit"),
    ("cli.tokens_cmd", "tokens"),
    ("cli.zookeeper_cmd", "zookeeper"),
]

for _module, _attr in _COMMANDS:
    main.add_command(getattr(importlib.import_module(_module), _attr))


if __name__ == "__main__":
    main()
