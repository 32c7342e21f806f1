"""Bad input through a ConfigStore on real files is rejected cleanly.

For every kind of invalid change (entity, key, value, config, resource name, op type, request shape)
the result carries Kafka's error code and a message naming the offending field, nothing is appended
to the log, the image is unchanged, and a reopened store holds the same image. Also: validate-only
requests change nothing, mixed requests apply per entity / resource as Kafka does, and a retried
request id is applied once (Kafka's controller semantics; the exactly-once retry is quotaplane's).
"""

from __future__ import annotations

import socket
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from quotaplane.config import (
    AlterConfigOp,
    ClientQuotaAlteration,
    ConfigImage,
    ConfigResource,
    ConfigResourceType,
    ConfigStore,
    OpType,
    Result,
)
from quotaplane.errors import Errors

T0 = 1_700_000_000_000
BROKER, TOPIC, CLIENT_METRICS = ConfigResourceType.BROKER, ConfigResourceType.TOPIC, ConfigResourceType.CLIENT_METRICS
SET, DELETE, APPEND, SUBTRACT = OpType.SET, OpType.DELETE, OpType.APPEND, OpType.SUBTRACT
IR, IC = Errors.INVALID_REQUEST, Errors.INVALID_CONFIG
LEADER_REPLICAS = "leader.replication.throttled.replicas"


def _resolver(host: str) -> object:
    """Injected resolver: only ``broker-host.example`` resolves (no DNS in the tests)."""
    if host == "broker-host.example":
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("10.0.0.9", 0))]
    raise socket.gaierror(socket.EAI_NONAME, f"unknown host {host}")


def _seed(store: ConfigStore) -> None:
    """Some state of every kind, so "unchanged" means something."""
    results = store.alter_client_quotas(
        [
            ClientQuotaAlteration({"user": "alice"}, [("producer_byte_rate", 1024.0), ("request_percentage", 50.0)]),
            ClientQuotaAlteration({"user": "alice", "client-id": "app"}, [("consumer_byte_rate", 2048.0)]),
            ClientQuotaAlteration({"user": None}, [("producer_ids_rate", 10.0)]),
            ClientQuotaAlteration({"ip": None}, [("connection_creation_rate", 100.0)]),
            ClientQuotaAlteration({"ip": "broker-host.example"}, [("connection_creation_rate", 5.0)]),
        ],
        now_ms=T0,
        principal="User:seed",
        request_id="seed-quotas",
    )
    assert all(r.ok for r in results), results
    results = store.incremental_alter_configs(
        [
            (ConfigResource(BROKER, ""), [AlterConfigOp("max.connections", SET, "1000")]),
            (ConfigResource(BROKER, "1"), [AlterConfigOp("max.connections.per.ip.overrides", SET, "h1:5")]),
            (ConfigResource(TOPIC, "orders"), [AlterConfigOp(LEADER_REPLICAS, SET, "0:101")]),
            (
                ConfigResource(CLIENT_METRICS, "sub-1"),
                [
                    AlterConfigOp("metrics", SET, "org.apache.kafka.producer."),
                    AlterConfigOp("interval.ms", SET, "5000"),
                ],
            ),
        ],
        now_ms=T0 + 1,
        principal="User:seed",
        request_id="seed-configs",
    )
    assert all(r.ok for r in results), results


@pytest.fixture
def store(tmp_path: Path) -> Iterator[ConfigStore]:
    with ConfigStore.open(tmp_path, resolver=_resolver) as opened:
        _seed(opened)
        yield opened


def _assert_rejected_cleanly(
    store: ConfigStore,
    change: Callable[[bool], list[Result]],
    code: Errors,
    names: Sequence[str],
) -> None:
    """Run ``change(validate_only)`` both ways: one failed result with ``code`` whose message names each of
    ``names``; no event appended; the image equal to before, also after a reopen."""
    before = store.image.copy()
    end = store.log.end_offset
    for validate_only in (True, False):
        [result] = change(validate_only)
        assert result.error is code, result
        assert not result.ok
        for name in names:
            assert name in result.message, (name, result.message)
        assert store.log.end_offset == end
        assert store.image == before
    directory = store.directory
    store.close()
    with ConfigStore.open(directory) as reopened:
        assert reopened.log.end_offset == end
        assert reopened.image == before


