"""The controller, controller-epoch and cluster-id znodes (``/controller``,
``/controller_epoch``, ``/cluster/id``): zk.layout's decoders of each.

Properties: only LayoutError escapes; what is read is written and read again the same.
"""

from __future__ import annotations

from zk import layout
from zk.layout import LayoutError

ERRORS = (LayoutError,)
DICTIONARY = "json.dict"


def fuzz_one(data: bytes) -> None:
    if not data:
        return
    kind, rest = data[0] % 3, data[1:]
    if kind == 0:
        broker_id = layout.decode_controller(rest)
        assert layout.decode_controller(layout.encode_controller(broker_id, 1)) == broker_id
    elif kind == 1:
        epoch = layout.decode_controller_epoch(rest)
        assert layout.decode_controller_epoch(layout.encode_controller_epoch(epoch)) == epoch
    else:
        cluster_id = layout.decode_cluster_id(rest)
        assert layout.decode_cluster_id(layout.encode_cluster_id(cluster_id)) == cluster_id


def seeds() -> dict[str, bytes]:
    """As Kafka 3.9's ControllerZNode, ControllerEpochZNode and ClusterIdZNode write them."""
    return {
        "kafka-controller": b'\x00{"version":1,"brokerid":3,"timestamp":"1700000000123"}',
        "kafka-controller-epoch": b"\x0117",
        "kafka-cluster-id": b'\x02{"version":"1","id":"AAAAAAAAAAAAAAAAAAAAAA"}',
    }
