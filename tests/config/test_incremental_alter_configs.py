"""Kafka's ``ConfigurationControlManagerTest`` (metadata module) and the resource checks of
``ControllerConfigurationValidatorTest`` (core), ported to ``plan_incremental_alter_configs`` for the
resources quotaplane serves: BROKER (the configs quotaplane keeps), TOPIC (throttled-replica lists) and
CLIENT_METRICS (validated by ``quotaplane.telemetry._configs``).

Kafka's test schema (``foo.bar``, ``abc``, ...) is replaced by quotaplane's own keys of the same types.
Not ported: the existence checker and AlterConfigPolicy cases (quotaplane has neither) and
``legacyAlterConfigs`` (no legacy AlterConfigs API).
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quotaplane.config import (
    BROKER_CONFIGS,
    AlterConfigOp,
    ConfigImage,
    ConfigResource,
    ConfigResourceType,
    OpType,
    Plan,
    plan_incremental_alter_configs,
    startup_configs,
)
from quotaplane.config import records as pb
from quotaplane.errors import Errors

BROKER, TOPIC, CLIENT_METRICS = ConfigResourceType.BROKER, ConfigResourceType.TOPIC, ConfigResourceType.CLIENT_METRICS
SET, DELETE, APPEND, SUBTRACT = OpType.SET, OpType.DELETE, OpType.APPEND, OpType.SUBTRACT
BROKER0 = ConfigResource(BROKER, "0")
CLUSTER = ConfigResource(BROKER, "")
MYTOPIC = ConfigResource(TOPIC, "mytopic")
SUB = ConfigResource(CLIENT_METRICS, "subscription-1")
LEADER_REPLICAS = "leader.replication.throttled.replicas"  # a TOPIC LIST config
Resources = Sequence[tuple[ConfigResource, Sequence[AlterConfigOp]]]


def _config_record(resource: ConfigResource, name: str, value: str | None) -> pb.Event:
    event = pb.Event()
    event.config.resource_type = int(resource.type)
    event.config.resource_name = resource.name
    event.config.name = name
    if value is not None:
        event.config.value = value
    return event


def _replay(image: ConfigImage, plan: Plan) -> None:
    for event in plan.records:
        image.apply(image.end_offset, event)


def _one(image: ConfigImage, resource: ConfigResource, *ops: AlterConfigOp) -> Plan:
    plan = plan_incremental_alter_configs(image, [(resource, list(ops))])
    assert len(plan.results) == 1
    return plan


def _error(plan: Plan) -> tuple[Errors, str | None]:
    [result] = plan.results
    return result.error, result.message


# --- testReplay --------------------------------------------------------------------------------------
def test_replay() -> None:
    """ConfigurationControlManagerTest.testReplay: ConfigRecords set and delete configs of a resource."""
    image = ConfigImage()
    assert image.configs(BROKER, "0") == {}
    image.apply(0, _config_record(BROKER0, "max.connections", "12"))
    assert image.configs(BROKER, "0") == {"max.connections": "12"}
    image.apply(1, _config_record(BROKER0, "max.connections", None))
    assert image.configs(BROKER, "0") == {}
    assert (BROKER, "0") not in image.config_resources()
    image.apply(2, _config_record(MYTOPIC, LEADER_REPLICAS, "0:1,1:2"))
    image.apply(3, _config_record(MYTOPIC, "follower.replication.throttled.replicas", "*"))
    assert image.configs(TOPIC, "mytopic") == {
        LEADER_REPLICAS: "0:1,1:2",
        "follower.replication.throttled.replicas": "*",
    }


# --- testIncrementalAlterConfigs / testIncrementalAlterConfig ----------------------------------------------
def test_incremental_alter_configs() -> None:
    """ConfigurationControlManagerTest.testIncrementalAlterConfigs: a SUBTRACT on a non-LIST key fails its
    resource (INVALID_CONFIG, no records), an APPEND to an unset LIST key of another resource succeeds;
    then a DELETE (its value ignored) writes a deletion."""
    image = ConfigImage()
    plan = plan_incremental_alter_configs(
        image,
        [
            (
                BROKER0,
                [
                    AlterConfigOp("max.connections", SUBTRACT, "abc"),
                    AlterConfigOp("max.connections.per.ip", SET, "abc"),
                ],
            ),
            (MYTOPIC, [AlterConfigOp(LEADER_REPLICAS, APPEND, "0:123")]),
        ],
    )
    assert [(r.error, r.message) for r in plan.results] == [
        (Errors.INVALID_CONFIG, "Can't SUBTRACT to key max.connections because its type is not LIST."),
        (Errors.NONE, None),
    ]
    assert plan.records == [_config_record(MYTOPIC, LEADER_REPLICAS, "0:123")]
    _replay(image, plan)

    plan = _one(image, MYTOPIC, AlterConfigOp(LEADER_REPLICAS, DELETE, "xyz"))
    assert plan.results[0].ok
    assert plan.records == [_config_record(MYTOPIC, LEADER_REPLICAS, None)]
    assert not plan.records[0].config.HasField("value")
    _replay(image, plan)
    assert image.configs(TOPIC, "mytopic") == {}


@pytest.mark.parametrize("op", [APPEND, SUBTRACT])
@pytest.mark.parametrize(
    ("resource", "key"),
    [
        (BROKER0, "max.connections"),
        (CLUSTER, "client.quota.value.metric.enable"),
        (CLUSTER, "max.connections.per.ip.overrides"),
        (SUB, "interval.ms"),
    ],
)
def test_append_and_subtract_only_on_list_keys(resource: ConfigResource, key: str, op: OpType) -> None:
    """Kafka's message: "Can't <OP> to key <key> because its type is not LIST." (INVALID_CONFIG)."""
    plan = _one(ConfigImage(), resource, AlterConfigOp(key, op, "1"))
    assert _error(plan) == (Errors.INVALID_CONFIG, f"Can't {op.name} to key {key} because its type is not LIST.")
    assert plan.records == []


