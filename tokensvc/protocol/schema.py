"""A small schema language for Kafka messages, and the one interpreter of it.

A message is a :class:`Struct` of :class:`Field` s. A field has a wire type, the
versions it exists in (``since``/``until``), the version from which it may be
null (``nullable``), an optional default and, for tagged fields, a ``tag``.
Whether a version is *flexible* (compact lengths, tagged-field sections) is a
property of the API, so it is passed in rather than stored here.

Values are plain Python: ``int``, ``bool``, ``str``, ``bytes``, ``None``, ``list``
and ``dict`` keyed by Kafka's JSON field names; a uuid is 16 ``bytes``. An array
may also be given as :class:`EncodedElements` (elements encoded beforehand).

Rules this module enforces:

* decoding: every length is checked against the bytes that remain (arrays also
  against the smallest possible element), UTF-8 must be valid, a null in a
  non-nullable field is an error, unknown tagged fields are skipped, a known
  tagged field must use exactly the bytes it declares;
* encoding: a missing key takes the field's default (explicit default, else
  ``None`` where the version allows null, else the type's zero: 0, False, "",
  b"", [], 16 zero bytes); keys for fields absent from the version are ignored;
  a tagged field is written only when it differs from its default.

It must not know about API keys, headers or framing, and must not touch sockets.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from tokensvc.protocol.errors import EncodeError, ProtocolError
from tokensvc.protocol.primitives import FLOAT64, INT8, INT16, INT32, INT64, Reader, Writer

MAX_STRING_LENGTH = 0x7FFF
MAX_ARRAY_LENGTH = 0x7FFFFFFF
MISSING: Any = object()


class WireType:
    """One Kafka wire type; subclasses read and write one value of it."""

    name = "?"

    def zero(self) -> Any:
        raise NotImplementedError

    def min_size(self, version: int, flexible: bool) -> int:
        raise NotImplementedError

    def read(self, r: Reader, version: int, flexible: bool, nullable: bool) -> Any:
        raise NotImplementedError

    def write(self, w: Writer, value: Any, version: int, flexible: bool, nullable: bool) -> None:
        raise NotImplementedError


class _Int(WireType):
    def __init__(self, name: str, codec: Any) -> None:
        self.name = name
        self.codec = codec
        self.size = codec.size
        self.read_fn = getattr(Reader, name)

    def zero(self) -> int:
        return 0

    def min_size(self, version: int, flexible: bool) -> int:
        return self.size

    def read(self, r: Reader, version: int, flexible: bool, nullable: bool) -> int:
        return self.read_fn(r)

    def write(self, w: Writer, value: Any, version: int, flexible: bool, nullable: bool) -> None:
        if not isinstance(value, int):
            raise EncodeError(f"{self.name} needs an int, got {type(value).__name__}")
        w.fixed(self.codec, value)


class _Float64(WireType):
    """An IEEE 754 double, big-endian (Kafka's ``float64``; quota values)."""

    name = "float64"

    def zero(self) -> float:
        return 0.0

    def min_size(self, version: int, flexible: bool) -> int:
        return FLOAT64.size

    def read(self, r: Reader, version: int, flexible: bool, nullable: bool) -> float:
        return r.unpack(FLOAT64, "float64")[0]

    def write(self, w: Writer, value: Any, version: int, flexible: bool, nullable: bool) -> None:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise EncodeError(f"float64 needs a float, got {type(value).__name__}")
        try:
            w.raw(FLOAT64.pack(float(value)))
        except OverflowError:
            raise EncodeError(f"{value!r} does not fit a float64") from None


class _Bool(WireType):
    name = "bool"

    def zero(self) -> bool:
        return False

    def min_size(self, version: int, flexible: bool) -> int:
        return 1

    def read(self, r: Reader, version: int, flexible: bool, nullable: bool) -> bool:
        return r.int8() != 0

    def write(self, w: Writer, value: Any, version: int, flexible: bool, nullable: bool) -> None:
        if not isinstance(value, (bool, int)):
            raise EncodeError(f"bool needs a bool, got {type(value).__name__}")
        w.buf.append(1 if value else 0)


class _Uuid(WireType):
    """A uuid, represented as 16 bytes (``uuid.UUID`` is accepted on encode)."""

    name = "uuid"

    def zero(self) -> bytes:
        return bytes(16)

    def min_size(self, version: int, flexible: bool) -> int:
        return 16

    def read(self, r: Reader, version: int, flexible: bool, nullable: bool) -> bytes:
        return r.take(16, "uuid")

    def write(self, w: Writer, value: Any, version: int, flexible: bool, nullable: bool) -> None:
        if isinstance(value, uuid.UUID):
            value = value.bytes
        if not isinstance(value, (bytes, bytearray, memoryview)) or len(value) != 16:
            raise EncodeError("uuid needs 16 bytes or a uuid.UUID")
        w.raw(bytes(value))


def _read_length(r: Reader, flexible: bool, classic: Any, what: str) -> int:
    """A length prefix; -1 means null. Rejects lengths below -1."""
    if flexible:
        return r.uvarint() - 1
    length = classic(r)
    if length < -1:
        raise ProtocolError(f"negative {what} length {length}")
    return length


def _write_length(w: Writer, length: int, flexible: bool, classic: Any) -> None:
    if flexible:
        w.uvarint(length + 1)
    else:
        classic(w, length)


class _String(WireType):
    name = "string"

    def zero(self) -> str:
        return ""

    def min_size(self, version: int, flexible: bool) -> int:
        return 1 if flexible else 2

    def read(self, r: Reader, version: int, flexible: bool, nullable: bool) -> str | None:
        length = _read_length(r, flexible, Reader.int16, "string")
        if length < 0:
            if nullable:
                return None
            raise ProtocolError("null in a non-nullable string")
        if length > MAX_STRING_LENGTH:
            raise ProtocolError(f"string length {length} exceeds {MAX_STRING_LENGTH}")
        data = r.take(length, "string")
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            raise ProtocolError("string is not valid UTF-8") from None

    def write(self, w: Writer, value: Any, version: int, flexible: bool, nullable: bool) -> None:
        if value is None:
            if not nullable:
                raise EncodeError("None for a non-nullable string")
            _write_length(w, -1, flexible, Writer.int16)
            return
        if not isinstance(value, str):
            raise EncodeError(f"string needs a str, got {type(value).__name__}")
        data = value.encode("utf-8")
        if len(data) > MAX_STRING_LENGTH:
            raise EncodeError(f"string of {len(data)} bytes exceeds {MAX_STRING_LENGTH}")
        _write_length(w, len(data), flexible, Writer.int16)
        w.raw(data)


class _Bytes(WireType):
    name = "bytes"

    def zero(self) -> bytes:
        return b""

    def min_size(self, version: int, flexible: bool) -> int:
        return 1 if flexible else 4

    def read(self, r: Reader, version: int, flexible: bool, nullable: bool) -> bytes | None:
        length = _read_length(r, flexible, Reader.int32, "bytes")
        if length < 0:
            if nullable:
                return None
            raise ProtocolError("null in a non-nullable bytes field")
        return r.take(length, "bytes")

    def write(self, w: Writer, value: Any, version: int, flexible: bool, nullable: bool) -> None:
        if value is None:
            if not nullable:
                raise EncodeError("None for a non-nullable bytes field")
            _write_length(w, -1, flexible, Writer.int32)
            return
        if not isinstance(value, (bytes, bytearray, memoryview)):
            raise EncodeError(f"bytes needs bytes, got {type(value).__name__}")
        data = bytes(value)
        _write_length(w, len(data), flexible, Writer.int32)
        w.raw(data)


INT8_T = _Int("int8", INT8)
INT16_T = _Int("int16", INT16)
INT32_T = _Int("int32", INT32)
INT64_T = _Int("int64", INT64)
FLOAT64_T = _Float64()
BOOL = _Bool()
UUID = _Uuid()
STRING = _String()
BYTES = _Bytes()


@dataclass(frozen=True)
class EncodedElements:
    """An array's elements already encoded (``count`` of them, in the bytes of
    ``parts``, in order), for a response too large to encode on the event loop in one
    piece: the writer puts the parts behind the array's length by reference (see
    :meth:`Writer.parts`) and checks nothing else."""

    count: int
    parts: tuple[bytes, ...]


class Array(WireType):
    """``[]element``: a length-prefixed list (null where the field allows it)."""

    def __init__(self, element: WireType) -> None:
        self.element = element
        self.name = f"[]{element.name}"

    def zero(self) -> list:
        return []

    def min_size(self, version: int, flexible: bool) -> int:
        return 1 if flexible else 4

    def read(self, r: Reader, version: int, flexible: bool, nullable: bool) -> list | None:
        count = _read_length(r, flexible, Reader.int32, "array")
        if count < 0:
            if nullable:
                return None
            raise ProtocolError("null in a non-nullable array")
        smallest = max(1, self.element.min_size(version, flexible))
        if count > r.remaining // smallest:
            raise ProtocolError(
                f"array of {count} elements cannot fit in the {r.remaining} bytes left"
            )
        element = self.element
        out = []
        for i in range(count):
            try:
                out.append(element.read(r, version, flexible, False))
            except ProtocolError as exc:
                raise exc.within(f"[{i}]") from None
        return out

    def write(self, w: Writer, value: Any, version: int, flexible: bool, nullable: bool) -> None:
        if value is None:
            if not nullable:
                raise EncodeError(f"None for a non-nullable {self.name}")
            _write_length(w, -1, flexible, Writer.int32)
            return
        if isinstance(value, EncodedElements):
            _write_length(w, value.count, flexible, Writer.int32)
            w.parts(value.parts)
            return
        if not isinstance(value, (list, tuple)):
            raise EncodeError(f"{self.name} needs a list, got {type(value).__name__}")
        if len(value) > MAX_ARRAY_LENGTH:
            raise EncodeError(f"{self.name} of {len(value)} elements is too long")
        _write_length(w, len(value), flexible, Writer.int32)
        for item in value:
            self.element.write(w, item, version, flexible, False)


@dataclass(frozen=True)
class Field:
    """One field of a struct. ``until=None`` means "and every later version"."""

    name: str
    type: WireType
    since: int = 0
    until: int | None = None
    nullable: int | None = None
    default: Any = MISSING
    tag: int | None = None

    def present_in(self, version: int) -> bool:
        return self.since <= version and (self.until is None or version <= self.until)

    def nullable_in(self, version: int) -> bool:
        return self.nullable is not None and version >= self.nullable

    def default_in(self, version: int) -> Any:
        if self.default is not MISSING:
            return self.default
        if self.nullable_in(version):
            return None
        return self.type.zero()


@dataclass(frozen=True)
class _Plan:
    """A struct's fields as laid out in one version."""

    regular: tuple[tuple[Field, bool], ...]
    tagged: dict[int, tuple[Field, bool]]
    min_size_classic: int
    min_size_flexible: int


class Struct(WireType):
    """A struct (a message body or an array element): fields in wire order."""

    def __init__(self, name: str, *fields: Field) -> None:
        self.name = name
        self.fields = fields
        self._plans: dict[int, _Plan] = {}
        tags = [f.tag for f in fields if f.tag is not None]
        if len(tags) != len(set(tags)):
            raise ValueError(f"{name}: duplicate tags {tags}")

    def __repr__(self) -> str:
        return f"Struct({self.name!r}, {len(self.fields)} fields)"

    def zero(self) -> dict:
        return {}

    def plan(self, version: int) -> _Plan:
        plan = self._plans.get(version)
        if plan is None:
            live = [f for f in self.fields if f.present_in(version)]
            regular = tuple((f, f.nullable_in(version)) for f in live if f.tag is None)
            tagged = {f.tag: (f, f.nullable_in(version)) for f in live if f.tag is not None}
            plan = _Plan(
                regular,
                dict(sorted(tagged.items())),
                sum(f.type.min_size(version, False) for f, _ in regular),
                sum(f.type.min_size(version, True) for f, _ in regular) + 1,
            )
            self._plans[version] = plan
        return plan

    def min_size(self, version: int, flexible: bool) -> int:
        plan = self.plan(version)
        return plan.min_size_flexible if flexible else plan.min_size_classic

    def read(self, r: Reader, version: int, flexible: bool, nullable: bool = False) -> dict:
        plan = self.plan(version)
        out: dict[str, Any] = {}
        for f, field_nullable in plan.regular:
            try:
                out[f.name] = f.type.read(r, version, flexible, field_nullable)
            except ProtocolError as exc:
                raise exc.within(f.name) from None
        if flexible:
            self._read_tagged(r, version, plan, out)
        return out

    def _read_tagged(self, r: Reader, version: int, plan: _Plan, out: dict[str, Any]) -> None:
        count = r.uvarint()
        # Each tagged field takes at least two bytes (tag and size).
        if count > r.remaining // 2:
            raise ProtocolError(f"{count} tagged fields cannot fit in {r.remaining} bytes")
        for _ in range(count):
            tag = r.uvarint()
            size = r.uvarint()
            data = r.take(size, "tagged field")
            known = plan.tagged.get(tag)
            if known is None:
                continue
            f, field_nullable = known
            sub = Reader(data)
            try:
                out[f.name] = f.type.read(sub, version, True, field_nullable)
                sub.expect_end()
            except ProtocolError as exc:
                raise exc.within(f.name) from None
        for f, _ in plan.tagged.values():
            if f.name not in out:
                out[f.name] = f.default_in(version)

    def write(
        self, w: Writer, value: Any, version: int, flexible: bool, nullable: bool = False
    ) -> None:
        if not isinstance(value, dict):
            raise EncodeError(f"{self.name} needs a dict, got {type(value).__name__}")
        plan = self.plan(version)
        for f, field_nullable in plan.regular:
            item = value.get(f.name, MISSING)
            if item is MISSING:
                item = f.default_in(version)
            try:
                f.type.write(w, item, version, flexible, field_nullable)
            except EncodeError as exc:
                raise EncodeError(f"{self.name}.{f.name}: {exc}") from None
        if flexible:
            self._write_tagged(w, value, version, plan)

    def _write_tagged(self, w: Writer, value: dict, version: int, plan: _Plan) -> None:
        sections = []
        for tag, (f, field_nullable) in plan.tagged.items():
            item = value.get(f.name, MISSING)
            default = f.default_in(version)
            if item is MISSING or item == default:
                continue
            sub = Writer()
            f.type.write(sub, item, version, True, field_nullable)
            sections.append((tag, sub.value()))
        w.uvarint(len(sections))
        for tag, data in sections:
            w.uvarint(tag)
            w.uvarint(len(data))
            w.raw(data)


def f(
    name: str,
    type_: WireType,
    since: int = 0,
    *,
    until: int | None = None,
    nullable: int | None = None,
    default: Any = MISSING,
    tag: int | None = None,
) -> Field:
    """Shorthand for :class:`Field` used by the message definitions."""
    return Field(name, type_, since, until, nullable, default, tag)
