"""Audit and export lines that are JSON but not an event, found by tests/fuzz/audit: the
live watch's label memory skips them, the export reader refuses them by line."""

from __future__ import annotations

from pathlib import Path

import pytest

from tokensvc.audit.token_export import TokenExportError, decode_token
from tokensvc.audit.watch import TokenLabels


@pytest.mark.parametrize("line", [b'["labels"]', b'"labels"', b"[" * 100_000 + b'"labels"'],
                         ids=["array", "string", "nested"])
def test_label_memory_skips_a_line_that_is_not_an_object(line):
    memory = TokenLabels(Path("/nonexistent"))
    memory.learn(line)
    assert memory.of("labels") is None


def test_export_line_nested_too_deep_is_refused_by_line_number():
    with pytest.raises(TokenExportError, match="line 3"):
        decode_token("[" * 100_000, 3)
