"""deploy/ checked by the real tools: Prometheus' promtool (the rules load, and every alert
fires and stays silent where tests.yml says), systemd-analyze verify on the units (with
their ExecStart pointed at this checkout's virtualenv: the paths of an installation do not
exist here), the example broker configuration loads, and the dashboard is valid JSON whose
every panel has a query. ``./dev`` installs Debian's prometheus and systemd packages when
the tools are missing; a missing tool fails these tests (it is never skipped)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tokensvc.config_loader import load_broker_config

ROOT = Path(__file__).resolve().parents[3]
DEPLOY = ROOT / "deploy"
INSTALLED_BIN = "/opt/tokensvc/venv/bin/"


def _tool(name: str) -> str:
    path = shutil.which(name)
    assert path, f"{name} is not installed: ./dev installs it (apt-get install prometheus systemd)"
    return path


def test_promtool_checks_the_rules() -> None:
    done = subprocess.run([_tool("promtool"), "check", "rules", "rules.yml"],
                          cwd=DEPLOY / "prometheus", capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def test_promtool_unit_tests_every_alert_firing_and_silent() -> None:
    tests = yaml.safe_load((DEPLOY / "prometheus" / "tests.yml").read_text())["tests"]
    rules = yaml.safe_load((DEPLOY / "prometheus" / "rules.yml").read_text())
    alerts = {r["alert"] for g in rules["groups"] for r in g["rules"]}
    firing = {c["alertname"] for t in tests for c in t["alert_rule_test"] if c["exp_alerts"]}
    silent = {c["alertname"] for t in tests for c in t["alert_rule_test"] if not c["exp_alerts"]}
    assert firing == alerts and silent == alerts
    done = subprocess.run([_tool("promtool"), "test", "rules", "tests.yml"],
                          cwd=DEPLOY / "prometheus", capture_output=True, text=True, check=False)
    assert done.returncode == 0 and "SUCCESS" in done.stdout, done.stdout + done.stderr


def test_every_alert_has_a_severity_a_runbook_section_and_a_row_in_the_docs() -> None:
    rules = yaml.safe_load((DEPLOY / "prometheus" / "rules.yml").read_text())
    operations = (ROOT / "docs" / "operations.md").read_text()
    for group in rules["groups"]:
        for rule in group["rules"]:
            assert rule["labels"]["severity"] in ("critical", "warning", "info"), rule["alert"]
            anchor = rule["annotations"]["runbook_url"].split("#", 1)[1]
            assert anchor == rule["alert"].lower()
            assert f"#### {rule['alert']}" in operations, rule["alert"]
            assert f"`{rule['alert']}`" in operations.split("### What to alert on")[1], rule["alert"]


def test_systemd_analyze_verifies_both_units(tmp_path: Path) -> None:
    venv_bin = str(Path(sys.executable).parent) + "/"
    units = []
    for unit in sorted((DEPLOY / "systemd").glob("*.service")):
        text = unit.read_text()
        assert INSTALLED_BIN in text, unit.name
        name = unit.name.replace("@.service", "@1.service")
        (tmp_path / name).write_text(text.replace(INSTALLED_BIN, venv_bin))
        units.append(str(tmp_path / name))
    assert len(units) == 2
    done = subprocess.run([_tool("systemd-analyze"), "verify", *units],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    broker = (DEPLOY / "systemd" / "tokensvc-broker@.service").read_text()
    for hardening in ("NoNewPrivileges=yes", "ProtectSystem=strict", "ReadWritePaths=",
                      "PrivateTmp=yes", "Restart=on-failure", "User=tokensvc",
                      "EnvironmentFile=/etc/tokensvc/tokensvc.env"):
        assert hardening in broker, hardening


def test_the_example_broker_configuration_loads_with_the_key_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    env = dict(line.split("=", 1) for line in
               (DEPLOY / "systemd" / "tokensvc.env").read_text().splitlines()
               if line and not line.startswith("#"))
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    loaded = load_broker_config(DEPLOY / "systemd" / "broker-1.properties")
    assert loaded.config.master_keys.enabled
    assert loaded.config.log_format == "json"
    assert loaded.config.audit_log_dir == "/var/log/tokensvc/audit"
    unit = (DEPLOY / "systemd" / "tokensvc-broker@.service").read_text()
    assert f"ReadWritePaths={loaded.config.audit_log_dir}" in unit
    # The snapshot directory is the unit's state directory (systemd makes it writable).
    assert loaded.config.token_cache_snapshot_dir == "/var/lib/tokensvc/broker-1"
    assert "StateDirectory=tokensvc/broker-%i" in unit


def test_the_dashboard_is_json_with_a_query_in_every_panel() -> None:
    dashboard = json.loads((DEPLOY / "grafana" / "tokensvc.json").read_text())
    titles = [p["title"] for p in dashboard["panels"]]
    assert len(titles) == len(set(titles)) >= 8
    assert all(p["targets"] and all(t["expr"] for t in p["targets"])
               for p in dashboard["panels"])
