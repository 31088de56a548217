"""Token labels (tokensvc.core.labels): ``key=value`` text as the CLI and the agent read
it, and label sets as the rules check them.

The input, split at newlines, is a list of ``key=value`` texts. Properties: only
LabelError and parse_label's ValueError escape; a valid set is sorted, its keys unique,
checked again unchanged, matched by itself and by each of its labels; the readable
form names every label.
"""

from __future__ import annotations

from tokensvc.core.labels import LabelError, format_labels, matches, parse_label, validate

ERRORS = (LabelError, ValueError)


def fuzz_one(data: bytes) -> None:
    text = data.decode("utf-8", "surrogateescape")
    labels = validate([parse_label(line) for line in text.split("\n") if line])
    keys = [k for k, _ in labels]
    assert keys == sorted(set(keys)), "labels not sorted or keys repeated"
    assert validate(labels) == labels, "validating again changes the set"
    assert matches(labels, labels)
    assert all(matches(labels, (pair,)) for pair in labels)
    shown = format_labels(labels)
    assert all(k in shown for k in keys)


def seeds() -> dict[str, bytes]:
    """Labels as the CLI's --label takes them (docs/cli.md)."""
    return {
        "cli-labels": b"job=etl-nightly\nteam=data\nenv=prod",
        "unicode-value": "owner=J\u00f6rg M\u00fcller\ncost.center/id=42".encode(),
        "one": b"a=b",
    }