# --- client quotas -----------------------------------------------------------------------------------------
BAD_QUOTAS: list[tuple[str, object, object, Errors, list[str]]] = [
    # entities
    ("unknown entity type", {"group": "g"}, [("producer_byte_rate", 1.0)], IR, ["group"]),
    ("null entity type", {None: "x"}, [("producer_byte_rate", 1.0)], IR, ["null"]),
    ("empty entity type", {"": "x"}, [("producer_byte_rate", 1.0)], IR, ["entity type"]),
    ("empty entity", {}, [("producer_byte_rate", 1.0)], IR, ["empty client quota entity"]),
    ("empty user", {"user": ""}, [("producer_byte_rate", 1.0)], IR, ["Empty user"]),
    ("empty client-id", {"client-id": ""}, [("producer_byte_rate", 1.0)], IR, ["Empty client-id"]),
    ("empty ip", {"ip": ""}, [("connection_creation_rate", 1.0)], IR, ["Empty ip"]),
    ("ip with user", {"ip": "1.2.3.4", "user": "a"}, [("connection_creation_rate", 1.0)], IR, ["IP entity"]),
    ("ip with client-id", {"ip": "1.2.3.4", "client-id": "c"}, [("connection_creation_rate", 1.0)], IR, ["IP entity"]),
    ("unresolvable host", {"ip": "nowhere.invalid"}, [("connection_creation_rate", 1.0)], IR, ["nowhere.invalid"]),
    ("bad ip literal", {"ip": "1.2.3.256"}, [("connection_creation_rate", 1.0)], IR, ["1.2.3.256"]),
    ("repeated entity type", [("user", "a"), ("user", "b")], [("producer_byte_rate", 1.0)], IR, ["duplicate", "user"]),
    ("non-string name", {"user": 5}, [("producer_byte_rate", 1.0)], IR, ["user", "5"]),
    ("entity is a string", "user", [("producer_byte_rate", 1.0)], IR, ["'user'"]),
    ("entity is None", None, [("producer_byte_rate", 1.0)], IR, ["None"]),
    ("entity entry not a pair", [("user",)], [("producer_byte_rate", 1.0)], IR, ["('user',)"]),
    ("unhashable entity type", [(["user"], "a")], [("producer_byte_rate", 1.0)], IR, ["['user']"]),
    # keys
    ("unknown key", {"user": "alice"}, [("bad", 1.0)], IR, ["bad"]),
    ("null key", {"user": "alice"}, [(None, 1.0)], IR, ["null"]),
    ("non-string key", {"user": "alice"}, [(5, 1.0)], IR, ["5"]),
    ("unhashable key", {"user": "alice"}, [(["k"], 1.0)], IR, ["['k']"]),
    ("ip key on a user", {"user": "alice"}, [("connection_creation_rate", 1.0)], IR, ["connection_creation_rate"]),
    ("user key on an ip", {"ip": None}, [("producer_byte_rate", 1.0)], IR, ["producer_byte_rate"]),
    ("producer_ids_rate on a client-id", {"client-id": "app"}, [("producer_ids_rate", 1.0)], IR, ["producer_ids_rate"]),
    (
        "duplicate key",
        {"user": "alice"},
        [("producer_byte_rate", 1.0), ("producer_byte_rate", 2.0)],
        IR,
        ["producer_byte_rate", "alice"],
    ),
    ("a bad key among good ones", {"user": "alice"}, [("request_percentage", 60.0), ("nope", 1.0)], IR, ["nope"]),
    # values
    ("zero", {"user": "alice"}, [("producer_byte_rate", 0.0)], IR, ["producer_byte_rate", "greater than 0"]),
    ("negative", {"user": "alice"}, [("consumer_byte_rate", -1.0)], IR, ["consumer_byte_rate", "greater than 0"]),
    ("negative int", {"ip": None}, [("connection_creation_rate", -3)], IR, ["connection_creation_rate"]),
    ("NaN", {"user": "alice"}, [("request_percentage", float("nan"))], IR, ["request_percentage", "NaN"]),
    ("NaN on a LONG", {"user": "alice"}, [("producer_byte_rate", float("nan"))], IR, ["producer_byte_rate", "NaN"]),
    (
        "inf on a DOUBLE",
        {"user": "alice"},
        [("request_percentage", float("inf"))],
        IR,
        ["request_percentage", "finite"],
    ),
    ("inf on a LONG", {"user": "alice"}, [("producer_byte_rate", float("inf"))], IR, ["producer_byte_rate", "LONG"]),
    (
        "inf on an INT",
        {"ip": None},
        [("connection_creation_rate", float("inf"))],
        IR,
        ["connection_creation_rate", "INT"],
    ),
    ("-inf", {"user": "alice"}, [("request_percentage", float("-inf"))], IR, ["request_percentage", "greater than 0"]),
    ("True", {"user": "alice"}, [("producer_byte_rate", True)], IR, ["producer_byte_rate", "True"]),
    ("False", {"user": "alice"}, [("producer_byte_rate", False)], IR, ["producer_byte_rate", "False"]),
    ("a string", {"user": "alice"}, [("producer_byte_rate", "1000")], IR, ["producer_byte_rate", "'1000'"]),
    ("a list", {"user": "alice"}, [("producer_byte_rate", [1.0])], IR, ["producer_byte_rate", "[1.0]"]),
    (
        "fraction on a LONG",
        {"user": "alice"},
        [("producer_byte_rate", 1024.5)],
        IR,
        ["producer_byte_rate", "fractional"],
    ),
    (
        "fraction on an INT",
        {"ip": None},
        [("connection_creation_rate", 2.5)],
        IR,
        ["connection_creation_rate", "fractional"],
    ),
    (
        "too large for an INT",
        {"ip": None},
        [("connection_creation_rate", 2**31)],
        IR,
        ["connection_creation_rate", "INT"],
    ),
    ("too large for a LONG", {"user": "alice"}, [("producer_byte_rate", 2.0**64)], IR, ["producer_byte_rate", "LONG"]),
    ("beyond any double", {"user": "alice"}, [("producer_byte_rate", 10**400)], IR, ["producer_byte_rate", "LONG"]),
    # ops
    ("ops is None", {"user": "alice"}, None, IR, ["None"]),
    ("ops is a string", {"user": "alice"}, "producer_byte_rate", IR, ["'producer_byte_rate'"]),
    ("op not a pair", {"user": "alice"}, [("producer_byte_rate",)], IR, ["('producer_byte_rate',)"]),
]


