"""One Apache Kafka 3.9 broker (ZooKeeper mode) whose SASL_PLAINTEXT listener takes
OAUTHBEARER logins with Kafka's own ``OAuthBearerValidatorCallbackHandler``: the judge the
OAUTHBEARER tests compare tokensvc's verdicts with.

The broker's jars (``org.apache.kafka:kafka_2.13`` and ``slf4j-reload4j``) come from Maven
Central on first use: ``mvn dependency:copy-dependencies`` of a two-dependency POM into
``~/.cache/tokensvc/kafka-broker-<version>/libs`` (under a file lock). The broker runs on a
chroot of the suite's ZooKeeper, alone (no tokensvc broker shares its chroot).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import socket
import subprocess
from pathlib import Path

from tests.support.wait import wait_for

KAFKA_VERSION = "3.9.1"
SLF4J_VERSION = "1.7.36"
VALIDATOR = "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler"
LOGIN_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
START_TIMEOUT_S = 90
POM = f"""<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>local.tokensvc.tests</groupId><artifactId>kafka-broker</artifactId><version>1</version>
  <dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId>
      <version>{KAFKA_VERSION}</version></dependency>
    <dependency><groupId>org.slf4j</groupId><artifactId>slf4j-reload4j</artifactId>
      <version>{SLF4J_VERSION}</version></dependency>
  </dependencies>
</project>
"""


def kafka_libs() -> Path:
    """The directory of the broker's jars (fetched with Maven on first use)."""
    if shutil.which("mvn") is None:
        raise RuntimeError("the Kafka judge needs Maven (apt-get install maven) to fetch Kafka")
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    home = base / "tokensvc" / f"kafka-broker-{KAFKA_VERSION}"
    home.mkdir(parents=True, exist_ok=True)
    libs = home / "libs"
    with open(home / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (libs / f"kafka_2.13-{KAFKA_VERSION}.jar").exists():
            (home / "pom.xml").write_text(POM)
            subprocess.run(["mvn", "-q", "-B", "dependency:copy-dependencies",
                            f"-DoutputDirectory={libs}", "-DincludeScope=runtime"],
                           cwd=home, check=True, capture_output=True, timeout=600)
    return libs


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class KafkaOAuthBroker:
    """A running Kafka broker judging OAUTHBEARER logins against one issuer."""

    def __init__(self, directory: Path, zookeeper: str, *, jwks_url: str, issuer: str,
                 audience: str) -> None:
        self.directory = directory
        self.sasl_port, plain_port = _free_port(), _free_port()
        self.address = ("127.0.0.1", self.sasl_port)
        libs = kafka_libs()
        props = {
            "broker.id": "0",
            "zookeeper.connect": zookeeper,
            "listeners": f"PLAINTEXT://127.0.0.1:{plain_port},SASL_PLAINTEXT://127.0.0.1:{self.sasl_port}",
            "inter.broker.listener.name": "PLAINTEXT",
            "sasl.enabled.mechanisms": "OAUTHBEARER",
            "listener.name.sasl_plaintext.oauthbearer.sasl.server.callback.handler.class": VALIDATOR,
            "listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config": f"{LOGIN_MODULE} required ;",
            "sasl.oauthbearer.jwks.endpoint.url": jwks_url,
            "sasl.oauthbearer.expected.issuer": issuer,
            "sasl.oauthbearer.expected.audience": audience,
            "connection.failed.authentication.delay.ms": "0",
            "log.dirs": str(directory / "kafka-logs"),
            "offsets.topic.replication.factor": "1",
            "transaction.state.log.replication.factor": "1",
            "group.initial.rebalance.delay.ms": "0",
        }
        config = directory / "kafka-server.properties"
        config.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        log4j = directory / "kafka-log4j.properties"
        log4j.write_text("log4j.rootLogger=INFO, out\n"
                         "log4j.appender.out=org.apache.log4j.ConsoleAppender\n"
                         "log4j.appender.out.layout=org.apache.log4j.PatternLayout\n"
                         "log4j.appender.out.layout.ConversionPattern=[%d] %p %m (%c)%n\n")
        self.log = directory / "kafka.log"
        self._log = open(self.log, "w")  # noqa: SIM115 -- the broker's output until close()
        java = shutil.which("java")
        assert java, "the Kafka judge needs Java 17"
        self.process = subprocess.Popen(
            [java, "-Xmx384m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
             f"-Dlog4j.configuration=file:{log4j}",
             f"-Dorg.apache.kafka.sasl.oauthbearer.allowed.urls={jwks_url}",
             "-cp", f"{libs}/*", "kafka.Kafka", str(config)],
            stdout=self._log, stderr=subprocess.STDOUT)
        wait_for(lambda: "started (kafka.server.KafkaServer)" in self.log.read_text()
                 or self.process.poll() is not None, START_TIMEOUT_S, "the Kafka broker's start")
        if self.process.poll() is not None:
            raise RuntimeError(f"Kafka did not start: {self.log.read_text()[-3000:]}")

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        self._log.close()
