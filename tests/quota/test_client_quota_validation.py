"""Bad input to the client-quota managers: every case is a ValueError with a clear message, and leaves
no trace (no sensor created, no metric value changed, no quota changed).

Kafka gets these guarantees from its types (``double``, ``String``, ``Quota``) and from the controller's
validation of quota values (``ClientQuotaControlManager``: a quota must be a positive, finite number).
"""

from __future__ import annotations

import math

import pytest

from quotaplane.quota import (
    DEFAULT,
    ClientQuotaEntity,
    ClientQuotaManager,
    ClientQuotaManagerConfig,
    ClientRequestQuotaManager,
    QuotaType,
)

from ._client_quota_support import START_MS, metric_values

BAD_VALUES = [
    pytest.param(-1.0, "finite number ≥ 0", id="negative"),
    pytest.param(-1e-9, "finite number ≥ 0", id="slightly-negative"),
    pytest.param(math.nan, "finite number ≥ 0", id="nan"),
    pytest.param(math.inf, "finite number ≥ 0", id="inf"),
    pytest.param(-math.inf, "finite number ≥ 0", id="-inf"),
    pytest.param(True, "must be a number, got bool", id="bool"),
    pytest.param("100", "must be a number, got str", id="string"),
    pytest.param(None, "must be a number, got NoneType", id="none"),
]

BAD_NAMES = [
    pytest.param(42, "c1", "user must be a string", id="int-user"),
    pytest.param(None, "c1", "user must be a string", id="none-user"),
    pytest.param(b"alice", "c1", "user must be a string", id="bytes-user"),
    pytest.param(DEFAULT, "c1", "user must be a string", id="default-user"),
    pytest.param("alice", 7, "client_id must be a string", id="int-client"),
    pytest.param("alice", None, "client_id must be a string", id="none-client"),
    pytest.param("alice", ["c1"], "client_id must be a string", id="list-client"),
]

BAD_BOUNDS = [
    pytest.param(0, "greater than 0", id="zero"),
    pytest.param(0.0, "greater than 0", id="zero-float"),
    pytest.param(-5.0, "greater than 0", id="negative"),
    pytest.param(math.nan, "must be a number, got nan", id="nan"),
    pytest.param(math.inf, "must be finite", id="inf"),
    pytest.param(-math.inf, "greater than 0", id="-inf"),
    pytest.param(True, "must be a number, got True", id="bool"),
    pytest.param("1000", "must be a number, got '1000'", id="string"),
]


@pytest.fixture
def mgr() -> ClientQuotaManager:
    """A PRODUCE manager with a user quota and some recorded usage."""
    manager = ClientQuotaManager(ClientQuotaManagerConfig(), QuotaType.PRODUCE)
    manager.update_quota(ClientQuotaEntity(user="alice"), 1000.0)
    manager.record_and_get_throttle_time_ms("alice", "c1", 5000.0, START_MS)
    return manager


def assert_untouched(mgr: ClientQuotaManager, sensors_before: list[str], values_before: dict) -> None:
    assert list(mgr.metrics.sensors) == sensors_before
    assert metric_values(mgr.metrics, START_MS + 500) == values_before


@pytest.mark.parametrize(("value", "message"), BAD_VALUES)
def test_bad_usage_value(mgr: ClientQuotaManager, value: object, message: str) -> None:
    """Kafka's recordAndGetThrottleTimeMs(double): a usage value is a finite number ≥ 0."""
    sensors, values = list(mgr.metrics.sensors), metric_values(mgr.metrics, START_MS + 500)
    calls = [
        lambda: mgr.record_and_get_throttle_time_ms("alice", "c1", value, START_MS + 500),
        lambda: mgr.maybe_record_and_get_throttle_time_ms("alice", "c1", value, START_MS + 500),
        lambda: mgr.record_no_throttle("alice", "c1", value, START_MS + 500),
        lambda: mgr.unrecord_quota_sensor("alice", "c1", value, START_MS + 500),
        lambda: mgr.record_batch([("alice", "c1", value)], START_MS + 500),
    ]
    for call in calls:
        with pytest.raises(ValueError, match=message):
            call()
    assert_untouched(mgr, sensors, values)