@pytest.mark.parametrize(
    ("entity", "ops", "code", "names"), [c[1:] for c in BAD_QUOTAS], ids=[c[0] for c in BAD_QUOTAS]
)
def test_bad_client_quota_changes_are_rejected_cleanly(
    store: ConfigStore, entity: object, ops: object, code: Errors, names: list[str]
) -> None:
    alteration = ClientQuotaAlteration(entity, ops)  # type: ignore[arg-type]

    def change(validate_only: bool) -> list[Result]:
        return store.alter_client_quotas([alteration], validate_only=validate_only, now_ms=T0 + 10, request_id="bad")

    _assert_rejected_cleanly(store, change, code, names)


# --- configs -----------------------------------------------------------------------------------------------
B, B1 = ConfigResource(BROKER, ""), ConfigResource(BROKER, "1")
TP, CM = ConfigResource(TOPIC, "orders"), ConfigResource(CLIENT_METRICS, "sub-1")
BAD_CONFIGS: list[tuple[str, object, object, Errors, list[str]]] = [
    # resource names and types
    (
        "broker name not a number",
        ConfigResource(BROKER, "blah"),
        [AlterConfigOp("max.connections", SET, "1")],
        IR,
        ["broker name"],
    ),
    (
        "negative broker id",
        ConfigResource(BROKER, "-1"),
        [AlterConfigOp("max.connections", SET, "1")],
        IR,
        ["negative broker ID"],
    ),
    ("broker name None", ConfigResource(BROKER, None), [AlterConfigOp("max.connections", SET, "1")], IR, ["None"]),  # type: ignore[arg-type]
    ("default topic", ConfigResource(TOPIC, ""), [AlterConfigOp(LEADER_REPLICAS, SET, "0:1")], IR, ["Default topic"]),
    (
        "illegal topic",
        ConfigResource(TOPIC, "a/b"),
        [AlterConfigOp(LEADER_REPLICAS, SET, "0:1")],
        Errors.INVALID_TOPIC_EXCEPTION,
        ["'a/b'"],
    ),
    (
        "empty subscription",
        ConfigResource(CLIENT_METRICS, ""),
        [AlterConfigOp("metrics", SET, "a.")],
        IR,
        ["Subscription name"],
    ),
    ("unknown resource type", ConfigResource(99, "x"), [AlterConfigOp("x", SET, "1")], IR, ["99"]),  # type: ignore[arg-type]
    ("group resource", ConfigResource(32, "g"), [AlterConfigOp("x", SET, "1")], IR, ["32"]),  # type: ignore[arg-type]
    ("not a ConfigResource", ("BROKER", ""), [AlterConfigOp("max.connections", SET, "1")], IR, ["ConfigResource"]),
    # keys
    ("unknown broker key", B, [AlterConfigOp("log.retention.ms", SET, "1")], IC, ["log.retention.ms"]),
    ("delete an unknown broker key", B, [AlterConfigOp("log.retention.ms", DELETE)], IC, ["log.retention.ms"]),
    ("unknown topic key", TP, [AlterConfigOp("retention.ms", SET, "1")], IC, ["retention.ms"]),
    ("unknown client metrics key", CM, [AlterConfigOp("random", SET, "1")], IR, ["random"]),
    ("upper-case listener", B, [AlterConfigOp("listener.name.EXTERNAL.max.connections", SET, "1")], IC, ["EXTERNAL"]),
    ("config name None", B, [AlterConfigOp(None, SET, "1")], IR, ["None"]),  # type: ignore[arg-type]
    (
        "duplicate config key",
        B,
        [AlterConfigOp("max.connections", SET, "1"), AlterConfigOp("max.connections", DELETE)],
        IR,
        ["max.connections"],
    ),
    # values
    ("not an INT", B, [AlterConfigOp("max.connections", SET, "many")], IC, ["max.connections", "many"]),
    ("below the minimum", B1, [AlterConfigOp("quota.window.num", SET, "0")], IC, ["quota.window.num", "at least 1"]),
    ("too large for an INT", B, [AlterConfigOp("max.connections", SET, "2147483648")], IC, ["max.connections", "INT"]),
    (
        "not a LONG",
        B,
        [AlterConfigOp("leader.replication.throttled.rate", SET, "1e9")],
        IC,
        ["leader.replication.throttled.rate"],
    ),
    (
        "not a BOOLEAN",
        B,
        [AlterConfigOp("client.quota.value.metric.enable", SET, "on")],
        IC,
        ["client.quota.value.metric.enable"],
    ),
    (
        "NaN DOUBLE",
        B,
        [AlterConfigOp("producer.id.quota.filter.false.positive.rate", SET, "NaN")],
        IC,
        ["false.positive.rate"],
    ),
    (
        "out of range DOUBLE",
        B,
        [AlterConfigOp("producer.id.quota.filter.false.positive.rate", SET, "1.5")],
        IC,
        ["false.positive.rate"],
    ),
    (
        "bad overrides",
        B,
        [AlterConfigOp("max.connections.per.ip.overrides", SET, "h1:x")],
        IC,
        ["max.connections.per.ip.overrides"],
    ),
    (
        "listener limit 0",
        B,
        [AlterConfigOp("listener.name.ext.max.connections", SET, "0")],
        IC,
        ["listener.name.ext.max.connections"],
    ),
    ("bad replica list", TP, [AlterConfigOp(LEADER_REPLICAS, SET, "zero:one")], IC, [LEADER_REPLICAS]),
    ("interval out of range", CM, [AlterConfigOp("interval.ms", SET, "99")], IR, ["interval.ms", "99"]),
    ("interval not a number", CM, [AlterConfigOp("interval.ms", SET, "soon")], IC, ["interval.ms", "soon"]),
    ("bad match selector", CM, [AlterConfigOp("match", SET, "client_os=linux")], IC, ["client_os=linux"]),
    ("bad match regex", CM, [AlterConfigOp("match", SET, "client_id=(")], IC, ["client_id=("]),
    ("duplicated metrics", CM, [AlterConfigOp("metrics", SET, "a.,a.")], IC, ["metrics"]),
    ("null SET", B, [AlterConfigOp("max.connections", SET, None)], IR, ["max.connections"]),
    ("null APPEND", CM, [AlterConfigOp("metrics", APPEND, None)], IR, ["metrics"]),
    ("non-string value", B, [AlterConfigOp("max.connections", SET, 5)], IC, ["max.connections", "5"]),  # type: ignore[arg-type]
    ("non-string client metrics value", CM, [AlterConfigOp("interval.ms", SET, 500)], IC, ["interval.ms", "500"]),  # type: ignore[arg-type]
    # op types
    ("APPEND to a non-list", B, [AlterConfigOp("max.connections", APPEND, "1")], IC, ["APPEND", "max.connections"]),
    ("SUBTRACT from a non-list", CM, [AlterConfigOp("interval.ms", SUBTRACT, "1")], IC, ["SUBTRACT", "interval.ms"]),
    ("unknown op type id", B, [AlterConfigOp("max.connections", 4, "1")], IR, ["4", "max.connections"]),  # type: ignore[arg-type]
    ("op type by name", B, [AlterConfigOp("max.connections", "SET", "1")], IR, ["SET", "max.connections"]),  # type: ignore[arg-type]
    ("op type None", B, [AlterConfigOp("max.connections", None, "1")], IR, ["None", "max.connections"]),  # type: ignore[arg-type]
    ("op not an AlterConfigOp", B, [("max.connections", SET, "1")], IR, ["AlterConfigOp"]),
    ("ops is None", B, None, IR, ["None"]),
    # one bad op spoils its resource: the good one is not applied either
    (
        "a good op and a bad one",
        B,
        [AlterConfigOp("max.connections", SET, "7"), AlterConfigOp("max.connections.per.ip", SET, "x")],
        IC,
        ["max.connections.per.ip"],
    ),
]


