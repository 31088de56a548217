"""Cheaper starts for the suite's ZooKeeper servers: a class-data archive and the client
compiler only; and no fsync of their transaction logs.

The suite starts a few hundred ZooKeeper JVMs (the session server of each worker, every
ensemble, every secured server, every cluster a test brings up), most of them for
seconds. Each start loads, verifies and compiles the same classes again: about 1.7 s of
CPU before the server answers, on two cores that the brokers, Spark and the tests also
need. Two standard HotSpot flags cut that:

* ``-XX:SharedArchiveFile`` maps the classes of an earlier run from a class-data archive
  (JDK 13+: a dynamic archive, written by ``-XX:ArchiveClassesAtExit`` when a JVM exits)
  instead of loading and verifying them from the jars;
* ``-XX:TieredStopAtLevel=1`` compiles hot code with C1 only: for a server that lives
  seconds and serves a test, C2's compile time is never paid back.

And one ZooKeeper setting, ``-Dzookeeper.forceSync=no``: a server writes its transaction
log without waiting for the disk after each write. Tests kill processes (ZooKeeper
servers included, with SIGKILL), never the machine, and a killed process's writes are
in the page cache and read back by its next start; only a power loss would need the
fsync. The security migration module alone, one run each: ZooKeeper 27.7 -> 24.4 CPU s,
61 -> 53 s wall.

Measured on this project's 2-core machine (one standalone server: start until it
serves, then 500 creates and 500 reads over kazoo): start 1.73 -> 0.75 CPU s, 1.2 ->
0.7 s wall; start and load 3.2 -> 1.7 CPU s.

:func:`zookeeper_flags` builds the archive once per Java and ZooKeeper classpath (a
secured server, started and stopped: its TLS, SASL and Netty classes are in it too;
about 3 s), keeps it next to the virtualenv, and returns the flags to set in
:data:`zk.server.JVMFLAGS_ENV` for every process of the run. A JVM that cannot use an
archive (another JDK, a changed classpath) ignores it with a warning in its log and starts
as before; the key of the archive's name changes with both, so that is rare. Production
servers (``./dev run``, ``tokensvc cluster up``) never get these flags: a long-lived server
wants C2.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tokensvc import devcerts
from tokensvc.cluster import LocalCluster
from tokensvc.jvm import FAST_COMPILE, SHORT_LIVED_KAFKA, find_java
from tokensvc.kafka import broker as kafka_broker
from tokensvc.kafka import kafka_jars, run_tool
from tokensvc.kafka import tools as kafka_tools
from zk.server import (
    JVMFLAGS_ENV,
    ManagedZooKeeper,
    ZkServerSecurity,
    zookeeper_classpath,
)

NO_FSYNC = "-Dzookeeper.forceSync=no"


def _archive_path(cache: Path) -> Path:
    java = find_java()
    version = subprocess.run([java, "-version"], capture_output=True, text=True,
                             timeout=60, check=True).stderr
    key = hashlib.sha256(f"{java}\n{version}\n{zookeeper_classpath()}".encode()).hexdigest()
    return cache / f"zookeeper-{key[:16]}.jsa"


def _dump_archive(target: Path) -> None:
    """Start and stop a secured server with ``-XX:ArchiveClassesAtExit``; the JVM writes
    the archive as it exits. Written under a name of its own, then renamed: two runs that
    build it at once never read a half-written one."""
    partial = target.with_name(f".{target.name}.{os.getpid()}")
    with tempfile.TemporaryDirectory(prefix="tokensvc-jsa-") as work:
        certs = devcerts.generate_zookeeper(Path(work) / "tls")
        security = ZkServerSecurity(key_store=certs.server, trust_store=certs.ca,
                                    sasl_users={"archive": "archive"}, quorum_tls=True,
                                    probe_key_store=certs.client)
        server = ManagedZooKeeper(Path(work) / "zookeeper", security=security)
        before = os.environ.get(JVMFLAGS_ENV)
        os.environ[JVMFLAGS_ENV] = f"-XX:ArchiveClassesAtExit={partial} {FAST_COMPILE}"
        try:
            server.start()
            server.four_letter_word("srvr", timeout=10.0)
        finally:
            server.stop(timeout=30.0)
            if before is None:
                os.environ.pop(JVMFLAGS_ENV, None)
            else:
                os.environ[JVMFLAGS_ENV] = before
    if not partial.exists() or partial.stat().st_size == 0:
        raise RuntimeError(f"the JVM wrote no class-data archive at {partial}")
    partial.replace(target)


def zookeeper_flags(cache: Path | None = None) -> str:
    """The flags for the suite's ZooKeeper servers, building the archive when it is
    missing. When no archive can be built (the reason goes to stderr), the client
    compiler alone."""
    cache = cache or Path(sys.prefix) / "tokensvc-cache"
    try:
        cache.mkdir(parents=True, exist_ok=True)
        archive = _archive_path(cache)
        if not archive.exists():
            began = time.monotonic()
            _dump_archive(archive)
            print(f"tests: ZooKeeper class-data archive {archive.name} built in "
                  f"{time.monotonic() - began:.1f} s", file=sys.stderr)
    except (OSError, RuntimeError, subprocess.SubprocessError) as exc:  # ZooKeeperStartError too
        print(f"tests: no ZooKeeper class-data archive ({exc}); starting servers without one",
              file=sys.stderr)
        return f"{FAST_COMPILE} {NO_FSYNC}"
    return f"-XX:SharedArchiveFile={archive} {FAST_COMPILE} {NO_FSYNC}"


# -- Kafka ----------------------------------------------------------------------------
# The same idea for the tests' Kafka brokers and Kafka's tools, built when a test first
# needs Kafka (not before the run: most runs start no Kafka JVM), once per Java and Kafka
# classpath, under a lock so that the workers of a run build it once. Two archives: a
# broker's classes (dumped by a broker as it stops) and a tool's (the admin client's,
# dumped by kafka-delegation-tokens.sh). Measured on this project's 2-core machine under
# load: a broker's start 4.4 -> 2.7 CPU s, a tool run 1.5 -> 1.0 CPU s.


def _kafka_archive_paths(cache: Path) -> tuple[Path, Path]:
    java = find_java()
    version = subprocess.run([java, "-version"], capture_output=True, text=True,
                             timeout=60, check=True).stderr
    jars = "\n".join(str(j) for j in kafka_jars())
    key = hashlib.sha256(f"{java}\n{version}\n{jars}".encode()).hexdigest()[:16]
    return cache / f"kafka-broker-{key}.jsa", cache / f"kafka-tool-{key}.jsa"


def _dump_kafka_archives(broker_target: Path, tool_target: Path) -> None:
    """Start a secured ZooKeeper and one Kafka broker, run one tool, stop them, each JVM
    with ``-XX:ArchiveClassesAtExit`` (written under names of their own, then renamed)."""
    partial = {t: t.with_name(f".{t.name}.{os.getpid()}") for t in (broker_target, tool_target)}
    before = {env: os.environ.get(env) for env in (kafka_broker.JVMFLAGS_ENV,
                                                    kafka_tools.JVMFLAGS_ENV)}
    os.environ[kafka_broker.JVMFLAGS_ENV] = (
        f"{SHORT_LIVED_KAFKA} -XX:ArchiveClassesAtExit={partial[broker_target]}")
    os.environ[kafka_tools.JVMFLAGS_ENV] = (
        f"{SHORT_LIVED_KAFKA} -XX:ArchiveClassesAtExit={partial[tool_target]}")
    try:
        with tempfile.TemporaryDirectory(prefix="tokensvc-kafka-jsa-") as work:
            cluster = LocalCluster.up(Path(work), brokers=0, kafka_brokers=1,
                                      die_with_parent=True, timeout=300)
            try:
                result = run_tool("kafka-delegation-tokens.sh", [
                    "--bootstrap-server", cluster.info["kafka"]["bootstrap_servers"],
                    "--command-config", cluster.info["admin"]["properties"], "--describe"],
                    timeout=300)
                if result.returncode != 0:
                    raise RuntimeError(f"kafka-delegation-tokens.sh failed: {result.stderr[-500:]}")
            finally:
                cluster.down(grace=120)  # the archive is written as the broker exits
    finally:
        for env, value in before.items():
            if value is None:
                os.environ.pop(env, None)
            else:
                os.environ[env] = value
    for target, written in partial.items():
        if not written.exists() or written.stat().st_size == 0:
            raise RuntimeError(f"the JVM wrote no class-data archive at {written}")
        written.replace(target)


def use_kafka_archives(cache: Path | None = None) -> None:
    """Set this process's JVM flags of Kafka brokers and tools (unless the environment
    names them already): the client compiler, the serial collector and the class-data
    archives, built first when they are missing. Without archives (the reason goes to
    stderr), the flags alone."""
    wanted = [env for env in (kafka_broker.JVMFLAGS_ENV, kafka_tools.JVMFLAGS_ENV)
              if env not in os.environ]
    if not wanted:
        return
    cache = cache or Path(sys.prefix) / "tokensvc-cache"
    flags = {kafka_broker.JVMFLAGS_ENV: SHORT_LIVED_KAFKA,
             kafka_tools.JVMFLAGS_ENV: SHORT_LIVED_KAFKA}
    try:
        cache.mkdir(parents=True, exist_ok=True)
        broker_archive, tool_archive = _kafka_archive_paths(cache)
        with open(cache / "kafka-jsa.lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not (broker_archive.exists() and tool_archive.exists()):
                began = time.monotonic()
                _dump_kafka_archives(broker_archive, tool_archive)
                print(f"tests: Kafka class-data archives built in "
                      f"{time.monotonic() - began:.1f} s", file=sys.stderr)
        flags = {
            kafka_broker.JVMFLAGS_ENV:
                f"-XX:SharedArchiveFile={broker_archive} {SHORT_LIVED_KAFKA}",
            kafka_tools.JVMFLAGS_ENV:
                f"-XX:SharedArchiveFile={tool_archive} {SHORT_LIVED_KAFKA}",
        }
    except (OSError, RuntimeError, subprocess.SubprocessError) as exc:  # JvmError too
        print(f"tests: no Kafka class-data archives ({exc}); starting Kafka JVMs without",
              file=sys.stderr)
    for env in wanted:
        os.environ[env] = flags[env]
