"""The token audit report job in its parts (the entry point is :mod:`tokensvc.audit.report`).

* :mod:`.options`: what a run is asked to do, checked before a session exists;
* :mod:`.inputs`: the audit lines (files or the lake) and the token snapshot, read;
* :mod:`.frames`: the report DataFrames, pure transformations;
* :mod:`.job`: :func:`~.job.run_report`, the steps of a run in order;
* :mod:`.output`: Parquet, CSV, ``summary.json``, ``report.html`` and the text summary.

The arrows point one way: ``job`` uses the other four, ``output`` uses ``frames``, and
``inputs`` and ``frames`` use ``options``. Nothing here may be imported by the broker:
every module but ``options`` loads pyspark.
"""