@pytest.mark.parametrize(
    ("resource", "ops", "code", "names"), [c[1:] for c in BAD_CONFIGS], ids=[c[0] for c in BAD_CONFIGS]
)
def test_bad_config_changes_are_rejected_cleanly(
    store: ConfigStore, resource: object, ops: object, code: Errors, names: list[str]
) -> None:
    def change(validate_only: bool) -> list[Result]:
        return store.incremental_alter_configs(
            [(resource, ops)],  # type: ignore[list-item]
            validate_only=validate_only,
            now_ms=T0 + 10,
            request_id="bad",
        )

    _assert_rejected_cleanly(store, change, code, names)


def test_bad_client_metrics_through_alter_client_metrics(store: ConfigStore) -> None:
    """``alter_client_metrics`` (kafka-client-metrics.sh --alter) goes through the same validation."""
    _assert_rejected_cleanly(
        store,
        lambda validate_only: [
            store.alter_client_metrics("sub-1", interval_ms=50, validate_only=validate_only, now_ms=T0 + 10)
        ],
        IR,
        ["interval.ms", "50"],
    )


# --- random bad values (hypothesis) -----------------------------------------------------------------------------
_QUOTA_TARGETS = [
    ({"user": "alice"}, "producer_byte_rate"),
    ({"user": "alice", "client-id": "app"}, "consumer_byte_rate"),
    ({"user": None}, "request_percentage"),
    ({"client-id": "app"}, "controller_mutation_rate"),
    ({"user": "bob"}, "producer_ids_rate"),
    ({"ip": None}, "connection_creation_rate"),
]
_INTEGRAL = {"producer_byte_rate", "consumer_byte_rate", "connection_creation_rate"}


