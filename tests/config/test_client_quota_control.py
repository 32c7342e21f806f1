"""Kafka's ``ClientQuotaControlManagerTest`` (metadata module) and the alter cases of
``ClientQuotasRequestTest`` (core), ported to quotaplane's pure planner and ConfigStore.

Cases and numbers are Kafka's; where quotaplane documents a difference (``producer_ids_rate`` is a
user-only key; a duplicated entity fails both occurrences) the test checks the documented behaviour.
"""

from __future__ import annotations

import math
import socket
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from quotaplane.config import (
    ClientQuotaAlteration,
    ClientQuotaFilterComponent,
    ConfigImage,
    ConfigStore,
    is_valid_ip_entity,
    plan_alter_client_quotas,
    validate_quota_key_value,
)
from quotaplane.config import records as pb
from quotaplane.config._client_quotas import config_keys_for_entity
from quotaplane.errors import Errors, InvalidRequestError

T0 = 1_700_000_000_000
USER_AND_CLIENT_KEYS = {"producer_byte_rate", "consumer_byte_rate", "controller_mutation_rate", "request_percentage"}
COMBINATION_MESSAGE = "Invalid quota entity combination, IP entity shouldnot be combined with User or ClientId"

Entity = Mapping[str | None, str | None] | Sequence[tuple[object, object]]
Ops = Sequence[tuple[object, object]]


def _unresolvable(host: str) -> object:
    """An injected resolver for which every host name is unknown (no DNS in the tests)."""
    raise socket.gaierror(socket.EAI_NONAME, f"unknown host {host}")


def _resolves(host: str) -> object:
    """An injected resolver for which every host name resolves."""
    return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("10.0.0.1", 0))]


def _plan_one(image: ConfigImage, entity: Entity, ops: Ops, **kwargs: object):
    plan = plan_alter_client_quotas(image, [ClientQuotaAlteration(entity, ops)], **kwargs)  # type: ignore[arg-type]
    assert len(plan.results) == 1
    return plan.results[0], plan.records


def _alter(image: ConfigImage, alterations: Sequence[ClientQuotaAlteration]) -> list[pb.Event]:
    """Kafka's ``alterQuotas`` helper: every entity succeeds, then the records are replayed."""
    plan = plan_alter_client_quotas(image, alterations, resolver=_unresolvable)
    assert all(result.ok for result in plan.results), plan.results
    for event in plan.records:
        image.apply(image.end_offset, event)
    return plan.records


def _quota_record(entity: Sequence[tuple[str, str | None]], key: str, value: float | None) -> pb.Event:
    event = pb.Event()
    for entity_type, name in entity:
        component = event.client_quota.entity.add(entity_type=entity_type)
        if name is not None:
            component.entity_name = name
    event.client_quota.key = key
    if value is None:
        event.client_quota.remove = True
    else:
        event.client_quota.value = value
    return event


# --- testInvalidEntityTypes ------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("entity", "message"),
    [
        ({"foo": "bar"}, "Unhandled client quota entity type: foo"),
        ({None: "null"}, "Unhandled client quota entity type: null"),
        ({"user": "user-1", "foo": "bar"}, "Unhandled client quota entity type: foo"),
        ({"foo": "bar", "ip": "1.2.3.4"}, "Unhandled client quota entity type: foo"),
        ({"user": "user-1", "ip": "1.2.3.4"}, COMBINATION_MESSAGE),
        ({"client-id": "user-1", "ip": "1.2.3.4"}, COMBINATION_MESSAGE),
        ({}, "Invalid empty client quota entity"),
    ],
)
def test_invalid_entity_types(entity: Entity, message: str) -> None:
    """ClientQuotaControlManagerTest.testInvalidEntityTypes: INVALID_REQUEST, no records."""
    result, records = _plan_one(ConfigImage(), entity, [("producer_byte_rate", 10000.0)])
    assert (result.error, result.message) == (Errors.INVALID_REQUEST, message)
    assert records == []


