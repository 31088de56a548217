"""`kafka-delegation-token ... --wait-all-brokers` on a 3-broker cluster of real processes:
it returns once every live broker serves the change (the token logs in, the new expiry is
visible, the token is refused), prints the time (in --output json too), and fails naming
the broker that lags -- here a broker stopped with SIGSTOP while the command waits."""

from __future__ import annotations

import base64
import json
import os
import signal
import threading
import time

import pytest
from click.testing import CliRunner

from cli.delegation_token import delegation_token
from tests.support.wait import poll_until
from tokensvc.admin import AdminClient, token_logs_in, token_refused
from tokensvc.client_config import load_client_config
from tokensvc.cluster import LocalCluster

pytestmark = pytest.mark.cluster(brokers=3)


def _admin_properties(cluster: LocalCluster) -> str:
    return cluster.info["admin"]["properties"]


def _address(cluster: LocalCluster, broker_id: int) -> str:
    return cluster.broker_info(broker_id)["listeners"]["SASL_PLAINTEXT"]


def _controller(cluster: LocalCluster) -> int:
    config = load_client_config(_admin_properties(cluster))
    with AdminClient(cluster.info["bootstrap_servers"], config, timeout_s=30) as admin:
        return admin.describe_cluster().controller_id


def _cli(cluster: LocalCluster, bootstrap: str, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(delegation_token, [
        "--bootstrap-server", bootstrap, "--command-config", _admin_properties(cluster), *args,
    ])
    return result.exit_code, result.output


def _metadata_lists_every_broker(cluster: LocalCluster, bootstrap: str) -> bool:
    config = load_client_config(_admin_properties(cluster))
    with AdminClient(bootstrap, config, timeout_s=30) as admin:
        listed = sorted(b.broker_id for b in admin.describe_cluster().brokers)
    return listed == cluster.broker_ids()


def test_create_renew_expire_wait_until_every_broker_serves_the_change(cluster):
    bootstrap = _address(cluster, cluster.broker_ids()[0])
    # "Every live broker" is every broker of the cluster metadata. A broker answers before
    # it registers (its listeners open first), so a cluster just started may not list all
    # three yet: wait until it does, as the command would then wait for all three.
    assert poll_until(lambda: _metadata_lists_every_broker(cluster, bootstrap), timeout=60,
                      interval=0.2)
    code, out = _cli(cluster, bootstrap, "--create", "--wait-all-brokers", "--output", "json")
    assert code == 0, out
    created = json.loads(out)
    assert created["all_brokers_ms"] >= 0
    assert sorted(b["id"] for b in created["brokers"]) == cluster.broker_ids()

    # What the command waited for now holds on every broker.
    config = load_client_config(_admin_properties(cluster))
    with AdminClient(bootstrap, config, timeout_s=30) as admin:
        token = admin.find_token(base64.b64decode(created["hmac"]))
        assert token is not None
        check = token_logs_in(token)
        for broker_id in cluster.broker_ids():
            assert check(_address(cluster, broker_id), config, _deadline(10))

    code, out = _cli(cluster, bootstrap, "--renew", "--hmac", created["hmac"],
                     "--renew-time-period", "7200000", "--wait-all-brokers")
    assert code == 0, out
    assert "Served by all 3 brokers after" in out

    code, out = _cli(cluster, bootstrap, "--expire", "--hmac", created["hmac"],
                     "--expiry-time-period", "-1", "--wait-all-brokers", "--output", "json")
    assert code == 0, out
    assert "all_brokers_ms" in json.loads(out)
    refused = token_refused(token)
    for broker_id in cluster.broker_ids():
        assert refused(_address(cluster, broker_id), config, _deadline(10))


def _deadline(seconds: float) -> float:
    return time.monotonic() + seconds


def test_a_stopped_broker_is_named_and_waited_for_until_it_resumes(cluster):
    controller = _controller(cluster)
    others = [b for b in cluster.broker_ids() if b != controller]
    stopped, bootstrap = others[0], _address(cluster, others[1])
    pid = cluster.broker_pid(stopped)
    os.kill(pid, signal.SIGSTOP)
    try:
        code, out = _cli(cluster, bootstrap, "--create", "--wait-all-brokers", "--timeout", "4")
        assert code == 1, out
        assert f"broker {stopped} (" in out and "still lagging" in out
        for other in cluster.broker_ids():
            if other != stopped:
                assert f"broker {other} (" not in out

        # Stopped while the command waits, resumed a moment later: the command returns
        # once the resumed broker serves the token.
        resume = threading.Timer(1.0, os.kill, args=(pid, signal.SIGCONT))
        resume.start()
        code, out = _cli(cluster, bootstrap, "--create", "--wait-all-brokers", "--timeout", "60",
                         "--output", "json")
        resume.join()
        assert code == 0, out
        served = {b["id"]: b["ms"] for b in json.loads(out)["brokers"]}
        assert set(served) == set(cluster.broker_ids())
    finally:
        os.kill(pid, signal.SIGCONT)
