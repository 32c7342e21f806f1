"""Declarative Kafka message schemas and the one generic codec that encodes and decodes them.

A message is declared as Kafka declares it in ``clients/src/main/resources/common/message/*.json``:
a ``MessageSpec`` (name, API key, valid and flexible versions) holding ``Field``s (name, type,
versions, nullable versions, tag and tagged versions, default, nested fields). ``messages.py``
holds the transcriptions.

Each message and each nested struct becomes one generated dataclass (``slots=True``) holding the
union of its fields over all versions, in snake case (``ThrottleTimeMs`` -> ``throttle_time_ms``),
every field defaulted (Kafka's defaults: 0, ``""``, ``False``, the zero uuid, an empty list, or the
schema's own). Nested struct classes are attributes of their parent
(``ApiVersionsResponse.ApiVersion``), because Kafka reuses struct names across messages with
different fields (``EntryData``).

**Compiled once per version.** A ``MessageSpec`` builds, when it is declared, a plan of
closures for that version: the fields present in that version in wire order, each with its
primitive decoder/encoder already chosen (compact or not, nullable or not), runs of consecutive
fixed-width fields merged into one ``struct`` call, tagged fields in a tag -> decoder table. No
schema is interpreted per message. Decoding fills a copy of the class's default argument list
and calls the dataclass ``__init__`` positionally.

**Versions.** Encoding writes only the fields of that version; a value set on a field the version
does not have is not written (Kafka refuses non-default values of non-ignorable fields instead;
the frontend builds its responses per version, so it does not need that check on the hot path).
Tagged fields are written only when they differ from their default, in ascending tag order, as
Kafka writes them. Unknown tags are skipped on decode (Kafka keeps them as unknown tagged fields;
nothing here forwards messages, so they are dropped). A known tagged field must fill exactly the
size its entry declares.
"""

from __future__ import annotations

import dataclasses
import operator
import re
import struct
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

from quotaplane.kafka_uuid import ZERO_UUID, Uuid

from . import types as t
from .types import Buffer, Decoder, Encoder, ProtocolError

__all__ = ["Field", "MessageCodec", "MessageSpec", "VersionRange", "field", "snake_case"]

_MAX_VERSION = 0x7FFF
_NO_DEFAULT: Any = object()


@dataclasses.dataclass(frozen=True, slots=True)
class VersionRange:
    """A range of versions as Kafka's schemas write them: ``"3+"``, ``"0-4"``, ``"0"``, ``"none"``."""

    lo: int
    hi: int

    @classmethod
    def parse(cls, text: str) -> VersionRange:
        text = text.strip()
        if text == "none":
            return cls(1, 0)
        if text.endswith("+"):
            return cls(int(text[:-1]), _MAX_VERSION)
        lo, sep, hi = text.partition("-")
        return cls(int(lo), int(hi) if sep else int(lo))

    def __contains__(self, version: int) -> bool:
        return self.lo <= version <= self.hi

    @property
    def empty(self) -> bool:
        return self.lo > self.hi

    def __str__(self) -> str:
        if self.empty:
            return "none"
        if self.hi == _MAX_VERSION:
            return f"{self.lo}+"
        return str(self.lo) if self.lo == self.hi else f"{self.lo}-{self.hi}"


_PRIMITIVES = frozenset({*t.FIXED_FORMATS, "string", "bytes", "uuid"})
_PY_TYPES: dict[str, type] = {
    "int8": int,
    "int16": int,
    "uint16": int,
    "int32": int,
    "int64": int,
    "float64": float,
    "bool": bool,
    "string": str,
    "bytes": bytes,
    "uuid": Uuid,
}
_TYPE_DEFAULTS: dict[str, Any] = {
    "int8": 0,
    "int16": 0,
    "uint16": 0,
    "int32": 0,
    "int64": 0,
    "float64": 0.0,
    "bool": False,
    "string": "",
    "bytes": b"",
    "uuid": ZERO_UUID,
}


