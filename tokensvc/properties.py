"""The one reader (and writer) of Java ``.properties`` files, for broker and client files.

Parsing is the ``javaproperties`` library's (``=``, ``:`` and whitespace separators,
``\\`` line continuations, ``\\uXXXX`` escapes, ``#``/``!`` comments), so tokensvc
keeps no parser of its own. This module adds what a configuration reader needs on
top: the file is read as UTF-8, keys and values are trimmed, a key given twice is an
error (Java would silently keep the last one), and every problem is a
:class:`~tokensvc.core.configdef.ConfigError` that names the file and the line, never
a value.

It reads and writes files and nothing else: what the keys mean is the config tables'.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import javaproperties

from tokensvc.core.configdef import ConfigError


def parse_properties(text: str, source: str | None = None) -> dict[str, str]:
    """The entries of properties ``text``, keys and values trimmed, in file order.

    Raises :class:`ConfigError` for a key given twice or a malformed ``\\u`` escape;
    ``source`` (the file name) goes into the message.
    """
    props: dict[str, str] = {}
    lines: dict[str, int] = {}
    line = 1
    elements = javaproperties.parse(text)
    while True:
        try:
            element = next(elements)
        except StopIteration:
            return props
        except javaproperties.InvalidUEscapeError:
            raise ConfigError(None, f"line {line}: malformed \\uXXXX escape", source) from None
        if isinstance(element, javaproperties.KeyValue):
            key = element.key.strip()
            if key in props:
                raise ConfigError(
                    key, f"is given twice (lines {lines[key]} and {line})", source
                )
            props[key] = element.value.strip()
            lines[key] = line
        line += element.source.count("\n")


def read_properties(path: str | os.PathLike[str]) -> dict[str, str]:
    """Read a properties file (UTF-8); see :func:`parse_properties`."""
    name = os.fspath(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(None, f"cannot read the file: {exc.strerror or exc}", name) from None
    except UnicodeDecodeError:
        raise ConfigError(None, "the file is not UTF-8 text", name) from None
    return parse_properties(text, name)


def properties_text(props: Mapping[str, str]) -> str:
    """``props`` as properties text that :func:`parse_properties` reads back unchanged."""
    return javaproperties.dumps(props, timestamp=False, ensure_ascii=False)