def test_bad_usage_value_rejected_even_without_quotas() -> None:
    """maybe_record_* skips recording with no quotas, but still rejects a value that could never be recorded."""
    manager = ClientQuotaManager(ClientQuotaManagerConfig(), QuotaType.FETCH)
    with pytest.raises(ValueError, match="finite number ≥ 0"):
        manager.maybe_record_and_get_throttle_time_ms("alice", "c1", math.nan, START_MS)
    with pytest.raises(ValueError, match="user must be a string"):
        manager.maybe_record_and_get_throttle_time_ms(None, "c1", 1.0, START_MS)


@pytest.mark.parametrize(("user", "client_id", "message"), BAD_NAMES)
def test_bad_user_or_client_id(mgr: ClientQuotaManager, user: object, client_id: object, message: str) -> None:
    """Kafka's principal name and client id are Strings: anything else is a ValueError, at every entry point."""
    sensors, values = list(mgr.metrics.sensors), metric_values(mgr.metrics, START_MS + 500)
    now = START_MS + 500
    calls = [
        lambda: mgr.record_and_get_throttle_time_ms(user, client_id, 1.0, now),
        lambda: mgr.maybe_record_and_get_throttle_time_ms(user, client_id, 1.0, now),
        lambda: mgr.record_no_throttle(user, client_id, 1.0, now),
        lambda: mgr.unrecord_quota_sensor(user, client_id, 1.0, now),
        lambda: mgr.record_batch([(user, client_id, 1.0)], now),
        lambda: mgr.throttle(user, client_id, 100, now),
        lambda: mgr.max_value_in_quota_window(user, client_id, now),
        lambda: mgr.quota(user, client_id),
        lambda: mgr.quota_metric(user, client_id),
    ]
    for call in calls:
        with pytest.raises(ValueError, match=message):
            call()
    assert_untouched(mgr, sensors, values)


@pytest.mark.parametrize(("user", "client_id", "message"), BAD_NAMES)
def test_bad_names_in_request_quota_manager(user: object, client_id: object, message: str) -> None:
    """ClientRequestQuotaManager: the thread-time entry points check names like the byte-rate ones."""
    manager = ClientRequestQuotaManager(ClientQuotaManagerConfig(), now_ms=START_MS)
    manager.update_quota(ClientQuotaEntity(user=DEFAULT), 50.0)
    sensors = list(manager.metrics.sensors)
    with pytest.raises(ValueError, match=message):
        manager.maybe_record_request_time(user, client_id, request_thread_time_nanos=1000, now_ms=START_MS)
    with pytest.raises(ValueError, match=message):
        manager.record_network_thread_time(user, client_id, time_nanos=1000, now_ms=START_MS)
    assert list(manager.metrics.sensors) == sensors


@pytest.mark.parametrize("nanos", [-1, 1.5, True, "100", None, math.nan])
def test_bad_thread_time(nanos: object) -> None:
    """ClientRequestQuotaManager: thread time is a non-negative integer of nanoseconds."""
    manager = ClientRequestQuotaManager(ClientQuotaManagerConfig(), now_ms=START_MS)
    manager.update_quota(ClientQuotaEntity(user=DEFAULT), 50.0)
    for call in (
        lambda: manager.maybe_record_request_time("alice", "c1", request_thread_time_nanos=nanos, now_ms=START_MS),
        lambda: manager.record_network_thread_time("alice", "c1", time_nanos=nanos, now_ms=START_MS),
        lambda: manager.maybe_record_exempt(time_nanos=nanos, now_ms=START_MS),
    ):
        with pytest.raises(ValueError, match="non-negative integer of nanoseconds"):
            call()
    assert manager.exempt_sensor.metrics[0].measurable_value(START_MS) == 0.0


