"""One Apache Kafka 3.9 broker in ZooKeeper mode, for tests that need a real Kafka broker.

The broker runs from Kafka's jars on Maven Central (``kafka_2.13`` and a logging
binding, :func:`tests.support.build_cache.maven_jars`), main class ``kafka.Kafka``, on a
ZooKeeper connect string with a chroot of its own. It listens on one SASL_PLAINTEXT
listener with SCRAM-SHA-256 and SCRAM-SHA-512, and speaks to itself (the controller to its
own broker) as an admin user whose SCRAM credentials are written into ``/config/users``
before it starts, with tokensvc's credential store, as Kafka's own
``kafka-configs --zookeeper`` did before 3.x. ``delegation.token.secret.key`` is set, so
the broker creates and validates delegation tokens. No authorizer: every authenticated
user may do anything, which is what client tests need.

Owns starting and stopping that one process; it must not know about clients or tokens.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.build_cache import maven_jars
from tokensvc.jvm.java import find_java
from tokensvc.jvm.ports import free_port
from zk.client import ZkSettings
from zk.credential_store import bootstrap_user

KAFKA_VERSION = "3.9.1"
KAFKA_ARTIFACTS = (f"org.apache.kafka:kafka_2.13:{KAFKA_VERSION}",
                   "org.slf4j:slf4j-reload4j:1.7.36")
START_TIMEOUT_S = 90.0
STOP_TIMEOUT_S = 30.0
STARTED = "started (kafka.server.KafkaServer)"
JVM_FLAGS = ("-Xms64m", "-Xmx384m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
             "-Djava.awt.headless=true")
LOG4J = """\
log4j.rootLogger=INFO, file
log4j.appender.file=org.apache.log4j.FileAppender
log4j.appender.file.File={log}
log4j.appender.file.layout=org.apache.log4j.PatternLayout
log4j.appender.file.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.kafka.request.logger=WARN
log4j.logger.state.change.logger=WARN
log4j.logger.org.apache.zookeeper=WARN
log4j.logger.kafka.log=WARN
log4j.logger.org.apache.kafka.storage=WARN
"""


class KafkaStartError(RuntimeError):
    """The broker exited or did not start in time; the message has its log's tail."""


@dataclass
class KafkaBroker:
    """A running Kafka broker. ``admin_user``/``admin_password`` log in with SCRAM."""

    process: subprocess.Popen[bytes]
    broker_id: int
    bootstrap: str
    zk_connect: str
    admin_user: str
    admin_password: str = field(repr=False)
    secret_key: str = field(repr=False)
    workdir: Path
    log_path: Path

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self) -> None:
        if self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(STOP_TIMEOUT_S)


def start_kafka_broker(
    zk_connect: str,
    workdir: Path,
    *,
    broker_id: int = 1,
    secret_key: str | None = None,
    admin_user: str = "kafka-admin",
    overrides: Mapping[str, str] | None = None,
) -> KafkaBroker:
    """Start a broker on ``zk_connect`` (its chroot is created if missing) and return it
    once it logs that it started. ``overrides`` are more ``server.properties`` keys."""
    jars = maven_jars(KAFKA_ARTIFACTS)
    admin_password = secrets.token_urlsafe(18)
    secret_key = secret_key or secrets.token_urlsafe(32)
    bootstrap_user(ZkSettings(zk_connect), admin_user, admin_password)
    workdir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    log_path = workdir / "server.log"
    jaas = ('org.apache.kafka.common.security.scram.ScramLoginModule required '
            f'username="{admin_user}" password="{admin_password}";')
    properties = {
        "broker.id": str(broker_id),
        "zookeeper.connect": zk_connect,
        "zookeeper.session.timeout.ms": "18000",
        "listeners": f"SASL_PLAINTEXT://127.0.0.1:{port}",
        "advertised.listeners": f"SASL_PLAINTEXT://127.0.0.1:{port}",
        "security.inter.broker.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
        "sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512",
        "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config": jaas,
        "listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config": jaas,
        "delegation.token.secret.key": secret_key,
        "log.dirs": str(workdir / "data"),
        "num.partitions": "1",
        "default.replication.factor": "1",
        "offsets.topic.replication.factor": "1",
        "offsets.topic.num.partitions": "1",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "group.initial.rebalance.delay.ms": "0",
        "num.network.threads": "2",
        "num.io.threads": "2",
        "num.recovery.threads.per.data.dir": "1",
        "background.threads": "2",
        "log.cleaner.enable": "false",
        **(overrides or {}),
    }
    config = workdir / "server.properties"
    config.write_text("".join(f"{k}={_escape(v)}\n" for k, v in properties.items()))
    log4j = workdir / "log4j.properties"
    log4j.write_text(LOG4J.format(log=log_path))
    argv = [find_java(), *JVM_FLAGS, f"-Dlog4j.configuration=file:{log4j}",
            f"-Dkafka.logs.dir={workdir}", "-cp", os.pathsep.join(map(str, jars)),
            "kafka.Kafka", str(config)]
    with open(workdir / "stdout.log", "wb") as out:
        process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, start_new_session=True)
    broker = KafkaBroker(process, broker_id, f"127.0.0.1:{port}", zk_connect, admin_user,
                         admin_password, secret_key, workdir, log_path)
    deadline = time.monotonic() + START_TIMEOUT_S
    while STARTED not in broker.log_text():
        if process.poll() is not None or time.monotonic() > deadline:
            broker.stop()
            stdout = (workdir / "stdout.log").read_text(errors="replace")
            raise KafkaStartError(f"Kafka broker {broker_id} did not start (exit "
                                  f"{process.returncode}):\n{broker.log_text()[-3000:]}"
                                  f"\n{stdout[-2000:]}")
        time.sleep(0.1)
    return broker


def _escape(value: str) -> str:
    """A value as a .properties line keeps it (backslashes, and the separators in keys
    do not occur in ours)."""
    return value.replace("\\", "\\\\")
