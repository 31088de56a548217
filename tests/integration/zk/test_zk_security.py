"""A ZooKeeper that only the brokers can read and write (issue 34), tried from outside.

Against the default local cluster (a secure managed ZooKeeper: TLS-only port, client
certificates, SASL enforced, ACLs), as one node and as a 3-node ensemble, a ZooKeeper
client without the brokers' identity tries every way in; it reads no credential or token
and writes nowhere, and the super user still logs in with its own password on every
broker. Every znode carries the declared ACL. Wrong or missing credentials stop a
broker's start in one line, fast, without a traceback or a secret.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient as ConfluentAdmin
from kazoo.client import KazooClient
from kazoo.handlers.threading import KazooTimeoutError

from tests.support.intruder import attempts_that_succeeded
from tests.support.java_stores import write_java_stores
from tests.support.local_cluster import admin_client, broker_metric
from tokensvc import devcerts
from tokensvc.cluster import LocalCluster
from tokensvc.core.zk_security import jaas_client_section
from tokensvc.jvm import free_port
from tokensvc.properties import properties_text, read_properties
from zk import znode_acls
from zk.client import open_client

ATTACK_TIMEOUT_S = 2.5
pytestmark = pytest.mark.heavy(minutes=3)  # a secure cluster of one node, one of an ensemble
ADMIN_PATH = "/config/users/admin"


def brokers_view(cluster: LocalCluster) -> KazooClient:
    """A client with the brokers' identity, as the cluster's tools open one."""
    return open_client(cluster.zk_settings())


def every_broker_serves_the_admin(cluster: LocalCluster, password: str) -> None:
    """confluent-kafka logs in as the super user on each broker with ``password``."""
    expected = {b["id"] for b in cluster.info["brokers"]}
    for broker in cluster.info["brokers"]:
        admin = ConfluentAdmin({
            "bootstrap.servers": broker["listeners"]["SASL_PLAINTEXT"],
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": cluster.info["admin"]["username"],
            "sasl.password": password,
        })
        nodes = admin.describe_cluster(request_timeout=20).result().nodes
        assert {node.id for node in nodes} == expected


@pytest.fixture(scope="module", params=[1, 3], ids=["one-node", "ensemble"])
def secure_cluster(request, tmp_path_factory) -> Iterator[LocalCluster]:
    """The default cluster: nothing asked, so its ZooKeeper is the secure one."""
    directory = tmp_path_factory.mktemp(f"secure-{request.param}")
    with LocalCluster.up(directory, brokers=3, zookeeper_nodes=request.param,
                         die_with_parent=True) as cluster:
        with admin_client(cluster) as admin:
            admin.create_token()
        yield cluster


def attempts(cluster: LocalCluster, foreign: devcerts.ZkCertificates) -> dict[str, dict]:
    tls = Path(cluster.info["zookeeper"]["client_config"]).parent / "zookeeper-tls"
    ca, brokers_cert = str(tls / "ca.pem"), str(tls / "client.pem")
    return {
        "plain TCP": {},
        "plain TCP, digest identity of its own": {"auth_data": [("digest", "eve:eve")]},
        "TLS without a client certificate": {"use_ssl": True, "ca": ca},
        "TLS without a certificate, digest identity of its own": {
            "use_ssl": True, "ca": ca, "auth_data": [("digest", "eve:eve")]},
        "TLS with a certificate of another CA": {
            "use_ssl": True, "ca": ca, "certfile": str(foreign.client),
            "keyfile": str(foreign.client)},
        # Even the brokers' certificate, without their SASL login, reaches nothing.
        "brokers' certificate, digest identity of its own": {
            "use_ssl": True, "ca": ca, "certfile": brokers_cert, "keyfile": brokers_cert,
            "auth_data": [("digest", "eve:eve")]},
        "brokers' certificate, SASL user of its own": {
            "use_ssl": True, "ca": ca, "certfile": brokers_cert, "keyfile": brokers_cert,
            "sasl_options": {"mechanism": "DIGEST-MD5", "username": "eve", "password": "eve"}},
    }


def what_it_managed(hosts: str, options: dict) -> list[str]:
    """Every read of a secret and every write the client managed (none expected)."""
    client = KazooClient(hosts=hosts, timeout=ATTACK_TIMEOUT_S, **options)
    started = time.monotonic()
    try:
        client.start(timeout=ATTACK_TIMEOUT_S)
    except KazooTimeoutError:
        assert time.monotonic() - started < ATTACK_TIMEOUT_S + 5
        return []
    tries = {
        "read the admin credential": lambda: client.get(ADMIN_PATH),
        "list the tokens": lambda: client.get_children("/delegation_token/tokens"),
        "replace the admin credential": lambda: client.set(ADMIN_PATH, b"salt=x"),
        "create under /": lambda: client.create("/evil", b"x"),
        "grant an ACL": lambda: client.create("/kafka-acl/Cluster/kafka-cluster", b"{}"),
        "create a user": lambda: client.create("/config/users/eve", b"x"),
        "delete the controller": lambda: client.delete("/controller"),
    }
    return attempts_that_succeeded(client, tries)


# The intruder's own kazoo clients die in their connection thread when ZooKeeper refuses
# their SASL login (kazoo 2.11); tokensvc's clients turn that into AUTH_FAILED.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_client_without_the_brokers_identity_reads_and_writes_nothing(
        secure_cluster: LocalCluster, tmp_path: Path) -> None:
    zk = brokers_view(secure_cluster)
    try:
        before = zk.get(ADMIN_PATH)[0]
    finally:
        zk.stop()
        zk.close()
    # Its own CA, and a certificate with the brokers' very subject name.
    foreign = devcerts.generate_zookeeper(tmp_path / "foreign")
    hosts = secure_cluster.info["zookeeper"]["connect"]
    for name, options in attempts(secure_cluster, foreign).items():
        assert what_it_managed(hosts, options) == [], name
    zk = brokers_view(secure_cluster)
    try:
        assert zk.get(ADMIN_PATH)[0] == before
        assert zk.exists("/evil") is None and zk.exists("/config/users/eve") is None
        assert zk.exists("/controller") is not None
    finally:
        zk.stop()
        zk.close()
    every_broker_serves_the_admin(secure_cluster, secure_cluster.info["admin"]["password"])


def test_every_znode_carries_the_declared_acl(secure_cluster: LocalCluster) -> None:
    zk = brokers_view(secure_cluster)
    checked = 0
    try:
        pending = ["/"]
        while pending:
            path = pending.pop()
            if path == "/zookeeper":  # ZooKeeper's own subtree
                continue
            acls, _ = zk.get_acls(path)
            assert znode_acls.matches_declared(path, list(acls), secure=True), (path, acls)
            checked += 1
            pending += [f"{path.rstrip('/')}/{child}" for child in zk.get_children(path)]
    finally:
        zk.stop()
        zk.close()
    # Users, a token, its notification, the controller, registrations, ACL roots...
    assert checked > 30
    for broker in secure_cluster.broker_ids():
        assert broker_metric(secure_cluster, broker, "tokensvc_zookeeper_insecure_paths") == 0


def test_cluster_json_names_the_client_settings_and_holds_no_zookeeper_credential(
        secure_cluster: LocalCluster) -> None:
    zk_info = secure_cluster.info["zookeeper"]
    assert zk_info["tls"] and zk_info["sasl"] and zk_info["set_acl"]
    client_config = Path(zk_info["client_config"])
    assert client_config.stat().st_mode & 0o077 == 0
    props = read_properties(client_config)
    jaas = Path(props["zookeeper.sasl.jaas.file"])
    assert jaas.stat().st_mode & 0o077 == 0
    password = jaas.read_text().split('password="')[1].split('"')[0]
    cluster_json = (secure_cluster.directory / "cluster.json").read_text()
    assert password not in cluster_json and password not in client_config.read_text()
    for broker in secure_cluster.info["brokers"]:
        assert password not in Path(broker["log"]).read_text()


# -- a broker with wrong or missing credentials -------------------------------------


def start_broker(cluster: LocalCluster, tmp_path: Path, changes: dict[str, str | None],
                 timeout_ms: int = 6000) -> tuple[int, str, float]:
    """Run a 4th broker with broker 1's config changed by ``changes`` (None removes a
    key); returns its exit status, its output and how long it took."""
    props = read_properties(cluster.broker_info(1)["config"])
    props.update({
        "broker.id": "9",
        "listeners": f"SASL_PLAINTEXT://127.0.0.1:{free_port()},BROKER://127.0.0.1:{free_port()}",
        "metrics.listener": "127.0.0.1:0",
        "token.cache.snapshot.dir": str(tmp_path / "snapshot"),
        "zookeeper.connection.timeout.ms": str(timeout_ms),
    })
    for key, value in changes.items():
        if value is None:
            props.pop(key, None)
        else:
            props[key] = value
    config = tmp_path / "server.properties"
    config.write_text(properties_text(props))
    config.chmod(0o600)
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "cli.tokensvc", "broker", "--config", str(config)],
                          capture_output=True, text=True, timeout=60, check=False)
    return done.returncode, done.stdout + done.stderr, time.monotonic() - started


def wrong_jaas(tmp_path: Path) -> str:
    path = tmp_path / "wrong.jaas"
    path.write_text(jaas_client_section("tokensvc", "not-the-password"))
    path.chmod(0o600)
    return str(path)


# The start-up refusals do not depend on the ensemble: one node covers them.
@pytest.mark.parametrize("secure_cluster", [1], indirect=True, ids=["one-node"])
@pytest.mark.parametrize("case", ["wrong SASL password", "no SASL login", "no client certificate",
                                  "no TLS", "ACLs without an identity", "wrong JKS password"])
def test_wrong_or_missing_credentials_stop_the_start_in_one_line(
        secure_cluster: LocalCluster, tmp_path: Path, case: str) -> None:
    changes = {
        "wrong SASL password": {"zookeeper.sasl.jaas.file": wrong_jaas(tmp_path)},
        "no SASL login": {"zookeeper.sasl.jaas.file": None},
        "no client certificate": {"zookeeper.ssl.keystore.location": None},
        "no TLS": {"zookeeper.ssl.client.enable": None, "zookeeper.ssl.keystore.location": None,
                   "zookeeper.clientCnxnSocket": None},
        "ACLs without an identity": {"zookeeper.ssl.client.enable": None,
                                     "zookeeper.ssl.keystore.location": None,
                                     "zookeeper.sasl.jaas.file": None},
    }.get(case)
    cause = {
        "wrong SASL password": "refused the SASL DIGEST-MD5 login of user 'tokensvc'",
        "no SASL login": "requires SASL authentication",
        "no client certificate": "refused the TLS connection",
        "no TLS": "could not connect to ZooKeeper",
        "ACLs without an identity": "zookeeper.set.acl: is true but the broker has no "
                                    "ZooKeeper identity",
    }.get(case)
    if case == "wrong JKS password":
        # The cluster's client certificate in keytool's JKS store, opened with a wrong password.
        tls = Path(secure_cluster.info["zookeeper"]["client_config"]).parent / "zookeeper-tls"
        jks = write_java_stores(devcerts.ZkCertificates(tls, tls / "ca.pem", tls / "ca-key.pem",
                                                        tls / "server.pem", tls / "client.pem"),
                                tmp_path / "stores", kinds=("JKS",))
        changes = {"zookeeper.ssl.keystore.location": str(jks.client_jks),
                   "zookeeper.ssl.keystore.type": "JKS",
                   "zookeeper.ssl.keystore.password": "not-the-password"}
        cause = (f"zookeeper.ssl.keystore.location: {jks.client_jks}: wrong password, or a "
                 "damaged store (check zookeeper.ssl.keystore.password)")
    assert changes is not None and cause is not None
    # A refusal is ZooKeeper's answer: it may take a TLS handshake and a SASL exchange of
    # seconds on a busy machine (a full run once met the 6 s timeout before the answer,
    # and one beside Kafka's JVMs at a load of 14 the 20 s one). Only "no TLS" ends with
    # the timeout, kept short; the others end with the answer, however long they may wait.
    timeout_s = 6 if case == "no TLS" else 45
    status, output, took = start_broker(secure_cluster, tmp_path, changes,
                                        timeout_ms=timeout_s * 1000)
    assert status != 0
    assert took < timeout_s + 15  # the connection timeout, plus the interpreter's start
    assert "Traceback" not in output
    errors = [line for line in output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and cause in errors[0], output
    jaas = Path(read_properties(secure_cluster.broker_info(1)["config"])
                ["zookeeper.sasl.jaas.file"]).read_text()
    password = jaas.split('password="')[1].split('"')[0]
    assert password not in output and "not-the-password" not in output