@st.composite
def _bad_quota_values(draw: st.DrawFn) -> tuple[dict, str, object, str]:
    entity, key = draw(st.sampled_from(_QUOTA_TARGETS))
    kind = draw(
        st.sampled_from(
            ["non-positive", "fractional", "not a number"] if key in _INTEGRAL else ["non-positive", "not a number"]
        )
    )
    if kind == "non-positive":
        value = draw(st.one_of(st.floats(max_value=0.0, allow_nan=False), st.integers(max_value=0)))
        return entity, key, value, "greater than 0"
    if kind == "fractional":
        value = draw(st.integers(0, 10**6)) + draw(st.floats(1e-4, 1 - 1e-4))
        return entity, key, value, "fractional"
    value = draw(
        st.one_of(st.booleans(), st.text(max_size=5), st.just(float("nan")), st.lists(st.integers(), max_size=2))
    )
    return entity, key, value, key


def test_random_bad_values_are_rejected_cleanly() -> None:
    """Random non-positive, fractional (LONG / INT keys) and non-numeric values: INVALID_REQUEST naming the
    key, never appended, the image unchanged (one store on disk for all examples, reopened at the end)."""
    with tempfile.TemporaryDirectory() as directory:
        with ConfigStore.open(directory, fsync=False, resolver=_resolver) as store:
            _seed(store)
            before = store.image.copy()
            end = store.log.end_offset

            @settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
            @given(case=_bad_quota_values(), validate_only=st.booleans())
            def check(case: tuple[dict, str, object, str], validate_only: bool) -> None:
                entity, key, value, expected = case
                [result] = store.alter_client_quotas(
                    [ClientQuotaAlteration(entity, [(key, value)])], validate_only=validate_only, now_ms=T0 + 10
                )
                assert result.error is Errors.INVALID_REQUEST
                assert key in result.message and expected in result.message
                assert store.log.end_offset == end

            check()
            assert store.image == before
        with ConfigStore.open(directory) as reopened:
            assert reopened.image == before