@pytest.mark.parametrize("throttle_time_ms", [-1, 1.5, "100", None, True])
def test_bad_throttle_time(mgr: ClientQuotaManager, throttle_time_ms: object) -> None:
    """ClientQuotaManager.throttle: a throttle time is a non-negative integer of milliseconds."""
    sensors, values = list(mgr.metrics.sensors), metric_values(mgr.metrics, START_MS + 500)
    with pytest.raises(ValueError, match="throttle_time_ms must be a non-negative integer"):
        mgr.throttle("alice", "c1", throttle_time_ms, START_MS + 500)
    assert_untouched(mgr, sensors, values)


@pytest.mark.parametrize("throttle_time_ms", [-1, 1.5, "100", None, True])
def test_bad_throttle_time_in_a_batch(mgr: ClientQuotaManager, throttle_time_ms: object) -> None:
    """ClientQuotaManager.throttle_batch: a bad throttle time of a cached client raises as ``throttle`` does."""
    mgr.record_and_get_throttle_time_ms("alice", "c1", 10.0, START_MS)  # the client's sensors are cached
    sensors, values = list(mgr.metrics.sensors), metric_values(mgr.metrics, START_MS + 500)
    with pytest.raises(ValueError, match="throttle_time_ms must be a non-negative integer"):
        mgr.throttle_batch([("alice", "c1", throttle_time_ms, START_MS + 500)])
    assert_untouched(mgr, sensors, values)


@pytest.mark.parametrize("name", ["produce-request", "", "Quota", "PRODUCE ", None, 3, 2.5])
def test_unknown_quota_type(name: object) -> None:
    """QuotaType.parse: only Kafka's quota type names (any case) are accepted."""
    with pytest.raises(ValueError, match=r"unknown quota type .*expected one of FETCH, PRODUCE, REQUEST"):
        QuotaType.parse(name)
    with pytest.raises(ValueError, match="unknown quota type"):
        ClientQuotaManager(ClientQuotaManagerConfig(), name)


@pytest.mark.parametrize("name", ["Produce", "PRODUCE", "produce", QuotaType.PRODUCE])
def test_known_quota_type_spellings(name: object) -> None:
    """QuotaType.parse: Kafka's name, the enum name and lower case all name the same type."""
    assert QuotaType.parse(name) is QuotaType.PRODUCE
    assert ClientQuotaManager(ClientQuotaManagerConfig(), name).quota_type is QuotaType.PRODUCE


def test_quota_type_without_client_quotas() -> None:
    """QuotaType.toClientQuotaType: replication quota types have no client quota manager."""
    with pytest.raises(ValueError, match="Not a client quota type: LeaderReplication"):
        ClientQuotaManager(ClientQuotaManagerConfig(), QuotaType.LEADER_REPLICATION)


@pytest.mark.parametrize(("bound", "message"), BAD_BOUNDS)
def test_bad_quota_bound(mgr: ClientQuotaManager, bound: object, message: str) -> None:
    """ClientQuotaControlManager's validation: a quota is a positive, finite number (None removes it)."""
    sensors, values = list(mgr.metrics.sensors), metric_values(mgr.metrics, START_MS + 500)
    for entity in (ClientQuotaEntity(user="alice"), ClientQuotaEntity(client_id=DEFAULT)):
        with pytest.raises(ValueError, match=message):
            mgr.update_quota(entity, bound)
    # nothing changed: the old bound holds, no entity kind was enabled
    assert mgr.quota("alice", "c1").bound == 1000.0
    assert mgr.quota_types_enabled == 2  # USER_QUOTA_ENABLED only
    assert_untouched(mgr, sensors, values)


