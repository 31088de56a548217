"""One SparkSession for the whole test run (per pytest-xdist worker).

Test modules that need Spark define a session-scoped ``spark`` fixture returning
:func:`shared_spark`; every such fixture of a process gets the same session, started once
(local[2], no UI, modest memory) and stopped at exit.

Test inputs are tiny (thousands of events), so the session is set for many small
queries rather than for large ones: one shuffle partition, no adaptive re-planning, and
no code generation at all (whole-stage or per expression: ``factoryMode`` NO_CODEGEN
runs Spark's interpreted expressions, which give the same results), and no recording of
each column function's Python call site (PySpark's DataFrame debugging: error messages
name the Spark operation without the Python line that built it). Compiling each of
the report's plans with Janino cost more than running them: one ingest and four reports
of 2,500 events took 102 CPU s with code generation per expression and 4 shuffle
partitions, 55 CPU s with these settings. The product's sessions
(:mod:`tokensvc.audit.session`) keep Spark's defaults. The Spark jobs the tests run as
processes of their own (``audit ingest`` killed mid-batch, the agent's Spark job) get the
same settings (but their master and partitions) from a ``spark-defaults.conf`` that
:func:`spark_conf_dir` writes and ``tests/conftest.py`` names in ``SPARK_CONF_DIR``; the
benchmark suite's quick run (``tests/integration/bench``) runs without it, so the
report's code generation runs in the suite too.
"""

from __future__ import annotations

import atexit
import functools
import os
import shutil
import sys
import tempfile
from pathlib import Path

from pyspark.sql import SparkSession

from tokensvc.audit.session import DRIVER_JAVA_OPTIONS

# Spark SQL settings for test-sized inputs (see the module docstring).
SMALL_INPUT_CONF = {
    "spark.sql.adaptive.enabled": "false",
    "spark.sql.codegen.wholeStage": "false",
    "spark.sql.codegen.factoryMode": "NO_CODEGEN",
    # PySpark's DataFrame debugging records every column function's Python call site in
    # the JVM (five gateway calls and a walk of the Python stack per call, some 700
    # calls per report) for error messages: a report's Python CPU 2.4-2.9 -> 1.6-2.2 s.
    "spark.python.sql.dataFrameDebugging.enabled": "false",
}
SPARK_CONF_DIR_ENV = "SPARK_CONF_DIR"


def spark_conf_dir() -> str:
    """A directory holding a ``spark-defaults.conf`` of :data:`SMALL_INPUT_CONF`, for
    ``SPARK_CONF_DIR`` (spark-submit reads it; a job's own settings win over it)."""
    directory = Path(tempfile.mkdtemp(prefix="tokensvc-spark-conf-"))
    # Removed when the process that made it (the run's first) exits, after its workers.
    atexit.register(shutil.rmtree, directory, True)
    (directory / "spark-defaults.conf").write_text(
        "".join(f"{key} {value}\n" for key, value in SMALL_INPUT_CONF.items()),
        encoding="ascii")
    return str(directory)


@functools.cache
def shared_spark() -> SparkSession:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # workers see the venv
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("tokensvc-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "1")
        .config("spark.default.parallelism", "1")
        .config("spark.driver.memory", "1g")
        .config("spark.driver.extraJavaOptions", DRIVER_JAVA_OPTIONS)
        .config("spark.sql.session.timeZone", "UTC")
        .config(map=SMALL_INPUT_CONF)
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    atexit.register(spark.stop)
    return spark