# --- validate-only on valid changes ------------------------------------------------------------------------------
def test_validate_only_valid_changes_answer_ok_and_change_nothing(store: ConfigStore) -> None:
    """Kafka's validateOnly: the answer a real request would get, nothing written or applied."""
    before = store.image.copy()
    end = store.log.end_offset
    results = store.alter_client_quotas(
        [
            ClientQuotaAlteration({"user": "alice"}, [("producer_byte_rate", 4096.0), ("request_percentage", None)]),
            ClientQuotaAlteration({"user": "carol"}, [("consumer_byte_rate", 1.0)]),
            ClientQuotaAlteration({"ip": "10.1.2.3"}, [("connection_creation_rate", 3.0)]),
        ],
        validate_only=True,
        now_ms=T0 + 10,
        request_id="vo-1",
    )
    assert [r.error for r in results] == [Errors.NONE] * 3
    results = store.incremental_alter_configs(
        [
            (ConfigResource(BROKER, ""), [AlterConfigOp("max.connections", SET, "1000")]),  # would write (KAFKA-14136)
            (ConfigResource(BROKER, "2"), [AlterConfigOp("quota.window.num", SET, "20")]),
            (ConfigResource(TOPIC, "orders"), [AlterConfigOp(LEADER_REPLICAS, APPEND, "1:102")]),
            (
                ConfigResource(CLIENT_METRICS, "sub-1"),
                [AlterConfigOp("metrics", DELETE), AlterConfigOp("interval.ms", DELETE)],
            ),
            (ConfigResource(CLIENT_METRICS, "sub-2"), [AlterConfigOp("metrics", SET, "*")]),
        ],
        validate_only=True,
        now_ms=T0 + 10,
        request_id="vo-2",
    )
    assert [r.error for r in results] == [Errors.NONE] * 5
    assert store.alter_client_metrics("sub-3", metrics=["a."], validate_only=True, now_ms=T0 + 10).ok
    assert store.log.end_offset == end
    assert store.image == before
    assert store.image.applied_request("vo-1") is None
    directory = store.directory
    store.close()
    with ConfigStore.open(directory) as reopened:
        assert reopened.image == before
        # the validate-only request id was not remembered: the same request for real is applied
        results = reopened.alter_client_quotas(
            [ClientQuotaAlteration({"user": "carol"}, [("consumer_byte_rate", 1.0)])], now_ms=T0 + 20, request_id="vo-1"
        )
        assert results[0].ok
        assert reopened.log.end_offset == end + 1