# --- testIncrementalAlterMultipleConfigValues ------------------------------------------------------------
def test_incremental_alter_multiple_config_values() -> None:
    """ConfigurationControlManagerTest.testIncrementalAlterMultipleConfigValues on a topic's LIST config:
    appending present values and subtracting absent ones are no-ops without records."""
    image = ConfigImage()
    plan = _one(image, MYTOPIC, AlterConfigOp(LEADER_REPLICAS, APPEND, "0:123,1:456,2:789"))
    assert plan.records == [_config_record(MYTOPIC, LEADER_REPLICAS, "0:123,1:456,2:789")]
    _replay(image, plan)

    plan = _one(image, MYTOPIC, AlterConfigOp(LEADER_REPLICAS, APPEND, "0:123,1:456"))
    assert plan.results[0].ok and plan.records == []

    plan = _one(image, MYTOPIC, AlterConfigOp(LEADER_REPLICAS, SUBTRACT, "0:123,1:456"))
    assert plan.records == [_config_record(MYTOPIC, LEADER_REPLICAS, "2:789")]
    _replay(image, plan)

    plan = _one(image, MYTOPIC, AlterConfigOp(LEADER_REPLICAS, SUBTRACT, "9:123456"))
    assert plan.results[0].ok and plan.records == []
    assert image.configs(TOPIC, "mytopic") == {LEADER_REPLICAS: "2:789"}

    # subtracting everything leaves an empty list, not the default
    plan = _one(image, MYTOPIC, AlterConfigOp(LEADER_REPLICAS, SUBTRACT, "2:789"))
    assert plan.records == [_config_record(MYTOPIC, LEADER_REPLICAS, "")]


