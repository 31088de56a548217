"""Declared configuration keys in the manner of Kafka's ``ConfigDef``.

This module owns the shape of a configuration table: each :class:`ConfigKey` has a
type, a default, a validator, an importance and its documentation, and
:class:`ConfigDef` parses raw ``key -> string`` properties key by key (type, then
range or choice), as Kafka does: there is no rule across keys here. It also sorts
the keys a table does not declare: a key close to a declared one is an error that
names the closest key; any other is reported back so the caller can warn about it
once (by name, never by value).

It must not do I/O (no files, no environment, no logging) and never puts the value
of a ``PASSWORD`` key in an error message. Callers own the tables
(:mod:`tokensvc.core.config`, :mod:`tokensvc.client_config`).
"""

from __future__ import annotations

import difflib
import enum
import posixpath
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

# How alike an unknown key must be to a declared one to count as a typo of it
# (difflib's ratio; "delegaton.token.expiry.time.ms" is 0.98 to the real key).
CLOSE_KEY_CUTOFF = 0.9


class ConfigError(ValueError):
    """A configuration problem.

    ``key`` is the offending key (None for the file as a whole) and ``source`` the
    file it came from, when known. The message is one line: ``source: key: problem``.
    """

    def __init__(self, key: str | None, problem: str, source: str | None = None) -> None:
        self.key = key
        self.problem = problem
        self.source = source
        parts = [part for part in (source, key, problem) if part]
        super().__init__(": ".join(parts))

    def in_file(self, source: str) -> ConfigError:
        """The same problem, said to come from ``source``."""
        error = type(self)(self.key, self.problem, source)
        error.__cause__ = self.__cause__
        return error


class Type(enum.Enum):
    """How a raw string becomes a value (Kafka's ``ConfigDef.Type``)."""

    BOOLEAN = "boolean"
    INT = "int"
    LONG = "long"
    STRING = "string"
    LIST = "list"
    PASSWORD = "password"


class Importance(enum.Enum):
    HIGH = "high"
    MEDIUM = "medium"
    LOW = "low"


class PathKind(enum.Enum):
    """A key whose value is a path: relative paths resolve against the properties
    file's directory; ``FILE`` must be a readable file when the file is loaded."""

    FILE = "file"
    DIRECTORY = "directory"
    SECRET_FILE = "secret file"


class _Required:
    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED = _Required()
"""The default of a key that has none: leaving it unset is an error."""


class Validator:
    """Checks one parsed value; ``describe()`` is the "valid values" text of the docs."""

    def __call__(self, key: str, value: object) -> None:
        raise NotImplementedError

    def describe(self) -> str:
        raise NotImplementedError


@dataclass(frozen=True)
class Range(Validator):
    """``minimum <= value <= maximum``; ``also`` lists single values allowed besides
    (``-1`` for "disabled")."""

    minimum: int | None = None
    maximum: int | None = None
    also: tuple[int, ...] = ()

    def __call__(self, key: str, value: object) -> None:
        assert isinstance(value, int)
        if value in self.also:
            return
        if (self.minimum is not None and value < self.minimum) or (
            self.maximum is not None and value > self.maximum
        ):
            raise ConfigError(key, f"{value} is out of range: must be {self._words()}")

    def _words(self) -> str:
        if self.maximum is None:
            text = f"at least {self.minimum}"
        elif self.minimum is None:
            text = f"at most {self.maximum}"
        else:
            text = f"between {self.minimum} and {self.maximum}"
        return " or ".join([*map(str, self.also), text])

    def describe(self) -> str:
        low = "..." if self.minimum is None else str(self.minimum)
        high = "..." if self.maximum is None else str(self.maximum)
        return ", ".join([*map(str, self.also), f"[{low},{high}]"])


def at_least(minimum: int, *, also: tuple[int, ...] = ()) -> Range:
    return Range(minimum, None, also)


def between(minimum: int, maximum: int) -> Range:
    return Range(minimum, maximum)


@dataclass(frozen=True)
class OneOf(Validator):
    """A string among ``choices`` (a list: every item among them)."""

    choices: tuple[str, ...]
    ignore_case: bool = False

    def __call__(self, key: str, value: object) -> None:
        items = value if isinstance(value, tuple) else (value,)
        allowed = {c.lower() for c in self.choices} if self.ignore_case else set(self.choices)
        for item in items:
            assert isinstance(item, str)
            if (item.lower() if self.ignore_case else item) not in allowed:
                shown = ", ".join(c or '""' for c in self.choices)
                raise ConfigError(key, f"{item!r} is not one of {shown}")

    def describe(self) -> str:
        return ", ".join(f"`{c}`" if c else '`""`' for c in self.choices)


@dataclass(frozen=True)
class Matches(Validator):
    """Every item (or the value) matches ``pattern``; ``form`` names it in messages.
    With ``secret`` the offending text is never shown."""

    pattern: str
    form: str
    secret: bool = False

    def __call__(self, key: str, value: object) -> None:
        items = value if isinstance(value, tuple) else (value,)
        for item in items:
            assert isinstance(item, str)
            if not re.fullmatch(self.pattern, item):
                if self.secret:
                    raise ConfigError(key, f"must be of the form {self.form}")
                raise ConfigError(key, f"{item!r} is not of the form {self.form}")

    def describe(self) -> str:
        return f"`{self.form}`"


