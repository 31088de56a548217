"""Apache Kafka's jars, from Maven Central through the JVM room: the broker and its
tools (Kafka 3.9, the last release with ZooKeeper mode) with a logging binding, and
kafka-clients of any version for Java client programs. Also the log4j configurations
the Kafka processes run with.

Must not start anything; the jars are fetched once and cached (:func:`tokensvc.jvm.resolve`).
"""

from __future__ import annotations

from pathlib import Path

from tokensvc.jvm import resolve

KAFKA_VERSION = "3.9.1"
# kafka_2.13 is the broker (``kafka.Kafka``) and the tools still written in Scala
# (kafka-acls.sh, kafka-configs.sh, kafka-console-producer.sh); kafka-tools holds the
# others (kafka-topics.sh, kafka-delegation-tokens.sh, kafka-console-consumer.sh). Kafka
# 3.9 logs through slf4j to log4j 1.2's API: reload4j is the binding its distribution ships.
BROKER_ARTIFACTS = (
    f"org.apache.kafka:kafka_2.13:{KAFKA_VERSION}",
    f"org.apache.kafka:kafka-tools:{KAFKA_VERSION}",
    "org.slf4j:slf4j-reload4j:1.7.36",
)


def kafka_jars() -> list[Path]:
    """The jars of the Kafka broker and its tools (105 jars, 56 MB; fetched on first use)."""
    return resolve(BROKER_ARTIFACTS)


def kafka_clients_jars(version: str) -> list[Path]:
    """kafka-clients ``version`` and its runtime dependencies (slf4j-api among them), for
    Java client programs."""
    return resolve([f"org.apache.kafka:kafka-clients:{version}"])


def broker_log4j(log: Path) -> str:
    """log4j 1.2 properties of a broker: INFO and above to ``log``, Kafka's noisy
    request and state-change loggers at WARN."""
    return "\n".join([
        "log4j.rootLogger=INFO, file",
        "log4j.appender.file=org.apache.log4j.FileAppender",
        f"log4j.appender.file.File={log}",
        "log4j.appender.file.Append=true",
        "log4j.appender.file.layout=org.apache.log4j.PatternLayout",
        "log4j.appender.file.layout.ConversionPattern=[%d] %p %m (%c)%n",
        "log4j.logger.kafka.request.logger=WARN",
        "log4j.logger.state.change.logger=WARN",
        "log4j.logger.org.apache.zookeeper=WARN",
        "log4j.logger.kafka.authorizer.logger=INFO",
        "",
    ])


# A tool prints its results on stdout; its log, warnings and up, goes to stderr (as
# Kafka's config/tools-log4j.properties).
TOOLS_LOG4J = """\
log4j.rootLogger=WARN, stderr
log4j.appender.stderr=org.apache.log4j.ConsoleAppender
log4j.appender.stderr.Target=System.err
log4j.appender.stderr.layout=org.apache.log4j.PatternLayout
log4j.appender.stderr.layout.ConversionPattern=[%d] %p %m (%c)%n
"""
