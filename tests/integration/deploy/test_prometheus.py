"""A real Prometheus (Debian's, on loopback) scrapes a real 3-broker cluster and a token
agent after some traffic -- logins with passwords and tokens, creates forwarded by
non-controllers, a refused login, an expiry, re-authentications -- and is asked through
its HTTP API:

- every metric named in docs/operations.md, the alert rules or the dashboard exists;
- every metric the brokers export is in docs/operations.md;
- the alert rules load and evaluate without error;
- every dashboard panel's query answers (data or an empty result), never an error.

The cluster runs with ``log.format=json``: every line of every broker's log parses as JSON,
and none holds an HMAC, password or master key of this session.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from confluent_kafka.admin import AdminClient as ConfluentAdmin

from tests.support.local_cluster import user_config, wait_served_everywhere
from tests.support.wait import wait_for
from tokensvc.admin import AdminClient, AdminError
from tokensvc.admin.connection import BrokerConnection
from tokensvc.client_config import client_config_from_properties, load_client_config
from tokensvc.cluster import LocalCluster
from tokensvc.jvm import free_port

ROOT = Path(__file__).resolve().parents[3]
DEPLOY = ROOT / "deploy"
SCRAPE_S = 1
NAME = re.compile(r"\btokensvc_[a-z0-9_]+")


def _documented() -> set[str]:
    """Metric names in the tables of docs/operations.md and docs/agent.md."""
    names = set()
    for page in ("operations.md", "agent.md"):
        for line in (ROOT / "docs" / page).read_text().splitlines():
            if line.startswith("| `tokensvc_"):
                names.add(line.split("`")[1])
            elif page == "agent.md":
                names.update(NAME.findall(line))
    return names


def _in_rules() -> set[str]:
    rules = yaml.safe_load((DEPLOY / "prometheus" / "rules.yml").read_text())
    return {n for g in rules["groups"] for r in g["rules"] for n in NAME.findall(r["expr"])}


def _dashboard_queries() -> list[str]:
    dashboard = json.loads((DEPLOY / "grafana" / "tokensvc.json").read_text())
    return [t["expr"] for p in dashboard["panels"] for t in p["targets"]]


class Prometheus:
    def __init__(self, workdir: Path, targets: list[str], agent: str) -> None:
        self.port = free_port()
        rules = workdir / "rules.yml"
        rules.write_text((DEPLOY / "prometheus" / "rules.yml").read_text())
        config = {
            "global": {"scrape_interval": f"{SCRAPE_S}s", "evaluation_interval": f"{SCRAPE_S}s"},
            "rule_files": [str(rules)],
            "scrape_configs": [
                {"job_name": "tokensvc", "static_configs": [{"targets": targets}]},
                {"job_name": "tokensvc-agent", "static_configs": [{"targets": [agent]}]},
            ],
        }
        (workdir / "prometheus.yml").write_text(yaml.safe_dump(config))
        assert subprocess.run(["promtool", "check", "config", str(workdir / "prometheus.yml")],
                              capture_output=True, check=False).returncode == 0
        self.log = open(workdir / "prometheus.log", "wb")  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen(
            ["prometheus", f"--config.file={workdir / 'prometheus.yml'}",
             f"--storage.tsdb.path={workdir / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}"],
            stdout=self.log, stderr=subprocess.STDOUT)
        wait_for(self._ready, 60, "Prometheus ready")

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/-/ready", timeout=2):
                return True
        except OSError:
            return False

    def api(self, path: str, **params: str) -> dict:
        url = f"http://127.0.0.1:{self.port}/api/v1/{path}"
        if params:
            url += "?" + urllib.parse.urlencode(params)
        with urllib.request.urlopen(url, timeout=10) as page:
            body = json.loads(page.read())
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str) -> list:
        return self.api("query", query=expr)["result"]

    def stop(self) -> None:
        self.process.send_signal(signal.SIGTERM)
        self.process.wait(timeout=30)
        self.log.close()


@pytest.fixture(scope="module")
def scraped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple]:
    workdir = tmp_path_factory.mktemp("prometheus")
    overrides = {"log.format": "json", "connections.max.reauth.ms": "2000",
                 "delegation.token.expiry.check.interval.ms": "1000"}
    with LocalCluster.up(workdir / "cluster", brokers=3, overrides=overrides,
                         die_with_parent=True) as cluster:
        secrets = _traffic(cluster, workdir)
        agent_port = free_port()
        agent = subprocess.Popen(
            [sys.executable, "-m", "cli.delegation_token", "--agent",
             "--bootstrap-server", cluster.info["bootstrap_servers"],
             "--command-config", cluster.info["admin"]["properties"],
             "--credentials-file", str(workdir / "job.properties"),
             "--metrics-port", str(agent_port)],
            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        prometheus = Prometheus(workdir, [b["metrics"] for b in cluster.info["brokers"]],
                                f"127.0.0.1:{agent_port}")
        try:
            wait_for(lambda: len(prometheus.query('up == 1')) == 4, 60, "4 targets up")
            time.sleep(3 * SCRAPE_S)  # a few scrapes of everything after the traffic
            yield cluster, prometheus, secrets
        finally:
            prometheus.stop()
            agent.send_signal(signal.SIGTERM)
            agent.wait(timeout=30)


def _traffic(cluster: LocalCluster, workdir: Path) -> set[str]:
    """Logins, creates through every broker, a refused login, an expiry, a user created;
    returns the secrets of the session (HMACs, passwords, master key)."""
    admin_props = cluster.info["admin"]["properties"]
    config = load_client_config(admin_props)
    secrets = {cluster.info["admin"]["password"]}
    for broker in cluster.info["brokers"]:
        props = (Path(broker["config"])).read_text()
        secrets.update(re.findall(r"(?:secret\.key|sasl\.password)=(\S+)", props))
    with AdminClient(cluster.info["bootstrap_servers"], config, timeout_s=15) as admin:
        admin.upsert_user_scram_credential("carol", "SCRAM-SHA-512", "carol-secret-pw")
        secrets.add("carol-secret-pw")
    # librdkafka logs carol in on whichever brokers it picks: wait until every broker
    # serves her (written through one broker, the others follow).
    wait_served_everywhere(cluster, user_config("carol", "carol-secret-pw"))
    for broker in cluster.info["brokers"]:
        address = broker["listeners"]["SASL_PLAINTEXT"]
        with AdminClient(address, config, timeout_s=15) as admin:
            token = admin.create_token()
            secrets.add(token.hmac_b64)
            token_config = client_config_from_properties({
                "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-512",
                "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule "
                f'required username="{token.token_id}" password="{token.hmac_b64}" '
                "tokenauth=true;"})
            with AdminClient(address, token_config, timeout_s=15) as as_token:
                as_token.describe_cluster()
            admin.expire_token(token.hmac)
    # librdkafka re-authenticates (KIP-368) once connections.max.reauth.ms is over.
    confluent = ConfluentAdmin({"bootstrap.servers": cluster.info["bootstrap_servers"],
                                "security.protocol": "SASL_PLAINTEXT",
                                "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "carol",
                                "sasl.password": "carol-secret-pw"})
    for _ in range(4):
        confluent.list_topics(timeout=10)
        time.sleep(1)
    wrong = client_config_from_properties({
        "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule "
                            'required username="carol" password="not-her-password";'})
    conn = BrokerConnection(cluster.info["brokers"][0]["listeners"]["SASL_PLAINTEXT"], wrong,
                            client_id="prometheus-test")
    with pytest.raises(AdminError):
        conn.open(time.monotonic() + 10)
    conn.close()
    return secrets


def _names(prometheus: Prometheus) -> set[str]:
    return set(prometheus.api("label/__name__/values"))


def _exists(name: str, names: set[str]) -> bool:
    return any(n in names for n in (name, f"{name}_bucket", f"{name}_total"))


def test_every_metric_named_in_docs_rules_or_dashboard_exists(scraped: tuple) -> None:
    _, prometheus, _ = scraped
    names = _names(prometheus)
    named = _documented() | _in_rules() | {n for q in _dashboard_queries()
                                           for n in NAME.findall(q)}
    assert len(named) > 40
    missing = sorted(n for n in named if not _exists(n, names))
    assert missing == [], missing


def test_every_metric_the_brokers_export_is_documented(scraped: tuple) -> None:
    _, prometheus, _ = scraped
    documented = _documented()
    exported = {n for n in _names(prometheus) if n.startswith("tokensvc_")}
    undocumented = []
    for name in sorted(exported):
        base = re.sub(r"_(created|bucket|sum|count)$", "", name)
        if not ({name, base, f"{base}_total"} & documented):
            undocumented.append(name)
    assert undocumented == [], undocumented


def test_the_alert_rules_load_and_evaluate_without_error(scraped: tuple) -> None:
    _, prometheus, _ = scraped
    groups = prometheus.api("rules")["groups"]
    rules = [r for g in groups for r in g["rules"]]
    assert len(rules) == len(_in_rules_alerts())
    wait_for(lambda: all(r["health"] == "ok" for g in prometheus.api("rules")["groups"]
                         for r in g["rules"]), 10, "every rule evaluated")
    # The healthy cluster has one controller: that alert is not pending.
    firing = {a["labels"]["alertname"] for a in prometheus.api("alerts")["alerts"]}
    assert "TokensvcNoController" not in firing and "TokensvcBrokerDown" not in firing


def _in_rules_alerts() -> set[str]:
    rules = yaml.safe_load((DEPLOY / "prometheus" / "rules.yml").read_text())
    return {r["alert"] for g in rules["groups"] for r in g["rules"]}


def test_every_dashboard_query_answers_without_error(scraped: tuple) -> None:
    _, prometheus, _ = scraped
    with_data = 0
    for expr in _dashboard_queries():
        concrete = (expr.replace("$__rate_interval", "1m").replace('"$job"', '"tokensvc"')
                    .replace('"$instance"', '".*"'))
        with_data += bool(prometheus.query(concrete))  # an error fails inside api()
    assert with_data >= len(_dashboard_queries()) // 2


def test_the_metrics_show_the_traffic(scraped: tuple) -> None:
    _, prometheus, _ = scraped
    assert prometheus.query('sum(tokensvc_controller{job="tokensvc"}) == 1')
    assert prometheus.query('sum(tokensvc_scram_logins_total{result="failure"}) >= 1')
    assert prometheus.query('sum(tokensvc_token_requests_total{action="create",error="NONE"}) >= 3')
    assert prometheus.query('sum(tokensvc_reauthentications_total{result="success"}) >= 1')
    assert prometheus.query('sum(tokensvc_forwarded_requests_total) >= 1')


def test_json_broker_logs_parse_line_by_line_and_hold_no_secret(scraped: tuple) -> None:
    cluster, _, secrets = scraped
    assert len(secrets) >= 6
    lines = 0
    for broker in cluster.info["brokers"]:
        text = Path(broker["log"]).read_text()
        for line in text.splitlines():
            record = json.loads(line)
            assert {"time", "level", "logger", "message", "broker_id"} <= record.keys()
            assert record["broker_id"] == broker["id"]
            lines += 1
        for secret in secrets:
            assert secret not in text
    assert lines > 10