# --- testInvalidQuotaKeys --------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("ops", "message"),
    [
        ([("not.a.quota.key", 0.0), ("request_percentage", 99.9)], "Invalid configuration key not.a.quota.key"),
        ([("request_percentage", 99.9), ("not.a.quota.key", 0.0)], "Invalid configuration key not.a.quota.key"),
        ([(None, 99.9)], "Invalid configuration key null"),
    ],
)
def test_invalid_quota_keys(ops: Ops, message: str) -> None:
    """ClientQuotaControlManagerTest.testInvalidQuotaKeys: one bad key fails the entity, valid keys included."""
    result, records = _plan_one(ConfigImage(), {"user": "user-1"}, ops)
    assert (result.error, result.message) == (Errors.INVALID_REQUEST, message)
    assert records == []


# --- testAlterAndRemove ----------------------------------------------------------------------------
def test_alter_and_remove() -> None:
    """ClientQuotaControlManagerTest.testAlterAndRemove, with the record count of each step."""
    image = ConfigImage()
    user = {"user": "user-1"}

    def alter(*ops: tuple[str, float | None]) -> list[pb.Event]:
        return _alter(image, [ClientQuotaAlteration(user, list(ops))])

    assert len(alter(("producer_byte_rate", 10000.0))) == 1
    assert image.client_quota(user) == {"producer_byte_rate": 10000.0}

    # replace it and add another
    assert len(alter(("producer_byte_rate", 10001.0), ("consumer_byte_rate", 20000.0))) == 2
    assert image.client_quota(user) == {"producer_byte_rate": 10001.0, "consumer_byte_rate": 20000.0}

    # remove one, the other remains
    [removal] = alter(("producer_byte_rate", None))
    assert removal.client_quota.remove and removal.client_quota.key == "producer_byte_rate"
    assert image.client_quota(user) == {"consumer_byte_rate": 20000.0}

    # removing a quota that is not set changes nothing and writes nothing
    assert alter(("request_percentage", None)) == []
    assert image.client_quota(user) == {"consumer_byte_rate": 20000.0}

    # all quotas removed: the entity is gone
    assert len(alter(("consumer_byte_rate", None))) == 1
    assert (("user", "user-1"),) not in image.client_quotas()

    # remove a non-existent quota again: still nothing
    assert alter(("consumer_byte_rate", None)) == []
    assert image.client_quotas() == {}

    # mixed update
    records = alter(
        ("request_percentage", 99.0),
        ("controller_mutation_rate", None),
        ("producer_byte_rate", 10002.0),
        ("consumer_byte_rate", 20001.0),
    )
    assert len(records) == 3  # the removal of an unset key writes nothing
    assert image.client_quota(user) == {
        "consumer_byte_rate": 20001.0,
        "producer_byte_rate": 10002.0,
        "request_percentage": 99.0,
    }


def test_removals_are_not_validated_but_their_entity_is() -> None:
    """alterClientQuotaEntity: a removal (null value) skips validateQuotaKeyValue, so removing a key the
    entity cannot have is a no-op success; the entity itself is still validated first."""
    result, records = _plan_one(ConfigImage(), {"user": "u"}, [("not.a.quota.key", None), (None, None)])
    assert result.ok and records == []
    result, records = _plan_one(ConfigImage(), {"user": "u", "ip": "1.2.3.4"}, [("producer_byte_rate", None)])
    assert (result.error, result.message) == (Errors.INVALID_REQUEST, COMBINATION_MESSAGE)


def test_setting_the_current_value_writes_nothing() -> None:
    """ClientQuotaControlManager: "Only record the new value if it has changed"."""
    image = ConfigImage()
    _alter(image, [ClientQuotaAlteration({"user": "u"}, [("producer_byte_rate", 5000.0)])])
    result, records = _plan_one(image, {"user": "u"}, [("producer_byte_rate", 5000)])
    assert result.ok and records == []
    result, records = _plan_one(image, {"user": "u"}, [("producer_byte_rate", 5001.0)])
    assert result.ok and [r.client_quota.value for r in records] == [5001.0]


