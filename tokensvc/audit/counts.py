"""Row counts of several DataFrames in one Spark job.

Owns :func:`count_each`. Counting N DataFrames one ``count()`` at a time is N Spark jobs,
each planned, scheduled and answered on its own; on the small inputs a report often has
(the report's eight frames, the lake's partial tables) a count job took 70-120 ms, most
of it that fixed cost. One job over the union of a literal column per DataFrame counts them all: no
column is read (a Parquet scan answers from its footers, a cached frame from memory).

It must not persist, write or change a DataFrame.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

_NAME = "counted"


def count_each(frames: Mapping[str, DataFrame]) -> dict[str, int]:
    """``{name: rows}`` for every DataFrame of ``frames`` (0 for an empty one), in one job."""
    if not frames:
        return {}
    tagged = [df.select(F.lit(name).alias(_NAME)) for name, df in frames.items()]
    union = functools.reduce(DataFrame.unionAll, tagged)
    rows = dict.fromkeys(frames, 0)
    for row in union.groupBy(_NAME).count().collect():
        rows[row[_NAME]] = row["count"]
    return rows
