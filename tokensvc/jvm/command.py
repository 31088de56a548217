"""The command line of a JVM service or tool, built in one place, as Kafka's
``bin/kafka-run-class.sh`` builds it for every Kafka script: the launcher, the heap, the
service's own flags and system properties, the flags an environment variable adds, the
classpath, the main class and its arguments.

The environment's flags come after the service's own, so they can add to them or
override them (a later ``-Xmx`` or ``-XX:`` flag wins), as ZooKeeper's ``zkServer.sh``
takes ``JVMFLAGS`` and Kafka's scripts ``KAFKA_OPTS``. The test suite uses that to start
its short-lived JVMs with a class-data archive and the client compiler only
(tests/support/jvm_start.py); long-lived servers never get such flags by default.

Pure: it builds the command and runs nothing.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

# Flags for JVMs that live seconds or a minute (the test suite's, the quick benchmark
# run's), never a default: the client compiler only (C2's compile time never pays back),
# and for a Kafka broker or tool the serial collector too (G1's threads cost more than
# they save on two cores).
FAST_COMPILE = "-XX:TieredStopAtLevel=1"
SHORT_LIVED_KAFKA = f"{FAST_COMPILE} -XX:+UseSerialGC"


def env_flags(variable: str, environ: Mapping[str, str] = os.environ) -> list[str]:
    """The JVM flags of environment variable ``variable``, split as a shell would (an
    unbalanced quote is a ValueError); none when it is unset or blank."""
    return shlex.split(environ.get(variable, ""))


def classpath(entries: Sequence[str | os.PathLike]) -> str:
    """Jars and class directories joined as ``-cp`` takes them."""
    return os.pathsep.join(str(entry) for entry in entries)


@dataclass(frozen=True)
class JavaCommand:
    """How to run one main class. ``flags`` are the service's own JVM flags (after the
    heap); ``system_properties`` become ``-Dkey=value`` after them; ``flags_env`` names
    the environment variable whose flags come last, before ``-cp``; ``prefix`` runs the
    whole command through another (``ip netns exec NAME``)."""

    java: str
    main: str
    classpath: Sequence[str | os.PathLike]
    args: Sequence[str] = ()
    heap_mb: int | None = None
    flags: Sequence[str] = ()
    system_properties: Mapping[str, str | Path] = field(default_factory=dict)
    flags_env: str | None = None
    prefix: Sequence[str] = ()

    def argv(self, environ: Mapping[str, str] = os.environ) -> list[str]:
        """The command, with the flags ``environ`` gives through :attr:`flags_env`."""
        heap = [f"-Xmx{self.heap_mb}m"] if self.heap_mb is not None else []
        props = [f"-D{key}={value}" for key, value in self.system_properties.items()]
        extra = env_flags(self.flags_env, environ) if self.flags_env else []
        return [
            *self.prefix,
            self.java,
            *heap,
            *self.flags,
            *props,
            *extra,
            "-cp",
            classpath(self.classpath),
            self.main,
            *self.args,
        ]
