"""One network namespace per process, joined by veth pairs to a bridge: the partition
harness of ``./dev chaos --net`` (``faults.chaos_net``).

Owns two things:

- :class:`NetPlan`, pure: the names and addresses of a run's hosts and the ``ip``
  commands that build, cut, heal and remove them. It does no I/O, so every command is
  unit-tested as text.
- :class:`Network`, the shell: runs those commands as root, remembers what it created,
  and removes all of it in reverse order on :meth:`Network.close` (also after a failure
  half-way through :meth:`Network.up`).

The layout, for hosts ``zk1 zk2 zk3 b1 b2 b3`` and prefix ``ts``:

- a bridge ``ts-br`` in the root namespace with the first address of the range, so
  clients in the root namespace reach every host;
- per host a namespace ``ts-<host>`` holding ``eth0`` (its address) and ``lo``; the
  veth's other end, ``ts-<host>``, is a port of the bridge;
- addresses from :data:`DEFAULT_SUBNET`, a /24 that :meth:`Network.up` refuses to use
  when the machine already routes any part of it.

Faults, both reversible:

- **cut** ``a`` from ``b``: a blackhole route to the other's address in each of the two
  namespaces, so neither can send to the other; both keep every other link. A process
  sending on an established connection sees its packets vanish (TCP retransmits until
  its own timeout); a new connection fails at once (EINVAL from the route).
- **link down** of a host: its bridge port goes down, so it is cut from every host and
  from the clients (the flapping-link fault).

Must not: touch any interface, route or namespace it did not create, or need anything
but ``ip`` (iproute2) and root. Without root it fails with one line (:class:`NetError`).
"""

from __future__ import annotations

import ipaddress
import os
import shutil
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Self

DEFAULT_SUBNET = "10.213.7.0/24"
DEFAULT_PREFIX = "ts"
IP_TIMEOUT_S = 10.0


class NetError(RuntimeError):
    """The harness cannot build or change its network; the message says why, in one line."""


@dataclass(frozen=True)
class NetPlan:
    """Names, addresses and ``ip`` commands of one run (pure)."""

    hosts: tuple[str, ...]
    subnet: str = DEFAULT_SUBNET
    prefix: str = DEFAULT_PREFIX

    def __post_init__(self) -> None:
        network = ipaddress.ip_network(self.subnet)
        if len(self.hosts) + 2 > network.num_addresses - 2:
            raise NetError(f"{self.subnet} has too few addresses for {len(self.hosts)} hosts")
        if len(set(self.hosts)) != len(self.hosts):
            raise NetError("host names must be unique")
        for host in self.hosts:
            if not host.isalnum() or len(self.namespace(host)) > 15:
                raise NetError(f"host name {host!r}: letters and digits, and "
                               f"{self.prefix}-{host} at most 15 characters")

    @property
    def network(self) -> ipaddress.IPv4Network:
        return ipaddress.ip_network(self.subnet)

    @property
    def bridge(self) -> str:
        return f"{self.prefix}-br"

    @property
    def gateway(self) -> str:
        """The bridge's address: where the root namespace's clients come from."""
        return str(self.network.network_address + 1)

    def namespace(self, host: str) -> str:
        return f"{self.prefix}-{host}"

    def port(self, host: str) -> str:
        """The veth end in the root namespace (a port of the bridge)."""
        return f"{self.prefix}-{host}"

    def address(self, host: str) -> str:
        return str(self.network.network_address + 2 + self.hosts.index(host))

    def exec_prefix(self, host: str) -> list[str]:
        """The command prefix that runs a process on ``host``."""
        return ["ip", "netns", "exec", self.namespace(host)]

    # -- commands (each a list of argv; run in order) -------------------------------------

    def bridge_up(self) -> list[list[str]]:
        length = self.network.prefixlen
        return [
            ["ip", "link", "add", self.bridge, "type", "bridge"],
            ["ip", "addr", "add", f"{self.gateway}/{length}", "dev", self.bridge],
            ["ip", "link", "set", self.bridge, "up"],
        ]

    def host_up(self, host: str) -> list[list[str]]:
        ns, port, length = self.namespace(host), self.port(host), self.network.prefixlen
        inside = ["ip", "-n", ns]
        return [
            ["ip", "netns", "add", ns],
            ["ip", "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", ns],
            ["ip", "link", "set", port, "master", self.bridge],
            ["ip", "link", "set", port, "up"],
            [*inside, "addr", "add", f"{self.address(host)}/{length}", "dev", "eth0"],
            [*inside, "link", "set", "eth0", "up"],
            [*inside, "link", "set", "lo", "up"],
        ]

    def bridge_down(self) -> list[str]:
        return ["ip", "link", "del", self.bridge]

    def host_down(self, host: str) -> list[list[str]]:
        # Deleting the namespace deletes eth0, and with it the veth's root end.
        return [["ip", "link", "del", self.port(host)], ["ip", "netns", "del", self.namespace(host)]]

    def _blackhole(self, verb: str, a: str, b: str) -> list[list[str]]:
        return [["ip", "-n", self.namespace(a), "route", verb, "blackhole", f"{self.address(b)}/32"],
                ["ip", "-n", self.namespace(b), "route", verb, "blackhole", f"{self.address(a)}/32"]]

    def cut(self, a: str, b: str) -> list[list[str]]:
        return self._blackhole("add", a, b)

    def heal(self, a: str, b: str) -> list[list[str]]:
        return self._blackhole("del", a, b)

    def link(self, host: str, up: bool) -> list[str]:
        return ["ip", "link", "set", self.port(host), "up" if up else "down"]


