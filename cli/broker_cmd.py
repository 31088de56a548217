"""`tokensvc broker --config server.properties`: run one broker in the foreground.

A bad file stops it before anything starts, with one line naming the file and the key;
the notices of the load (ignored keys, tokens disabled) are logged once.
"""

from __future__ import annotations

import asyncio
import logging
import signal

import click

from tokensvc import logjson
from tokensvc.config_loader import load_broker_config
from tokensvc.core.config import ConfigError


@click.command("broker")
@click.option("--config", "config_path", required=True, type=click.Path(dir_okay=False),
              help="Kafka-style server.properties file.")
@click.option("--log-level", default="INFO", show_default=True,
              type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False))
def broker(config_path: str, log_level: str) -> None:
    """Run one tokensvc broker until SIGTERM or Ctrl-C."""
    try:
        loaded = load_broker_config(config_path)
    except ConfigError as exc:
        raise click.ClickException(f"invalid configuration: {exc}") from None
    config = loaded.config
    logjson.configure(log_level, config.broker_id, config.log_format)
    logging.getLogger("kazoo").setLevel(logging.WARNING)
    for notice in loaded.notices:
        logging.getLogger("tokensvc.config").warning("%s", notice)
    from tokensvc.broker.broker import run_broker
    from tokensvc.broker.loop import eventloop

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await run_broker(config, stop)

    from zk.client import ZooKeeperUnavailable

    security = config.zookeeper_security
    zk_log = logging.getLogger("tokensvc.zookeeper")
    zk_log.info("ZooKeeper: %s", security.describe())
    if not security.set_acl:
        zk_log.warning(
            "znodes are created world-writable (zookeeper.set.acl is off): anyone who reaches "
            "ZooKeeper can replace credentials, tokens and ACLs; give the broker a ZooKeeper "
            "identity (zookeeper.sasl.jaas.file, zookeeper.ssl.*) -- see docs/zookeeper.md"
        )
    try:
        eventloop.run(main())
    except ZooKeeperUnavailable as exc:
        raise click.ClickException(f"broker {config.broker_id} could not start: {exc}") from None
    except OSError as exc:
        raise click.ClickException(f"broker {config.broker_id} could not start: {exc}") from None
