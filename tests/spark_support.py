"""One SparkSession for the whole test run (per pytest-xdist worker).

Test modules that need Spark define a session-scoped ``spark`` fixture returning
:func:`shared_spark`; every such fixture of a process gets the same session, started once
(local[2], no UI, 4 shuffle partitions, modest memory) and stopped at exit.
Whole-stage code generation is off: test inputs are tiny, and compiling each of
the report's many plans costs more than it saves (about half the run time).
"""

from __future__ import annotations

import atexit
import functools
import os
import sys

from pyspark.sql import SparkSession

from tokensvc.audit.session import DRIVER_JAVA_OPTIONS


@functools.cache
def shared_spark() -> SparkSession:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # workers see the venv
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("tokensvc-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.default.parallelism", "2")
        .config("spark.driver.memory", "1g")
        .config("spark.driver.extraJavaOptions", DRIVER_JAVA_OPTIONS)
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.codegen.wholeStage", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    atexit.register(spark.stop)
    return spark