def overlaps(subnet: str, routes: Iterable[str]) -> list[str]:
    """The destinations of ``routes`` (``ip -4 route`` lines) that overlap ``subnet``."""
    mine = ipaddress.ip_network(subnet)
    found = []
    for line in routes:
        dest = line.split()[0] if line.strip() else ""
        if dest in ("", "default"):
            continue
        try:
            if ipaddress.ip_network(dest, strict=False).overlaps(mine):
                found.append(dest)
        except ValueError:
            continue
    return found


def free_subnet(routes: Iterable[str], first: str = DEFAULT_SUBNET, tries: int = 64) -> str:
    """The first /24 from ``first`` upwards (10.213.7.0/24, 10.213.8.0/24, ...) that no
    route of ``routes`` overlaps: a bridge left by a killed run on the same kernel, or
    another run beside this one, keeps its subnet and this run takes the next (pure)."""
    lines = list(routes)
    base = ipaddress.ip_network(first)
    for step in range(tries):
        candidate = ipaddress.ip_network((int(base.network_address) + step * base.num_addresses,
                                          base.prefixlen))
        if not overlaps(str(candidate), lines):
            return str(candidate)
    raise NetError(f"no free subnet among {tries} from {first}: pass one with --subnet")


def routes() -> list[str]:
    """This machine's ``ip -4 route`` lines."""
    return _run(["ip", "-4", "route"]).splitlines()


