"""A controller with a wrong clock steps down (issue #50, item 7), in a 3-broker
LocalCluster of real processes, the wrong clock made by Debian's libfaketime.

Before: a controller restarted ten minutes ahead took the role again, refused every token
write for its clock, and every create through another broker timed out with no cause
given. Now:

1. the controller, restarted ten minutes ahead (alone, so that nobody else can hold the
   role meanwhile), does not take the role;
2. once the others are back one of them is the controller, and creates through them and
   through the CLI bootstrapped from every broker (the skewed one first) succeed; the CLI
   bootstrapped from the skewed broker alone fails naming the clock;
3. no token expires early: a token that is expired by the skewed clock but not by the
   cluster's time survives the new controller's sweeps (one a second) and logs in;
4. with the others gone it still does not take the role, and restarted with a clock
   within the bound it does.
"""

from __future__ import annotations

import base64
import time

import pytest
from click.testing import CliRunner

from cli.delegation_token import delegation_token
from tests.support.client import WireClient
from tests.support.faketime import faketime_env
from tests.support.local_cluster import ClusterFactory, broker_address, broker_metric
from tests.support.wait import poll_until
from tokensvc.broker.writes.channel import ChannelAuthError
from tokensvc.cluster import LocalCluster
from zk import layout
from zk.client import open_client

pytestmark = [pytest.mark.slow, pytest.mark.heavy(minutes=2)]  # 3 brokers, 7 restarts

CREATE = 38
# How long the cluster is watched to see that nobody takes the role (an election that
# would win does so within a ZooKeeper round trip of the broker's start).
NO_CONTROLLER_WATCH_S = 3.0


@pytest.fixture(scope="module")
def cluster(module_cluster_factory: ClusterFactory) -> LocalCluster:
    return module_cluster_factory(
        brokers=3, overrides={"delegation.token.expiry.check.interval.ms": "1000"})


def _controller_znode(cluster: LocalCluster) -> int | None:
    client = open_client(cluster.zk_settings())
    try:
        if client.exists(layout.CONTROLLER) is None:
            return None
        return layout.decode_controller(client.get(layout.CONTROLLER)[0])
    finally:
        client.stop()
        client.close()


def _acting_controller(cluster: LocalCluster, among: list[int]) -> int | None:
    acting = [b for b in among if broker_metric(cluster, b, "tokensvc_controller") == 1]
    return acting[0] if len(acting) == 1 else None


def _stays_without_controller(cluster: LocalCluster) -> bool:
    end = time.monotonic() + NO_CONTROLLER_WATCH_S
    while time.monotonic() < end:
        if _controller_znode(cluster) is not None:
            return False
        time.sleep(0.2)
    return True


def _create(cluster: LocalCluster, broker_id: int, max_lifetime_ms: int = -1) -> dict:
    admin = cluster.info["admin"]
    with WireClient(broker_address(cluster, broker_id), admin["username"],
                    admin["password"]) as client:
        return client.request(CREATE, 3, {"Renewers": [], "MaxLifetimeMs": max_lifetime_ms})


def _cli_create(cluster: LocalCluster, bootstrap: str) -> tuple[int, str]:
    result = CliRunner().invoke(delegation_token, [
        "--bootstrap-server", bootstrap, "--command-config",
        cluster.info["admin"]["properties"], "--timeout", "8", "--create"])
    return result.exit_code, result.output


def _token_logs_in(cluster: LocalCluster, broker_id: int, created: dict) -> bool:
    try:
        WireClient(broker_address(cluster, broker_id), created["TokenId"],
                   base64.b64encode(created["Hmac"]).decode("ascii"), token=True,
                   timeout=10.0).close()
    except ChannelAuthError:
        return False
    return True


def _token_in_zookeeper(cluster: LocalCluster, token_id: str) -> bool:
    client = open_client(cluster.zk_settings())
    try:
        return client.exists(layout.token_path(token_id)) is not None
    finally:
        client.stop()
        client.close()


def test_a_controller_ten_minutes_ahead_gives_up_the_role_and_writes_go_on(
        cluster: LocalCluster) -> None:
    ids = cluster.broker_ids()
    assert poll_until(lambda: _acting_controller(cluster, ids) is not None, timeout=30)
    skewed = _acting_controller(cluster, ids)
    others = [b for b in ids if b != skewed]
    # Three minutes left by the cluster's time; long expired by a clock ten minutes ahead.
    short = _create(cluster, others[0], max_lifetime_ms=180_000)
    assert short["ErrorCode"] == 0

    # -- 1. Restarted ten minutes ahead, alone: it does not take the role.
    for broker_id in others:
        cluster.stop_broker(broker_id)
    cluster.stop_broker(skewed)
    cluster.start_broker(skewed, env=faketime_env("+10m"))
    assert broker_metric(cluster, skewed, "tokensvc_clock_skew_refusing") == 1
    assert _stays_without_controller(cluster)
    assert broker_metric(cluster, skewed, "tokensvc_controller") == 0

    # -- 2. The others come back: one of them leads, and writes go on through them.
    for broker_id in others:
        cluster.start_broker(broker_id)
    assert poll_until(lambda: _acting_controller(cluster, others) is not None, timeout=30)
    leader = _acting_controller(cluster, others)
    assert _controller_znode(cluster) == leader
    assert broker_metric(cluster, skewed, "tokensvc_controller") == 0
    for broker_id in others:
        assert _create(cluster, broker_id)["ErrorCode"] == 0
    addresses = {b: cluster.broker_info(b)["listeners"]["SASL_PLAINTEXT"] for b in ids}
    everyone = ",".join([addresses[skewed]] + [addresses[b] for b in others])
    code, output = _cli_create(cluster, everyone)
    assert code == 0, output
    code, output = _cli_create(cluster, addresses[skewed])
    assert code != 0
    assert "max.clock.skew.ms" in output and "clock" in output, output

    # -- 3. Nothing expires early: the new controller's sweeps leave the short token.
    sweeps = broker_metric(cluster, leader, "tokensvc_expiry_sweeps")
    assert poll_until(
        lambda: broker_metric(cluster, leader, "tokensvc_expiry_sweeps") >= sweeps + 3,
        timeout=15)
    assert _token_in_zookeeper(cluster, short["TokenId"])
    for broker_id in others:
        assert _token_logs_in(cluster, broker_id, short), broker_id

    # -- 4. Alone again it waits; with a clock within the bound it leads.
    for broker_id in others:
        cluster.stop_broker(broker_id)
    assert _stays_without_controller(cluster)
    cluster.stop_broker(skewed)
    cluster.start_broker(skewed, env={})  # the host's clock
    assert broker_metric(cluster, skewed, "tokensvc_clock_skew_refusing") == 0
    assert poll_until(lambda: _controller_znode(cluster) == skewed, timeout=30)
    assert poll_until(lambda: broker_metric(cluster, skewed, "tokensvc_controller") == 1,
                      timeout=10)
    assert _create(cluster, skewed)["ErrorCode"] == 0
