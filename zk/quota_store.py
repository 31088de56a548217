"""Client quotas in ZooKeeper, read only: the quota store.

Kafka keeps client quotas in its config znodes (``AdminZkClient``'s layout, under the
client's chroot):

- ``/config/users/<sanitized user>`` (the credential store's znodes: quota keys sit
  beside the SCRAM credentials) and ``/config/users/<user>/clients/<client-id>``;
- ``/config/clients/<sanitized client-id>``;
- ``/config/ips/<ip>``;

each ``{"version":1,"config":{"producer_byte_rate":"1024",...}}``, ``<default>`` naming a
type's default entity. :class:`QuotaStore` reads them for DescribeClientQuotas
(:mod:`tokensvc.core.quotas` decides which): one znode, or a folder's children in
pipelined reads. Quotas are Kafka's: tokensvc never writes them (the credential store's
read-modify-write keeps a user's quota keys).

Must not: write a znode, or be imported by pure code.
"""

from __future__ import annotations

from collections.abc import Mapping

from kazoo.client import KazooClient

from zk.credential_store import decode_user_config
from zk.errors import ZnodeMissing
from zk.reads import ZnodeReads

CONFIG_PATH = "/config"


class QuotaStore:
    """Reads quota entity configs under ``/config`` (:class:`tokensvc.core.quotas.QuotaConfigs`).

    The shape of every store: ``(client, *, request_timeout_s=10.0, multi_read=True)``,
    the client as :attr:`client`. Construction does no I/O. A znode that is not Kafka's
    config JSON is a :class:`zk.errors.StoreError`."""

    def __init__(
        self, client: KazooClient, *, request_timeout_s: float = 10.0, multi_read: bool = True
    ) -> None:
        self._reads = ZnodeReads(client, request_timeout_s, multi_read=multi_read)
        self._client = client

    @property
    def client(self) -> KazooClient:
        return self._client

    def entity(self, path: str) -> Mapping[str, str]:
        """The config of ``/config/<path>``; empty where the znode does not exist."""
        full = f"{CONFIG_PATH}/{path}"
        try:
            data, _ = self._reads.call(f"read {full}", lambda: self._client.get_async(full))
        except ZnodeMissing:
            return {}
        return decode_user_config(data)

    def entities(self, folder: str) -> Mapping[str, Mapping[str, str]]:
        """Every child of ``/config/<folder>`` by znode name, with its config."""
        parent = f"{CONFIG_PATH}/{folder}"
        children = self._children(parent)
        values = self._reads.get_many([f"{parent}/{c}" for c in children], f"read {parent}",
                                      with_stat=False)
        return {child: decode_user_config(value)  # type: ignore[arg-type]
                for child, value in zip(children, values) if value is not None}

    def user_clients(self) -> Mapping[tuple[str, str], Mapping[str, str]]:
        """Every ``/config/users/<user>/clients/<client>`` by (user, client) znode names."""
        users_path = f"{CONFIG_PATH}/users"
        users = self._children(users_path)
        listed = self._reads.pipelined(self._client.get_children_async,
                                       [f"{users_path}/{u}/clients" for u in users],
                                       "list users' clients")
        pairs = [(user, client) for user, clients in zip(users, listed)
                 for client in sorted(clients or ())]
        values = self._reads.get_many(
            [f"{users_path}/{u}/clients/{c}" for u, c in pairs], "read users' clients",
            with_stat=False)
        return {pair: decode_user_config(value)  # type: ignore[arg-type]
                for pair, value in zip(pairs, values) if value is not None}

    def _children(self, path: str) -> list[str]:
        try:
            return sorted(self._reads.call(f"list {path}",
                                           lambda: self._client.get_children_async(path)))
        except ZnodeMissing:
            return []
