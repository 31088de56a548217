"""The SparkSession of the audit jobs: ``audit report``, ``audit ingest`` and ``audit watch``.

This module owns how a job gets its session (:func:`create_session`: the active one, else a
new one on spark-submit's master or ``local[*]``) and the settings a local session starts
with. It must not be imported by the broker: pyspark is loaded here.
"""

from __future__ import annotations

import os
import sys

from pyspark.sql import SparkSession

# A deeper thread stack for the driver: the streaming thread of `audit watch` once
# overflowed the default (a regular expression over a long plan description).
DRIVER_JAVA_OPTIONS = "-Xss16m"


def create_session(master: str | None = None, app_name: str = "tokensvc-audit-report"
                   ) -> SparkSession:
    """A SparkSession for an audit job: the active one if there is one (tests, notebooks),
    else a new one. Without ``master``: spark-submit's, else local[*]."""
    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    builder = SparkSession.builder.appName(app_name)
    if master is None and "PYSPARK_GATEWAY_PORT" not in os.environ:
        master = "local[*]"
    if master is not None:
        builder = builder.master(master)
        if master.startswith("local"):
            builder = (builder.config("spark.sql.shuffle.partitions", "8")
                       .config("spark.driver.memory", "2g")
                       .config("spark.driver.extraJavaOptions", DRIVER_JAVA_OPTIONS))
    # Python workers (watch's pandas state function) run this interpreter, so they
    # find the same packages as the driver (pyspark reads the variable at start).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = (builder.config("spark.sql.session.timeZone", "UTC")
               .config("spark.ui.showConsoleProgress", "false"))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark
