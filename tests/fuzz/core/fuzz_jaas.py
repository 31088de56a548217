"""JAAS text: a client's ``sasl.jaas.config`` (tokensvc.client_config.parse_jaas_config)
and the ZooKeeper JAAS file (tokensvc.core.zk_security.parse_jaas_client_login).

The first byte picks the parser. Properties: only ConfigError escapes; a ZooKeeper
login read is written (``jaas_client_section``) and read again to the same login; the
options of a client entry are written with Kafka's quoting and read again the same.
"""

from __future__ import annotations

from tokensvc.client_config import parse_jaas_config
from tokensvc.core.configdef import ConfigError
from tokensvc.core.zk_security import jaas_client_section, parse_jaas_client_login

ERRORS = (ConfigError,)


def _quoted(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def fuzz_one(data: bytes) -> None:
    if not data:
        return
    text = data[1:].decode("utf-8", "replace")
    if data[0] % 2:
        login = parse_jaas_client_login(text, "Client")
        again = parse_jaas_client_login(jaas_client_section(login.username, login.password),
                                        "Client")
        assert again == login, "ZooKeeper JAAS round trip differs"
        return
    module = parse_jaas_config(text)
    options = " ".join(f"{k}={_quoted(v)}" for k, v in module.options.items())
    again = parse_jaas_config(f"{module.login_module} {module.control_flag} {options};")
    assert again == module, "client JAAS round trip differs"


def seeds() -> dict[str, bytes]:
    """As Kafka's documentation gives them (security.html, SASL/SCRAM and ZooKeeper
    DIGEST-MD5), and as the tokensvc agent writes a token's."""
    return {
        "kafka-scram-client": (b"\x00org.apache.kafka.common.security.scram.ScramLoginModule "
                               b'required username="alice" password="alice-secret";'),
        "kafka-token-client": (b"\x00org.apache.kafka.common.security.scram.ScramLoginModule "
                               b'required username="Zl0YT9kvSLaHtdxp5pMVbA" '
                               b'password="c2VjcmV0\\"x" tokenauth=true;'),
        "zookeeper-client": (b'\x01Client {\n  org.apache.zookeeper.server.auth.DigestLoginModule '
                             b'required\n  username="kafka"\n  password="kafka-secret";\n};\n'),
        "zookeeper-server-and-client": (
            b'\x01Server {\n  org.apache.zookeeper.server.auth.DigestLoginModule required\n'
            b'  user_kafka="kafka-secret";\n};\nClient {\n'
            b'  org.apache.zookeeper.server.auth.DigestLoginModule required\n'
            b'  username="kafka"\n  password="k\\\\a\\"fka";\n};\n'),
    }