def test_append_and_subtract_on_client_metrics_lists() -> None:
    """The same LIST semantics on a client-metrics resource (``metrics`` and ``match`` are LISTs), with
    Java's ``split(",")``: trailing empty parts of the op's value are dropped."""
    image = ConfigImage()
    plan = _one(image, SUB, AlterConfigOp("metrics", APPEND, "org.apache.kafka.producer.,"))
    assert plan.results[0].ok
    assert plan.records[0].client_metrics.metrics == "org.apache.kafka.producer."
    _replay(image, plan)
    plan = _one(image, SUB, AlterConfigOp("metrics", APPEND, "org.apache.kafka.consumer.,org.apache.kafka.producer."))
    _replay(image, plan)
    assert image.client_metrics_resource("subscription-1") == {
        "metrics": "org.apache.kafka.producer.,org.apache.kafka.consumer."
    }
    plan = _one(image, SUB, AlterConfigOp("metrics", APPEND, "org.apache.kafka.consumer."))
    assert plan.results[0].ok and plan.records == []  # unchanged: no record for a non-BROKER resource
    plan = _one(image, SUB, AlterConfigOp("metrics", SUBTRACT, "org.apache.kafka.producer."))
    _replay(image, plan)
    assert image.client_metrics_resource("subscription-1") == {"metrics": "org.apache.kafka.consumer."}
    # an empty part in the middle is kept (Java keeps it) and refused by the client-metrics validation
    plan = _one(image, SUB, AlterConfigOp("metrics", APPEND, "a,,b"))
    assert _error(plan) == (Errors.INVALID_CONFIG, "Configuration 'metrics' values must not be empty.")


# --- KAFKA-14136 -------------------------------------------------------------------------------------------
def test_broker_records_are_emitted_even_when_unchanged() -> None:
    """KAFKA-14136: a BROKER resource gets a record for every key the request names, so nodes reload,
    a deletion of an unset key included; TOPIC and CLIENT_METRICS only for actual changes."""
    image = ConfigImage()
    _replay(image, _one(image, BROKER0, AlterConfigOp("max.connections", SET, "100")))
    _replay(image, _one(image, MYTOPIC, AlterConfigOp(LEADER_REPLICAS, SET, "0:1")))
    _replay(image, _one(image, SUB, AlterConfigOp("interval.ms", SET, "2000")))
    end = image.end_offset

    plan = _one(image, BROKER0, AlterConfigOp("max.connections", SET, "100"))
    assert plan.records == [_config_record(BROKER0, "max.connections", "100")]
    plan = _one(image, BROKER0, AlterConfigOp("max.connection.creation.rate", DELETE))
    assert plan.records == [_config_record(BROKER0, "max.connection.creation.rate", None)]
    _replay(image, plan)  # a deletion of an unset key changes nothing in the image
    assert image.configs(BROKER, "0") == {"max.connections": "100"}
    assert image.end_offset == end + 1

    assert _one(image, MYTOPIC, AlterConfigOp(LEADER_REPLICAS, SET, "0:1")).records == []
    assert _one(image, MYTOPIC, AlterConfigOp("follower.replication.throttled.replicas", DELETE)).records == []
    assert _one(image, SUB, AlterConfigOp("interval.ms", SET, "2000")).records == []
    assert _one(image, SUB, AlterConfigOp("match", DELETE)).records == []


# --- a failing validation writes nothing of its resource -----------------------------------------------------
def test_validation_failure_writes_no_record_of_the_resource() -> None:
    """incrementalAlterConfigResource: the records of a resource are kept only if the whole resource
    validates; the other resources of the request are unaffected (one result per resource)."""
    plan = plan_incremental_alter_configs(
        ConfigImage(),
        [
            (
                BROKER0,
                [AlterConfigOp("max.connections", SET, "10"), AlterConfigOp("max.connections.per.ip", SET, "-5")],
            ),
            (CLUSTER, [AlterConfigOp("max.connections", SET, "20")]),
            (SUB, [AlterConfigOp("metrics", SET, "a."), AlterConfigOp("interval.ms", SET, "50")]),
            (MYTOPIC, [AlterConfigOp(LEADER_REPLICAS, SET, "0:1"), AlterConfigOp("retention.ms", SET, "1")]),
        ],
    )
    assert [r.error for r in plan.results] == [
        Errors.INVALID_CONFIG,
        Errors.NONE,
        Errors.INVALID_REQUEST,
        Errors.INVALID_CONFIG,
    ]
    assert (
        plan.results[0].message == "Invalid value -5 for configuration max.connections.per.ip: Value must be at least 0"
    )
    assert (
        plan.results[2].message == "Invalid value 50 for interval.ms, interval must be between 100 and 3600000 (1 hour)"
    )
    assert "retention.ms" in plan.results[3].message
    assert plan.records == [_config_record(CLUSTER, "max.connections", "20")]


