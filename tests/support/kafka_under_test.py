"""What the tests of a real Apache Kafka broker hold of it (the fixture of
tests/integration/kafka/conftest.py starts it through :class:`tokensvc.cluster.LocalCluster`).

Owns only the record; it must not start or stop anything.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class KafkaUnderTest:
    """The broker a test talks to: where, as whom, and the keys it was started with."""

    bootstrap: str
    admin_user: str
    admin_password: str = field(repr=False)
    properties: dict[str, str] = field(repr=False)