# --- testEntityTypes -------------------------------------------------------------------------------
ENTITY_TYPE_CASES: list[tuple[list[tuple[str, str | None]], float]] = [
    ([("user", "user-1"), ("client-id", "client-id-1")], 50.50),
    ([("user", "user-2"), ("client-id", "client-id-1")], 51.51),
    ([("user", "user-3"), ("client-id", "client-id-2")], 52.52),
    ([("user", None), ("client-id", "client-id-1")], 53.53),
    ([("user", "user-1"), ("client-id", None)], 54.54),
    ([("user", "user-3"), ("client-id", None)], 55.55),
    ([("user", "user-1")], 56.56),
    ([("user", "user-2")], 57.57),
    ([("user", "user-3")], 58.58),
    ([("user", None)], 59.59),
    ([("client-id", "client-id-2")], 60.60),
]


def test_entity_types_and_their_exact_records() -> None:
    """ClientQuotaControlManagerTest.testEntityTypes: the exact ClientQuotaRecords for every entity shape.

    quotaplane keeps the request's order of entities and writes each entity's components sorted by
    type (Kafka's test deep-sorts both sides), a default name as an absent ``entity_name``.
    """
    image = ConfigImage()
    records = _alter(
        image, [ClientQuotaAlteration(entity, [("request_percentage", v)]) for entity, v in ENTITY_TYPE_CASES]
    )
    expected = [
        _quota_record(sorted(entity, key=lambda pair: pair[0]), "request_percentage", value)
        for entity, value in ENTITY_TYPE_CASES
    ]
    assert records == expected
    for record in records:
        assert not record.client_quota.remove
        assert [e.entity_type for e in record.client_quota.entity] == sorted(
            e.entity_type for e in record.client_quota.entity
        )
    default_user = records[3].client_quota.entity
    assert [(e.entity_type, e.HasField("entity_name")) for e in default_user] == [("client-id", True), ("user", False)]
    assert len(image.client_quotas()) == 11


# --- isValidIpEntity -------------------------------------------------------------------------------
def test_is_valid_ip_entity_with_null() -> None:
    """ClientQuotaControlManagerTest.testIsValidIpEntityWithNull: the default IP entity."""
    assert is_valid_ip_entity(None, _unresolvable)


def test_is_valid_ip_entity_with_unresolvable_hostname_injected() -> None:
    """testIsValidIpEntityWithUnresolvableHostname, deterministic: the resolver says the host is unknown."""
    assert not is_valid_ip_entity("example.invalid", _unresolvable)
    assert is_valid_ip_entity("example.invalid", _resolves)


def test_is_valid_ip_entity_with_unresolvable_hostname_default_resolver() -> None:
    """testIsValidIpEntityWithUnresolvableHostname through the default resolver: ``.invalid`` never
    resolves (RFC 2606 / 6761), and the answer is local, so this is fast offline."""
    assert not is_valid_ip_entity("example.invalid")


@pytest.mark.parametrize("ip", ["127.0.0.1", "1.2.3.4", "::1", "2001:db8::1", "0.0.0.0"])
def test_is_valid_ip_entity_with_ip_literals_never_resolves(ip: str) -> None:
    """testIsValidIpEntityWithLocalhost: an IP literal is valid without asking a resolver."""

    def must_not_resolve(host: str) -> object:
        raise AssertionError(f"resolved {host}")

    assert is_valid_ip_entity(ip, must_not_resolve)


def test_is_valid_ip_entity_accepts_a_host_with_only_ipv6_addresses(monkeypatch: pytest.MonkeyPatch) -> None:
    """Java's ``InetAddress.getByName`` resolves a name that has only AAAA records; so does quotaplane's
    default resolver (``gethostbyname`` is IPv4-only and would refuse it)."""

    def getaddrinfo(host: str, port: object, *args: object, **kwargs: object) -> list[tuple]:
        if host == "v6only.example":
            return [(socket.AF_INET6, socket.SOCK_STREAM, 6, "", ("2001:db8::7", 0, 0, 0))]
        raise socket.gaierror(socket.EAI_NONAME, "unknown")

    def gethostbyname(host: str) -> str:
        raise socket.gaierror(socket.EAI_NONAME, "no IPv4 address")

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    monkeypatch.setattr(socket, "gethostbyname", gethostbyname)
    assert is_valid_ip_entity("v6only.example")
    assert not is_valid_ip_entity("nowhere.example")


