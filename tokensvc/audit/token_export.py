"""The token export: one token per JSON line, never an HMAC.

``tokensvc tokens export`` writes it from ZooKeeper, ``tokensvc audit generate`` writes
it beside the generated logs, and the audit report reads it (``--tokens``) to add the
tokens the log never mentions and the labels of tokens created before the range it
reads. This module owns the one format all three use: the fields (:data:`FIELDS`, in
the order the report's Spark schema lists them), how a record is written
(:func:`encode_token`, :func:`write_tokens`) and read back (:func:`decode_token`,
:func:`read_tokens`). A line is a JSON object with its keys sorted (one line, wrapped
here)::

    {"expiry_ms": 1704088800000, "issue_ms": 1704067200000, "max_ms": 1704153600000,
     "owner": "User:alice", "renewers": ["User:bob"], "requester": "User:alice",
     "token_id": "..."}

plus ``labels`` (an object) for a token that has labels. There is no header and no
version: a field added later is ignored by an older reader.

:func:`decode_token` is strict (a clear :class:`TokenExportError` naming the line and the
field); the report's Spark reader is lenient by design and skips lines without
``token_id``, ``expiry_ms`` or ``max_ms`` (docs/audit.md).

Must not: open files or import pyspark (callers hand in text or file objects); hold an
HMAC or anything derived from one.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, TextIO

from tokensvc.core.token import TokenInformation

# Each field of a line and the JSON type of its value: "text" a string, "texts" a list of
# strings, "ms" an integer of epoch milliseconds, "labels" an object of strings.
FIELDS: tuple[tuple[str, str], ...] = (
    ("token_id", "text"), ("owner", "text"), ("requester", "text"), ("renewers", "texts"),
    ("issue_ms", "ms"), ("expiry_ms", "ms"), ("max_ms", "ms"), ("labels", "labels"),
)
# Every line has these; ``labels`` only when the token has labels.
REQUIRED = tuple(name for name, _ in FIELDS if name != "labels")


class TokenExportError(ValueError):
    """A line of a token export that is not a token record; the message names the
    line and, where one is at fault, the field."""


@dataclass(frozen=True)
class ExportedToken:
    """One token of the export: its details as text, never its HMAC."""

    token_id: str
    owner: str
    requester: str
    renewers: tuple[str, ...]
    issue_ms: int
    expiry_ms: int
    max_ms: int
    labels: Mapping[str, str] = field(default_factory=dict)

    def as_record(self) -> dict[str, Any]:
        """The line's JSON object: ``labels`` only when there are some."""
        record: dict[str, Any] = {
            "token_id": self.token_id, "owner": self.owner, "requester": self.requester,
            "renewers": list(self.renewers), "issue_ms": self.issue_ms,
            "expiry_ms": self.expiry_ms, "max_ms": self.max_ms,
        }
        if self.labels:
            record["labels"] = dict(self.labels)
        return record


def from_token(info: TokenInformation) -> ExportedToken:
    """The export record of a token as ZooKeeper holds it."""
    return ExportedToken(
        token_id=info.token_id, owner=str(info.owner), requester=str(info.token_requester),
        renewers=tuple(str(r) for r in info.renewers), issue_ms=info.issue_timestamp,
        expiry_ms=info.expiry_timestamp, max_ms=info.max_timestamp, labels=dict(info.labels),
    )


def encode_token(token: ExportedToken) -> str:
    """One line of the export, with its ``\\n``."""
    return json.dumps(token.as_record(), sort_keys=True) + "\n"


def write_tokens(tokens: Iterable[ExportedToken], out: TextIO) -> int:
    """Write each token as a line of ``out``; how many were written."""
    count = 0
    for token in tokens:
        out.write(encode_token(token))
        count += 1
    return count


def _field_error(line_number: int, name: str, expected: str, value: object) -> TokenExportError:
    shown = json.dumps(value)
    if len(shown) > 40:
        shown = shown[:37] + "..."
    return TokenExportError(f"line {line_number}: field {name!r}: expected {expected}, "
                            f"got {shown}")


def _checked(line_number: int, name: str, kind: str, value: object) -> Any:
    if kind == "text":
        if not isinstance(value, str):
            raise _field_error(line_number, name, "a string", value)
        return value
    if kind == "texts":
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise _field_error(line_number, name, "a list of strings", value)
        return tuple(value)
    if kind == "ms":
        if isinstance(value, bool) or not isinstance(value, int):
            raise _field_error(line_number, name, "an integer (epoch ms)", value)
        return value
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise _field_error(line_number, name, "an object of strings", value)
    return dict(value)


def decode_token(line: str, line_number: int = 1) -> ExportedToken:
    """The token of one line (``line_number`` counts from 1, for the error)."""
    try:
        record = json.loads(line)
    except ValueError as exc:
        raise TokenExportError(f"line {line_number}: not JSON ({exc})") from None
    except RecursionError:
        raise TokenExportError(f"line {line_number}: not JSON (nested too deep)") from None
    if not isinstance(record, dict):
        raise TokenExportError(f"line {line_number}: expected a JSON object")
    missing = [name for name in REQUIRED if name not in record]
    if missing:
        raise TokenExportError(f"line {line_number}: field {missing[0]!r} is missing")
    values = {name: _checked(line_number, name, kind, record[name])
              for name, kind in FIELDS if name in record}
    return ExportedToken(**values)


def read_tokens(lines: Iterable[str]) -> Iterator[ExportedToken]:
    """The tokens of an export's lines (a file object will do); blank lines skipped."""
    for number, line in enumerate(lines, start=1):
        if line.strip():
            yield decode_token(line, number)
