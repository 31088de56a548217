"""The key tables of docs/broker.md and docs/cli.md, generated from the declared tables.

Owns the text between the ``<!-- generated: NAME -->`` and ``<!-- end generated -->``
markers of those two pages: :func:`render` builds it from
:data:`tokensvc.core.config.BROKER_CONFIG` and
:data:`tokensvc.client_config.CLIENT_CONFIG`, :func:`update` rewrites a page, and
``python -m tokensvc.config_docs docs`` rewrites both (a unit test fails when a page
and its table disagree). It must not change anything outside the markers.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from tokensvc.client_config import CLIENT_CONFIG
from tokensvc.core.config import BROKER_CONFIG
from tokensvc.core.configdef import ConfigDef, ConfigKey

PAGES = {"broker.md": ("broker keys", BROKER_CONFIG), "cli.md": ("client keys", CLIENT_CONFIG)}
_END = "<!-- end generated -->"


def _type_words(key: ConfigKey) -> str:
    if key.path is not None:
        return f"path ({key.path.value})"
    return key.type.value


def render(table: ConfigDef) -> str:
    """The generated Markdown table of ``table``."""
    return table.markdown_table(_type_words)


def _section(name: str) -> re.Pattern[str]:
    return re.compile(
        rf"(<!-- generated: {re.escape(name)} -->\n)(.*?)({re.escape(_END)})", re.DOTALL
    )


def generated_part(text: str, name: str) -> str | None:
    """The text between the markers of section ``name`` in ``text``, or None."""
    match = _section(name).search(text)
    return match.group(2) if match else None


def update(path: Path, name: str, table: ConfigDef) -> bool:
    """Rewrite section ``name`` of ``path`` from ``table``; True when it changed."""
    text = path.read_text(encoding="utf-8")
    if generated_part(text, name) is None:
        raise ValueError(f"{path} has no '<!-- generated: {name} -->' section")
    new = _section(name).sub(lambda m: m.group(1) + render(table) + m.group(3), text)
    if new != text:
        path.write_text(new, encoding="utf-8")
    return new != text


def main(argv: list[str]) -> int:
    docs = Path(argv[0] if argv else "docs")
    for page, (name, table) in PAGES.items():
        changed = update(docs / page, name, table)
        print(f"{docs / page}: {'updated' if changed else 'unchanged'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
