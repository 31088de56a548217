"""User credential znodes (``/config/users/<user>``, Kafka's ConfigEntityZNode) and the
SCRAM credentials in them: zk.credential_store.decode_user_config,
credentials_from_config and ScramCredential.from_kafka_string.

Properties: only StoreError escapes the znode decoder; credentials_from_config skips a
malformed credential (raises nothing); a credential read is written and read again to
the same value; a znode decoded is encoded and decoded to the same map.
"""

from __future__ import annotations

from zk.credential_store import credentials_from_config, decode_user_config, encode_user_config
from zk.errors import StoreError

ERRORS = (StoreError,)
DICTIONARY = "json.dict"


def fuzz_one(data: bytes) -> None:
    config = decode_user_config(data)
    assert decode_user_config(encode_user_config(config)) == config, "round trip differs"
    for mechanism, credential in credentials_from_config(config).items():
        text = credential.to_kafka_string()
        assert type(credential).from_kafka_string(text) == credential, mechanism


def seeds() -> dict[str, bytes]:
    """A user znode as Kafka 3.9 writes it (kafka-configs --alter --add-config
    'SCRAM-SHA-256=[...]'): ConfigEntityZNode version 1, credentials in ScramCredentialUtils'
    text."""
    cred = ("salt=MWx6cXNyZ2xsY3F5NmNtaGhrMDNrOWdhcHM=,stored_key=x2ig/yMWcaGRPlnvq3PaFHDR"
            "yG0MF7SK0+dJr0ogDVU=,server_key=bVZuRNmhlHdgOJSvVZxZKlH0tKobCpGsWYKRx8CxJ4Y=,"
            "iterations=4096")
    return {
        "kafka-user": f'{{"version":1,"config":{{"SCRAM-SHA-256":"{cred}","SCRAM-SHA-512":"{cred}"}}}}'.encode(),
        "kafka-user-quota": b'{"version":1,"config":{"producer_byte_rate":"1024"}}',
        "empty-config": b'{"version":1,"config":{}}',
    }