@pytest.mark.parametrize("entity", [("alice", None), "alice", None, {"user": "alice"}])
def test_update_quota_needs_an_entity(mgr: ClientQuotaManager, entity: object) -> None:
    """update_quota takes a ClientQuotaEntity (Kafka's ClientQuotaEntity), not its parts."""
    with pytest.raises(ValueError, match="expected a ClientQuotaEntity"):
        mgr.update_quota(entity, 10.0)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "needs a user, a client id, or both"),
        ({"user": 42}, "user must be a string, DEFAULT or None, got int"),
        ({"client_id": b"c1"}, "client_id must be a string, DEFAULT or None, got bytes"),
    ],
)
def test_bad_client_quota_entity(kwargs: dict, message: str) -> None:
    """ClientQuotaEntity: a user, a client id, or both; each a string or DEFAULT."""
    with pytest.raises(ValueError, match=message):
        ClientQuotaEntity(**kwargs)


BAD_ITEMS = [
    pytest.param(("bob", "c2", -5.0), "usage item 2: usage value must be a finite number ≥ 0", id="negative"),
    pytest.param(("bob", "c2", math.nan), "usage item 2: usage value must be a finite number ≥ 0", id="nan"),
    pytest.param(("bob", "c2", math.inf), "usage item 2: usage value must be a finite number ≥ 0", id="inf"),
    pytest.param(("bob", "c2", False), "usage item 2: usage value must be a number, got bool", id="bool"),
    pytest.param(("bob", "c2", "5"), "usage item 2: usage value must be a number, got str", id="string"),
    pytest.param((None, "c2", 5.0), "usage item 2: user must be a string", id="user"),
    pytest.param(("bob", 2, 5.0), "usage item 2: client_id must be a string", id="client-id"),
    pytest.param(("bob", "c2"), r"usage item 2: expected \(user, client_id, value\[, now_ms\]\), got 2", id="short"),
    pytest.param(("bob", "c2", 5.0, START_MS, 1), "usage item 2: expected .* got 5 fields", id="long"),
    pytest.param(("bob", "c2", 5.0, 1.7e12), "usage item 2: now_ms must be an integer", id="float-now"),
    pytest.param(("bob", "c2", 5.0, True), "usage item 2: now_ms must be an integer", id="bool-now"),
    pytest.param(42, "usage item 2: ", id="not-a-tuple"),
]


@pytest.mark.parametrize(("bad_item", "message"), BAD_ITEMS)
def test_batch_with_one_bad_item_records_nothing(mgr: ClientQuotaManager, bad_item: object, message: str) -> None:
    """record_batch validates every item first: one bad item rejects the batch and records nothing."""
    now = START_MS + 500
    sensors, values = list(mgr.metrics.sensors), metric_values(mgr.metrics, now)
    items = [
        ("alice", "c1", 900.0),  # would be recorded first ...
        ("carol", "c3", 10_000.0, now),  # ... and create carol's sensors
        bad_item,
        ("alice", "c1", 100.0),
    ]
    with pytest.raises(ValueError, match=message):
        mgr.record_batch(items, now)
    assert_untouched(mgr, sensors, values)


@pytest.mark.parametrize("now_ms", [None, 1.7e12, "1700000000000", True])
def test_batch_with_bad_now_records_nothing(mgr: ClientQuotaManager, now_ms: object) -> None:
    """record_batch validates its own now_ms too, before an item with its own time is recorded."""
    sensors, values = list(mgr.metrics.sensors), metric_values(mgr.metrics, START_MS + 500)
    with pytest.raises(ValueError, match="now_ms must be an integer"):
        mgr.record_batch([("alice", "c1", 900.0, START_MS + 500), ("alice", "c1", 100.0)], now_ms)
    assert_untouched(mgr, sensors, values)


def test_client_quota_manager_config() -> None:
    """Kafka's quota.window.num and quota.window.size.seconds are at least 1."""
    for kwargs in ({"num_quota_samples": 0}, {"quota_window_size_seconds": 0}, {"num_quota_samples": 2.5}):
        with pytest.raises(ValueError, match="must be an integer ≥ 1"):
            ClientQuotaManagerConfig(**kwargs)
