"""A rolling restart of a local cluster: each broker in turn, the controller last.

Owns :func:`roll_order` (pure: which broker goes when) and :func:`roll_cluster`, the
procedure behind ``tokensvc cluster roll``. For each broker:

1. stop it cleanly (SIGTERM: it deregisters from ZooKeeper and writes its token cache
   snapshot), start it again with the same configuration, and wait until it answers;
2. wait until it is in the cluster metadata another broker gives out (clients route to
   it again);
3. wait until its token cache has caught up: a *probe* token is created through the
   cluster after the broker was stopped, and the broker must let that token log in. Change
   notifications are applied in order, so a cache that serves a token created after the
   restart began holds every change committed before it -- the load from the snapshot
   or from ZooKeeper and the catch-up are both done. The probe is then expired.

Only then does the next broker go. The controller goes last, so control moves once.

Must not: print (the caller renders), decide token rules, or open ZooKeeper (it asks the
brokers the way a client would).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from tokensvc.admin import AdminClient, AdminError
from tokensvc.admin.propagation import PropagationTimeout, token_logs_in, wait_all_brokers
from tokensvc.admin.results import BrokerNode
from tokensvc.client_config import load_client_config
from tokensvc.cluster import ClusterError, LocalCluster

DEFAULT_TIMEOUT_S = 120.0


class RollError(RuntimeError):
    """A broker did not come back, or did not catch up, within the timeout."""


@dataclass(frozen=True)
class BrokerRolled:
    """One broker's restart: ``serving_s`` from the stop until it answered again,
    ``caught_up_s`` until it served a token created after the stop."""

    broker_id: int
    was_controller: bool
    serving_s: float
    caught_up_s: float


@dataclass(frozen=True)
class RollResult:
    brokers: tuple[BrokerRolled, ...]
    seconds: float


def roll_order(broker_ids: Iterable[int], controller_id: int | None) -> list[int]:
    """Every broker once, in id order, the controller last."""
    ids = sorted(set(broker_ids))
    if controller_id in ids:
        ids.remove(controller_id)
        ids.append(controller_id)
    return ids


def roll_cluster(
    cluster: LocalCluster,
    *,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    on_step: Callable[[str], None] | None = None,
) -> RollResult:
    """Restart every broker of ``cluster`` in turn (see the module docstring)."""
    say = on_step or (lambda _text: None)
    config = load_client_config(cluster.info["admin"]["properties"])
    started = time.monotonic()
    with AdminClient(cluster.info["bootstrap_servers"], config, timeout_s=timeout_s) as admin:
        controller = admin.describe_cluster().controller_id
        order = roll_order(cluster.broker_ids(), controller)
        say(f"order: {', '.join(map(str, order))} (controller {controller} last)")
        rolled = [_roll_one(cluster, admin, broker_id, broker_id == controller, timeout_s, say)
                  for broker_id in order]
    return RollResult(tuple(rolled), time.monotonic() - started)


def _roll_one(cluster: LocalCluster, admin: AdminClient, broker_id: int, was_controller: bool,
              timeout_s: float, say: Callable[[str], None]) -> BrokerRolled:
    address = cluster.broker_info(broker_id)["listeners"]["SASL_PLAINTEXT"]
    host, _, port = address.rpartition(":")
    say(f"broker {broker_id}: stopping")
    stopped = time.monotonic()
    try:
        cluster.restart_broker(broker_id, timeout=timeout_s)
    except ClusterError as exc:
        raise RollError(f"broker {broker_id} did not come back: {exc}") from exc
    serving = time.monotonic() - stopped
    say(f"broker {broker_id}: answering after {serving:.1f}s")
    deadline = stopped + timeout_s
    _wait_in_metadata(admin, broker_id, deadline)
    try:
        probe = admin.create_token()
    except AdminError as exc:
        raise RollError(f"broker {broker_id}: the probe token could not be created: "
                        f"{exc.message}") from exc
    try:
        wait_all_brokers([BrokerNode(broker_id, host, int(port))], admin.config,
                         token_logs_in(probe), max(1.0, deadline - time.monotonic()))
    except PropagationTimeout as exc:
        raise RollError(f"broker {broker_id} answers but its token cache did not catch up "
                        f"within {timeout_s:.0f}s") from exc
    finally:
        try:
            admin.expire_token(probe.hmac, -1)
        except AdminError as exc:
            say(f"broker {broker_id}: the probe token {probe.token_id} was not expired "
                f"({exc.message}); it expires by itself")
    caught_up = time.monotonic() - stopped
    say(f"broker {broker_id}: caught up after {caught_up:.1f}s")
    return BrokerRolled(broker_id, was_controller, serving, caught_up)


def _wait_in_metadata(admin: AdminClient, broker_id: int, deadline: float) -> None:
    while True:
        try:
            if any(b.broker_id == broker_id for b in admin.describe_cluster().brokers):
                return
        except AdminError:
            pass
        if time.monotonic() > deadline:
            raise RollError(f"broker {broker_id} is not in the cluster metadata")
        time.sleep(0.1)
