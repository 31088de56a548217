"""Audit lines as Spark sees them: the event schema and the verdict on each line.

This module owns :data:`EVENT_SCHEMA` (every field of every event type of
schema 1, as Spark types), the fields the reports read, and the one
classification of a line: ``ok`` or the reason it is malformed
(:data:`MALFORMED_REASONS`). The batch report and the lake ingest (Spark's JSON
source, :func:`json_reader_options`) and the live watch (text lines parsed with
``from_json``, :func:`parse_text`) all classify through :func:`status_column`, so
a line is judged the same way everywhere.

Fields that are not in the schema (added by a newer broker) are ignored, never
an error. It builds DataFrame expressions only: no I/O, no UDFs.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from tokensvc.audit.events import EVENT_TYPES, SCHEMA_VERSION

MALFORMED_REASONS = ("not_json", "wrong_types", "unknown_schema", "unknown_type",
                     "missing_fields")
CORRUPT = "_corrupt_record"

_S, _L, _I, _B = T.StringType(), T.LongType(), T.IntegerType(), T.BooleanType()
# Every field of every event type (schema 1), as Spark reads it. A value of the
# wrong JSON type lands the raw line in _corrupt_record.
EVENT_FIELDS = T.StructType([
    T.StructField(name, kind) for name, kind in (
        ("schema", _I), ("ts", _L), ("broker_id", _I), ("event_id", _S), ("type", _S),
        ("outcome", _S), ("mechanism", _S), ("kind", _S), ("username", _S), ("token_id", _S),
        ("principal", _S), ("client_host", _S), ("client_port", _I), ("listener", _S),
        ("reason", _S), ("implicit", _B), ("action", _S), ("error_code", _I), ("error", _S),
        ("requester", _S), ("token_authenticated", _B), ("owner", _S),
        ("renewers", T.ArrayType(_S)), ("expiry_ms", _L), ("max_ms", _L), ("count", _L),
        ("forwarded", _B), ("api", _S), ("client_id", _S), ("controller_id", _I),
        ("attempts", _I), ("latency_ms", T.DoubleType()), ("resource_type", _S),
        ("resource_name", _S), ("pattern_type", _S), ("acl_principal", _S), ("host", _S),
        ("operation", _S), ("permission", _S), ("user", _S), ("iterations", _I),
        ("dropped", _L), ("dropped_total", _L),
        # A token's labels and a selector are JSON objects in the line; kept as their JSON
        # text (Spark reads an object into a string field as its text), parsed where a
        # report needs them: a map column would forbid the de-duplication's distinct().
        ("labels", _S), ("selector", _S),
    )
])
EVENT_SCHEMA = T.StructType([*EVENT_FIELDS.fields, T.StructField(CORRUPT, _S)])
# What the reports read; the rest is only type-checked (fewer columns to shuffle).
REPORT_FIELDS = (
    "ts", "broker_id", "event_id", "type", "outcome", "kind", "username", "token_id",
    "principal", "client_host", "reason", "action", "requester", "token_authenticated",
    "owner", "dropped", "client_id", "labels",
)
_PARSE_OPTIONS = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT}
# Reasons given to lines that parse as JSON: Spark's JSON source keeps no text for
# them (its _corrupt_record is set only when parsing fails).
PARSED_BAD_REASONS = ("unknown_schema", "unknown_type", "missing_fields")


def json_reader_options() -> dict[str, str]:
    """Options of Spark's JSON source (with :data:`EVENT_SCHEMA`) that judge a line as
    :func:`parse_text` does."""
    return dict(_PARSE_OPTIONS)


def status_column() -> Column:
    """``ok`` or the malformed reason of a row of :data:`EVENT_SCHEMA`.

    Only lines that failed to parse are parsed again, to tell garbage
    (``not_json``) from a field of the wrong type (``wrong_types``).
    """
    raw_text = F.col(CORRUPT)
    is_object = F.from_json(raw_text, T.MapType(_S, _S)).isNotNull()
    return (
        F.when(raw_text.isNotNull() & ~is_object, "not_json")
        .when(raw_text.isNotNull(), "wrong_types")
        .when(F.col("schema").isNull() | (F.col("schema") != SCHEMA_VERSION), "unknown_schema")
        .when(~F.col("type").isin(*sorted(EVENT_TYPES)), "unknown_type")
        .when(F.col("ts").isNull() | F.col("broker_id").isNull()
              | F.col("event_id").isNull(), "missing_fields")
        .otherwise("ok")
    )


def classify(raw: DataFrame, fields: tuple[str, ...] = REPORT_FIELDS) -> DataFrame:
    """Column ``status`` then ``fields`` of rows read with :data:`EVENT_SCHEMA`."""
    return raw.select(status_column().alias("status"), *fields)


def parse_text(lines: DataFrame, value: str = "value") -> DataFrame:
    """Rows of :data:`EVENT_SCHEMA`, then ``line`` (the text) and the other columns of
    ``lines``, from a column of text lines; blank lines are dropped, as Spark's JSON
    source does."""
    text = F.col(value)
    others = [c for c in lines.columns if c != value]
    parsed = lines.filter(F.trim(text) != "").select(
        F.from_json(text, EVENT_SCHEMA, _PARSE_OPTIONS).alias("e"), text.alias("line"), *others)
    return parsed.select("e.*", "line", *others)
