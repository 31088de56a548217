"""Apache Kafka beside tokensvc: Kafka's jars (from Maven Central), a ZooKeeper-mode
Kafka 3.9 broker (:class:`KafkaBroker`) and Kafka's own command-line tools
(:func:`run_tool`), each run through the JVM room (:mod:`tokensvc.jvm`).

It configures and runs Kafka; it never writes ZooKeeper itself and is no part of the
tokensvc broker.
"""

from tokensvc.kafka.broker import KafkaBroker, KafkaStartError, reauth_key
from tokensvc.kafka.jars import KAFKA_VERSION, kafka_clients_jars, kafka_jars
from tokensvc.kafka.tools import TOOL_CLASSES, KafkaToolError, ToolResult, run_tool, tool_command

__all__ = [
    "KAFKA_VERSION",
    "TOOL_CLASSES",
    "KafkaBroker",
    "KafkaStartError",
    "KafkaToolError",
    "ToolResult",
    "kafka_clients_jars",
    "kafka_jars",
    "reauth_key",
    "run_tool",
    "tool_command",
]