# --- configKeysForEntityType -----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("entity", "expected"),
    [
        # quotaplane adds KIP-936's producer_ids_rate to user entities (documented difference)
        ({"user": "foo"}, USER_AND_CLIENT_KEYS | {"producer_ids_rate"}),
        ({"user": None}, USER_AND_CLIENT_KEYS | {"producer_ids_rate"}),
        ({"client-id": "foo"}, USER_AND_CLIENT_KEYS),
        ({"client-id": "foo", "user": "foo"}, USER_AND_CLIENT_KEYS),
        ({"ip": "127.0.0.1"}, {"connection_creation_rate"}),
        ({"ip": None}, {"connection_creation_rate"}),
    ],
)
def test_config_keys_for_entity_type(entity: dict[str, str | None], expected: set[str]) -> None:
    """testConfigKeysForEntityTypeWith{User,ClientId,UserAndClientId,Ip}."""
    assert set(config_keys_for_entity(entity, _unresolvable)) == expected


@pytest.mark.parametrize(
    ("entity", "message"),
    [
        ({}, "Invalid empty client quota entity"),
        ({"ip": "127.0.0.1", "user": "foo"}, COMBINATION_MESSAGE),
        ({"ip": "127.0.0.1", "client-id": "foo"}, COMBINATION_MESSAGE),
        ({"ip": "example.invalid"}, "example.invalid is not a valid IP or resolvable host."),
    ],
)
def test_config_keys_errors(entity: dict[str, str | None], message: str) -> None:
    """testConfigKeysForEmptyEntity, ...WithIpAndUser, ...WithIpAndClientId, ...ForUnresolvableIpEntity."""
    with pytest.raises(InvalidRequestError) as raised:
        config_keys_for_entity(entity, _unresolvable)
    assert str(raised.value) == message
    assert raised.value.error is Errors.INVALID_REQUEST


def test_producer_ids_rate_is_a_user_only_key() -> None:
    """quotaplane's documented KIP-936 key: on a user or the default user, nowhere else."""
    image = ConfigImage()
    for entity in ({"user": "alice"}, {"user": None}):
        result, records = _plan_one(image, entity, [("producer_ids_rate", 10.0)])
        assert result.ok and records[0].client_quota.key == "producer_ids_rate"
    for entity in ({"client-id": "app"}, {"user": "alice", "client-id": "app"}, {"ip": "1.2.3.4"}):
        result, records = _plan_one(image, entity, [("producer_ids_rate", 10.0)])
        assert (result.error, result.message) == (Errors.INVALID_REQUEST, "Invalid configuration key producer_ids_rate")
        assert records == []


# --- validateQuotaKeyValue -------------------------------------------------------------------------
CLIENT_ID_KEYS = config_keys_for_entity({"client-id": "foo"})
IP_KEYS = config_keys_for_entity({"ip": "127.0.0.1"})


