"""ConfigDef machinery: types, validators, typo detection, relative paths; and the
rule that tokensvc/core does no I/O."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tokensvc.core.configdef import (
    INT32_MAX,
    INT64_MAX,
    REQUIRED,
    ConfigDef,
    ConfigError,
    ConfigKey,
    Importance,
    OneOf,
    PathKind,
    Type,
    at_least,
    between,
)

LOW = Importance.LOW


def key(name: str, kind: Type, default: object = None, validator=None, **kw) -> ConfigKey:
    return ConfigKey(name, kind, default, validator, LOW, "doc", **kw)


@pytest.mark.parametrize(
    ("kind", "text", "value"),
    [
        (Type.BOOLEAN, "TRUE", True),
        (Type.BOOLEAN, " false ", False),
        (Type.INT, str(INT32_MAX), INT32_MAX),
        (Type.INT, "-7", -7),
        (Type.LONG, str(INT64_MAX), INT64_MAX),
        (Type.LIST, " a, ,b ,", ("a", "b")),
        (Type.STRING, "  x y ", "x y"),
        (Type.PASSWORD, " s3cret ", "s3cret"),
    ],
)
def test_types_convert_trimmed_text(kind: Type, text: str, value: object) -> None:
    assert key("k", kind).parse(text) == value


@pytest.mark.parametrize(
    ("kind", "text", "message"),
    [
        (Type.BOOLEAN, "yes", "k: 'yes' is not true or false"),
        (Type.INT, str(INT32_MAX + 1), f"k: {INT32_MAX + 1} does not fit in a 32-bit integer"),
        (Type.LONG, str(INT64_MAX + 1), f"k: {INT64_MAX + 1} does not fit in a 64-bit integer"),
        (Type.LONG, "1e3", "k: '1e3' is not a number (expected a 64-bit integer)"),
    ],
)
def test_type_errors_name_the_key(kind: Type, text: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        key("k", kind).parse(text)
    assert str(caught.value) == message


def test_blank_means_default_and_required_keys_need_a_value() -> None:
    assert key("k", Type.INT, 5).parse("  ") == 5
    assert key("k", Type.INT, 5).parse(None) == 5
    with pytest.raises(ConfigError, match="k: is required"):
        key("k", Type.INT, REQUIRED).parse("")


def test_validators_check_and_describe() -> None:
    assert between(1, 3).describe() == "[1,3]"
    assert at_least(1, also=(-1,)).describe() == "-1, [1,...]"
    with pytest.raises(ConfigError, match="k: 4 is out of range: must be between 1 and 3"):
        key("k", Type.INT, 1, between(1, 3)).parse("4")
    assert key("k", Type.STRING, "a", OneOf(("A", "b"), ignore_case=True)).parse("a") == "a"
    with pytest.raises(ConfigError, match="k: 'c' is not one of A, b"):
        key("k", Type.LIST, (), OneOf(("A", "b"))).parse("A,c")


def test_closest_key_and_foreign_keys() -> None:
    table = ConfigDef(
        [key("request.timeout.ms", Type.INT), key("log.dir.enable", Type.BOOLEAN)],
        foreign={"log.dirs"},
        foreign_prefixes=("listener.name.",),
    )
    assert table.closest("request.timeout") == "request.timeout.ms"
    assert table.closest("REQUEST.TIMEOUT.MS") == "request.timeout.ms"
    assert table.closest("requst.timeout.ms") == "request.timeout.ms"
    assert table.closest("something.else") is None
    assert table.ignored_keys({"log.dirs": "x", "listener.name.a.log.dir.enable": "y",
                               "zzz": "z"}) == ["listener.name.a.log.dir.enable", "log.dirs", "zzz"]
    with pytest.raises(ConfigError, match="log.dir: unknown key; did you mean log.dir.enable"):
        table.ignored_keys({"log.dir": "x"})


def test_a_key_declared_twice_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="declared twice"):
        ConfigDef([key("a", Type.INT), key("a", Type.LONG)])


def test_relative_paths_join_the_base_directory_absolute_ones_stay() -> None:
    table = ConfigDef([key("f", Type.STRING, path=PathKind.FILE), key("s", Type.STRING)])
    assert table.resolve_paths({"f": "tls/../ca.pem", "s": "rel"}, "/etc/x") == {
        "f": "/etc/x/ca.pem", "s": "rel"}
    assert table.resolve_paths({"f": "/abs/ca.pem"}, "/etc/x") == {"f": "/abs/ca.pem"}
    assert table.resolve_paths({"f": ""}, "/etc/x") == {"f": ""}


_IO_NAMES = {"open", "environ", "getenv", "stat", "isfile", "exists", "Path", "read_text",
             "read_bytes", "write_text", "listdir", "scandir", "access"}


def test_core_does_no_io() -> None:
    core = Path(__file__).parents[3] / "tokensvc" / "core"
    found = []
    for source in sorted(core.glob("*.py")):
        for node in ast.walk(ast.parse(source.read_text(), str(source))):
            name = node.attr if isinstance(node, ast.Attribute) else (
                node.id if isinstance(node, ast.Name) else None)
            if name in _IO_NAMES:
                found.append(f"{source.name}:{node.lineno}: {name}")
    assert found == []
