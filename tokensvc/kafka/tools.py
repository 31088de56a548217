"""Kafka's own command-line tools, run as Kafka's ``bin/*.sh`` scripts run them: each
script names a main class, and one classpath (the broker's jars, :mod:`tokensvc.kafka.jars`)
serves them all. :data:`TOOL_CLASSES` is the table of the scripts of Kafka 3.9 this project
uses, read from those scripts.

A tool runs to its end or to a timeout, with its log (WARN and up) on stderr; the caller
gets the exit status, stdout and stderr. Must not keep a process running after it returns.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tokensvc.atomicfile import write_atomic
from tokensvc.jvm import JavaCommand, JvmError, cache_dir, require_java
from tokensvc.kafka.jars import KAFKA_VERSION, TOOLS_LOG4J, kafka_jars

JVMFLAGS_ENV = "TOKENSVC_KAFKA_TOOL_JVMFLAGS"
TOOL_HEAP_MB = 256
# Script name -> main class, as Kafka 3.9's bin/<script> execs kafka-run-class.sh.
TOOL_CLASSES = {
    "kafka-acls.sh": "kafka.admin.AclCommand",
    "kafka-broker-api-versions.sh": "kafka.admin.BrokerApiVersionsCommand",
    "kafka-configs.sh": "kafka.admin.ConfigCommand",
    "kafka-console-consumer.sh": "org.apache.kafka.tools.consumer.ConsoleConsumer",
    "kafka-console-producer.sh": "kafka.tools.ConsoleProducer",
    "kafka-consumer-groups.sh": "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
    "kafka-delegation-tokens.sh": "org.apache.kafka.tools.DelegationTokenCommand",
    "kafka-features.sh": "org.apache.kafka.tools.FeatureCommand",
    "kafka-get-offsets.sh": "org.apache.kafka.tools.GetOffsetShell",
    "kafka-topics.sh": "org.apache.kafka.tools.TopicCommand",
}


class KafkaToolError(JvmError):
    """A Kafka tool could not be run (unknown script, no Java, no jars) or did not end
    within its timeout."""


@dataclass(frozen=True)
class ToolResult:
    """How a tool ended: its exit status and everything it printed."""

    returncode: int
    stdout: str
    stderr: str


def tool_command(script: str, args: Sequence[str]) -> list[str]:
    """The command that runs ``script`` (``kafka-topics.sh``, or without ``.sh``) with ``args``."""
    name = script if script.endswith(".sh") else f"{script}.sh"
    main = TOOL_CLASSES.get(name)
    if main is None:
        raise KafkaToolError(f"unknown Kafka tool {script!r}: one of {', '.join(sorted(TOOL_CLASSES))}")
    try:
        java = require_java(11)
        jars = kafka_jars()
    except JvmError as exc:
        raise KafkaToolError(f"cannot run {name}: {exc}") from None
    return JavaCommand(
        java=java,
        main=main,
        classpath=jars,
        args=list(args),
        heap_mb=TOOL_HEAP_MB,
        flags=["-Djava.awt.headless=true"],
        system_properties={"log4j.configuration": f"file:{_tools_log4j()}"},
        flags_env=JVMFLAGS_ENV,
    ).argv()


def run_tool(script: str, args: Sequence[str], *, timeout: float = 120.0,
             stdin: str | None = None) -> ToolResult:
    """Run Kafka's ``script`` with ``args`` (``stdin``, when given, on its standard input) and wait for its end;
    :class:`KafkaToolError` if it runs longer than ``timeout`` seconds (it is killed)."""
    command = tool_command(script, args)
    try:
        done = subprocess.run(command, input=stdin, capture_output=True, text=True,
                              timeout=timeout, check=False,
                              stdin=None if stdin is not None else subprocess.DEVNULL)
    except subprocess.TimeoutExpired as exc:
        raise KafkaToolError(f"{script} {' '.join(args)} did not end within {timeout:.0f}s; "
                             f"its stderr: {_text(exc.stderr)[-2000:]}") from None
    return ToolResult(done.returncode, done.stdout, done.stderr)


def _text(output: bytes | str | None) -> str:
    if isinstance(output, bytes):
        return output.decode("utf-8", "replace")
    return output or ""


def _tools_log4j() -> Path:
    """The tools' log4j file, written once beside the cached jars."""
    path = cache_dir() / f"kafka-{KAFKA_VERSION}-tools-log4j.properties"
    if not path.exists() or path.read_text() != TOOLS_LOG4J:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, TOOLS_LOG4J.encode(), mode=0o644)
    return path