@dataclasses.dataclass(frozen=True, slots=True)
class Field:
    """One field of a message schema (see ``field`` for the constructor used in ``messages.py``).

    ``type`` is a primitive (``int8`` ... ``float64``, ``bool``, ``string``, ``bytes``, ``uuid``),
    ``[]T`` for an array of a primitive or of a struct, or a struct name; struct types list their
    ``fields``. ``flexible_versions`` overrides the message's for this field only: the request
    header's ClientId stays an int16-length string in the flexible header v2.
    """

    name: str
    type: str
    versions: VersionRange
    nullable_versions: VersionRange
    tag: int | None
    tagged_versions: VersionRange
    default: Any
    fields: tuple[Field, ...]
    flexible_versions: VersionRange | None

    @property
    def py_name(self) -> str:
        return snake_case(self.name)

    @property
    def is_array(self) -> bool:
        return self.type.startswith("[]")

    @property
    def element_type(self) -> str:
        return self.type[2:] if self.is_array else self.type

    @property
    def is_struct(self) -> bool:
        return self.element_type not in _PRIMITIVES


def field(
    name: str,
    type: str,
    versions: str,
    *,
    nullable: str = "none",
    tag: int | None = None,
    tagged: str = "none",
    default: Any = _NO_DEFAULT,
    fields: Sequence[Field] = (),
    flexible: str | None = None,
) -> Field:
    """Declare a field with Kafka's JSON vocabulary (version strings such as ``"3+"``).

    ``nullable`` is ``nullableVersions``, ``tagged`` is ``taggedVersions``, ``flexible`` a
    field-level ``flexibleVersions``; ``default`` is the Python value (``None`` for ``"null"``).
    """
    f = Field(
        name=name,
        type=type,
        versions=VersionRange.parse(versions),
        nullable_versions=VersionRange.parse(nullable),
        tag=tag,
        tagged_versions=VersionRange.parse(tagged),
        default=default,
        fields=tuple(fields),
        flexible_versions=None if flexible is None else VersionRange.parse(flexible),
    )
    if f.is_struct and not f.fields:
        raise ValueError(f"field {name}: struct type {type!r} lists no fields")
    if not f.is_struct and f.fields:
        raise ValueError(f"field {name}: primitive type {type!r} cannot have fields")
    if (tag is None) != f.tagged_versions.empty:
        raise ValueError(f"field {name}: a tag and taggedVersions go together")
    return f


_SNAKE_1 = re.compile(r"(.)([A-Z][a-z]+)")
_SNAKE_2 = re.compile(r"([a-z0-9])([A-Z])")


def snake_case(name: str) -> str:
    """``ThrottleTimeMs`` -> ``throttle_time_ms``, ``ClientInstanceId`` -> ``client_instance_id``.

    >>> snake_case("IsrNodes"), snake_case("ZkMigrationReady"), snake_case("TopicId")
    ('isr_nodes', 'zk_migration_ready', 'topic_id')
    """
    return _SNAKE_2.sub(r"\1_\2", _SNAKE_1.sub(r"\1_\2", name)).lower()


# ---------------------------------------------------------------------------------------------
# Generated classes


def _default_of(f: Field) -> tuple[Any, Callable[[], Any] | None]:
    """(value, None) for an immutable default, (None, factory) for a mutable one."""
    if f.default is not _NO_DEFAULT:
        if isinstance(f.default, list):
            return None, list
        return f.default, None
    if f.is_array:
        return None, list
    if f.is_struct:
        return None, None  # filled in by _make_class with the nested class as the factory
    return _TYPE_DEFAULTS[f.type], None


def _annotation(f: Field, nested: dict[str, type]) -> Any:
    if f.is_struct:
        inner: Any = nested[f.element_type]
    else:
        inner = _PY_TYPES[f.element_type]
    tp: Any = list[inner] if f.is_array else inner
    if not f.nullable_versions.empty or f.default is None:
        tp = tp | None
    return tp


class _StructInfo:
    """A generated class with its schema: the field list in class order and the defaults."""

    __slots__ = ("cls", "factories", "fields", "nested", "template")

    def __init__(self, cls: type, fields: tuple[Field, ...], nested: dict[str, _StructInfo]) -> None:
        self.cls = cls
        self.fields = fields
        self.nested = nested
        template: list[Any] = []
        factories: list[Callable[[], Any] | None] = []
        for f in fields:
            value, factory = _default_of(f)
            if f.is_struct and not f.is_array and f.default is _NO_DEFAULT:
                factory = nested[f.element_type].cls
            template.append(value)
            factories.append(factory)
        self.template = template
        self.factories = factories