@dataclass(frozen=True)
class ConfigKey:
    """One declared key."""

    name: str
    type: Type
    default: object
    validator: Validator | None
    importance: Importance
    doc: str
    path: PathKind | None = None
    default_doc: str | None = None
    """How the docs show the default, when the value alone would mislead."""
    blank_is_value: bool = False
    """A key present with a blank value means the empty string, not the default (as in
    Kafka's ``zookeeper.ssl.endpoint.identification.algorithm=``)."""

    @property
    def attribute(self) -> str:
        """The Python attribute holding the value: the key with dots as underscores."""
        return self.name.replace(".", "_")

    @property
    def required(self) -> bool:
        return self.default is REQUIRED

    @property
    def secret(self) -> bool:
        return self.type is Type.PASSWORD

    def parse(self, raw: str | None) -> object:
        """The typed, validated value of ``raw`` (None or blank: the default; blank is
        ``""`` for a ``blank_is_value`` key)."""
        text = None if raw is None else raw.strip()
        if text == "" and self.blank_is_value:
            return ""
        if not text:
            if self.required:
                raise ConfigError(self.name, "is required")
            return self.default
        value = _convert(self, text)
        if self.validator is not None:
            self.validator(self.name, value)
        return value


_INT = re.compile(r"[+-]?\d+")


def _convert(key: ConfigKey, text: str) -> object:
    kind = key.type
    if kind is Type.BOOLEAN:
        if text.lower() not in ("true", "false"):
            raise ConfigError(key.name, f"{text!r} is not true or false")
        return text.lower() == "true"
    if kind in (Type.INT, Type.LONG):
        bits, low, high = (32, INT32_MIN, INT32_MAX) if kind is Type.INT else (64, INT64_MIN, INT64_MAX)
        if not _INT.fullmatch(text):
            raise ConfigError(key.name, f"{text!r} is not a number (expected a {bits}-bit integer)")
        value = int(text)
        if not low <= value <= high:
            raise ConfigError(key.name, f"{value} does not fit in a {bits}-bit integer")
        return value
    if kind is Type.LIST:
        return tuple(item.strip() for item in text.split(",") if item.strip())
    return text


class ConfigDef:
    """An ordered table of :class:`ConfigKey` with Kafka's per-key parsing.

    ``foreign`` names keys that belong to a neighbour (Kafka's own broker or client
    keys): they are never typos, only keys this table ignores.
    """

    def __init__(
        self,
        keys: Iterable[ConfigKey],
        *,
        foreign: Iterable[str] = (),
        foreign_prefixes: tuple[str, ...] = (),
    ) -> None:
        self.keys: dict[str, ConfigKey] = {}
        for key in keys:
            if key.name in self.keys:
                raise ValueError(f"{key.name} is declared twice")
            self.keys[key.name] = key
        self._foreign = frozenset(foreign) - self.keys.keys()
        self._foreign_prefixes = foreign_prefixes

    def __getitem__(self, name: str) -> ConfigKey:
        return self.keys[name]

    def names(self) -> frozenset[str]:
        return frozenset(self.keys)

    def closest(self, name: str) -> str | None:
        """The declared key ``name`` is most likely a typo of, or None."""
        lowered = {k.lower(): k for k in self.keys}
        if name.lower() in lowered:
            return lowered[name.lower()]
        for suffix in (".ms", ".bytes", ".enable"):
            if name + suffix in self.keys:
                return name + suffix
        match = difflib.get_close_matches(name, self.keys, n=1, cutoff=CLOSE_KEY_CUTOFF)
        return match[0] if match else None

    def ignored_keys(self, props: Mapping[str, str]) -> list[str]:
        """The keys of ``props`` this table does not declare, sorted; raises
        :class:`ConfigError` for the first one that looks like a typo of a declared key."""
        unknown = sorted(set(props) - self.keys.keys())
        for name in unknown:
            if name in self._foreign or name.startswith(self._foreign_prefixes):
                continue
            hint = self.closest(name)
            if hint is not None:
                raise ConfigError(name, f"unknown key; did you mean {hint}?")
        return unknown

    def parse(self, props: Mapping[str, str]) -> dict[str, object]:
        """Every declared key's typed value (defaults filled in), checked key by key."""
        self.ignored_keys(props)
        return {name: key.parse(props.get(name)) for name, key in self.keys.items()}

    def resolve_paths(self, props: Mapping[str, str], base_dir: str) -> dict[str, str]:
        """``props`` with relative values of path keys made relative to ``base_dir``
        (pure string work: nothing is looked up)."""
        resolved = dict(props)
        for name, key in self.keys.items():
            value = props.get(name, "").strip()
            if key.path is not None and value and not posixpath.isabs(value):
                resolved[name] = posixpath.normpath(posixpath.join(base_dir, value))
        return resolved

    def markdown_table(self, type_words: Callable[[ConfigKey], str] | None = None) -> str:
        """The reference table of the docs: one row per key, in declaration order."""
        rows = [
            "| key | type | default | valid values | importance | description |",
            "|---|---|---|---|---|---|",
        ]
        for key in self.keys.values():
            kind = type_words(key) if type_words else key.type.value
            rows.append(
                f"| `{key.name}` | {kind} | {_default_text(key)} | "
                f"{key.validator.describe() if key.validator else ''} | "
                f"{key.importance.value} | {key.doc} |"
            )
        return "\n".join(rows) + "\n"


def _default_text(key: ConfigKey) -> str:
    if key.default_doc is not None:
        return key.default_doc
    if key.required:
        return "required"
    value = key.default
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, tuple):
        return f"`{','.join(value)}`" if value else "empty"
    if value == "":
        return "empty"
    return f"`{value}`"
