"""The local cluster: real ZooKeeper, real broker processes, real sockets.

`LocalCluster.up` starts brokers as `tokensvc broker --config ...` processes; these tests
check what it writes (cluster.json, server.properties, admin.properties, users in
ZooKeeper), that every broker answers, that brokers can be killed and started again, and
that `down` (library, CLI and the foreground mode's signal handling) leaves no process
behind. Real Kafka clients against a local cluster: test_interop.py.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from cli.cluster_cmd import cluster as cluster_cli
from tokensvc.cluster import ClusterError, LocalCluster, answers_api_versions
from tokensvc.properties import read_properties
from tokensvc.scram.formatter import ScramMechanism
from zk.client import open_client
from zk.credential_store import CredentialStore

DESIGN_KEYS = {"bootstrap_servers", "zookeeper", "brokers", "audit_dir", "admin"}
BROKER_KEYS = {"id", "listeners", "config", "log", "pid", "metrics", "prefix"}


def _pid_running(pid: int) -> bool:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()
    except OSError:
        return False
    return fields[0] != "Z"


def _all_pids(info: dict) -> list[int]:
    pids = [b["pid"] for b in info["brokers"]] + [info["zookeeper"]["pid"]]
    return [p for p in pids if p is not None]


@pytest.fixture(scope="module")
def tls_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    directory = tmp_path_factory.mktemp("cluster")
    # A short ZooKeeper session: a killed broker's registration expires fast.
    overrides = {"zookeeper.session.timeout.ms": "4000"}
    with LocalCluster.up(
        directory, brokers=2, tls=True, overrides=overrides, die_with_parent=True
    ) as cluster:
        yield cluster


def test_cluster_json_has_the_design_keys(tls_cluster: LocalCluster) -> None:
    info = json.loads((tls_cluster.directory / "cluster.json").read_text())
    assert DESIGN_KEYS | {"tls", "inter_broker"} == set(info)
    assert info["zookeeper"]["pid"] == tls_cluster.zookeeper_pid()
    assert [b["id"] for b in info["brokers"]] == [1, 2]
    for broker in info["brokers"]:
        assert set(broker) == BROKER_KEYS
        assert set(broker["listeners"]) == {"SASL_PLAINTEXT", "BROKER", "SASL_SSL"}
        assert Path(broker["config"]).is_file() and Path(broker["log"]).is_file()
    assert info["bootstrap_servers"] == ",".join(
        b["listeners"]["SASL_PLAINTEXT"] for b in info["brokers"]
    )
    assert info["admin"]["principal"] == "User:admin"
    assert info["admin"]["username"] == "admin"
    assert info["inter_broker"] == {"username": "broker"}
    assert Path(info["tls"]["ca"]).is_file()
    assert Path(info["audit_dir"]).is_dir()


def test_every_broker_answers_api_versions_on_every_plain_listener(
    tls_cluster: LocalCluster,
) -> None:
    for broker in tls_cluster.info["brokers"]:
        assert answers_api_versions(broker["listeners"]["SASL_PLAINTEXT"])
        assert answers_api_versions(broker["listeners"]["BROKER"])
        assert tls_cluster.broker_pid(broker["id"]) == broker["pid"]


def test_secret_files_are_private_and_the_master_key_stays_in_server_properties(
    tls_cluster: LocalCluster,
) -> None:
    directory = tls_cluster.directory
    info = tls_cluster.info
    configs = [Path(b["config"]) for b in info["brokers"]]
    for path in [*configs, directory / "admin.properties", directory / "cluster.json"]:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    props = [read_properties(p) for p in configs]
    key = props[0]["delegation.token.secret.key"]
    assert len(key) >= 43 and all(p["delegation.token.secret.key"] == key for p in props)
    for path in directory.rglob("*"):
        if path.is_file() and path not in configs and path.suffix in {".json", ".properties", ".log"}:
            assert key not in path.read_text(errors="replace"), path
    assert props[0]["super.users"] == "User:admin;User:broker"
    assert props[0]["ssl.keystore.location"] == str(directory / "tls" / "broker.pem")


def test_admin_properties_are_kafka_client_properties(tls_cluster: LocalCluster) -> None:
    props = read_properties(tls_cluster.directory / "admin.properties")
    password = tls_cluster.info["admin"]["password"]
    assert props == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="admin" password="{password}";',
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": tls_cluster.info["tls"]["ca"],
    }


def test_admin_and_inter_broker_users_are_in_zookeeper(tls_cluster: LocalCluster) -> None:
    client = open_client(tls_cluster.zk_settings())
    try:
        users = CredentialStore(client).load_all()
    finally:
        client.stop()
        client.close()
    assert sorted(users) == ["admin", "broker"]
    for creds in users.values():
        assert set(creds) == set(ScramMechanism)
        assert {c.iterations for c in creds.values()} == {4096}


def test_killed_broker_starts_again_on_its_ports(tls_cluster: LocalCluster) -> None:
    old_pid = tls_cluster.broker_pid(2)
    assert old_pid is not None
    tls_cluster.kill_broker(2)
    assert tls_cluster.broker_pid(2) is None
    assert not _pid_running(old_pid)
    assert tls_cluster.broker_info(2)["pid"] is None
    tls_cluster.start_broker(2)
    new_pid = tls_cluster.broker_pid(2)
    assert new_pid is not None and new_pid != old_pid
    assert answers_api_versions(tls_cluster.broker_info(2)["listeners"]["SASL_PLAINTEXT"])
    saved = json.loads((tls_cluster.directory / "cluster.json").read_text())
    assert saved["brokers"][1]["pid"] == new_pid


def test_restart_broker_replaces_the_process(tls_cluster: LocalCluster) -> None:
    old_pid = tls_cluster.broker_pid(1)
    tls_cluster.restart_broker(1)
    assert tls_cluster.broker_pid(1) not in (None, old_pid)
    assert answers_api_versions(tls_cluster.broker_info(1)["listeners"]["SASL_PLAINTEXT"])


def test_down_leaves_no_process_and_is_idempotent(tmp_path: Path, zk_connect: str) -> None:
    cluster = LocalCluster.up(tmp_path, brokers=2, zookeeper=zk_connect, die_with_parent=True)
    pids = _all_pids(cluster.info)
    assert len(pids) == 2 and all(_pid_running(p) for p in pids)
    assert cluster.info["zookeeper"] == {"connect": zk_connect, "pid": None, "heap_mb": None}
    cluster.down()
    assert not any(_pid_running(p) for p in pids)
    assert _all_pids(json.loads((tmp_path / "cluster.json").read_text())) == []
    cluster.down()
    assert LocalCluster.open(tmp_path).running_pids() == []


def test_one_by_one_starts_each_broker_once_the_one_before_answers(
    tmp_path: Path, zk_connect: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    steps: list[tuple[str, object]] = []
    spawn, wait_ready = LocalCluster._spawn, LocalCluster._wait_ready

    def spawned(self: LocalCluster, broker_id: int) -> None:
        steps.append(("spawn", broker_id))
        spawn(self, broker_id)

    def waited(self: LocalCluster, broker_ids: list[int], timeout: float) -> None:
        wait_ready(self, broker_ids, timeout)
        steps.append(("ready", sorted(broker_ids)))
        assert all(answers_api_versions(self.broker_info(b)["listeners"]["SASL_PLAINTEXT"])
                   for b in broker_ids)

    monkeypatch.setattr(LocalCluster, "_spawn", spawned)
    monkeypatch.setattr(LocalCluster, "_wait_ready", waited)
    with LocalCluster.up(tmp_path, brokers=2, zookeeper=zk_connect, die_with_parent=True,
                         one_by_one=True) as cluster:
        assert steps == [("spawn", 1), ("ready", [1]), ("spawn", 2), ("ready", [2])]
        assert all(answers_api_versions(b["listeners"]["SASL_PLAINTEXT"])
                   for b in cluster.info["brokers"])


def test_cli_up_in_background_then_down_stops_everything(tmp_path: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(
        cluster_cli, ["up", "--dir", str(tmp_path), "--brokers", "1", "--zookeeper-heap", "384m"]
    )
    assert result.exit_code == 0, result.output
    info = json.loads((tmp_path / "cluster.json").read_text())
    zk_args = Path(f"/proc/{info['zookeeper']['pid']}/cmdline").read_bytes().decode().split("\0")
    assert [a for a in zk_args if a.startswith("-Xmx")] == ["-Xmx384m"]
    assert info["zookeeper"]["heap_mb"] == 384
    assert info["bootstrap_servers"] in result.output
    assert str(tmp_path / "admin.properties") in result.output
    assert info["brokers"][0]["metrics"] in result.output
    assert info["admin"]["password"] not in result.output
    pids = _all_pids(info)
    assert len(pids) == 2 and all(_pid_running(p) for p in pids)

    result = runner.invoke(cluster_cli, ["up", "--dir", str(tmp_path), "--brokers", "1"])
    assert result.exit_code != 0 and "already running" in result.output

    result = runner.invoke(cluster_cli, ["down", "--dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert not any(_pid_running(p) for p in pids)
    result = runner.invoke(cluster_cli, ["down", "--dir", str(tmp_path)])
    assert result.exit_code == 0


def test_cli_refuses_a_bad_zookeeper_heap_and_starts_nothing(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        cluster_cli, ["up", "--dir", str(tmp_path), "--zookeeper-heap", "lots"]
    )
    assert result.exit_code == 2
    assert "not a heap size" in result.output
    assert not (tmp_path / "cluster.json").exists()


def test_cli_down_without_a_cluster_says_so(tmp_path: Path) -> None:
    result = CliRunner().invoke(cluster_cli, ["down", "--dir", str(tmp_path)])
    assert result.exit_code == 0
    assert "no cluster" in result.output


def test_foreground_cluster_stops_everything_on_sigterm(tmp_path: Path, zk_connect: str) -> None:
    command = [
        sys.executable, "-m", "cli.tokensvc", "cluster", "up", "--dir", str(tmp_path),
        "--brokers", "1", "--zookeeper", zk_connect, "--foreground",
    ]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert process.stdout is not None
        output = []
        for line in process.stdout:
            output.append(line)
            if line.startswith("Running in the foreground"):
                break
        else:
            pytest.fail(f"cluster up exited with {process.wait()} before it was up:\n"
                        + "".join(output[-20:]))
        pids = _all_pids(json.loads((tmp_path / "cluster.json").read_text()))
        assert len(pids) == 1 and _pid_running(pids[0])
        process.send_signal(signal.SIGTERM)
        # A clean stop takes seconds; the bound covers the broker's 10 s grace and its
        # kill on a loaded machine (a full run beside other work met 30 s).
        assert process.wait(60) == 0
        assert not _pid_running(pids[0])
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_a_broker_that_cannot_start_fails_up_with_its_log(tmp_path: Path, zk_connect: str) -> None:
    with pytest.raises(ClusterError) as failure:
        LocalCluster.up(
            tmp_path, brokers=1, zookeeper=zk_connect,
            overrides={"early.start.listeners": "NO_SUCH_LISTENER"},
            die_with_parent=True, timeout=30,
        )
    assert "broker 1 exited" in str(failure.value)
    assert "early.start.listeners: listener NO_SUCH_LISTENER is not in listeners" in str(
        failure.value)
    info = json.loads((tmp_path / "cluster.json").read_text())
    assert _all_pids(info) == []


def test_overrides_of_keys_the_cluster_assigns_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ClusterError, match="listeners"):
        LocalCluster.up(tmp_path, brokers=1, overrides={"listeners": "PLAINTEXT://:9092"})
    assert not (tmp_path / "cluster.json").exists()
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"delegation.token.max.lifetime.ms": "-5"},
         "--set delegation.token.max.lifetime.ms: -5 is out of range: must be at least 1"),
        ({"delegation.token.expiry.time.ms": "1d"},
         "--set delegation.token.expiry.time.ms: '1d' is not a number (expected a 64-bit integer)"),
        ({"delegation.token.max.lifetime": "600000"},
         ("--set delegation.token.max.lifetime: unknown key; "
         "did you mean delegation.token.max.lifetime.ms?")),
    ],
)
def test_bad_overrides_are_refused_before_anything_starts(
    tmp_path: Path, overrides: dict[str, str], message: str
) -> None:
    with pytest.raises(ClusterError) as failure:
        LocalCluster.up(tmp_path, brokers=1, overrides=overrides)
    assert str(failure.value) == message
    assert os.listdir(tmp_path) == []


def test_cli_bad_set_is_one_line_and_starts_nothing(tmp_path: Path) -> None:
    result = CliRunner().invoke(cluster_cli, [
        "up", "--dir", str(tmp_path / "c"), "--brokers", "3",
        "--set", "delegation.token.max.lifetime.ms=600000",
        "--set", "delegation.token.expiry.time.ms=-1"])
    assert result.exit_code == 1
    assert result.output == (
        "Error: --set delegation.token.expiry.time.ms: -1 is out of range: must be at least 1\n"
    )
    assert not (tmp_path / "c").exists()