# --- resource names (ControllerConfigurationValidatorTest) -----------------------------------------------------
@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("blah", "Unable to parse broker name as a base 10 number."),
        ("1.0", "Unable to parse broker name as a base 10 number."),
        (" 1", "Unable to parse broker name as a base 10 number."),
        ("2147483648", "Unable to parse broker name as a base 10 number."),  # beyond Integer.valueOf
        ("-1", "Invalid negative broker ID."),
        ("-2147483648", "Invalid negative broker ID."),
    ],
)
def test_invalid_broker_names(name: str, message: str) -> None:
    """testInvalidBrokerEntity, testInvalidNegativeBrokerId (INVALID_REQUEST)."""
    plan = _one(ConfigImage(), ConfigResource(BROKER, name), AlterConfigOp("max.connections", SET, "1"))
    assert _error(plan) == (Errors.INVALID_REQUEST, message)
    assert plan.records == []


@pytest.mark.parametrize(
    ("name", "stored"), [("", ""), ("0", "0"), ("7", "7"), ("2147483647", "2147483647"), ("+3", "3"), ("007", "7")]
)
def test_valid_broker_names(name: str, stored: str) -> None:
    """``""`` is the cluster default; ``Integer.valueOf`` takes a leading '+' (and zeros): the record
    names the node canonically, as a node looks its overrides up."""
    plan = _one(ConfigImage(), ConfigResource(BROKER, name), AlterConfigOp("max.connections", SET, "1"))
    assert plan.results[0].ok
    assert plan.records == [_config_record(ConfigResource(BROKER, stored), "max.connections", "1")]


@pytest.mark.parametrize(
    ("name", "message"),
    [
        (
            "(<-invalid->)",
            "Topic name is invalid: '(<-invalid->)' contains one or more characters other than "
            "ASCII alphanumerics, '.', '_' and '-'",
        ),
        (".", "Topic name is invalid: '.' is not allowed"),
        ("..", "Topic name is invalid: '..' is not allowed"),
        ("t" * 250, f"Topic name is invalid: the length of '{'t' * 250}' is longer than the max allowed length 249"),
        (
            "tópico",
            "Topic name is invalid: 'tópico' contains one or more characters other than "
            "ASCII alphanumerics, '.', '_' and '-'",
        ),
    ],
)
def test_invalid_topic_names_messages(name: str, message: str) -> None:
    """testInvalidTopicNameRejected: Kafka's Topic.validate message, nothing written."""
    plan = _one(ConfigImage(), ConfigResource(TOPIC, name), AlterConfigOp(LEADER_REPLICAS, SET, "0:1"))
    assert plan.results[0].message == message
    assert plan.records == []


def test_invalid_topic_name_is_invalid_topic_exception() -> None:
    """testInvalidTopicNameRejected: Kafka throws InvalidTopicException, whose code is
    INVALID_TOPIC_EXCEPTION (17). quotaplane.errors has no such code yet and answers INVALID_REQUEST
    (42): this test fails until it does (see the report)."""
    plan = _one(ConfigImage(), ConfigResource(TOPIC, "(<-invalid->)"), AlterConfigOp(LEADER_REPLICAS, SET, "0:1"))
    assert int(plan.results[0].error) == 17


def test_default_topic_resource_is_rejected() -> None:
    """testDefaultTopicResourceIsRejected."""
    plan = _one(ConfigImage(), ConfigResource(TOPIC, ""), AlterConfigOp(LEADER_REPLICAS, SET, "0:1"))
    assert _error(plan) == (Errors.INVALID_REQUEST, "Default topic resources are not allowed.")


def test_unknown_resource_type() -> None:
    """testUnknownResourceType: a type quotaplane does not serve is INVALID_REQUEST "Unknown resource type"
    (Kafka's broker answers so for BROKER_LOGGER on the controller path, and for unknown ids)."""
    for rtype in (8, 32, 99):
        plan = _one(ConfigImage(), ConfigResource(rtype, "foo"), AlterConfigOp("x", SET, "1"))  # type: ignore[arg-type]
        assert _error(plan) == (Errors.INVALID_REQUEST, f"Unknown resource type {rtype}")


