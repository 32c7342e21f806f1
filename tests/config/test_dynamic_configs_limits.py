"""Every config resource name, config name and value the config layer accepts is one Kafka can carry back.

Kafka's generated readers refuse a STRING over 32,767 bytes, so a broker never receives (nor can return in
DescribeConfigs) a longer resource name, config name or value. ``ControllerConfigurationValidator`` asks
nothing more of a client-metrics name than to be non-empty (``ClientMetricsConfigs.validate``), of a topic
``Topic.validate`` (249 ASCII characters at most), of a broker a node id. The check is the same rule as for
entity names (``validate_string``): INVALID_CONFIG for a config name or value, INVALID_REQUEST for a
client-metrics name, INVALID_TOPIC_EXCEPTION for a topic, as Kafka answers each.
"""

from __future__ import annotations

import pytest

from quotaplane.config import (
    MAX_STRING_BYTES,
    AlterConfigOp,
    ConfigResource,
    ConfigResourceType,
    ConfigStore,
    OpType,
    string_problem,
    validate_config_strings,
    validate_resource_name,
)
from quotaplane.config._dynamic_configs import validate_config_value, validate_topic_name
from quotaplane.errors import ApiError, Errors, InvalidConfigurationError, InvalidRequestError, InvalidTopicError

T0 = 1_700_000_000_000
BROKER, TOPIC, METRICS = ConfigResourceType.BROKER, ConfigResourceType.TOPIC, ConfigResourceType.CLIENT_METRICS
TOO_LONG = "v" * (MAX_STRING_BYTES + 1)


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        (TOO_LONG, None, "Invalid config name 'vvvv"),
        ("a\udcffb", None, "Invalid config name 'a\\udcffb': not valid UTF-8"),
        ("metrics", TOO_LONG, "Invalid value for configuration metrics 'vvvv"),
        ("match", "client_id=\ud800", "not valid UTF-8 (a lone surrogate U+D800 at character 10)"),
    ],
)
def test_config_names_and_values_kafka_cannot_carry_are_invalid_config(name: str, value: str | None, message: str):
    with pytest.raises(InvalidConfigurationError) as e:
        validate_config_strings(name, value)
    assert message in str(e.value)
    assert string_problem(str(e.value)) is None


def test_the_largest_carriable_value_passes_the_string_rule() -> None:
    validate_config_strings("metrics", "m" * MAX_STRING_BYTES)
    validate_config_strings("metrics", None)  # a deletion has no value


def test_broker_and_topic_configs_check_strings_first() -> None:
    with pytest.raises(InvalidConfigurationError, match=r"Invalid value for configuration max\.connections\.per\.ip "):
        validate_config_value(BROKER, "max.connections.per.ip", TOO_LONG)
    with pytest.raises(InvalidConfigurationError, match="Invalid config name"):  # a listener name 40k long
        validate_config_value(BROKER, f"listener.name.{'l' * 40_000}.max.connections", "10")
    with pytest.raises(InvalidConfigurationError, match="above the 32767"):
        validate_config_value(BROKER, "max.connections.per.ip.overrides", "h" * 32_770 + ":1")


@pytest.mark.parametrize(
    ("resource_type", "name", "error", "message"),
    [
        (METRICS, "", InvalidRequestError, "Subscription name can't be empty"),
        (METRICS, TOO_LONG, InvalidRequestError, "Invalid client metrics resource name 'vvvv"),
        (METRICS, "sub\udcff", InvalidRequestError, "not valid UTF-8"),
        (TOPIC, "t" * 250, InvalidTopicError, "longer than the max allowed length 249"),
        (TOPIC, "t\udcff", InvalidTopicError, "'t\\udcff' contains one or more characters other than ASCII"),
        (BROKER, "1\udcff", InvalidRequestError, "Unable to parse broker name as a base 10 number."),
    ],
)
def test_resource_names_are_refused_as_kafka_refuses_them(resource_type, name, error, message) -> None:
    with pytest.raises(error) as e:
        validate_resource_name(resource_type, name)
    assert message in str(e.value)
    assert string_problem(str(e.value)) is None and len(str(e.value)) < 400


def test_resource_names_kafka_accepts() -> None:
    assert validate_resource_name(BROKER, "+01") == "1"
    assert validate_resource_name(TOPIC, "t" * 249) == "t" * 249
    name = "sub\nwith\tcontrols" + "x" * (MAX_STRING_BYTES - 17)
    assert validate_resource_name(METRICS, name) == name
    with pytest.raises(InvalidTopicError):
        validate_topic_name("\ud800" * 300)


@pytest.mark.parametrize(
    ("resource", "op"),
    [
        (ConfigResource(BROKER, ""), AlterConfigOp("max.connections.per.ip.overrides", OpType.SET, "h:1," * 9000)),
        (ConfigResource(TOPIC, "t1"), AlterConfigOp("leader.replication.throttled.replicas", OpType.SET, TOO_LONG)),
        (ConfigResource(BROKER, "0"), AlterConfigOp("\udcff", OpType.DELETE)),
    ],
)
def test_the_store_refuses_and_writes_nothing(tmp_path, resource: ConfigResource, op: AlterConfigOp) -> None:
    with ConfigStore.open(tmp_path, fsync=False) as store:
        [result] = store.incremental_alter_configs([(resource, [op])], now_ms=T0)
        assert result.error is Errors.INVALID_CONFIG, result
        assert string_problem(result.message) is None
        assert store.end_offset == 0


def test_errors_are_api_errors() -> None:
    """Every refusal is an ApiError, so every door maps it to its Kafka code and never to a traceback."""
    for call in (
        lambda: validate_config_strings(TOO_LONG, None),
        lambda: validate_resource_name(METRICS, TOO_LONG),
    ):
        with pytest.raises(ApiError):
            call()


@pytest.mark.parametrize(
    ("resource", "op", "error"),
    [
        (ConfigResource(METRICS, TOO_LONG), AlterConfigOp("metrics", OpType.SET, "org.apache"), Errors.INVALID_REQUEST),
        (ConfigResource(METRICS, "sub"), AlterConfigOp("metrics", OpType.SET, TOO_LONG), Errors.INVALID_CONFIG),
        (ConfigResource(METRICS, "sub"), AlterConfigOp("\udcff", OpType.SET, "x"), Errors.INVALID_CONFIG),
    ],
)
def test_the_store_refuses_client_metrics_strings_kafka_cannot_carry(
    tmp_path, resource: ConfigResource, op: AlterConfigOp, error: Errors
) -> None:
    """The config layer's own check (not only the doors'): an in-process caller cannot store them either."""
    with ConfigStore.open(tmp_path, fsync=False) as store:
        [result] = store.incremental_alter_configs([(resource, [op])], now_ms=T0)
        assert result.error is error, result
        assert string_problem(result.message) is None
        assert store.end_offset == 0


def test_the_store_refuses_a_principal_or_request_id_kafka_cannot_carry(tmp_path) -> None:
    with ConfigStore.open(tmp_path, fsync=False) as store:
        resource, op = ConfigResource(METRICS, "sub"), AlterConfigOp("interval.ms", OpType.SET, "1000")
        with pytest.raises(InvalidRequestError, match="Invalid principal"):
            store.incremental_alter_configs([(resource, [op])], now_ms=T0, principal="User:\ud800")
        with pytest.raises(InvalidRequestError, match="Invalid request id"):
            store.incremental_alter_configs([(resource, [op])], now_ms=T0, request_id="r\udcff")
        assert store.end_offset == 0
