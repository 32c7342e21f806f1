"""The AdminService's first check of a request: every string in it is one Kafka can carry back.

Every name and value the AdminService accepts ends up in the config log and, sooner or later, in a Kafka
response (a DescribeClientQuotas entry, a DescribeConfigs value) or a tool's output. A Kafka STRING holds at
most 32,767 bytes of valid UTF-8 (``quotaplane.config.validate_string``, the one rule every door applies),
so a request holding any string field that breaks the rule is refused whole, before the backend sees it:
INVALID_ARGUMENT, a message naming the field by its path in the request (``entries[0].entity[1].entity_name``)
and INVALID_REQUEST (42) in the Kafka error-code trailer, as a Kafka broker refuses a request it cannot parse.

Protobuf itself refuses malformed UTF-8 in a ``string`` field while it parses, before any handler runs, and
gRPC would answer that with a bare INTERNAL. :func:`lenient` is the request deserializer that turns that
failure into an :class:`Undecodable` request instead, which :func:`request_problem` names by walking the
wire format to the first field that is not valid UTF-8.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import DecodeError, Message

from quotaplane.config import string_problem

__all__ = ["Undecodable", "lenient", "request_problem"]


class Undecodable:
    """A request protobuf refused to parse; ``problem`` says where and why."""

    __slots__ = ("problem",)

    def __init__(self, problem: str) -> None:
        self.problem = problem


def lenient(message_type: type[Message]) -> Callable[[bytes], Message | Undecodable]:
    """A request deserializer for ``message_type`` that answers :class:`Undecodable` instead of raising."""

    def deserialize(data: bytes) -> Message | Undecodable:
        try:
            return message_type.FromString(data)
        except DecodeError as e:
            path = _bad_utf8_path(message_type.DESCRIPTOR, data, "")
            if path is not None:
                return Undecodable(f"{path}: not valid UTF-8")
            return Undecodable(f"the request is not a valid {message_type.DESCRIPTOR.name}: {e}")

    return deserialize


def request_problem(request: Message | Undecodable) -> str | None:
    """The first string field (by its path) a Kafka client could not receive back and why, or None."""
    if isinstance(request, Undecodable):
        return request.problem
    return _message_problem(request, "")


def _message_problem(message: Message, path: str) -> str | None:
    for field, value in message.ListFields():
        name = f"{path}{field.name}"
        values: list[Any] = list(value) if field.is_repeated else [value]
        for index, item in enumerate(values):
            where = f"{name}[{index}]" if field.is_repeated else name
            if field.type == FieldDescriptor.TYPE_MESSAGE:
                problem = _message_problem(item, f"{where}.")
            elif field.type == FieldDescriptor.TYPE_STRING:
                problem = string_problem(item)
                problem = None if problem is None else f"{where}: {problem}"
            else:
                problem = None
            if problem is not None:
                return problem
    return None


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7


def _bad_utf8_path(descriptor: Descriptor, data: bytes, path: str) -> str | None:
    """The path of the first ``string`` field of ``data`` that is not valid UTF-8 (None if there is none or
    the bytes are not a well-formed message): the wire format walked with the message's descriptor."""
    seen: dict[int, int] = {}
    pos = 0
    try:
        while pos < len(data):
            key, pos = _varint(data, pos)
            number, wire_type = key >> 3, key & 7
            if wire_type == 0:
                _, pos = _varint(data, pos)
                continue
            if wire_type in (1, 5):
                pos += 8 if wire_type == 1 else 4
                continue
            if wire_type != 2:
                return None
            size, pos = _varint(data, pos)
            chunk, pos = data[pos : pos + size], pos + size
            field = descriptor.fields_by_number.get(number)
            if field is None:
                continue
            index = seen.get(number, 0)
            seen[number] = index + 1
            where = f"{path}{field.name}[{index}]" if field.is_repeated else f"{path}{field.name}"
            if field.type == FieldDescriptor.TYPE_STRING:
                try:
                    chunk.decode("utf-8")
                except UnicodeDecodeError:
                    return where
            elif field.type == FieldDescriptor.TYPE_MESSAGE:
                found = _bad_utf8_path(field.message_type, chunk, f"{where}.")
                if found is not None:
                    return found
    except IndexError:
        return None
    return None