@pytest.mark.parametrize(
    ("keys", "key", "value", "message"),
    [
        (CLIENT_ID_KEYS, "foobar", 1.0, "Invalid configuration key foobar"),
        (CLIENT_ID_KEYS, "producer_byte_rate", 0.0, "Quota producer_byte_rate must be greater than 0"),
        (CLIENT_ID_KEYS, "consumer_byte_rate", -2.0, "Quota consumer_byte_rate must be greater than 0"),
        (
            CLIENT_ID_KEYS,
            "consumer_byte_rate",
            36893488147419103232.4,
            "Proposed value for consumer_byte_rate is too large for a LONG.",
        ),
        (CLIENT_ID_KEYS, "consumer_byte_rate", 2.245, "consumer_byte_rate cannot be a fractional value."),
        (
            IP_KEYS,
            "connection_creation_rate",
            2147483648.0,
            "Proposed value for connection_creation_rate is too large for an INT.",
        ),
        (IP_KEYS, "connection_creation_rate", 10.5, "connection_creation_rate cannot be a fractional value."),
        (IP_KEYS, "connection_creation_rate", -1.0, "Quota connection_creation_rate must be greater than 0"),
        (IP_KEYS, "producer_byte_rate", 1.0, "Invalid configuration key producer_byte_rate"),
        (CLIENT_ID_KEYS, "connection_creation_rate", 1.0, "Invalid configuration key connection_creation_rate"),
        # an int beyond any double is as large as Kafka's infinite double
        (
            CLIENT_ID_KEYS,
            "producer_byte_rate",
            10**400,
            "Proposed value for producer_byte_rate is too large for a LONG.",
        ),
        (CLIENT_ID_KEYS, "producer_byte_rate", 2**64, "Proposed value for producer_byte_rate is too large for a LONG."),
    ],
)
def test_validate_quota_key_value_errors(keys: Mapping, key: str, value: float, message: str) -> None:
    """testValidateQuotaKeyValueFor{UnknownQuota,ZeroQuota,NegativeQuota,ConsumerByteRateTooLarge,
    FractionalConsumerByteRate}, plus the INT cases of connection_creation_rate."""
    with pytest.raises(InvalidRequestError) as raised:
        validate_quota_key_value(keys, key, value)
    assert str(raised.value) == message


@pytest.mark.parametrize(
    ("keys", "key", "value"),
    [
        (CLIENT_ID_KEYS, "consumer_byte_rate", 1234.0),
        (CLIENT_ID_KEYS, "consumer_byte_rate", 1235.0000001),  # within Kafka's 1e-6 of a whole number
        (CLIENT_ID_KEYS, "request_percentage", 56.62367),
        (CLIENT_ID_KEYS, "producer_byte_rate", float(2**63)),  # not > (double) Long.MAX_VALUE
        (IP_KEYS, "connection_creation_rate", 2147483647.0),
        (CLIENT_ID_KEYS, "controller_mutation_rate", 1e300),
    ],
)
def test_validate_quota_key_value_accepts(keys: Mapping, key: str, value: float) -> None:
    """testValidateQuotaKeyValueForValid{ConsumerByteRate,ConsumerByteRate2,RequestPercentage}: the value
    is kept as sent (Kafka stores the double, it does not round)."""
    assert validate_quota_key_value(keys, key, value) == value


ALL_KEYS = [(CLIENT_ID_KEYS, k) for k in sorted(USER_AND_CLIENT_KEYS)] + [(IP_KEYS, "connection_creation_rate")]


@given(
    keyed=st.sampled_from(ALL_KEYS),
    value=st.one_of(
        st.floats(max_value=0.0, allow_nan=False, allow_infinity=True), st.integers(max_value=0), st.just(-0.0)
    ),
)
def test_non_positive_values_are_refused_for_every_key(keyed: tuple[Mapping, str], value: float) -> None:
    """Kafka: ``value <= 0.0`` is "Quota <key> must be greater than 0", whatever the key's type."""
    keys, key = keyed
    with pytest.raises(InvalidRequestError) as raised:
        validate_quota_key_value(keys, key, value)
    assert str(raised.value) == f"Quota {key} must be greater than 0"


@given(
    keyed=st.sampled_from(
        [
            (CLIENT_ID_KEYS, "producer_byte_rate"),
            (CLIENT_ID_KEYS, "consumer_byte_rate"),
            (IP_KEYS, "connection_creation_rate"),
        ]
    ),
    whole=st.integers(0, 10**6),
    fraction=st.floats(1e-5, 1 - 1e-5),
)
def test_fractional_values_of_integral_keys_are_refused(
    keyed: tuple[Mapping, str], whole: int, fraction: float
) -> None:
    """Kafka's ``getErrorForIntegralQuotaValue``: a LONG or INT quota more than 1e-6 from a whole number."""
    keys, key = keyed
    value = whole + fraction
    assert abs(math.fmod(value, 1.0)) > 1e-6
    with pytest.raises(InvalidRequestError) as raised:
        validate_quota_key_value(keys, key, value)
    assert str(raised.value) == f"{key} cannot be a fractional value."