# --- client metrics (ControllerConfigurationValidatorTest) -------------------------------------------------------
def test_valid_client_metrics_config() -> None:
    """testValidClientMetricsConfig: one ClientMetricsRecord holding the resource as it is after the change."""
    match = (
        "client_instance_id=b69cc35a-7a54-4790-aa69-cc2bd4ee4538,client_id=1,client_software_name=apache-kafka-java,"
        "client_software_version=2.8.0-SNAPSHOT,client_source_address=127.0.0.1,client_source_port=1234"
    )
    metrics = "org.apache.kafka.client.producer.partition.queue.,org.apache.kafka.client.producer.partition.latency"
    plan = _one(
        ConfigImage(),
        SUB,
        AlterConfigOp("interval.ms", SET, "2000"),
        AlterConfigOp("metrics", SET, metrics),
        AlterConfigOp("match", SET, match),
    )
    assert plan.results[0].ok
    [event] = plan.records
    record = event.client_metrics
    assert (record.name, record.metrics, record.interval_ms, record.match, record.delete) == (
        "subscription-1",
        metrics,
        2000,
        match,
        False,
    )


@pytest.mark.parametrize(
    ("resource", "ops", "error", "message"),
    [
        (
            ConfigResource(CLIENT_METRICS, ""),
            [("metrics", "a.")],
            Errors.INVALID_REQUEST,
            "Subscription name can't be empty",
        ),
        (
            SUB,
            [("interval.ms", "10")],
            Errors.INVALID_REQUEST,
            "Invalid value 10 for interval.ms, interval must be between 100 and 3600000 (1 hour)",
        ),
        (
            SUB,
            [("interval.ms", "3600001")],
            Errors.INVALID_REQUEST,
            "Invalid value 3600001 for interval.ms, interval must be between 100 and 3600000 (1 hour)",
        ),
        (SUB, [("random", "10")], Errors.INVALID_REQUEST, "Unknown client metrics configuration: random"),
        (SUB, [("match", "10")], Errors.INVALID_CONFIG, "Illegal client matching pattern: 10"),
        (
            SUB,
            [("match", "client_os=linux")],
            Errors.INVALID_CONFIG,
            "Illegal client matching pattern: client_os=linux",
        ),
        (
            SUB,
            [("interval.ms", "abc")],
            Errors.INVALID_CONFIG,
            "Invalid value abc for configuration interval.ms: Not a number of type INT",
        ),
        (SUB, [("metrics", "a.,a.")], Errors.INVALID_CONFIG, "Configuration 'metrics' values must not be duplicated."),
    ],
)
def test_invalid_client_metrics_configs(
    resource: ConfigResource, ops: list[tuple[str, str]], error: Errors, message: str
) -> None:
    """testInvalidSubscriptionNameClientMetricsConfig, testInvalidIntervalClientMetricsConfig,
    testUndefinedConfigClientMetricsConfig, testInvalidMatchClientMetricsConfig: the name, unknown keys
    and the interval range are INVALID_REQUEST, unparsable values INVALID_CONFIG."""
    plan = _one(ConfigImage(), resource, *(AlterConfigOp(k, SET, v) for k, v in ops))
    assert _error(plan) == (error, message)
    assert plan.records == []


def test_client_metrics_delete_all_configs_deletes_the_resource() -> None:
    """A resource without configs does not exist: deleting its last config writes a deletion."""
    image = ConfigImage()
    _replay(image, _one(image, SUB, AlterConfigOp("metrics", SET, "a."), AlterConfigOp("interval.ms", SET, "1000")))
    plan = _one(image, SUB, AlterConfigOp("metrics", DELETE))
    assert plan.records[0].client_metrics.interval_ms == 1000
    assert not plan.records[0].client_metrics.HasField("metrics")
    _replay(image, plan)
    plan = _one(image, SUB, AlterConfigOp("interval.ms", DELETE))
    assert plan.records[0].client_metrics.delete
    _replay(image, plan)
    assert image.client_metrics() == {}


