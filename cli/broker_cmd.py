"""`tokensvc broker --config server.properties`: run one broker in the foreground."""

from __future__ import annotations

import asyncio
import logging
import signal
import sys

import click

from tokensvc.core.config import BrokerConfig, ConfigError


@click.command("broker")
@click.option("--config", "config_path", required=True, type=click.Path(dir_okay=False),
              help="Kafka-style server.properties file.")
@click.option("--log-level", default="INFO", show_default=True,
              type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False))
def broker(config_path: str, log_level: str) -> None:
    """Run one tokensvc broker until SIGTERM or Ctrl-C."""
    try:
        config = BrokerConfig.load(config_path)
    except FileNotFoundError:
        raise click.ClickException(f"config file {config_path} does not exist") from None
    except ConfigError as exc:
        raise click.ClickException(f"invalid configuration in {config_path}: {exc}") from None
    logging.basicConfig(
        level=log_level.upper(),
        stream=sys.stderr,
        format=f"%(asctime)s %(levelname)s [broker {config.broker_id}] %(name)s: %(message)s",
    )
    logging.getLogger("kazoo").setLevel(logging.WARNING)
    from tokensvc.broker import eventloop
    from tokensvc.broker.broker import run_broker

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await run_broker(config, stop)

    try:
        eventloop.run(main())
    except OSError as exc:
        raise click.ClickException(f"broker {config.broker_id} could not start: {exc}") from None
