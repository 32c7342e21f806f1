"""Every client-quota entity name the config layer accepts is one a Kafka client can receive back.

Kafka's generated message code refuses a STRING longer than 32,767 bytes (``string field ... had invalid
length``, ``... is too long to be serialized``: ``MessageDataGenerator``), so a broker can neither receive
nor return a longer name; ``ClientQuotaControlManager.validateEntity`` itself only refuses empty names
(``Empty user not supported``), control characters included. The config layer refuses what the wire
cannot carry, whatever door the change came through, and writes nothing for it.
"""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from quotaplane.config import (
    MAX_STRING_BYTES,
    ClientQuotaAlteration,
    ClientQuotaFilterComponent,
    ConfigStore,
    shown,
    string_problem,
    validate_entity,
    validate_string,
)
from quotaplane.config._client_quotas import format_entity
from quotaplane.errors import Errors, InvalidConfigurationError, InvalidRequestError

T0 = 1_700_000_000_000


def carriable(text: str) -> bool:
    return string_problem(text) is None


@pytest.fixture
def store(tmp_path):
    with ConfigStore.open(tmp_path, fsync=False) as s:
        yield s


def alter(store: ConfigStore, entity: dict, key: str = "producer_byte_rate", value: float = 1024.0):
    [result] = store.alter_client_quotas([ClientQuotaAlteration(entity, [(key, value)])], now_ms=T0)
    return result


# --- the rule ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "ok"),
    [
        ("x" * MAX_STRING_BYTES, True),
        ("x" * (MAX_STRING_BYTES + 1), False),
        ("é" * (MAX_STRING_BYTES // 2) + "x", True),  # 32,767 bytes in 16,384 characters
        ("é" * (MAX_STRING_BYTES // 2 + 1), False),  # 32,768 bytes: the limit is bytes, not characters
        ("😀" * (MAX_STRING_BYTES // 4) + "xxx", True),
        ("a\ud800b", False),  # a lone surrogate: UTF-8 cannot encode it
        ("a\udcffb", False),  # what surrogateescape makes of an undecodable byte
        ("a\nb\tc\x00\x1b[31m\u2028", True),  # control characters: Kafka accepts them
        ("", True),
    ],
)
def test_a_kafka_string_is_at_most_32767_bytes_of_valid_utf8(text: str, ok: bool) -> None:
    assert carriable(text) is ok
    if ok:
        assert validate_string(text, "thing") is text
    else:
        with pytest.raises(InvalidRequestError) as e:
            validate_string(text, "thing")
        assert str(e.value).startswith("Invalid thing '")
        assert carriable(str(e.value)) and len(str(e.value)) < 300  # the message itself travels


def test_the_error_type_is_the_callers() -> None:
    with pytest.raises(InvalidConfigurationError) as e:
        validate_string("x" * 40_000, "value for configuration metrics", InvalidConfigurationError)
    assert e.value.error is Errors.INVALID_CONFIG
    assert "40000 bytes of UTF-8, above the 32767" in str(e.value)


def unescape(text: str) -> str:
    """The inverse of ``shown``'s escaping (``\\\\``, ``\\n``, ``\\r``, ``\\t``, ``\\xNN``, ``\\uNNNN``)."""
    simple = {"\\": "\\", "n": "\n", "r": "\r", "t": "\t"}
    return re.sub(
        r"\\(\\|n|r|t|x[0-9a-f]{2}|u[0-9a-f]{4})",
        lambda m: simple.get(m.group(1)) or chr(int(m.group(1)[1:], 16)),
        text,
    )


@given(st.text(alphabet=st.characters(codec=None)))
def test_shown_is_one_carriable_line_that_can_be_undone(text: str) -> None:
    full = shown(text, limit=len(text))
    assert carriable(full)
    assert len(full.splitlines()) <= 1
    assert unescape(full) == text


# --- the config layer refuses, and writes nothing -------------------------------------------------------------
@pytest.mark.parametrize("entity_type", ["user", "client-id"])
def test_a_32768_byte_name_is_refused_and_nothing_is_written(store: ConfigStore, entity_type: str) -> None:
    result = alter(store, {entity_type: "n" * (MAX_STRING_BYTES + 1)})
    assert result.error is Errors.INVALID_REQUEST
    assert result.message.startswith(f"Invalid {entity_type} name 'nnnn")
    assert "32768 bytes of UTF-8, above the 32767 a Kafka string can carry" in result.message
    assert store.end_offset == 0
    assert store.describe_client_quotas([]) == []


def test_a_32767_byte_name_is_kept_and_described(store: ConfigStore) -> None:
    name = "é" * (MAX_STRING_BYTES // 2) + "x"
    assert alter(store, {"user": name, "client-id": None}).ok
    found = store.describe_client_quotas([ClientQuotaFilterComponent.of_entity("user", name)])
    assert found == [({"user": name, "client-id": None}, {"producer_byte_rate": 1024.0})]


def test_a_lone_surrogate_is_refused_in_one_entity_and_the_others_apply(store: ConfigStore) -> None:
    results = store.alter_client_quotas(
        [
            ClientQuotaAlteration({"user": "bad\udcff"}, [("producer_byte_rate", 10.0)]),
            ClientQuotaAlteration({"user": "good"}, [("producer_byte_rate", 10.0)]),
        ],
        now_ms=T0,
    )
    assert [r.error for r in results] == [Errors.INVALID_REQUEST, Errors.NONE]
    assert "lone surrogate U+DCFF at character 3" in results[0].message
    assert "bad\\udcff" in results[0].message and carriable(results[0].message)
    assert store.describe_client_quotas([]) == [({"user": "good"}, {"producer_byte_rate": 10.0})]


def test_control_characters_are_accepted_as_kafka_accepts_them(store: ConfigStore) -> None:
    name = "multi\nline\tname\x1b"
    assert alter(store, {"client-id": name}).ok
    assert store.describe_client_quotas([ClientQuotaFilterComponent.of_entity("client-id", name)]) == [
        ({"client-id": name}, {"producer_byte_rate": 1024.0})
    ]


def test_validate_entity_checks_names_before_the_combination() -> None:
    """An IP entity's name is checked before it is resolved: a huge name never reaches the resolver."""
    asked: list[str] = []
    with pytest.raises(InvalidRequestError, match="Invalid ip name"):
        validate_entity({"ip": "h" * 40_000}, resolver=asked.append)
    assert asked == []


@pytest.mark.parametrize("bad", ["\ud800" * 3, "t" * 40_000])
def test_messages_quoting_an_unknown_type_or_key_stay_carriable(store: ConfigStore, bad: str) -> None:
    [by_type] = store.alter_client_quotas(
        [ClientQuotaAlteration([(bad, "x")], [("producer_byte_rate", 1.0)])], now_ms=T0
    )
    [by_key] = store.alter_client_quotas([ClientQuotaAlteration({"user": "u"}, [(bad, 1.0)])], now_ms=T0)
    for result in (by_type, by_key):
        assert result.error is Errors.INVALID_REQUEST
        assert carriable(result.message) and len(result.message) < 400
    assert by_type.message.startswith("Unhandled client quota entity type: ")
    assert by_key.message.startswith("Invalid configuration key ")
    assert store.end_offset == 0


def test_kafka_messages_are_unchanged_for_ordinary_names() -> None:
    assert (
        format_entity({"user": "alice", "client-id": None}) == "ClientQuotaEntity(entries={user=alice, client-id=null})"
    )
    long_name = "n" * 20_000
    assert carriable(format_entity({"user": long_name})) and len(format_entity({"user": long_name})) < 200