# --- the broker configs quotaplane keeps -------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("key", "value", "reason"),
    [
        ("max.connections", "abc", "Not a number of type INT"),
        ("max.connections", "1.5", "Not a number of type INT"),
        ("max.connections", "2147483648", "Not a number of type INT"),
        ("max.connections", "-1", "Value must be at least 0"),
        ("max.connection.creation.rate", "", "Not a number of type INT"),
        ("leader.replication.throttled.rate", "9223372036854775808", "Not a number of type LONG"),
        ("follower.replication.throttled.rate", "-1", "Value must be at least 0"),
        ("quota.window.num", "0", "Value must be at least 1"),
        ("quota.window.size.seconds", "0", "Value must be at least 1"),
        ("telemetry.max.bytes", "0", "Value must be at least 1"),
        ("client.quota.value.metric.enable", "yes", "Expected value to be either true or false"),
        ("producer.id.quota.filter.false.positive.rate", "abc", "Not a number of type DOUBLE"),
        ("producer.id.quota.filter.false.positive.rate", "NaN", "Not a number of type DOUBLE"),
        ("producer.id.quota.filter.false.positive.rate", "inf", "Not a number of type DOUBLE"),  # Java: "Infinity"
        ("producer.id.quota.filter.false.positive.rate", "1_0", "Not a number of type DOUBLE"),
        ("producer.id.quota.filter.false.positive.rate", "0", "Value must be greater than 0 and less than 1"),
        ("producer.id.quota.filter.false.positive.rate", "1", "Value must be greater than 0 and less than 1"),
        ("producer.id.quota.filter.false.positive.rate", "Infinity", "Value must be greater than 0 and less than 1"),
        ("listener.name.external.max.connections", "0", "Value must be at least 1"),
        ("listener.name.external.max.connection.creation.rate", "x", "Not a number of type INT"),
    ],
)
def test_invalid_broker_config_values(key: str, value: str, reason: str) -> None:
    """Values as Kafka's ConfigDef parses them (trimmed), INVALID_CONFIG naming the config: quotaplane
    validates broker values at the controller (documented)."""
    plan = _one(ConfigImage(), CLUSTER, AlterConfigOp(key, SET, value))
    assert _error(plan) == (Errors.INVALID_CONFIG, f"Invalid value {value.strip()} for configuration {key}: {reason}")
    assert plan.records == []


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("max.connections", " 10 "),  # trimmed to parse, stored as sent (Kafka's ConfigRecord keeps the string)
        ("max.connections", "+10"),
        ("max.connections", "0"),
        ("leader.replication.throttled.rate", "9223372036854775807"),
        ("client.quota.value.metric.enable", "TRUE"),
        ("producer.id.quota.filter.false.positive.rate", "0.001"),
        ("producer.id.quota.filter.false.positive.rate", "1e-3d"),  # Java's Double.parseDouble takes a suffix
        ("producer.id.quota.filter.false.positive.rate", "0x1p-4"),
        ("max.connections.per.ip.overrides", "hostName:100,127.0.0.1:200"),
        ("max.connections.per.ip.overrides", ""),
        ("listener.name.external.max.connections", "5"),
        ("listener.name.sasl_ssl-2.max.connection.creation.rate", "7"),
    ],
)
def test_valid_broker_config_values(key: str, value: str) -> None:
    plan = _one(ConfigImage(), CLUSTER, AlterConfigOp(key, SET, value))
    assert plan.results[0].ok
    assert plan.records == [_config_record(CLUSTER, key, value)]


@pytest.mark.parametrize(
    ("value", "detail"),
    [
        ("hostName", "entry 'hostName' is not host:count"),
        ("hostName:abc", "hostName"),
        ("bad host!:1", "'bad host!'"),
        ("h:-1", "must be between 0 and 2147483647"),
    ],
)
def test_max_connections_per_ip_overrides_format(value: str, detail: str) -> None:
    """``max.connections.per.ip.overrides`` is 'host:count,...' with valid hosts and counts >= 0."""
    plan = _one(ConfigImage(), CLUSTER, AlterConfigOp("max.connections.per.ip.overrides", SET, value))
    error, message = _error(plan)
    assert error is Errors.INVALID_CONFIG
    assert "max.connections.per.ip.overrides" in message and detail in message
    assert plan.records == []


@pytest.mark.parametrize(
    "key",
    [
        "retention.ms",
        "listener.name.EXTERNAL.max.connections",  # listener names are lower case in config keys
        "listener.name..max.connections",
        "listener.name.external.max.connections.per.ip",
        "listener.name.max.connections",
    ],
)
@pytest.mark.parametrize("op", [SET, DELETE])
def test_unknown_broker_keys(key: str, op: OpType) -> None:
    """quotaplane keeps a closed set of broker configs: another key is INVALID_CONFIG naming it."""
    plan = _one(ConfigImage(), CLUSTER, AlterConfigOp(key, op, "1" if op is SET else None))
    error, message = _error(plan)
    assert error is Errors.INVALID_CONFIG
    assert message.startswith(f"Unknown broker config {key}:")
    assert plan.records == []


