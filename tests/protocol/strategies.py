"""Hypothesis strategies generated from the codec's own schemas: any message at any version."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from quotaplane.kafka_uuid import Uuid
from quotaplane.protocol.messages import APIS
from quotaplane.protocol.schema import Field, MessageSpec

_PRIMITIVES: dict[str, st.SearchStrategy[Any]] = {
    "int8": st.integers(-(2**7), 2**7 - 1),
    "int16": st.integers(-(2**15), 2**15 - 1),
    "uint16": st.integers(0, 2**16 - 1),
    "int32": st.integers(-(2**31), 2**31 - 1),
    "int64": st.integers(-(2**63), 2**63 - 1),
    "float64": st.floats(allow_nan=False),
    "bool": st.booleans(),
    # no lone surrogates: they are not encodable as UTF-8, and Kafka strings are UTF-8
    "string": st.text(st.characters(blacklist_categories=("Cs",)), max_size=12),
    "bytes": st.binary(max_size=24),
    "uuid": st.binary(min_size=16, max_size=16).map(Uuid),
}


def _value(f: Field, owner: type, version: int) -> st.SearchStrategy[Any]:
    if f.is_struct:
        element = struct_strategy(getattr(owner, f.element_type), f.fields, version)
    else:
        element = _PRIMITIVES[f.element_type]
    strategy = st.lists(element, max_size=3) if f.is_array else element
    if version in f.nullable_versions:
        strategy = st.none() | strategy
    return strategy


def struct_strategy(cls: type, fields: tuple[Field, ...], version: int) -> st.SearchStrategy[Any]:
    """Instances of ``cls`` with every field of ``version`` drawn, the others left at their default."""
    return st.builds(cls, **{f.py_name: _value(f, cls, version) for f in fields if version in f.versions})


def message_strategy(spec: MessageSpec, version: int) -> st.SearchStrategy[Any]:
    return struct_strategy(spec.cls, spec.fields, version)


#: every (spec, version) of every API, requests and responses
ALL_MESSAGE_VERSIONS: list[tuple[MessageSpec, int]] = [
    (spec, v) for req, resp in APIS.values() for spec in (req, resp) for v in spec.versions
]
REQUEST_VERSIONS: list[tuple[MessageSpec, int]] = [(req, v) for req, _ in APIS.values() for v in req.versions]


@st.composite
def request_frames(draw: st.DrawFn) -> bytes:
    """A valid request frame (without the size prefix) of any API and version."""
    from quotaplane.protocol import encode_request

    spec, version = draw(st.sampled_from(REQUEST_VERSIONS))
    body = draw(message_strategy(spec, version))
    client_id = draw(st.none() | _PRIMITIVES["string"])
    return encode_request(spec.api_key, version, draw(_PRIMITIVES["int32"]), body, client_id=client_id)[4:]


#: Byte-level damage to a valid frame: flip a byte, truncate, insert.
MUTATIONS = st.one_of(
    st.tuples(st.just("flip"), st.integers(0, 10_000), st.integers(1, 255)),
    st.tuples(st.just("truncate"), st.integers(0, 10_000), st.just(0)),
    st.tuples(st.just("insert"), st.integers(0, 10_000), st.integers(0, 255)),
    st.tuples(st.just("delete"), st.integers(0, 10_000), st.just(0)),
    st.tuples(st.just("max"), st.integers(0, 10_000), st.sampled_from([0x7F, 0x80, 0xFF])),
)


def mutate(frame: bytes, mutations: list[tuple[str, int, int]]) -> bytes:
    data = bytearray(frame)
    for kind, where, value in mutations:
        if not data:
            break
        i = where % len(data)
        if kind == "flip":
            data[i] ^= value
        elif kind == "truncate":
            del data[i:]
        elif kind == "insert":
            data.insert(i, value)
        elif kind == "delete":
            del data[i]
        else:  # a run of length-like bytes: 7f ff ff ff, 80 80 80 ..., ff ff ff ff
            data[i : i + 4] = bytes([value]) * 4
    return bytes(data)