def _make_class(name: str, qualname: str, module: str, fields: tuple[Field, ...], doc: str) -> _StructInfo:
    nested: dict[str, _StructInfo] = {}
    for f in fields:
        if f.is_struct:
            if f.element_type in nested:
                raise ValueError(f"{qualname}: struct {f.element_type} declared twice")
            nested[f.element_type] = _make_class(
                f.element_type, f"{qualname}.{f.element_type}", module, f.fields, f"The {f.element_type} of {name}."
            )
    names = [f.py_name for f in fields]
    if len(set(names)) != len(names):
        raise ValueError(f"{qualname}: duplicate field names")
    specs = []
    nested_cls = {k: v.cls for k, v in nested.items()}
    for f in fields:
        value, factory = _default_of(f)
        if f.is_struct and not f.is_array and f.default is _NO_DEFAULT:
            factory = nested_cls[f.element_type]
        dc_field = dataclasses.field(default_factory=factory) if factory else dataclasses.field(default=value)
        specs.append((f.py_name, _annotation(f, nested_cls), dc_field))
    cls = dataclasses.make_dataclass(name, specs, slots=True, eq=True, repr=True)
    cls.__qualname__ = qualname
    cls.__module__ = module
    cls.__doc__ = doc
    for struct_name, info in nested.items():
        setattr(cls, struct_name, info.cls)
    return _StructInfo(cls, fields, nested)


# ---------------------------------------------------------------------------------------------
# Per-version plans


_STRING_CODECS = {
    # (compact, nullable) -> (decoder, encoder, minimum size)
    (False, False): (t.decode_string, t.encode_string, 2),
    (False, True): (t.decode_nullable_string, t.encode_nullable_string, 2),
    (True, False): (t.decode_compact_string, t.encode_compact_string, 1),
    (True, True): (t.decode_compact_nullable_string, t.encode_compact_nullable_string, 1),
}
_BYTES_CODECS = {
    (False, False): (t.decode_bytes, t.encode_bytes, 4),
    (False, True): (t.decode_nullable_bytes, t.encode_nullable_bytes, 4),
    (True, False): (t.decode_compact_bytes, t.encode_compact_bytes, 1),
    (True, True): (t.decode_compact_nullable_bytes, t.encode_compact_nullable_bytes, 1),
}
_FIXED_CODECS: dict[str, tuple[Decoder, Encoder]] = {
    name: (getattr(t, f"decode_{name}"), getattr(t, f"encode_{name}")) for name in t.FIXED_FORMATS
}


class _Plan:
    """The compiled decoder and encoder of one struct at one version."""

    __slots__ = ("decode", "encode", "min_size")

    def __init__(self, decode: Decoder, encode: Encoder, min_size: int) -> None:
        self.decode = decode
        self.encode = encode
        self.min_size = min_size


def _primitive_codec(type_name: str, compact: bool, nullable: bool) -> tuple[Decoder, Encoder, int]:
    if type_name == "string":
        return _STRING_CODECS[compact, nullable]
    if type_name == "bytes":
        return _BYTES_CODECS[compact, nullable]
    if nullable:
        raise ValueError(f"type {type_name} cannot be nullable")
    if type_name == "uuid":
        return t.decode_uuid, t.encode_uuid, 16
    dec, enc = _FIXED_CODECS[type_name]
    return dec, enc, t.FIXED_SIZES[type_name]


def _field_codec(
    f: Field, info: _StructInfo, version: int, flexible: bool, cache: dict[tuple[int, int, bool], _Plan]
) -> tuple[Decoder, Encoder, int]:
    compact = flexible if f.flexible_versions is None else flexible and version in f.flexible_versions
    nullable = version in f.nullable_versions
    if f.is_struct:
        plan = _compile(info.nested[f.element_type], version, compact, cache)
        if not f.is_array:
            if nullable:
                raise ValueError(f"field {f.name}: nullable structs are not supported")
            return plan.decode, plan.encode, plan.min_size
        dec = t.array_decoder(plan.decode, compact=compact, nullable=nullable, min_element_size=plan.min_size)
        enc = t.array_encoder(plan.encode, compact=compact, nullable=nullable)
        return dec, enc, 1 if compact else 4
    if f.is_array:
        elem_dec, elem_enc, elem_size = _primitive_codec(f.element_type, compact, False)
        fmt = t.FIXED_FORMATS.get(f.element_type)
        dec = t.array_decoder(
            elem_dec, compact=compact, nullable=nullable, min_element_size=elem_size, fixed_format=fmt
        )
        enc = t.array_encoder(elem_enc, compact=compact, nullable=nullable, fixed_format=fmt)
        return dec, enc, 1 if compact else 4
    return _primitive_codec(f.type, compact, nullable)


