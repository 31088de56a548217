"""Requests on open password sessions go through the bounded-staleness gate (issue 27).

A broker is frozen (SIGSTOP) while a user who has a password session open on it is
deleted through another broker; it resumes after longer than
``zookeeper.max.staleness.ms``. The very next request on that session -- a
CreateDelegationToken -- is held until the broker's view is confirmed current, and by then
the deletion has closed the session: no answer with a token, and no token of the user in
ZooKeeper. Before the gate covered user sessions, the frozen broker answered from its old
view and minted the token.
"""

from __future__ import annotations

import os
import signal
import time

import pytest

from tests.support.wait import retry
from tokensvc.admin import AdminClient, AdminError
from tokensvc.admin.connection import BrokerConnection, ConnectionLost
from tokensvc.client_config import client_config_from_properties, load_client_config
from tokensvc.cluster import LocalCluster
from tokensvc.protocol import ApiKey

STALENESS_MS = 2_000


pytestmark = pytest.mark.cluster(brokers=3,
                                 overrides={"zookeeper.max.staleness.ms": str(STALENESS_MS)})


def test_a_deleted_users_session_on_a_frozen_broker_is_refused_after_the_bound(
    cluster: LocalCluster,
) -> None:
    admin_config = load_client_config(cluster.info["admin"]["properties"])
    with AdminClient(cluster.info["bootstrap_servers"], admin_config, timeout_s=20) as admin:
        admin.upsert_user_scram_credential("kim", "SCRAM-SHA-512", "kim-pw")
        controller = admin.describe_cluster().controller_id
    frozen = next(b for b in cluster.info["brokers"] if b["id"] != controller)
    kim = client_config_from_properties({
        "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required "
                            'username="kim" password="kim-pw";'})
    # kim was created through the bootstrap broker: the one to be frozen serves the
    # credential once the change reaches it (read-your-writes holds where it was answered).
    def logged_in() -> BrokerConnection:
        session = BrokerConnection(frozen["listeners"]["SASL_PLAINTEXT"], kim, client_id="kim")
        try:
            session.open(time.monotonic() + 10)
        except AdminError:
            session.close()
            raise
        return session

    session = retry(logged_in, timeout=20, errors=(AdminError,), interval=0.1)
    pid = cluster.broker_pid(frozen["id"])
    os.kill(pid, signal.SIGSTOP)
    try:
        controller_address = cluster.broker_info(controller)["listeners"]["SASL_PLAINTEXT"]
        with AdminClient(controller_address, admin_config, timeout_s=20) as admin:
            admin.delete_user_scram_credential("kim", "SCRAM-SHA-512")
        time.sleep(STALENESS_MS / 1000 + 1.5)  # the frozen broker's view is past the bound
    finally:
        os.kill(pid, signal.SIGCONT)
    answer = None
    try:
        answer = session.request(ApiKey.CREATE_DELEGATION_TOKEN,
                                 {"Renewers": [], "MaxLifetimeMs": -1}, time.monotonic() + 15, 1)
    except (ConnectionLost, AdminError, OSError):
        pass  # closed: the deletion reached the broker before the request was served
    finally:
        session.close()
    assert answer is None or answer["ErrorCode"] != 0, answer
    with AdminClient(cluster.info["bootstrap_servers"], admin_config, timeout_s=20) as admin:
        assert admin.describe_tokens(owners=["User:kim"]) == []
