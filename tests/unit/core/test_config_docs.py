"""docs/broker.md and docs/cli.md carry exactly the key tables declared in code."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tokensvc.config_docs import PAGES, generated_part, render, update

DOCS = Path(__file__).parents[3] / "docs"


@pytest.mark.parametrize("page", sorted(PAGES))
def test_page_matches_its_declared_table(page: str) -> None:
    name, table = PAGES[page]
    text = (DOCS / page).read_text(encoding="utf-8")
    assert generated_part(text, name) == render(table), (
        f"docs/{page} is out of date: run `python -m tokensvc.config_docs docs`"
    )
    documented = re.findall(r"^\| `([^`]+)` \|", generated_part(text, name), flags=re.MULTILINE)
    assert documented == list(table.keys)


def test_update_rewrites_only_the_marked_section(tmp_path: Path) -> None:
    name, table = PAGES["broker.md"]
    page = tmp_path / "page.md"
    page.write_text(f"before\n<!-- generated: {name} -->\nstale\n<!-- end generated -->\nafter\n")
    assert update(page, name, table) is True
    text = page.read_text()
    assert text.startswith("before\n") and text.endswith("<!-- end generated -->\nafter\n")
    assert generated_part(text, name) == render(table)
    assert update(page, name, table) is False
