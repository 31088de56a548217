"""The rule that splits a machine's CPUs between the load side and the brokers when B12
runs pinned (``--pin-cores``). Pure: no process is pinned here."""

from __future__ import annotations

import pytest

from bench.pinning import split_cores


def test_two_cpus_give_one_to_each_side():
    split = split_cores({1, 0})
    assert split.load == {0} and split.brokers == {1}
    assert split.as_dict() == {"load": [0], "brokers": [1]}


def test_the_lower_half_is_the_load_side_and_no_cpu_is_on_both():
    split = split_cores([7, 2, 3, 5, 4])
    assert split.load == {2, 3}
    assert split.brokers == {4, 5, 7}
    assert not split.load & split.brokers


def test_one_cpu_is_refused_with_a_reason():
    with pytest.raises(ValueError, match="at least 2 CPUs"):
        split_cores({3})
    with pytest.raises(ValueError, match="at least 2 CPUs"):
        split_cores([])
