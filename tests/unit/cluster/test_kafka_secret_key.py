"""Which ``delegation.token.secret.key`` the local cluster's Kafka brokers get: the one
tokensvc's brokers use, wherever ``--set`` or the cluster put it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tokensvc.cluster.kafka import kafka_secret_key


def test_a_key_given_with_set_is_used_under_either_name(tmp_path: Path) -> None:
    assert kafka_secret_key(tmp_path, {"delegation.token.secret.key": "given"}) == "given"
    assert kafka_secret_key(tmp_path, {"delegation.token.master.key": "alias"}) == "alias"


def test_a_key_file_or_variable_is_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    key_file = tmp_path / "key"
    key_file.write_text("from-file\n")
    key_file.chmod(0o600)
    assert kafka_secret_key(tmp_path, {"delegation.token.secret.key.file": str(key_file)}) == "from-file"
    monkeypatch.setenv("KAFKA_TEST_KEY", "from-env")
    assert kafka_secret_key(tmp_path, {"delegation.token.secret.key.env": "KAFKA_TEST_KEY"}) == "from-env"


def test_the_key_the_cluster_wrote_for_its_brokers_is_used(tmp_path: Path) -> None:
    (tmp_path / "broker-1").mkdir()
    (tmp_path / "broker-1" / "server.properties").write_text("delegation.token.secret.key=written\n")
    assert kafka_secret_key(tmp_path, {}) == "written"


def test_without_any_a_new_key_is_made(tmp_path: Path) -> None:
    first, second = kafka_secret_key(tmp_path, {}), kafka_secret_key(tmp_path, {})
    assert len(first) >= 32 and first != second
