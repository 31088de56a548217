"""The broker's rooms import each other without a cycle, and no handler imports ``zk``.

Imports are read from the source with ``ast`` (imports under ``if TYPE_CHECKING:`` are
annotations only and do not count).
"""

from __future__ import annotations

import ast
from pathlib import Path

import tokensvc

ROOT = Path(tokensvc.__file__).resolve().parent.parent
BROKER = ROOT / "tokensvc" / "broker"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _runtime_imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    found: set[str] = set()

    def visit(nodes: list[ast.stmt]) -> None:
        for node in nodes:
            if isinstance(node, ast.If) and _is_type_checking(node):
                visit(node.orelse)
                continue
            if isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found.add(node.module)
                found.update(f"{node.module}.{alias.name}" for alias in node.names)
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.stmt):
                    visit([child])

    visit(tree.body)
    return found


def _graph() -> dict[str, set[str]]:
    modules = {_module_name(p): p for p in BROKER.rglob("*.py")}
    return {
        name: {imp for imp in _runtime_imports(path) if imp in modules and imp != name}
        for name, path in modules.items()
    }


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def dfs(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (found := dfs(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := dfs(node)):
            return found
    return None


def test_the_graph_is_read_from_the_sources():
    graph = _graph()
    assert "tokensvc.broker.handlers.tokens" in graph
    assert "tokensvc.broker.handlers.base" in graph["tokensvc.broker.handlers.tokens"]


def test_tokensvc_broker_has_no_import_cycle():
    assert _cycle(_graph()) is None


def test_a_cycle_is_found_when_there_is_one():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]


def test_no_handler_imports_zk_or_the_broker_module():
    for path in (BROKER / "handlers").glob("*.py"):
        imports = _runtime_imports(path)
        assert not any(i == "zk" or i.startswith("zk.") for i in imports), path.name
        assert "tokensvc.broker.broker" not in imports, path.name
