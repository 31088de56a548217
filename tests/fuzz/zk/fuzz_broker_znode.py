"""Broker registrations (``/brokers/ids/<id>``, Kafka's BrokerIdZNode versions 1-5) and
the brokers' clock reports (``/tokensvc/clock/<id>``): zk.layout.decode_broker and
decode_clock_report.

Properties: only LayoutError escapes; the endpoints of a registration read are encoded
and read again to the same endpoints.
"""

from __future__ import annotations

from zk import layout
from zk.layout import LayoutError

ERRORS = (LayoutError,)
DICTIONARY = "json.dict"


def fuzz_one(data: bytes) -> None:
    if not data:
        return
    if data[0] % 2:
        layout.decode_clock_report(data[1:])
        return
    broker = layout.decode_broker(1, data[1:])
    endpoints = broker["endpoints"]
    if endpoints:
        again = layout.decode_broker(1, layout.encode_broker(endpoints, broker["timestamp"],
                                                             rack=broker["rack"]))
        assert again["endpoints"] == endpoints, "endpoints round trip differs"
        assert again["rack"] == broker["rack"]


def seeds() -> dict[str, bytes]:
    """As Kafka 3.9's BrokerIdZNode writes version 5 (and Kafka 0.9's version 1)."""
    return {
        "kafka-v5": (b'\x00{"features":{},"listener_security_protocol_map":{"PLAINTEXT":"PLAINTEXT",'
                     b'"SASL_SSL":"SASL_SSL"},"endpoints":["PLAINTEXT://broker1:9092",'
                     b'"SASL_SSL://[::1]:9093"],"jmx_port":-1,"port":9092,"host":"broker1",'
                     b'"version":5,"timestamp":"1700000000000","rack":"r1"}'),
        "kafka-v1": b'\x00{"version":1,"host":"localhost","port":9092,"jmx_port":-1,"timestamp":"5"}',
        "tokensvc-clock": b'\x01{"version":1,"brokerid":3,"offsetMs":600000,"uncertaintyMs":2}',
    }