@given(keyed=st.sampled_from(ALL_KEYS), value=st.integers(1, 2**31 - 1))
def test_whole_positive_values_in_range_are_kept(keyed: tuple[Mapping, str], value: int) -> None:
    keys, key = keyed
    assert validate_quota_key_value(keys, key, value) == float(value)


# --- duplicates (alterClientQuotas) ----------------------------------------------------------------
def test_duplicate_quota_key_fails_the_entity_and_writes_nothing_of_it() -> None:
    """Kafka's alterClientQuotas: a key named twice for one entity fails that entity (INVALID_REQUEST).

    Kafka then overwrites the message with "Ignoring duplicate entity ..."; quotaplane keeps the more
    precise "Duplicate quota key ..." (same error code).
    """
    plan = plan_alter_client_quotas(
        ConfigImage(),
        [
            ClientQuotaAlteration({"user": "a"}, [("producer_byte_rate", 1.0), ("producer_byte_rate", 2.0)]),
            ClientQuotaAlteration({"user": "b"}, [("producer_byte_rate", 3.0)]),
        ],
    )
    assert plan.results[0].error is Errors.INVALID_REQUEST
    assert plan.results[0].message == (
        "Duplicate quota key producer_byte_rate not updating quota for this entity ClientQuotaEntity(entries={user=a})"
    )
    assert plan.results[1].ok
    assert [r.client_quota.entity[0].entity_name for r in plan.records] == ["b"]


def test_duplicate_entity_fails_both_occurrences_and_writes_neither() -> None:
    """quotaplane's documented difference: Kafka answers "Ignoring duplicate entity" for the entity but
    keeps the first occurrence's records; quotaplane fails both and appends nothing of the entity. The
    same entity in another component order is the same entity."""
    plan = plan_alter_client_quotas(
        ConfigImage(),
        [
            ClientQuotaAlteration({"user": "a", "client-id": "c"}, [("producer_byte_rate", 1.0)]),
            ClientQuotaAlteration({"user": "b"}, [("producer_byte_rate", 2.0)]),
            ClientQuotaAlteration([("client-id", "c"), ("user", "a")], [("consumer_byte_rate", 3.0)]),
        ],
    )
    message = "Ignoring duplicate entity ClientQuotaEntity(entries={client-id=c, user=a})"
    assert [(r.error, r.message) for r in plan.results] == [
        (Errors.INVALID_REQUEST, message),
        (Errors.NONE, None),
        (Errors.INVALID_REQUEST, message),
    ]
    assert [r.client_quota.entity[0].entity_name for r in plan.records] == ["b"]


def test_duplicate_entity_type_within_one_entity() -> None:
    """validateEntity: "Invalid client quota entity, duplicate entity entry <type>" (pairs can repeat a type)."""
    result, records = _plan_one(ConfigImage(), [("user", "a"), ("user", "b")], [("producer_byte_rate", 1.0)])
    assert (result.error, result.message) == (
        Errors.INVALID_REQUEST,
        "Invalid client quota entity, duplicate entity entry user",
    )
    assert records == []


# --- ClientQuotasRequestTest: alter cases --------------------------------------------------------------
def _describe_exact(store: ConfigStore, entity: dict[str, str | None]) -> dict[str, float]:
    """ClientQuotasRequestTest.verifyDescribeEntityQuotas: a strict describe of exactly this entity."""
    components = [
        ClientQuotaFilterComponent.of_default_entity(t) if n is None else ClientQuotaFilterComponent.of_entity(t, n)
        for t, n in entity.items()
    ]
    found = store.describe_client_quotas(components, strict=True)
    assert len(found) <= 1
    return found[0][1] if found else {}


