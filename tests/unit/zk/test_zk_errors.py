"""zk.errors: the one table from kazoo's exceptions to store errors (pure: the kazoo
exceptions are built, never raised by a client)."""

from __future__ import annotations

import pytest
from kazoo.exceptions import (
    BadVersionError,
    ConnectionLoss,
    NodeExistsError,
    NoNodeError,
    OperationTimeoutError,
    SessionExpiredError,
)
from kazoo.handlers.threading import KazooTimeoutError

from tokensvc.core.errors import Errors
from zk.errors import (
    StoreError,
    StoreUnavailable,
    ZnodeExists,
    ZnodeMissing,
    translate,
    zk_call,
)


@pytest.mark.parametrize("kazoo_error", [ConnectionLoss, SessionExpiredError,
                                         OperationTimeoutError, KazooTimeoutError])
def test_an_unreachable_zookeeper_is_store_unavailable_and_retriable(kazoo_error) -> None:
    error = translate("read /x", kazoo_error())
    assert type(error) is StoreUnavailable
    assert error.error is Errors.REQUEST_TIMED_OUT and error.error.retriable
    assert error.message == f"read /x: ZooKeeper unavailable ({kazoo_error.__name__})"


@pytest.mark.parametrize(("kazoo_error", "store_error"), [(NoNodeError, ZnodeMissing),
                                                          (NodeExistsError, ZnodeExists)])
def test_a_missing_or_existing_znode_has_its_own_store_error(kazoo_error, store_error) -> None:
    error = translate("create /x", kazoo_error())
    assert type(error) is store_error
    assert error.error is Errors.UNKNOWN_SERVER_ERROR
    assert error.message == f"create /x: ZooKeeper error {kazoo_error.__name__}"


def test_any_other_kazoo_failure_is_a_plain_store_error() -> None:
    error = translate("update /x", BadVersionError())
    assert type(error) is StoreError
    assert error.error is Errors.UNKNOWN_SERVER_ERROR
    assert error.message == "update /x: ZooKeeper error BadVersionError"


def test_zk_call_raises_the_store_error_with_the_kazoo_exception_as_cause() -> None:
    def fails() -> None:
        raise NoNodeError()

    with pytest.raises(ZnodeMissing) as caught:
        zk_call("read /gone", fails)
    assert isinstance(caught.value.__cause__, NoNodeError)
    assert zk_call("read /here", lambda: 7) == 7