@dataclass
class Network:
    """The harness's namespaces and links; remove everything with :meth:`close`."""

    plan: NetPlan
    cuts: set[frozenset[str]] = field(default_factory=set)
    down: set[str] = field(default_factory=set)
    _undo: list[list[list[str]]] = field(default_factory=list)

    @staticmethod
    def require_root() -> None:
        if shutil.which("ip") is None:
            raise NetError("the partition harness needs iproute2's `ip` command")
        if os.geteuid() != 0:
            raise NetError("the partition harness needs root (network namespaces and veth "
                           "pairs): run it as root")

    def up(self) -> Network:
        """Build the bridge and every host; on any failure remove what was built."""
        self.require_root()
        clash = overlaps(self.plan.subnet, routes())
        if clash:
            raise NetError(f"{self.plan.subnet} overlaps routes on this machine "
                           f"({', '.join(clash)}): pick another subnet")
        stale = [name for name in _run(["ip", "netns", "list"]).split()
                 if name.startswith(f"{self.plan.prefix}-")]
        if stale or _exists(self.plan.bridge):
            raise NetError(f"namespaces or a bridge named {self.plan.prefix}-* already exist "
                           "(another run, or one that was killed): remove them with "
                           "`python -m faults.netns --clean`")
        try:
            self._step(self.plan.bridge_up(), [self.plan.bridge_down()])
            for host in self.plan.hosts:
                self._step(self.plan.host_up(host), self.plan.host_down(host))
        except BaseException:
            self.close()
            raise
        return self

    def _step(self, commands: list[list[str]], undo: list[list[str]]) -> None:
        # The undo is registered first: a half-built step is removed too.
        self._undo.append(undo)
        for command in commands:
            _run(command)

    def cut(self, a: str, b: str) -> None:
        pair = frozenset((a, b))
        if pair not in self.cuts:
            for command in self.plan.cut(a, b):
                _run(command)
            self.cuts.add(pair)

    def heal(self, a: str, b: str) -> None:
        pair = frozenset((a, b))
        if pair in self.cuts:
            for command in self.plan.heal(a, b):
                _run(command, check=False)
            self.cuts.discard(pair)

    def cut_between(self, side: Sequence[str], other: Sequence[str]) -> None:
        for a in side:
            for b in other:
                self.cut(a, b)

    def heal_all(self) -> None:
        for pair in list(self.cuts):
            self.heal(*sorted(pair))
        for host in list(self.down):
            self.set_link(host, up=True)

    def set_link(self, host: str, *, up: bool) -> None:
        _run(self.plan.link(host, up))
        if up:
            self.down.discard(host)
        else:
            self.down.add(host)

    def close(self) -> None:
        """Remove every namespace and link this network created (idempotent)."""
        while self._undo:
            for command in self._undo.pop():
                _run(command, check=False)
        self.cuts.clear()
        self.down.clear()

    def __enter__(self) -> Self:
        return self.up()

    def __exit__(self, *exc: object) -> None:
        self.close()


def _exists(link: str) -> bool:
    return subprocess.run(["ip", "link", "show", link], capture_output=True,
                          timeout=IP_TIMEOUT_S, check=False).returncode == 0


def _run(command: list[str], *, check: bool = True) -> str:
    done = subprocess.run(command, capture_output=True, text=True, timeout=IP_TIMEOUT_S,
                          check=False)
    if check and done.returncode != 0:
        raise NetError(f"`{' '.join(command)}` failed: {done.stderr.strip() or done.returncode}")
    return done.stdout


def clean(prefix: str = DEFAULT_PREFIX) -> list[str]:
    """Remove namespaces and links named ``<prefix>-*`` left by a killed run; return them."""
    Network.require_root()
    removed = []
    for name in _run(["ip", "netns", "list"]).split():
        if name.startswith(f"{prefix}-"):
            _run(["ip", "netns", "del", name], check=False)
            removed.append(name)
    for line in _run(["ip", "-o", "link", "show"]).splitlines():
        parts = line.split(":")
        if len(parts) > 1:
            name = parts[1].strip().split("@")[0]
            if name.startswith(f"{prefix}-"):
                _run(["ip", "link", "del", name], check=False)
                removed.append(name)
    return removed


if __name__ == "__main__":
    import argparse
    import sys

    parser = argparse.ArgumentParser(prog="python -m faults.netns",
                                     description="the partition harness's network")
    parser.add_argument("--clean", action="store_true",
                        help=f"remove {DEFAULT_PREFIX}-* namespaces and links left by a killed run")
    args = parser.parse_args()
    if not args.clean:
        parser.error("nothing to do: pass --clean")
    try:
        print("\n".join(clean()) or "nothing to remove")
    except NetError as exc:
        print(f"netns: {exc}", file=sys.stderr)
        sys.exit(1)