# --- mixed requests ---------------------------------------------------------------------------------------------
def test_mixed_quota_request_applies_the_valid_entity_only(store: ConfigStore) -> None:
    """Kafka's per-entity semantics: the valid entity is applied, the invalid one answers its error and
    nothing of it is appended (not even its valid keys)."""
    end = store.log.end_offset
    results = store.alter_client_quotas(
        [
            ClientQuotaAlteration({"user": "alice"}, [("producer_byte_rate", 2048.0)]),
            ClientQuotaAlteration({"user": "bob"}, [("consumer_byte_rate", 10.0), ("producer_byte_rate", -1.0)]),
        ],
        now_ms=T0 + 10,
        request_id="mixed",
    )
    assert results[0].ok
    assert (results[1].error, results[1].message) == (
        Errors.INVALID_REQUEST,
        "Quota producer_byte_rate must be greater than 0",
    )
    assert store.log.end_offset == end + 1
    [(offset, event)] = list(store.log.read(end))
    assert offset == end and event.request_id == "mixed"
    assert [(e.entity_type, e.entity_name) for e in event.client_quota.entity] == [("user", "alice")]
    assert store.image.client_quota({"user": "alice"})["producer_byte_rate"] == 2048.0
    assert store.image.client_quota({"user": "bob"}) == {}
    directory = store.directory
    store.close()
    with ConfigStore.open(directory) as reopened:
        assert reopened.image.client_quota({"user": "alice"})["producer_byte_rate"] == 2048.0
        assert reopened.image.client_quota({"user": "bob"}) == {}


def test_mixed_config_request_applies_the_valid_resource_only(store: ConfigStore) -> None:
    """Per resource: the valid resources are applied, the invalid one answers its error."""
    end = store.log.end_offset
    results = store.incremental_alter_configs(
        [
            (ConfigResource(BROKER, "1"), [AlterConfigOp("max.connections", SET, "500")]),
            (
                ConfigResource(TOPIC, "orders"),
                [AlterConfigOp(LEADER_REPLICAS, APPEND, "1:102"), AlterConfigOp("x", SET, "1")],
            ),
            (ConfigResource(CLIENT_METRICS, "sub-1"), [AlterConfigOp("interval.ms", SET, "6000")]),
        ],
        now_ms=T0 + 10,
    )
    assert [r.error for r in results] == [Errors.NONE, Errors.INVALID_CONFIG, Errors.NONE]
    assert "x" in results[1].message
    assert store.log.end_offset == end + 2
    assert store.image.configs(BROKER, "1")["max.connections"] == "500"
    assert store.image.configs(TOPIC, "orders") == {LEADER_REPLICAS: "0:101"}
    assert store.image.client_metrics_resource("sub-1")["interval.ms"] == "6000"


def test_duplicated_entity_in_one_request_appends_neither(store: ConfigStore) -> None:
    """quotaplane's documented difference from Kafka: both occurrences fail, nothing of the entity is
    appended; the other entities of the request are."""
    end = store.log.end_offset
    results = store.alter_client_quotas(
        [
            ClientQuotaAlteration({"user": "dave"}, [("producer_byte_rate", 1.0)]),
            ClientQuotaAlteration({"user": "erin"}, [("producer_byte_rate", 2.0)]),
            ClientQuotaAlteration({"user": "dave"}, [("consumer_byte_rate", 3.0)]),
        ],
        now_ms=T0 + 10,
    )
    assert [r.error for r in results] == [Errors.INVALID_REQUEST, Errors.NONE, Errors.INVALID_REQUEST]
    assert "dave" in results[0].message
    assert store.log.end_offset == end + 1
    assert store.image.client_quota({"user": "dave"}) == {}
    assert store.image.client_quota({"user": "erin"}) == {"producer_byte_rate": 2.0}