def test_alter_client_quotas_request(tmp_path: Path) -> None:
    """ClientQuotasRequestTest.testAlterClientQuotasRequest, through a ConfigStore."""
    entity = {"user": "user", "client-id": "client-id"}
    with ConfigStore.open(tmp_path) as store:

        def alter(*ops: tuple[str, float | None]) -> None:
            [result] = store.alter_client_quotas([ClientQuotaAlteration(entity, list(ops))], now_ms=T0)
            assert result.ok

        assert _describe_exact(store, entity) == {}
        alter(("producer_byte_rate", 10000.0), ("consumer_byte_rate", 20000.0))
        assert _describe_exact(store, entity) == {"producer_byte_rate": 10000.0, "consumer_byte_rate": 20000.0}
        alter(("producer_byte_rate", 15000.0))
        assert _describe_exact(store, entity) == {"producer_byte_rate": 15000.0, "consumer_byte_rate": 20000.0}
        alter(("producer_byte_rate", None))
        assert _describe_exact(store, entity) == {"consumer_byte_rate": 20000.0}
        end = store.log.end_offset
        alter(("request_percentage", None))  # a non-existent entry: no change
        assert store.log.end_offset == end
        assert _describe_exact(store, entity) == {"consumer_byte_rate": 20000.0}
        alter(("producer_byte_rate", 5000.0))
        assert _describe_exact(store, entity) == {"producer_byte_rate": 5000.0, "consumer_byte_rate": 20000.0}
        alter(("producer_byte_rate", 20000.0), ("consumer_byte_rate", None), ("request_percentage", 12.3))
        assert _describe_exact(store, entity) == {"producer_byte_rate": 20000.0, "request_percentage": 12.3}
    with ConfigStore.open(tmp_path) as store:
        assert _describe_exact(store, entity) == {"producer_byte_rate": 20000.0, "request_percentage": 12.3}


def test_alter_client_quotas_request_validate_only(tmp_path: Path) -> None:
    """ClientQuotasRequestTest.testAlterClientQuotasRequestValidateOnly: validate-only additions,
    modifications, removals and mixed updates answer OK and change nothing."""
    entity = {"user": "user"}
    expected = {"producer_byte_rate": 20000.0, "request_percentage": 23.45}
    with ConfigStore.open(tmp_path) as store:
        store.alter_client_quotas(
            [ClientQuotaAlteration(entity, [("producer_byte_rate", 20000.0), ("request_percentage", 23.45)])], now_ms=T0
        )
        assert _describe_exact(store, entity) == expected
        end = store.log.end_offset
        for ops in (
            [("consumer_byte_rate", 50000.0)],
            [("producer_byte_rate", 10000.0)],
            [("request_percentage", None)],
            [("producer_byte_rate", 10000.0), ("consumer_byte_rate", 50000.0), ("request_percentage", None)],
        ):
            [result] = store.alter_client_quotas([ClientQuotaAlteration(entity, ops)], validate_only=True, now_ms=T0)
            assert result.ok
            assert _describe_exact(store, entity) == expected
            assert store.log.end_offset == end