def _fixed_run(types: list[str], names: list[str]) -> tuple[Decoder, Encoder]:
    """One struct call for consecutive fixed-width fields (the common int16/int32 headers)."""
    packer = struct.Struct(">" + "".join(t.FIXED_FORMATS[x] for x in types))
    unpack_from, pack, size = packer.unpack_from, packer.pack, packer.size
    what = "/".join(names)

    def decode(buf: Buffer, pos: int) -> tuple[Any, int]:
        try:
            return unpack_from(buf, pos), pos + size
        except struct.error:
            raise ProtocolError(f"truncated {what} at offset {pos}: need {size} bytes") from None

    def encode(out: bytearray, values: tuple[Any, ...]) -> None:
        try:
            out += pack(*values)
        except struct.error as e:
            raise ProtocolError(f"cannot encode {what} = {values!r}: {e}") from None

    return decode, encode


def _compile(info: _StructInfo, version: int, flexible: bool, cache: dict[tuple[int, int, bool], _Plan]) -> _Plan:
    key = (version, id(info), flexible)
    plan = cache.get(key)
    if plan is not None:
        return plan

    cls = info.cls
    present = [(i, f) for i, f in enumerate(info.fields) if version in f.versions]
    tagged = [(i, f) for i, f in present if version in f.tagged_versions]
    regular = [(i, f) for i, f in present if version not in f.tagged_versions]
    if tagged and not flexible:
        raise ValueError(f"{cls.__qualname__} v{version}: tagged fields in a non-flexible version")

    # decode steps (class index, run length or 0 for one value, decoder); encode steps (getter, encoder)
    dec_steps: list[tuple[int, int, Decoder]] = []
    enc_steps: list[tuple[Callable[[Any], Any], Encoder]] = []
    min_size = 1 if flexible else 0
    run: list[tuple[int, Field]] = []

    def flush_run() -> None:
        if not run:
            return
        start = run[0][0]
        names = [f.py_name for _, f in run]
        if len(run) == 1:
            dec, enc = _FIXED_CODECS[run[0][1].type]
            dec_steps.append((start, 0, dec))
        else:
            dec, enc = _fixed_run([f.type for _, f in run], names)
            dec_steps.append((start, len(run), dec))
        enc_steps.append((operator.attrgetter(*names), enc))
        run.clear()

    for i, f in regular:
        if f.type in t.FIXED_FORMATS:
            if run and run[-1][0] != i - 1:
                flush_run()
            run.append((i, f))
            min_size += t.FIXED_SIZES[f.type]
            continue
        flush_run()
        dec, enc, size = _field_codec(f, info, version, flexible, cache)
        min_size += size
        dec_steps.append((i, 0, dec))
        enc_steps.append((operator.attrgetter(f.py_name), enc))
    flush_run()

    tag_decoders: dict[int, tuple[int, Decoder]] = {}
    tag_encoders: list[tuple[int, Callable[[Any], Any], Encoder, Any]] = []
    for i, f in sorted(tagged, key=lambda item: item[1].tag or 0):
        assert f.tag is not None
        dec, enc, _ = _field_codec(f, info, version, flexible, cache)
        tag_decoders[f.tag] = (i, dec)
        default = info.template[i] if info.factories[i] is None else info.factories[i]()
        tag_encoders.append((f.tag, operator.attrgetter(f.py_name), enc, default))

    template = info.template
    # defaults that must be fresh objects per message: mutable ones not decoded in this version
    decoded = {i + k for i, n, _ in dec_steps for k in range(max(n, 1))}
    fresh = [(i, fac) for i, fac in enumerate(info.factories) if fac is not None and i not in decoded]
    steps = tuple(dec_steps)
    encoders = tuple(enc_steps)
    read_tags = _tag_reader(tag_decoders, cls.__qualname__) if flexible else None
    write_tags = _tag_writer(tuple(tag_encoders)) if flexible else None

    def decode(buf: Buffer, pos: int) -> tuple[Any, int]:
        args = template.copy()
        for i, factory in fresh:
            args[i] = factory()
        for i, n, fn in steps:
            value, pos = fn(buf, pos)
            if n:
                args[i : i + n] = value
            else:
                args[i] = value
        if read_tags is not None:
            pos = read_tags(buf, pos, args)
        return cls(*args), pos

    def encode(out: bytearray, obj: Any) -> None:
        for get, fn in encoders:
            fn(out, get(obj))
        if write_tags is not None:
            write_tags(out, obj)

    plan = _Plan(decode, encode, min_size)
    cache[key] = plan
    return plan


