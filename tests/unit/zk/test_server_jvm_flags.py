"""The extra JVM flags of the ZooKeeper servers this code starts
(``TOKENSVC_ZOOKEEPER_JVMFLAGS``, as ``zkServer.sh`` takes ``JVMFLAGS``): split as a shell
would, and placed after the node's own flags and before its main class, so they can add
to or override them. Pure: the command is built, not run."""

from __future__ import annotations

from pathlib import Path

import pytest

from zk.server import JVMFLAGS_ENV, ZooKeeperNode, extra_jvm_flags


def test_unset_or_blank_gives_no_flags() -> None:
    assert extra_jvm_flags({}) == []
    assert extra_jvm_flags({JVMFLAGS_ENV: "  "}) == []


def test_flags_are_split_as_a_shell_would() -> None:
    environ = {JVMFLAGS_ENV: "-XX:TieredStopAtLevel=1 '-XX:SharedArchiveFile=/a b/zk.jsa'"}
    assert extra_jvm_flags(environ) == ["-XX:TieredStopAtLevel=1",
                                        "-XX:SharedArchiveFile=/a b/zk.jsa"]


def test_an_unbalanced_quote_is_an_error() -> None:
    with pytest.raises(ValueError):
        extra_jvm_flags({JVMFLAGS_ENV: "-Dx='open"})


def test_the_flags_come_after_the_nodes_own_and_before_the_main_class(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(JVMFLAGS_ENV, "-Xmx64m -XX:TieredStopAtLevel=1")
    node = ZooKeeperNode(data_dir=tmp_path, client_port=1)
    command = node.command()
    main = command.index("org.apache.zookeeper.server.quorum.QuorumPeerMain")
    own = next(i for i, arg in enumerate(command) if arg.startswith("-Xmx") and arg != "-Xmx64m")
    assert own < command.index("-Xmx64m") < command.index("-XX:TieredStopAtLevel=1") < main
    monkeypatch.delenv(JVMFLAGS_ENV)
    assert "-XX:TieredStopAtLevel=1" not in node.command()
