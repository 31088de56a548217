"""`tokensvc cluster up/down/roll`: a local cluster on loopback (see docs/cluster.md).

A thin shell over :class:`tokensvc.cluster.LocalCluster`: parses options, starts or stops
the cluster, and prints how to use it. Passwords are never printed: the usage text points
at the 0600 files that hold them.
"""

from __future__ import annotations

import shutil
import signal
import sys
import threading
from pathlib import Path
from types import FrameType
from typing import Any

import click

from tokensvc.cluster import ClusterError, LocalCluster
from tokensvc.cluster import down as cluster_down
from tokensvc.roll import DEFAULT_TIMEOUT_S as DEFAULT_ROLL_TIMEOUT_S
from tokensvc.roll import RollError, roll_cluster
from zk.server import DEFAULT_HEAP_MB, parse_heap_mb


@click.group("cluster")
def cluster() -> None:
    """Run a local tokensvc cluster (ZooKeeper + brokers, Kafka brokers beside) on 127.0.0.1."""


def _parse_overrides(values: tuple[str, ...]) -> dict[str, str]:
    overrides: dict[str, str] = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"{item!r} is not KEY=VALUE", param_hint="--set")
        overrides[key.strip()] = value.strip()
    return overrides


def _heap(ctx: click.Context, param: click.Parameter, value: str) -> int:
    try:
        return parse_heap_mb(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


def _command(name: str) -> str:
    """``name`` as a person can type it: bare when on PATH, else the virtualenv's script."""
    if shutil.which(name):
        return name
    script = Path(sys.executable).parent / name
    return str(script) if script.exists() else name


def usage_text(info: dict[str, Any], directory: Path) -> str:
    """What to tell a person once the cluster answers."""
    tls = info.get("tls")
    bootstrap = tls["bootstrap_servers"] if tls else info["bootstrap_servers"]
    admin = info["admin"]
    lines = [
        f"tokensvc cluster is up in {directory}",
        f"  bootstrap servers (SASL_PLAINTEXT): {info['bootstrap_servers']}",
    ]
    if tls:
        lines.append(f"  bootstrap servers (SASL_SSL):       {tls['bootstrap_servers']}")
        lines.append(f"  CA certificate:                     {tls['ca']}")
    zk = info["zookeeper"]
    if zk.get("tls") and zk.get("sasl"):
        lines.append(f"  ZooKeeper (TLS only, client certificate + SASL): {zk['connect']}")
    else:
        lines.append(f"  ZooKeeper:                          {zk['connect']}")
    if zk.get("client_config"):
        lines.append(f"  ZooKeeper client settings (for tools): {zk['client_config']}")
    lines.append(
        f"  admin ({admin['principal']}) client properties: {admin['properties']} "
        f"(password also in {directory / 'cluster.json'})"
    )
    for broker in info["brokers"]:
        lines.append(
            f"  broker {broker['id']}: pid {broker['pid']}, metrics http://{broker['metrics']}/metrics,"
            f" log {broker['log']}"
        )
    protocol = "SASL_SSL" if tls else "SASL_PLAINTEXT"
    ssl_conf = f'\n    "ssl.ca.location": "{tls["ca"]}",' if tls else ""
    lines += [
        "",
        "Create a delegation token:",
        f"  {_command('kafka-delegation-token')} --bootstrap-server {bootstrap} \\",
        f"      --command-config {admin['properties']} --create --max-life-time-period -1",
        "",
        "From confluent-kafka:",
        "  import json",
        "  from confluent_kafka.admin import AdminClient",
        f"  info = json.load(open(\"{directory / 'cluster.json'}\"))",
        "  admin = AdminClient({",
        f'    "bootstrap.servers": "{bootstrap}",',
        f'    "security.protocol": "{protocol}",{ssl_conf}',
        '    "sasl.mechanism": "SCRAM-SHA-512",',
        '    "sasl.username": info["admin"]["username"],',
        '    "sasl.password": info["admin"]["password"],',
        "  })",
        "  print([node.id for node in admin.describe_cluster().result().nodes])",
    ]
    if zk.get("client_config"):
        lines += [
            "",
            "Open its ZooKeeper from a tool (the brokers' certificate and SASL login):",
            f"  {_command('tokensvc')} tokens export --zookeeper {zk['connect']} \\",
            f"      --zk-tls-config-file {zk['client_config']}",
        ]
    lines += _kafka_usage(info, directory)
    lines += [
        "",
        f"Stop it with: {_command('tokensvc')} cluster down --dir {directory}",
    ]
    return "\n".join(lines)


def _kafka_usage(info: dict[str, Any], directory: Path) -> list[str]:
    """How to use the Apache Kafka brokers of ``--kafka-brokers``, with a token."""
    kafka = info.get("kafka")
    if not kafka:
        return []
    bootstrap = kafka["bootstrap_servers"]
    tokens = info["bootstrap_servers"] or bootstrap
    bin_dir = directory / "kafka-bin"
    props = kafka["token_properties"]
    lines = ["", f"Apache Kafka brokers (ZooKeeper mode) beside it: {bootstrap}"]
    for broker in kafka["brokers"]:
        lines.append(f"  Kafka broker {broker['id']}: pid {broker['pid']}, log {broker['log']}")
    return [
        *lines,
        "",
        "Produce and consume on them with a delegation token (its login, tokenauth=true,",
        f"is in {props}; Kafka's tools are in {bin_dir}):",
        f"  echo hello | {bin_dir / 'kafka-console-producer.sh'} --bootstrap-server {bootstrap} \\",
        f"      --producer.config {props} --topic demo",
        f"  {bin_dir / 'kafka-console-consumer.sh'} --bootstrap-server {bootstrap} \\",
        f"      --consumer.config {props} --topic demo --from-beginning --max-messages 1",
        "",
        "A token of your own (then put its id and HMAC in a copy of that file):",
        f"  {_command('kafka-delegation-token')} --bootstrap-server {tokens} \\",
        f"      --command-config {info['admin']['properties']} --create --max-life-time-period -1",
    ]


def _wait_for_signal(announce: str) -> None:
    """Print ``announce``, then block until SIGINT or SIGTERM arrives. The handlers are
    in place before the announcement: a signal sent as soon as it is read is caught
    (printed first, a SIGTERM sent at once under load killed the process before the
    cluster was stopped)."""
    stop = threading.Event()

    def handler(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        click.echo(announce)
        while not stop.wait(0.5):
            pass
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


@cluster.command("up")
@click.option("--dir", "directory", required=True, type=click.Path(file_okay=False),
              help="Directory for configs, logs, ZooKeeper data and cluster.json.")
@click.option("--brokers", default=3, show_default=True, type=click.IntRange(1, 32),
              help="Number of brokers.")
@click.option("--zookeeper", default=None, metavar="CONNECT",
              help="Use this ZooKeeper (host:port[/chroot]) instead of starting one.")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE",
              help="server.properties override for every broker (repeatable).")
@click.option("--tls", is_flag=True, help="Add SASL_SSL listeners with dev certificates.")
@click.option("--foreground", is_flag=True,
              help="Stay attached; Ctrl-C or SIGTERM stops the whole cluster.")
@click.option("--zookeeper-heap", "zookeeper_heap_mb", default=f"{DEFAULT_HEAP_MB}m",
              show_default=True, callback=_heap, metavar="SIZE",
              help="Heap of the managed ZooKeeper (2048m, 4g); about 1 GB per million tokens "
                   "is live, see docs/operations.md. Ignored with --zookeeper.")
@click.option("--zookeeper-nodes", default=1, show_default=True, type=click.IntRange(1, 7),
              help="Nodes of the managed ZooKeeper: 1, or an ensemble of 3, 5 or 7.")
@click.option("--kafka-brokers", default=0, show_default=True, type=click.IntRange(0, 9),
              help="Also start this many Apache Kafka 3.9 brokers (ZooKeeper mode, ids 101..) "
                   "on the same ZooKeeper, sharing it with tokensvc (docs/kafka.md); the "
                   "Kafka jars come from Maven Central on first use.")
@click.option("--insecure-zookeeper", is_flag=True,
              help="Start the managed ZooKeeper open, as earlier releases did: a plain "
                   "client port, no client certificates, no SASL, world-writable znodes. "
                   "Not for anything anyone else can reach.")
def up(
    directory: str,
    brokers: int,
    zookeeper: str | None,
    overrides: tuple[str, ...],
    tls: bool,
    foreground: bool,
    zookeeper_heap_mb: int,
    zookeeper_nodes: int,
    kafka_brokers: int,
    insecure_zookeeper: bool,
) -> None:
    """Start ZooKeeper and BROKERS brokers; return once every broker answers."""
    parsed = _parse_overrides(overrides)
    path = Path(directory).resolve()
    try:
        local = LocalCluster.up(
            path, brokers=brokers, zookeeper=zookeeper, overrides=parsed, tls=tls,
            die_with_parent=foreground, zookeeper_heap_mb=zookeeper_heap_mb,
            zookeeper_nodes=zookeeper_nodes, insecure_zookeeper=insecure_zookeeper,
            kafka_brokers=kafka_brokers,
        )
    except ClusterError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(usage_text(local.info, path))
    if not foreground:
        return
    try:
        _wait_for_signal("\nRunning in the foreground: press Ctrl-C to stop the cluster.")
    finally:
        click.echo("stopping the cluster ...")
        local.down()
        click.echo("cluster stopped")


@cluster.command("down")
@click.option("--dir", "directory", required=True, type=click.Path(file_okay=False),
              help="Directory given to `cluster up`.")
@click.option("--grace", default=10.0, show_default=True, type=click.FloatRange(0),
              help="Seconds a process gets to exit after SIGTERM before SIGKILL.")
def down(directory: str, grace: float) -> None:
    """Stop the brokers and the managed ZooKeeper of the cluster in DIR."""
    try:
        stopped = cluster_down(directory, grace)
    except ClusterError as exc:
        raise click.ClickException(str(exc)) from None
    if not stopped:
        click.echo(f"no cluster in {directory} (no cluster.json): nothing to stop")
        return
    click.echo(f"cluster in {directory} is stopped")


@cluster.command("roll")
@click.option("--dir", "directory", required=True, type=click.Path(file_okay=False),
              help="Directory given to `cluster up`.")
@click.option("--timeout", "timeout_s", default=DEFAULT_ROLL_TIMEOUT_S, show_default=True,
              type=click.FloatRange(1), help="Seconds each broker gets to come back and "
              "catch up before the roll stops.")
def roll(directory: str, timeout_s: float) -> None:
    """Restart each broker of the cluster in DIR in turn, the controller last.

    Each broker is stopped cleanly, started again, and waited for until it is in the
    cluster metadata and its token cache serves a token created after it was stopped;
    only then does the next one go (see docs/operations.md, "Rolling restart")."""
    try:
        result = roll_cluster(LocalCluster.open(directory), timeout_s=timeout_s,
                              on_step=click.echo)
    except (ClusterError, RollError) as exc:
        raise click.ClickException(str(exc)) from None
    for b in result.brokers:
        role = " (was controller)" if b.was_controller else ""
        click.echo(f"broker {b.broker_id}{role}: answering after {b.serving_s:.1f}s, "
                   f"caught up after {b.caught_up_s:.1f}s")
    click.echo(f"rolled {len(result.brokers)} brokers in {result.seconds:.1f}s")
