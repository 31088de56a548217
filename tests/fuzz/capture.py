"""Captures the request frames real clients send to a tokensvc broker, as seed corpora:
``python -m tests.fuzz.capture [--clients confluent,kafka-python,aiokafka,java,tokensvc]``.

It starts a one-broker ``LocalCluster`` whose advertised client listener is a recording
proxy (:class:`RecordingProxy`: every byte goes through unchanged; what clients send is
cut into frames with tokensvc's ``FrameDecoder`` and kept), then runs each client
against it: confluent-kafka (librdkafka), kafka-python, aiokafka and Apache Kafka's Java
Admin client (``tests/java/TokenMatrix.java``, compiled against the kafka-clients jar of
an installed package), and tokensvc's own admin client for tokensvc's tagged fields
(labels). Each logs in as a user and, where the client can, with a token. The frames are
then written as the inputs of the protocol and SCRAM harnesses
(``tests/fuzz/protocol/corpus/*``, ``tests/fuzz/scram/corpus/scram_server``), named
``<client>-<api key>-v<version>-<sha1 prefix>``, each corpus with a README saying where
its files came from. Envelope seeds are made by tokensvc's codec around the captured
write requests (a one-broker cluster forwards nothing).

It never writes a password or an HMAC anywhere but into those frames, which carry only
the test cluster's throwaway credentials (SCRAM proofs, not passwords).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import hashlib
import importlib.metadata
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from tests.fuzz.runner import corpus_dir
from tokensvc.cluster import LocalCluster
from tokensvc.core.principal import KafkaPrincipal
from tokensvc.kafka import kafka_clients_jars
from tokensvc.protocol import (
    ApiKey,
    FrameDecoder,
    ProtocolError,
    RequestHeader,
    decode_request_header,
    encode_request,
    frame,
)
from tokensvc.protocol.principal_serde import serialize_principal

CLIENTS = ("confluent", "kafka-python", "aiokafka", "java", "tokensvc")
JAVA_SOURCE = Path(__file__).resolve().parents[1] / "java" / "TokenMatrix.java"
KAFKA_CLIENTS_VERSION = "4.3.0"  # from Maven Central, as the Java client matrix's
MAX_FRAME = 100 << 20
Frame = tuple[str, bytes]  # (client label, payload without its size prefix)


class RecordingProxy:
    """Forwards 127.0.0.1:``port`` to ``target``; keeps each frame a client sent, labelled
    with :attr:`label` as it was when the connection opened."""

    def __init__(self, target: tuple[str, int], port: int, label: str) -> None:
        self.target = target
        self.label = label
        self.frames: list[Frame] = []
        self._lock = threading.Lock()
        self._server = socket.create_server(("127.0.0.1", port))
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            label = self.label
            threading.Thread(target=self._pump, args=(client, upstream, label),
                             daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, None),
                             daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, label: str | None) -> None:
        decoder = FrameDecoder(MAX_FRAME)
        try:
            while data := src.recv(65536):
                dst.sendall(data)
                if label is None:
                    continue
                decoder.feed(data)
                while (payload := decoder.next_frame()) is not None:
                    with self._lock:
                        self.frames.append((label, payload))
        except (OSError, ProtocolError):
            pass
        finally:
            for sock in (src, dst):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        self._server.close()


# --- the clients ----------------------------------------------------------------------


def _confluent(address: str, user: str, password: str, token: tuple[str, str]) -> None:
    from confluent_kafka.admin import (
        AclBinding,
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        AdminClient,
        ResourcePatternType,
        ResourceType,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    def admin(name: str, secret: str) -> AdminClient:
        return AdminClient({"bootstrap.servers": address, "security.protocol": "SASL_PLAINTEXT",
                            "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": name,
                            "sasl.password": secret, "log_level": 0})

    client = admin(user, password)
    client.list_topics(timeout=10)
    binding = AclBinding(ResourceType.TOPIC, "capture", ResourcePatternType.PREFIXED,
                         "User:capture", "*", AclOperation.READ, AclPermissionType.ALLOW)
    for future in client.create_acls([binding]).values():
        future.result(timeout=10)
    acl_filter = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                                  AclOperation.ANY, AclPermissionType.ANY)
    client.describe_acls(acl_filter).result(timeout=10)
    exact = AclBindingFilter(ResourceType.TOPIC, "capture", ResourcePatternType.PREFIXED,
                             "User:capture", "*", AclOperation.READ, AclPermissionType.ALLOW)
    for future in client.delete_acls([exact]).values():
        future.result(timeout=10)
    client.describe_cluster().result(timeout=10)
    upsert = UserScramCredentialUpsertion(
        "capture-user", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"pw-capture")
    for future in client.alter_user_scram_credentials([upsert]).values():
        future.result(timeout=10)
    client.describe_user_scram_credentials().result(timeout=10)
    admin(*token).list_topics(timeout=10)  # an implicit token login


def _kafka_python(address: str, user: str, password: str, token: tuple[str, str]) -> None:
    from kafka import KafkaAdminClient
    from kafka.admin import (
        ACL,
        ACLFilter,
        ACLOperation,
        ACLPermissionType,
        ACLResourcePatternType,
        ResourcePattern,
        ResourcePatternFilter,
        ResourceType,
    )

    from tokensvc.kafka_python_token import token_login_config

    common = {"bootstrap_servers": address, "security_protocol": "SASL_PLAINTEXT",
              "request_timeout_ms": 10_000}
    client = KafkaAdminClient(**common, sasl_mechanism="SCRAM-SHA-256",
                              sasl_plain_username=user, sasl_plain_password=password)
    acl = ACL("User:capture", "*", ACLOperation.READ, ACLPermissionType.ALLOW,
              ResourcePattern(ResourceType.TOPIC, "capture", ACLResourcePatternType.LITERAL))
    client.create_acls([acl])
    any_filter = ACLFilter(None, "*", ACLOperation.ANY, ACLPermissionType.ANY,
                           ResourcePatternFilter(ResourceType.ANY, None,
                                                 ACLResourcePatternType.ANY))
    client.describe_acls(any_filter)
    client.delete_acls([ACLFilter("User:capture", "*", ACLOperation.ANY, ACLPermissionType.ANY,
                                  ResourcePatternFilter(ResourceType.TOPIC, "capture",
                                                        ACLResourcePatternType.LITERAL))])
    client.describe_cluster()
    client.close()
    token_client = KafkaAdminClient(**common, **token_login_config(*token))
    token_client.describe_cluster()
    token_client.close()


def _aiokafka(address: str, user: str, password: str, token: tuple[str, str]) -> None:
    from aiokafka.admin import AIOKafkaAdminClient

    async def run(name: str, secret: str) -> None:
        client = AIOKafkaAdminClient(bootstrap_servers=address, security_protocol="SASL_PLAINTEXT",
                                     sasl_mechanism="SCRAM-SHA-512", sasl_plain_username=name,
                                     sasl_plain_password=secret, request_timeout_ms=10_000)
        await client.start()
        try:
            await client.describe_cluster()
            await client.list_topics()
        finally:
            await client.close()

    asyncio.run(run(user, password))
    asyncio.run(run(*token))


def _java(address: str, user: str, password: str, token: tuple[str, str]) -> None:
    del token  # TokenMatrix creates its own tokens and logs in with them
    jars = kafka_clients_jars(KAFKA_CLIENTS_VERSION)
    classes = Path(tempfile.mkdtemp(prefix="capture-java-"))
    libs = os.pathsep.join(str(j) for j in jars)
    javac, java = shutil.which("javac"), shutil.which("java")
    if not javac or not java:
        raise RuntimeError("a JDK 17 (javac, java) is needed for the Java client")
    subprocess.run([javac, "-d", str(classes), "-cp", libs, str(JAVA_SOURCE)], check=True,
                   capture_output=True, timeout=300)
    env = {**os.environ, "MATRIX_ADMIN_USER": user, "MATRIX_ADMIN_PASSWORD": password}
    for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        ran = subprocess.run([java, "-cp", os.pathsep.join([str(classes), libs]), "TokenMatrix",
                              "all", address, mechanism, f"capture{mechanism[-3:]}"],
                             env=env, capture_output=True, text=True, timeout=300, check=False)
        print(f"  java {mechanism}: exit {ran.returncode}, "
              f"{sum(' ok ' in line for line in ran.stdout.splitlines())} checks ok")
    shutil.rmtree(classes, ignore_errors=True)


def _tokensvc(address: str, user: str, password: str, token: tuple[str, str]) -> None:
    from tokensvc.admin import AdminClient
    from tokensvc.authz.acl import AclBindingFilter
    from tokensvc.client_config import client_config_from_properties

    def config(name: str, secret: str, extra: str = "") -> object:
        return client_config_from_properties({
            "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule "
                                f'required username="{name}" password="{secret}"{extra};'})

    client = AdminClient(address, config(user, password), client_id="capture-tokensvc")
    made = client.create_token(renewers=["User:bob"], labels={"job": "capture", "team": "fuzz"})
    client.describe_tokens()
    client.renew_token(made.hmac)
    client.describe_acls(AclBindingFilter())
    client.describe_user_scram_credentials()
    client.revoke_tokens(labels={"job": "capture"})
    client.close()
    as_token = AdminClient(address, config(*token, " tokenauth=true"), client_id="capture-token")
    as_token.describe_acls(AclBindingFilter())
    as_token.close()


RUNNERS: dict[str, Callable[[str, str, str, tuple[str, str]], None]] = {
    "confluent": _confluent, "kafka-python": _kafka_python, "aiokafka": _aiokafka,
    "java": _java, "tokensvc": _tokensvc,
}


# --- writing the corpora --------------------------------------------------------------


def _name(label: str, key: int, version: int, data: bytes) -> str:
    api = ApiKey(key).name.lower() if key in ApiKey._value2member_map_ else f"key{key}"
    return f"{label}-{api}-v{version}-{hashlib.sha1(data).hexdigest()[:10]}"


def _envelopes(writes: list[bytes]) -> list[bytes]:
    """EnvelopeRequest v0 payloads around captured write requests, as a forwarding
    broker sends them (tokensvc's codec; the principal in Kafka's serde)."""
    principal = serialize_principal(KafkaPrincipal.user("alice"))
    out = []
    for index, inner in enumerate(writes):
        header = RequestHeader(int(ApiKey.ENVELOPE), 0, index, "broker-2")
        out.append(encode_request(header, {
            "RequestData": inner, "RequestPrincipal": principal,
            "ClientHostAddress": bytes([127, 0, 0, 1]),
        }))
    return out


def write_corpora(frames: list[Frame], versions: dict[str, str]) -> dict[str, int]:
    """The frames as each harness's inputs; returns the files written per corpus."""
    from tests.fuzz.protocol.fuzz_requests import PAIRS
    from tokensvc.broker.network.decoding import decode_client_request

    files: dict[str, dict[str, bytes]] = {}

    def put(target: str, name: str, data: bytes) -> None:
        files.setdefault(target, {})[name] = data

    writes = []
    for label, payload in frames:
        try:
            header, offset = decode_request_header(payload)
        except ProtocolError:
            continue
        key, version, body = header.api_key, header.api_version, payload[offset:]
        name = _name(label, key, version, payload)
        put("protocol/request_header", name, payload)
        put("protocol/frame", name, b"\x07" + frame(payload))
        if (key, version) in PAIRS:
            put("protocol/requests", name, PAIRS.index((key, version)).to_bytes(2, "big") + body)
        if key == ApiKey.API_VERSIONS:
            put("protocol/api_versions", name, bytes([version]) + body)
        elif key == ApiKey.SASL_HANDSHAKE:
            put("protocol/sasl_handshake", name, bytes([version]) + body)
        elif key == ApiKey.SASL_AUTHENTICATE:
            put("protocol/sasl_authenticate", name, bytes([version]) + body)
            auth = decode_client_request(payload)[1]["AuthBytes"]
            bit = 1 if label.endswith("512") else 0
            put("scram/scram_server", name + "-first", bytes([0, bit]) + auth)
            put("scram/scram_server", name + "-parse", bytes([7, bit]) + auth)
        elif key in (ApiKey.CREATE_DELEGATION_TOKEN, ApiKey.RENEW_DELEGATION_TOKEN,
                     ApiKey.EXPIRE_DELEGATION_TOKEN, ApiKey.CREATE_ACLS, ApiKey.DELETE_ACLS,
                     ApiKey.ALTER_USER_SCRAM_CREDENTIALS):
            writes.append(payload)
    envelope = PAIRS.index((int(ApiKey.ENVELOPE), 0)).to_bytes(2, "big")
    for payload in _envelopes(writes):
        _, offset = decode_request_header(payload)
        put("protocol/requests", _name("gen-envelope", int(ApiKey.ENVELOPE), 0, payload),
            envelope + payload[offset:])
    shown = "; ".join(versions.values())
    counts = {}
    for target, named in files.items():
        directory = corpus_dir(target)
        directory.mkdir(parents=True, exist_ok=True)
        for name, data in named.items():
            (directory / name).write_bytes(data)
        _readme(directory, target, shown)
        counts[target] = len(named)
    return counts