def _tag_reader(table: dict[int, tuple[int, Decoder]], owner: str) -> Callable[[Buffer, int, list[Any]], int]:
    uvarint = t.decode_unsigned_varint

    def read_tags(buf: Buffer, pos: int, args: list[Any]) -> int:
        start = pos
        n, pos = uvarint(buf, pos)
        if not n:
            return pos
        if n * 2 > len(buf) - pos:
            raise ProtocolError(f"{owner}: tagged fields at offset {start} claim {n} entries, more than the bytes left")
        for _ in range(n):
            tag, pos = uvarint(buf, pos)
            size, pos = uvarint(buf, pos)
            end = pos + size
            if end > len(buf):
                raise ProtocolError(f"{owner}: tagged field {tag} at offset {pos} claims {size} bytes, past the end")
            entry = table.get(tag)
            if entry is not None:
                i, fn = entry
                value, stop = fn(buf, pos)
                if stop != end:
                    raise ProtocolError(f"{owner}: tagged field {tag} used {stop - pos} of its {size} bytes")
                args[i] = value
            pos = end
        return pos

    return read_tags


def _tag_writer(encoders: tuple[tuple[int, Callable[[Any], Any], Encoder, Any], ...]) -> Encoder:
    uvarint = t.encode_unsigned_varint

    def write_tags(out: bytearray, obj: Any) -> None:
        entries = []
        for tag, get, fn, default in encoders:
            value = get(obj)
            if value != default:
                data = bytearray()
                fn(data, value)
                entries.append((tag, data))
        uvarint(out, len(entries))
        for tag, data in entries:
            uvarint(out, tag)
            uvarint(out, len(data))
            out += data

    return write_tags


# ---------------------------------------------------------------------------------------------
# Messages


class MessageCodec:
    """One message at one version: ``decode(buf, pos) -> (obj, pos)``, ``encode(out, obj)``."""

    __slots__ = ("decode", "encode", "flexible", "spec", "version")

    def __init__(self, spec: MessageSpec, version: int, plan: _Plan) -> None:
        self.spec = spec
        self.version = version
        self.flexible = version in spec.flexible_versions
        self.decode: Decoder = plan.decode
        self.encode: Encoder = plan.encode

    def __repr__(self) -> str:
        return f"<MessageCodec {self.spec.name} v{self.version}>"


class MessageSpec:
    """A message schema (``type`` request, response or header) and its generated class ``cls``."""

    kinds: ClassVar[frozenset[str]] = frozenset({"request", "response", "header"})

    def __init__(
        self,
        name: str,
        kind: str,
        *,
        valid_versions: str,
        flexible_versions: str,
        fields: Sequence[Field],
        api_key: int | None = None,
        module: str = __name__,
    ) -> None:
        if kind not in self.kinds:
            raise ValueError(f"{name}: kind must be one of {sorted(self.kinds)}")
        self.name = name
        self.kind = kind
        self.api_key = api_key
        self.valid_versions = VersionRange.parse(valid_versions)
        self.flexible_versions = VersionRange.parse(flexible_versions)
        self.fields = tuple(fields)
        doc = f"Kafka's {name}" + (f" (API key {api_key})" if api_key is not None else "")
        doc += f", versions {self.valid_versions}, flexible {self.flexible_versions}."
        self._info = _make_class(name, name, module, self.fields, doc)
        self.cls: type = self._info.cls
        self._cache: dict[tuple[int, int, bool], _Plan] = {}
        self._codecs: dict[int, MessageCodec] = {}
        for v in range(self.valid_versions.lo, self.valid_versions.hi + 1):
            self._codecs[v] = MessageCodec(self, v, _compile(self._info, v, v in self.flexible_versions, self._cache))

    def codec(self, version: int) -> MessageCodec:
        """The precompiled codec of ``version``; ``KeyError`` if the schema does not have it."""
        return self._codecs[version]

    @property
    def versions(self) -> range:
        return range(self.valid_versions.lo, self.valid_versions.hi + 1)

    def __repr__(self) -> str:
        return f"<MessageSpec {self.name} v{self.valid_versions}>"
