"""``server.properties``: the properties reader (tokensvc.properties) and the broker's
configuration table (tokensvc.core.config.BrokerConfig.from_properties) behind it.

The input is the file's bytes. Properties: only ConfigError escapes (a file that is not
UTF-8 is one too, as ``read_properties`` says); what is read is written
(``properties_text``) and read again to the same keys and values.
"""

from __future__ import annotations

from pathlib import Path

from tokensvc.core.config import BrokerConfig
from tokensvc.core.configdef import ConfigError
from tokensvc.properties import parse_properties, properties_text

ERRORS = (ConfigError,)


def fuzz_one(data: bytes) -> None:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return
    props = parse_properties(text, "server.properties")
    assert parse_properties(properties_text(props)) == props, "properties round trip differs"
    BrokerConfig.from_properties(props)


def seeds() -> dict[str, bytes]:
    """The broker file this repository ships (deploy/systemd), and a small one with the
    properties syntax's corners (continuations, escapes, ':' separators, comments)."""
    shipped = Path(__file__).parents[3] / "deploy" / "systemd" / "broker-1.properties"
    corners = (
        "# comment\n! another\nbroker.id : 1\n"
        "listeners = SASL_PLAINTEXT://127.0.0.1:9092,\\\n    SSL://[::1]:9093\n"
        "zookeeper.connect=127.0.0.1:2181/kafka\n"
        "delegation.token.secret.key=\\u0073ecret-key-of-enough-length-0123456789\n"
        "super.users=User:admin;User:broker\n"
        "sasl.enabled.mechanisms=SCRAM-SHA-256,SCRAM-SHA-512\n"
    )
    return {"deploy-broker-1": shipped.read_bytes(), "corners": corners.encode()}
