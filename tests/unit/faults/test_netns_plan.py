"""The partition harness's network plan (faults.netns.NetPlan): names, addresses and the
exact ``ip`` commands, as text; no namespace is made here."""

from __future__ import annotations

import pytest

from faults.netns import NetError, NetPlan, free_subnet, overlaps

PLAN = NetPlan(("zk1", "b1"), subnet="10.9.8.0/24", prefix="ts")


def test_each_host_has_a_namespace_a_bridge_port_and_an_address_of_the_range() -> None:
    assert PLAN.bridge == "ts-br"
    assert PLAN.gateway == "10.9.8.1"
    assert [PLAN.address(h) for h in PLAN.hosts] == ["10.9.8.2", "10.9.8.3"]
    assert PLAN.namespace("b1") == "ts-b1" and PLAN.port("b1") == "ts-b1"
    assert PLAN.exec_prefix("zk1") == ["ip", "netns", "exec", "ts-zk1"]


def test_building_a_host_makes_its_namespace_veth_and_address() -> None:
    assert PLAN.bridge_up() == [
        ["ip", "link", "add", "ts-br", "type", "bridge"],
        ["ip", "addr", "add", "10.9.8.1/24", "dev", "ts-br"],
        ["ip", "link", "set", "ts-br", "up"],
    ]
    assert PLAN.host_up("b1") == [
        ["ip", "netns", "add", "ts-b1"],
        ["ip", "link", "add", "ts-b1", "type", "veth", "peer", "name", "eth0", "netns", "ts-b1"],
        ["ip", "link", "set", "ts-b1", "master", "ts-br"],
        ["ip", "link", "set", "ts-b1", "up"],
        ["ip", "-n", "ts-b1", "addr", "add", "10.9.8.3/24", "dev", "eth0"],
        ["ip", "-n", "ts-b1", "link", "set", "eth0", "up"],
        ["ip", "-n", "ts-b1", "link", "set", "lo", "up"],
    ]
    assert PLAN.host_down("b1") == [["ip", "link", "del", "ts-b1"], ["ip", "netns", "del", "ts-b1"]]


def test_a_cut_is_a_blackhole_route_on_both_sides_and_a_heal_removes_both() -> None:
    assert PLAN.cut("b1", "zk1") == [
        ["ip", "-n", "ts-b1", "route", "add", "blackhole", "10.9.8.2/32"],
        ["ip", "-n", "ts-zk1", "route", "add", "blackhole", "10.9.8.3/32"],
    ]
    assert PLAN.heal("b1", "zk1") == [
        ["ip", "-n", "ts-b1", "route", "del", "blackhole", "10.9.8.2/32"],
        ["ip", "-n", "ts-zk1", "route", "del", "blackhole", "10.9.8.3/32"],
    ]
    assert PLAN.link("b1", False) == ["ip", "link", "set", "ts-b1", "down"]


@pytest.mark.parametrize("hosts, message", [
    (("a", "a"), "unique"),
    (("b-1",), "letters and digits"),
    (("averyveryverylonghost",), "15 characters"),
])
def test_bad_host_names_are_refused(hosts, message) -> None:
    with pytest.raises(NetError, match=message):
        NetPlan(hosts)


def test_a_range_too_small_for_the_hosts_is_refused() -> None:
    with pytest.raises(NetError, match="too few addresses"):
        NetPlan(("a", "b", "c"), subnet="10.0.0.0/30")


def test_routes_overlapping_the_range_are_found() -> None:
    routes = ["default via 192.0.2.1 dev eth0", "10.9.0.0/16 dev x proto kernel",
              "192.0.2.0/24 dev eth0", ""]
    assert overlaps("10.9.8.0/24", routes) == ["10.9.0.0/16"]
    assert overlaps("10.10.0.0/24", routes) == []


def test_a_free_subnet_skips_every_routed_one() -> None:
    routes = ["default via 192.0.2.1 dev eth0",
              "10.213.7.0/24 dev ts-br proto kernel scope link src 10.213.7.1",
              "10.213.8.128/25 dev other proto kernel scope link"]
    assert free_subnet(routes) == "10.213.9.0/24"
    assert free_subnet(["default via 192.0.2.1 dev eth0"]) == "10.213.7.0/24"


def test_no_free_subnet_is_a_one_line_error() -> None:
    with pytest.raises(NetError, match="no free subnet"):
        free_subnet(["10.0.0.0/8 dev big"], first="10.213.7.0/24", tries=3)