def test_alter_ip_quotas_request(tmp_path: Path) -> None:
    """ClientQuotasRequestTest.testAlterIpQuotasRequest (the describe side; the connection quotas that
    follow are ManagerBinding's)."""
    known = {"ip": "1.2.3.4"}
    default = {"ip": None}
    by_ip = [ClientQuotaFilterComponent.of_entity("ip", "1.2.3.4")]
    by_default = [ClientQuotaFilterComponent.of_default_entity("ip")]
    all_ips = [ClientQuotaFilterComponent.of_entity_type("ip")]
    with ConfigStore.open(tmp_path) as store:

        def alter(entity: dict[str, str | None], value: float | None) -> None:
            [result] = store.alter_client_quotas(
                [ClientQuotaAlteration(entity, [("connection_creation_rate", value)])], now_ms=T0
            )
            assert result.ok

        def describe(components: list[ClientQuotaFilterComponent]) -> dict[str | None, float]:
            found = store.describe_client_quotas(components, strict=True)
            assert all(set(quotas) == {"connection_creation_rate"} for _, quotas in found)
            return {entity["ip"]: quotas["connection_creation_rate"] for entity, quotas in found}

        assert describe(all_ips) == {}
        alter(known, 100.0)
        assert describe(by_ip) == {"1.2.3.4": 100.0}
        alter(known, 150.0)
        assert describe(by_ip) == {"1.2.3.4": 150.0}
        alter(default, 200.0)
        assert describe(by_default) == {None: 200.0}
        assert describe(all_ips) == {"1.2.3.4": 150.0, None: 200.0}
        alter(known, None)
        assert describe(by_ip) == {}
        alter(default, None)
        assert describe(all_ips) == {}


@pytest.mark.parametrize(
    ("entity", "ops", "message"),
    [
        ({"user": ""}, [("request_percentage", 12.34)], "Empty user not supported"),
        ({"client-id": ""}, [("request_percentage", 12.34)], "Empty client-id not supported"),
        ({"": "name"}, [("request_percentage", 12.34)], "Unhandled client quota entity type: "),
        ({}, [("producer_byte_rate", 10000.5)], "Invalid empty client quota entity"),
        ({"user": "user"}, [("bad", 1.0)], "Invalid configuration key bad"),
        ({"user": "user"}, [("producer_byte_rate", 10000.5)], "producer_byte_rate cannot be a fractional value."),
        ({"user": "user", "ip": "1.2.3.4"}, [("request_percentage", 12.34)], COMBINATION_MESSAGE),
        ({"client-id": "client", "ip": "1.2.3.4"}, [("request_percentage", 12.34)], COMBINATION_MESSAGE),
        (
            {"ip": "not a valid host because it has spaces"},
            [("connection_creation_rate", 50.0)],
            "not a valid host because it has spaces is not a valid IP or resolvable host.",
        ),
        (
            {"ip": "RFC2606.invalid"},
            [("connection_creation_rate", 50.0)],
            "RFC2606.invalid is not a valid IP or resolvable host.",
        ),
    ],
)
def test_alter_client_quotas_invalid_requests(
    tmp_path: Path, entity: dict[str, str | None], ops: Ops, message: str
) -> None:
    """ClientQuotasRequestTest.testAlterClientQuotasInvalidRequests, ...InvalidEntityCombination and
    ...BadIp (validate-only, as Kafka's test sends them; the host names go to an injected resolver)."""
    with ConfigStore.open(tmp_path, resolver=_unresolvable) as store:
        [result] = store.alter_client_quotas([ClientQuotaAlteration(entity, ops)], validate_only=True, now_ms=T0)
        assert (result.error, result.message) == (Errors.INVALID_REQUEST, message)
        [result] = store.alter_client_quotas([ClientQuotaAlteration(entity, ops)], now_ms=T0)
        assert (result.error, result.message) == (Errors.INVALID_REQUEST, message)
        assert store.log.end_offset == 0


def test_client_quotas_sanitized_and_default_name(tmp_path: Path) -> None:
    """ClientQuotasRequestTest.testClientQuotasSanitized and testClientQuotasWithDefaultName: any name is
    kept as is; a client-id literally named "<default>" is not the default entity."""
    spaces = {"user": "user with spaces"}
    literal_default = {"client-id": "<default>"}
    with ConfigStore.open(tmp_path) as store:
        for entity in (spaces, literal_default):
            [result] = store.alter_client_quotas(
                [ClientQuotaAlteration(entity, [("producer_byte_rate", 20000.0)])], now_ms=T0
            )
            assert result.ok
            assert _describe_exact(store, entity) == {"producer_byte_rate": 20000.0}
        assert (
            store.describe_client_quotas([ClientQuotaFilterComponent.of_default_entity("client-id")], strict=True) == []
        )
