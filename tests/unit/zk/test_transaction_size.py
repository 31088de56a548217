"""A store's transaction over what ZooKeeper takes in one request is refused before it is
sent (zk.writes.check_transaction): ZooKeeper would close the connection instead."""

from __future__ import annotations

import pytest
from kazoo.client import KazooClient
from kazoo.security import OPEN_ACL_UNSAFE

from tokensvc.core.errors import Errors
from zk.errors import StoreError
from zk.writes import MAX_TRANSACTION_BYTES, check_transaction, transaction_bytes


def _transaction(creates: int, data_bytes: int):
    tx = KazooClient(hosts="127.0.0.1:1").transaction()  # built, never connected
    tx.check("/tokensvc/controller_epoch", 3)
    for i in range(creates):
        tx.create(f"/kafka-acl/Topic/t-{i:06d}", b"x" * data_bytes, acl=OPEN_ACL_UNSAFE)
    return tx


def test_the_size_counts_paths_data_and_acls() -> None:
    small = transaction_bytes(_transaction(1, 100))
    larger = transaction_bytes(_transaction(1, 1_100))
    assert larger - small == 1_000
    assert transaction_bytes(_transaction(2, 100)) - small == small - transaction_bytes(
        _transaction(0, 0))


def test_a_transaction_under_the_bound_passes() -> None:
    check_transaction(_transaction(100, 1_000), "update ACLs")  # about 110 KB


def test_a_transaction_over_the_bound_is_invalid_request_naming_its_size() -> None:
    tx = _transaction(1_000, 1_000)
    assert transaction_bytes(tx) > MAX_TRANSACTION_BYTES
    with pytest.raises(StoreError) as refused:
        check_transaction(tx, "update ACLs")
    assert refused.value.error is Errors.INVALID_REQUEST
    assert refused.value.message.startswith("update ACLs: one ZooKeeper transaction of about ")
    assert refused.value.message.endswith("send fewer items per request")