# --- retries ---------------------------------------------------------------------------------------------------
def test_a_retried_quota_request_is_applied_once(store: ConfigStore) -> None:
    """Request "r1", then another change, then "r1" again with the same content: no new records, and the
    retry does not undo the later change."""
    r1 = [ClientQuotaAlteration({"user": "alice"}, [("producer_byte_rate", 5000.0)])]
    assert store.alter_client_quotas(r1, now_ms=T0 + 10, request_id="r1")[0].ok
    first, last = store.image.applied_request("r1")
    assert (first, last) == (store.log.end_offset - 1, store.log.end_offset - 1)
    other = [ClientQuotaAlteration({"user": "alice"}, [("producer_byte_rate", 7000.0)])]
    assert store.alter_client_quotas(other, now_ms=T0 + 20, request_id="r2")[0].ok
    end = store.log.end_offset
    before = store.image.copy()

    results = store.alter_client_quotas(r1, now_ms=T0 + 30, request_id="r1")
    assert [r.error for r in results] == [Errors.NONE]
    assert store.log.end_offset == end
    assert store.image == before
    assert store.image.client_quota({"user": "alice"})["producer_byte_rate"] == 7000.0

    directory = store.directory
    store.close()
    with ConfigStore.open(directory) as reopened:  # the request ids survive a restart
        assert reopened.alter_client_quotas(r1, now_ms=T0 + 40, request_id="r1")[0].ok
        assert reopened.log.end_offset == end
        assert reopened.image == before


def test_a_retried_broker_config_request_is_applied_once(store: ConfigStore) -> None:
    """BROKER changes write a record even when unchanged (KAFKA-14136), so only the request id keeps a
    retry from appending again."""
    request = [(ConfigResource(BROKER, "1"), [AlterConfigOp("max.connections", SET, "300")])]
    assert store.incremental_alter_configs(request, now_ms=T0 + 10, request_id="c1")[0].ok
    assert store.incremental_alter_configs(
        [(ConfigResource(BROKER, ""), [AlterConfigOp("max.connections", SET, "900")])], now_ms=T0 + 20, request_id="c2"
    )[0].ok
    end = store.log.end_offset
    before = store.image.copy()
    assert store.incremental_alter_configs(request, now_ms=T0 + 30, request_id="c1")[0].ok
    assert store.log.end_offset == end
    assert store.image == before
    # without a request id the same change is a new request, and BROKER writes again
    assert store.incremental_alter_configs(request, now_ms=T0 + 40)[0].ok
    assert store.log.end_offset == end + 1


def test_a_rejected_request_id_is_not_remembered(store: ConfigStore) -> None:
    """A request that appended nothing is not "applied": fixing it and sending it again with the same id
    applies it."""
    bad = [ClientQuotaAlteration({"user": "frank"}, [("producer_byte_rate", -5.0)])]
    assert store.alter_client_quotas(bad, now_ms=T0 + 10, request_id="r9")[0].error is Errors.INVALID_REQUEST
    assert store.image.applied_request("r9") is None
    good = [ClientQuotaAlteration({"user": "frank"}, [("producer_byte_rate", 5.0)])]
    end = store.log.end_offset
    assert store.alter_client_quotas(good, now_ms=T0 + 20, request_id="r9")[0].ok
    assert store.log.end_offset == end + 1


def test_no_image_change_is_visible_after_a_rejection_seen_from_a_listener(store: ConfigStore) -> None:
    """A rejected request delivers no delta to subscribers (the managers never see it)."""
    deltas: list[object] = []
    store.subscribe(deltas.append)
    store.alter_client_quotas([ClientQuotaAlteration({"user": "alice"}, [("bad", 1.0)])], now_ms=T0 + 10)
    store.incremental_alter_configs(
        [(ConfigResource(BROKER, "x"), [AlterConfigOp("max.connections", SET, "1")])], now_ms=T0 + 10
    )
    assert deltas == []
    store.alter_client_quotas([ClientQuotaAlteration({"user": "alice"}, [("producer_byte_rate", 1.0)])], now_ms=T0 + 10)
    assert len(deltas) == 1


def test_seeded_image_equals_a_replay_of_its_log(store: ConfigStore) -> None:
    """Sanity for the "image unchanged" checks: the seeded image is what its log replays to."""
    assert store.image == ConfigImage.replayed([event for _, event in store.log.read()])
    assert store.image != ConfigImage()