_BROKER_KEYS = [
    *sorted(BROKER_CONFIGS),
    "listener.name.ext.max.connections",
    "listener.name.ext.max.connection.creation.rate",
]
_VALUES = st.one_of(
    st.sampled_from(["0", "1", "-1", "0.5", "1.5", "2", "inf", "Infinity", "NaN", "1e-9", "true", "", "h:1", "+5"]),
    st.integers(-(2**64), 2**64).map(str),
    st.floats(allow_nan=True).map(repr),
    st.text(max_size=6),
)


@settings(max_examples=300, deadline=None)
@given(key=st.sampled_from(_BROKER_KEYS), value=_VALUES, node=st.sampled_from(["", "1"]))
def test_every_accepted_broker_value_builds_the_managers(key: str, value: str, node: str) -> None:
    """What the controller accepts a shard can build its managers from: ``startup_configs`` never fails
    on a value the planner let into the log."""
    image = ConfigImage()
    plan = _one(image, ConfigResource(BROKER, node), AlterConfigOp(key, SET, value))
    if not plan.results[0].ok:
        assert plan.results[0].error is Errors.INVALID_CONFIG and plan.records == []
        return
    _replay(image, plan)
    startup_configs(image, 1)
    startup_configs(image)


# --- request shape ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("ops", "error", "message"),
    [
        (
            [AlterConfigOp("max.connections", SET, None)],
            Errors.INVALID_REQUEST,
            "Null value not supported for max.connections",
        ),
        (
            [AlterConfigOp(LEADER_REPLICAS, APPEND, None)],
            Errors.INVALID_REQUEST,
            f"Null value not supported for {LEADER_REPLICAS}",
        ),
        (
            [AlterConfigOp(LEADER_REPLICAS, SUBTRACT, None)],
            Errors.INVALID_REQUEST,
            f"Null value not supported for {LEADER_REPLICAS}",
        ),
        (
            [AlterConfigOp(LEADER_REPLICAS, 7, "0:1")],
            Errors.INVALID_REQUEST,
            f"Unknown operation type 7 for {LEADER_REPLICAS}",
        ),  # type: ignore[arg-type]
        (
            [AlterConfigOp(LEADER_REPLICAS, SET, "0:1"), AlterConfigOp(LEADER_REPLICAS, DELETE)],
            Errors.INVALID_REQUEST,
            f"Duplicate config key {LEADER_REPLICAS} for resource 'mytopic'",
        ),
    ],
)
def test_request_shape_errors(ops: list[AlterConfigOp], error: Errors, message: str) -> None:
    """Kafka's ConfigAdminManager.preprocess: every op but DELETE needs a value, a key appears once per
    resource (INVALID_REQUEST); an unknown op type is INVALID_REQUEST."""
    plan = plan_incremental_alter_configs(ConfigImage(), [(MYTOPIC, ops)])
    assert _error(plan) == (error, message)
    assert plan.records == []


def test_a_resource_named_twice_fails_both_times_and_neither_is_applied() -> None:
    """Kafka (ConfigAdminManager: "Each resource must appear at most once."; ControllerApis drops the
    first occurrence's changes too): both occurrences fail, neither writes, the others apply."""
    plan = plan_incremental_alter_configs(
        ConfigImage(),
        [
            (BROKER0, [AlterConfigOp("max.connections", SET, "1")]),
            (MYTOPIC, [AlterConfigOp(LEADER_REPLICAS, SET, "0:1")]),
            (ConfigResource(BROKER, "0"), [AlterConfigOp("max.connections.per.ip", SET, "2")]),
        ],
    )
    assert [r.error for r in plan.results] == [Errors.INVALID_REQUEST, Errors.NONE, Errors.INVALID_REQUEST]
    assert plan.results[0].message == plan.results[2].message
    assert "BROKER '0'" in plan.results[0].message
    assert plan.records == [_config_record(MYTOPIC, LEADER_REPLICAS, "0:1")]