def _readme(directory: Path, target: str, shown: str) -> None:
    room, _, name = target.partition("/")
    text = (
        f"# Seed corpus of tests/fuzz/{room}/fuzz_{name}.py\n\n"
        f"`<client>-<api>-v<version>-<sha1>`: request frames real clients sent to a tokensvc "
        f"broker, recorded by `python -m tests.fuzz.capture` (a proxy in front of a one-broker "
        f"LocalCluster) and turned into this harness's input format (its docstring). Clients: "
        f"{shown}.\n"
    )
    if target == "protocol/requests":
        text += ("\n`gen-envelope-*`: EnvelopeRequest v0 bodies made by tokensvc's codec around "
                 "the captured write requests, as a forwarding broker sends them.\n")
    if (directory / "README.md").exists() and target.startswith("scram/"):
        old = (directory / "README.md").read_text()
        if "capture" not in old:
            text = old + "\n" + text.split("\n\n", 1)[1]
        else:
            return
    (directory / "README.md").write_text(text)


def _versions() -> dict[str, str]:
    def of(package: str) -> str:
        try:
            return importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            return "?"

    import confluent_kafka

    jar = f"kafka-clients-{KAFKA_CLIENTS_VERSION}.jar"
    return {
        "confluent": f"confluent-kafka {of('confluent-kafka')} (librdkafka "
                     f"{confluent_kafka.libversion()[0]})",
        "kafka-python": f"kafka-python {of('kafka-python')}",
        "aiokafka": f"aiokafka {of('aiokafka')}",
        "java": f"Apache Kafka's Java Admin client ({Path(jar).stem})",
        "tokensvc": "tokensvc's admin client",
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.fuzz.capture",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--clients", default=",".join(CLIENTS),
                        help=f"comma-separated, of {', '.join(CLIENTS)}")
    args = parser.parse_args(argv)
    chosen = [c for c in args.clients.split(",") if c]
    unknown = sorted(set(chosen) - set(CLIENTS))
    if unknown:
        parser.error(f"unknown client {', '.join(unknown)}")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    directory = Path(tempfile.mkdtemp(prefix="capture-cluster-"))
    overrides = {"advertised.listeners": f"SASL_PLAINTEXT://127.0.0.1:{port}"}
    with LocalCluster.up(directory, brokers=1, overrides=overrides, die_with_parent=True,
                         insecure_zookeeper=True) as cluster:
        host, _, broker_port = cluster.info["brokers"][0]["listeners"]["SASL_PLAINTEXT"] \
            .rpartition(":")
        proxy = RecordingProxy((host, int(broker_port)), port, "tokensvc")
        address = f"127.0.0.1:{port}"
        admin = cluster.info["admin"]
        token = _token(address, admin["username"], admin["password"])
        versions = _versions()
        for client in chosen:
            proxy.label = client
            started = time.monotonic()
            try:
                RUNNERS[client](address, admin["username"], admin["password"], token)
                outcome = "ok"
            except Exception as exc:  # noqa: BLE001 - a client's failure is reported, the rest run
                outcome = f"failed: {type(exc).__name__}: {exc}"[:200]
            seen = sum(1 for label, _ in proxy.frames if label == client)
            print(f"{client}: {outcome}, {seen} frames, {time.monotonic() - started:.1f} s",
                  flush=True)
        time.sleep(1)
        proxy.close()
        frames = list(proxy.frames)
    shutil.rmtree(directory, ignore_errors=True)
    counts = write_corpora(frames, {c: versions[c] for c in chosen})
    for target, count in sorted(counts.items()):
        print(f"{target}: {count} files in {corpus_dir(target)}")
    return 0


def _token(address: str, user: str, password: str) -> tuple[str, str]:
    """A token of the admin (id, HMAC in base64), made with tokensvc's admin client."""
    from tests.support.local_cluster import user_config
    from tokensvc.admin import AdminClient

    client = AdminClient(address, user_config(user, password))
    made = client.create_token()
    client.close()
    return made.token_id, base64.b64encode(made.hmac).decode()


if __name__ == "__main__":
    sys.exit(main())
