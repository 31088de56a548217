"""Token labels: what a label may be, how a selector matches, one shared copy per label set.

A token may carry labels (``job=etl-nightly``, ``team=payments``), set when it is created
and never changed afterwards. This module owns the rules a label set must follow (the
limits below, checked in one place: :func:`validate`), the ``key=value`` text form
(:func:`parse_label`, :func:`format_labels`), how a selector matches a token
(:func:`matches`: every label of the selector must be on the token) and the sharing of
equal label sets (:func:`interned`): a token holds its labels as a tuple of ``(key,
value)`` pairs sorted by key, and the tokens of one job hold the same tuple, so a label
set costs a token one pointer.

The limits (docs/tokens.md):

* at most :data:`MAX_LABELS` labels per token (and per selector);
* a key is 1 to :data:`MAX_KEY_CHARS` characters of ``[a-z0-9._/-]``, given once;
* a value is 1 to :data:`MAX_VALUE_CHARS` characters of UTF-8 text without control
  characters (C0, DEL, C1): labels are printed in tables, logs and reports, and a value
  that could move a cursor or end a line has no business there.

Breaking one is INVALID_REQUEST with a message naming the label; the caller writes nothing.

Must not: do I/O, or know about the wire or ZooKeeper.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterable, Mapping

from tokensvc.core.errors import Errors, KafkaError

Labels = tuple[tuple[str, str], ...]

MAX_LABELS = 16
MAX_KEY_CHARS = 63
MAX_VALUE_CHARS = 255
NO_LABELS: Labels = ()

_KEY = re.compile(rf"[a-z0-9._/-]{{1,{MAX_KEY_CHARS}}}")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
# Values printed without quotes in text (anything else is shown JSON-quoted).
_PLAIN_VALUE = re.compile(r"[A-Za-z0-9._/:@+-]+")

# Equal label sets (and pairs) share one tuple. Bounded: past these sizes a new set is
# kept as it is (correct, just not shared), so a stream of unique labels cannot grow
# the tables without end.
MAX_INTERNED_SETS = 65_536
MAX_INTERNED_PAIRS = 65_536
_sets: dict[Labels, Labels] = {}
_pairs: dict[tuple[str, str], tuple[str, str]] = {}


class LabelError(KafkaError):
    """A label or selector that breaks a rule: INVALID_REQUEST, the message names it."""

    def __init__(self, message: str) -> None:
        super().__init__(Errors.INVALID_REQUEST, message)


def _shown(text: str, limit: int = 40) -> str:
    """``text`` for an error message: quoted, cut, control characters escaped."""
    cut = text if len(text) <= limit else text[:limit] + "..."
    return repr(cut)


def check_key(key: object) -> str:
    if not isinstance(key, str) or not _KEY.fullmatch(key):
        shown = _shown(key) if isinstance(key, str) else type(key).__name__
        raise LabelError(f"label key {shown} is not 1-{MAX_KEY_CHARS} characters of [a-z0-9._/-]")
    return key


def check_value(key: str, value: object) -> str:
    if not isinstance(value, str):
        raise LabelError(f"label {key!r} has no text value")
    if not value:
        raise LabelError(f"label {key!r} has an empty value")
    if len(value) > MAX_VALUE_CHARS:
        raise LabelError(f"label {key!r} has a value of {len(value)} characters "
                         f"(at most {MAX_VALUE_CHARS})")
    if _CONTROL.search(value):
        raise LabelError(f"label {key!r} has a control character in its value")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise LabelError(f"label {key!r} has a value that is not UTF-8 text") from None
    return value


def validate(pairs: Iterable[tuple[object, object]] | Mapping[str, str], *,
             what: str = "labels") -> Labels:
    """``pairs`` as a label set (sorted by key, shared), or :class:`LabelError` naming the
    first label that breaks a rule. ``what`` names the set in the message ("labels",
    "label selector")."""
    items = list(pairs.items()) if isinstance(pairs, Mapping) else list(pairs)
    if len(items) > MAX_LABELS:
        raise LabelError(f"{len(items)} {what} given, at most {MAX_LABELS} allowed")
    seen: dict[str, str] = {}
    for item in items:
        if not isinstance(item, tuple | list) or len(item) != 2:
            raise LabelError(f"{what}: an entry is not a (key, value) pair")
        key = check_key(item[0])
        value = check_value(key, item[1])
        if key in seen:
            raise LabelError(f"label {key!r} is given twice")
        seen[key] = value
    return interned(tuple(sorted(seen.items())))


def interned(labels: Labels) -> Labels:
    """The shared copy of ``labels`` (already valid and sorted): equal sets are one tuple,
    equal pairs one pair, keys one string. Thread-safe (one dict operation each)."""
    if not labels:
        return NO_LABELS
    found = _sets.get(labels)
    if found is not None:
        return found
    if len(_sets) >= MAX_INTERNED_SETS:
        return labels
    shared = tuple(_pair(k, v) for k, v in labels)
    return _sets.setdefault(shared, shared)


def _pair(key: str, value: str) -> tuple[str, str]:
    pair = (key, value)
    found = _pairs.get(pair)
    if found is not None:
        return found
    if len(_pairs) >= MAX_INTERNED_PAIRS:
        return (sys.intern(key), value)
    return _pairs.setdefault(pair, (sys.intern(key), value))


def matches(labels: Labels, selector: Labels) -> bool:
    """True when every label of ``selector`` is on ``labels`` (an empty selector matches
    every token)."""
    if not selector:
        return True
    if len(selector) > len(labels):
        return False
    held = dict(labels)
    return all(held.get(k) == v for k, v in selector)


def parse_label(text: str) -> tuple[str, str]:
    """``key=value`` as a pair (ValueError if there is no ``=``); the rules are checked
    by :func:`validate`, once the whole set is known."""
    key, sep, value = text.partition("=")
    if not sep:
        raise ValueError(f"{text!r} is not a label: use key=value, e.g. job=etl-nightly")
    return key, value


def format_labels(labels: Labels) -> str:
    """``k=v,k2=v2`` for people; a value with anything but ``[A-Za-z0-9._/:@+-]`` is
    JSON-quoted (so commas, spaces, quotes and non-ASCII characters stay unambiguous)."""
    return ",".join(
        f"{k}={v}" if _PLAIN_VALUE.fullmatch(v) else f"{k}={json.dumps(v)}" for k, v in labels
    )
