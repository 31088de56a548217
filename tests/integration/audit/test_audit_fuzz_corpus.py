"""The ingest's own reading of audit lines (Spark's JSON parse, tokensvc.audit.lines), which
the coverage-guided harness cannot see inside the JVM, given the audit harness's corpus
(tests/fuzz/audit/corpus/audit_lines) and the hostile lines its findings were made of:
every line gets ``ok`` or one of the malformed reasons, and nothing fails the job."""

from __future__ import annotations

import pytest
from pyspark.sql import SparkSession

from tests.fuzz.runner import corpus_dir
from tests.spark_support import shared_spark
from tokensvc.audit.lines import MALFORMED_REASONS, classify, parse_text

pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]

HOSTILE = [
    "[" * 5000 + '"labels"',
    '["labels"]',
    '"labels"',
    '{"schema": 1, "ts": Infinity, "broker_id": 1, "event_id": "e", "type": "token"}',
    '{"schema": 1, "ts": 1' + "0" * 5000 + ', "broker_id": 1, "event_id": "e", "type": "token"}',
    '{"schema": 1, "ts": 1, "broker_id": 1, "event_id": "\\ud800", "type": "token"}',
    ('{"schema": 1, "ts": 1, "broker_id": 1, "event_id": "e", "type": "token", '
     '"labels": {"job": ["not", "text"]}}'),
    "\x00\x01\x02",
    "{" * 3000,
]


@pytest.fixture(scope="module")
def spark() -> SparkSession:
    return shared_spark()


def _corpus_lines() -> list[str]:
    lines = []
    for path in sorted(corpus_dir("audit/audit_lines").iterdir()):
        if path.name != "README.md":
            lines += path.read_bytes().decode("utf-8", "replace").splitlines()
    return lines


def test_every_corpus_and_hostile_line_gets_a_verdict(spark: SparkSession) -> None:
    lines = [line for line in _corpus_lines() + HOSTILE if line.strip()]
    frame = spark.createDataFrame([(line,) for line in lines], "value string")
    statuses = [row["status"] for row in classify(parse_text(frame)).collect()]
    assert len(statuses) == len(lines)
    assert set(statuses) <= {"ok", *MALFORMED_REASONS}, set(statuses)
    assert statuses.count("ok") >= 2  # the broker's own lines in the seed corpus
    assert all(s != "ok" for s in statuses[-len(HOSTILE):][:5])

