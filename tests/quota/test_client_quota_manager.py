"""Ports of Kafka's ClientQuotaManager tests.

Sources: ``core/src/test/scala/unit/kafka/server/ClientQuotaManagerTest.scala`` (with
``BaseClientQuotaManagerTest.scala``) and its 4.x Java successor
``server/src/test/java/org/apache/kafka/server/quota/ClientQuotaManagerTest.java``, which adds the
per-kind reference counting of ``quotaTypesEnabled``.

Kafka's ``Session`` becomes the ``user`` string (the principal name); ``time.milliseconds`` becomes an
explicit ``now_ms``. Kafka's tests never advance the clock between ``checkQuota`` calls, so neither
do these. Kafka's delay queue (``queue-size``, ``ThrottledChannelReaper``) has no counterpart here: the
caller mutes the channel; the ports check the ``throttle-time`` metric that ``throttle`` records instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import pytest

from quotaplane.quota import (
    CLIENT_ID_QUOTA_ENABLED,
    CUSTOM_QUOTAS,
    DEFAULT,
    NO_QUOTAS,
    USER_CLIENT_ID_QUOTA_ENABLED,
    USER_QUOTA_ENABLED,
    ClientQuotaEntity,
    ClientQuotaManager,
    ClientQuotaManagerConfig,
    ClientQuotaType,
    QuotaType,
)
from quotaplane.quota.throttle import INT_MAX_VALUE

from ._client_quota_support import DOUBLE_MAX_VALUE, START_MS, UNLIMITED, quota_metric_value

CONFIG = ClientQuotaManagerConfig()  # Kafka's defaults: 11 samples of 1 s


def new_manager(quota_type: QuotaType = QuotaType.PRODUCE, config: ClientQuotaManagerConfig = CONFIG):
    return ClientQuotaManager(config, quota_type)


def check_quota(
    mgr: ClientQuotaManager,
    user: str,
    client_id: str,
    expected_bound: float | None,
    value: int,
    *,
    expect_throttle: bool,
    now_ms: int = START_MS,
) -> None:
    """Kafka's ``checkQuota``: bound, max value in the window, then whether ``value * samples`` throttles."""
    cfg = mgr.config
    assert mgr.quota(user, client_id).bound == (UNLIMITED if expected_bound is None else expected_bound)
    expected_max = (
        DOUBLE_MAX_VALUE
        if expected_bound is None
        else cfg.quota_window_size_seconds * (cfg.num_quota_samples - 1) * expected_bound
    )
    assert mgr.max_value_in_quota_window(user, client_id, now_ms) == expected_max

    throttle_ms = mgr.maybe_record_and_get_throttle_time_ms(user, client_id, value * cfg.num_quota_samples, now_ms)
    if expect_throttle:
        assert throttle_ms > 0, f"{user}/{client_id} should be throttled"
    else:
        assert throttle_ms == 0, f"{user}/{client_id} should not be throttled, was {throttle_ms}"


# --- quota parsing ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class UserClient:
    """Kafka's ``UserClient``: the request's user and client id, and the entity its quota is configured on."""

    user: str
    client_id: str
    config_entity: ClientQuotaEntity | None = None


def check_quota_parsing(client1: UserClient, client2: UserClient, random_client: UserClient, default: UserClient):
    """Kafka's ``testQuotaParsing``, with the exact throttle times its ``> 0`` checks stand for."""
    mgr = new_manager()
    now = START_MS
    samples = CONFIG.num_quota_samples

    # Case 1: the overridden quotas apply; a client without one is unlimited
    mgr.update_quota(client1.config_entity, 2000)
    mgr.update_quota(client2.config_entity, 4000)
    assert mgr.quota(random_client.user, random_client.client_id).bound == UNLIMITED
    assert mgr.quota(client1.user, client1.client_id).bound == 2000
    assert mgr.quota(client2.user, client2.client_id).bound == 4000

    # 27,500 bytes in a fresh 10 s (padded) window: 2750 B/s, 37.5 % over 2000 for 10 s
    throttle = mgr.maybe_record_and_get_throttle_time_ms(client1.user, client1.client_id, 2500 * samples, now)
    assert throttle == 3750

    # Case 2: a higher quota reaches the existing sensor, whose usage is kept: 2750 <= 3000
    mgr.update_quota(client1.config_entity, 3000)
    assert mgr.quota(client1.user, client1.client_id).bound == 3000
    assert mgr.maybe_record_and_get_throttle_time_ms(client1.user, client1.client_id, 0, now) == 0

    # Case 3: a lower quota throttles the same usage again: (2750 - 500) / 500 * 10 s
    mgr.update_quota(client1.config_entity, 500)
    assert mgr.quota(client1.user, client1.client_id).bound == 500
    assert mgr.maybe_record_and_get_throttle_time_ms(client1.user, client1.client_id, 0, now) == 45_000

    # Case 4: remove the override and set a high default: (27,500 + 11,000) / 10 s = 3850 <= 4000
    mgr.update_quota(client1.config_entity, None)
    mgr.update_quota(default.config_entity, 4000)
    assert mgr.quota(client1.user, client1.client_id).bound == 4000
    assert mgr.maybe_record_and_get_throttle_time_ms(client1.user, client1.client_id, 1000 * samples, now) == 0
    assert quota_metric_value(mgr, client1.user, client1.client_id, now) == 3850.0


def test_client_id_quota_parsing() -> None:
    """ClientQuotaManagerTest.scala: testClientIdQuotaParsing (/config/clients/<client-id> and <default>)."""
    check_quota_parsing(
        UserClient("ANONYMOUS", "p1", ClientQuotaEntity(client_id="p1")),
        UserClient("ANONYMOUS", "p2", ClientQuotaEntity(client_id="p2")),
        UserClient("ANONYMOUS", "random-client-id"),
        UserClient("", "", ClientQuotaEntity(client_id=DEFAULT)),
    )


def test_user_quota_parsing() -> None:
    """ClientQuotaManagerTest.scala: testUserQuotaParsing (/config/users/<user> and <default>)."""
    check_quota_parsing(
        UserClient("User1", "p1", ClientQuotaEntity(user="User1")),
        UserClient("User2", "p2", ClientQuotaEntity(user="User2")),
        UserClient("RandomUser", "random-client-id"),
        UserClient("", "", ClientQuotaEntity(user=DEFAULT)),
    )


def test_user_client_id_quota_parsing() -> None:
    """ClientQuotaManagerTest.scala: testUserClientIdQuotaParsing (/config/users/<user>/clients/<client-id>)."""
    check_quota_parsing(
        UserClient("User1", "p1", ClientQuotaEntity(user="User1", client_id="p1")),
        UserClient("User2", "p2", ClientQuotaEntity(user="User2", client_id="p2")),
        UserClient("RandomUser", "random-client-id"),
        UserClient("", "", ClientQuotaEntity(user=DEFAULT, client_id=DEFAULT)),
    )


def test_user_quota_parsing_with_default_client_id_quota() -> None:
    """ClientQuotaManagerTest.scala: testUserQuotaParsingWithDefaultClientIdQuota."""
    # The static client-id default properties this test once combined with are gone (Kafka 4 kept the case).
    check_quota_parsing(
        UserClient("User1", "p1", ClientQuotaEntity(user="User1")),
        UserClient("User2", "p2", ClientQuotaEntity(user="User2")),
        UserClient("RandomUser", "random-client-id"),
        UserClient("", "", ClientQuotaEntity(user=DEFAULT)),
    )


def test_user_client_quota_parsing_id_with_default_client_id_quota() -> None:
    """ClientQuotaManagerTest.scala: testUserClientQuotaParsingIdWithDefaultClientIdQuota."""
    check_quota_parsing(
        UserClient("User1", "p1", ClientQuotaEntity(user="User1", client_id="p1")),
        UserClient("User2", "p2", ClientQuotaEntity(user="User2", client_id="p2")),
        UserClient("RandomUser", "random-client-id"),
        UserClient("", "", ClientQuotaEntity(user=DEFAULT, client_id=DEFAULT)),
    )


# --- max value in the quota window, set and remove ----------------------------------------------------


def test_get_max_value_in_quota_window_with_non_default_quota_window() -> None:
    """ClientQuotaManagerTest.scala: testGetMaxValueInQuotaWindowWithNonDefaultQuotaWindow."""
    num_full_quota_windows = 3  # a 3 s window instead of the default 10 s
    mgr = new_manager(QuotaType.FETCH, ClientQuotaManagerConfig(num_quota_samples=num_full_quota_windows + 1))

    assert mgr.max_value_in_quota_window("userA", "client1", START_MS) == DOUBLE_MAX_VALUE

    mgr.update_quota(ClientQuotaEntity(user=DEFAULT), 10)
    assert mgr.max_value_in_quota_window("userA", "client1", START_MS) == 10 * num_full_quota_windows


def test_set_and_remove_default_user_quota() -> None:
    """ClientQuotaManagerTest.scala: testSetAndRemoveDefaultUserQuota."""
    mgr = new_manager()
    assert mgr.quota_types_enabled == NO_QUOTAS
    check_quota(mgr, "userA", "client1", None, 1000, expect_throttle=False)

    mgr.update_quota(ClientQuotaEntity(user=DEFAULT), 10)
    check_quota(mgr, "userA", "client1", 10, 1000, expect_throttle=True)

    mgr.update_quota(ClientQuotaEntity(user=DEFAULT), None)
    assert mgr.quota_types_enabled == NO_QUOTAS
    check_quota(mgr, "userA", "client1", None, 1000, expect_throttle=False)


def test_set_and_remove_user_quota() -> None:
    """ClientQuotaManagerTest.scala: testSetAndRemoveUserQuota."""
    mgr = new_manager()
    mgr.update_quota(ClientQuotaEntity(user="userA"), 10)
    check_quota(mgr, "userA", "client1", 10, 1000, expect_throttle=True)

    mgr.update_quota(ClientQuotaEntity(user="userA"), None)
    check_quota(mgr, "userA", "client1", None, 1000, expect_throttle=False)


def test_set_and_remove_user_client_quota() -> None:
    """ClientQuotaManagerTest.scala: testSetAndRemoveUserClientQuota."""
    mgr = new_manager()
    mgr.update_quota(ClientQuotaEntity(user="userA", client_id="client1"), 10)
    check_quota(mgr, "userA", "client1", 10, 1000, expect_throttle=True)

    mgr.update_quota(ClientQuotaEntity(user="userA", client_id="client1"), None)
    check_quota(mgr, "userA", "client1", None, 1000, expect_throttle=False)


# --- precedence ---------------------------------------------------------------------------------------


def test_quota_config_precedence() -> None:
    """ClientQuotaManagerTest.scala: testQuotaConfigPrecedence."""
    mgr = new_manager()
    E = ClientQuotaEntity
    mgr.update_quota(E(user=DEFAULT), 1000)
    mgr.update_quota(E(client_id=DEFAULT), 2000)
    mgr.update_quota(E(user=DEFAULT, client_id=DEFAULT), 3000)
    mgr.update_quota(E(user="userA"), 4000)
    mgr.update_quota(E(user="userA", client_id="client1"), 5000)
    mgr.update_quota(E(user="userB"), 6000)
    mgr.update_quota(E(user="userB", client_id="client1"), 7000)
    mgr.update_quota(E(user="userB", client_id=DEFAULT), 8000)
    mgr.update_quota(E(user="userC"), 10000)
    mgr.update_quota(E(client_id="client1"), 9000)

    check_quota(mgr, "userA", "client1", 5000, 4500, expect_throttle=False)  # <user, client> over <user>
    check_quota(mgr, "userA", "client2", 4000, 4500, expect_throttle=True)  # <user> over <client> and defaults
    check_quota(mgr, "userA", "client3", 4000, 0, expect_throttle=True)  # <user> is shared by the user's clients
    check_quota(mgr, "userA", "client1", 5000, 0, expect_throttle=False)  # <user, client> is for its own use

    check_quota(mgr, "userB", "client1", 7000, 8000, expect_throttle=True)
    check_quota(mgr, "userB", "client2", 8000, 7000, expect_throttle=False)  # <user>/<default>: one budget each
    check_quota(mgr, "userB", "client3", 8000, 7000, expect_throttle=False)

    check_quota(mgr, "userD", "client1", 3000, 3500, expect_throttle=True)  # <default>/<default>
    check_quota(mgr, "userD", "client2", 3000, 2500, expect_throttle=False)
    check_quota(mgr, "userE", "client1", 3000, 2500, expect_throttle=False)

    # Remove the <default>/<default> quota: back to the <user> default, with new metric tags (fresh usage)
    mgr.update_quota(E(user=DEFAULT, client_id=DEFAULT), None)
    check_quota(mgr, "userD", "client1", 1000, 0, expect_throttle=False)
    check_quota(mgr, "userE", "client4", 1000, 1500, expect_throttle=True)
    check_quota(mgr, "userF", "client4", 1000, 800, expect_throttle=False)  # default <user> shared by its clients
    check_quota(mgr, "userF", "client5", 1000, 800, expect_throttle=True)

    # Remove the <user> default: back to the <client-id> default, shared by that client id of all users
    mgr.update_quota(E(user=DEFAULT), None)
    check_quota(mgr, "userF", "client4", 2000, 0, expect_throttle=False)
    check_quota(mgr, "userF", "client5", 2000, 0, expect_throttle=False)
    check_quota(mgr, "userF", "client5", 2000, 2500, expect_throttle=True)
    check_quota(mgr, "userG", "client5", 2000, 0, expect_throttle=True)

    # Update quotas: usage recorded before the change still counts
    mgr.update_quota(E(user="userA"), 8000)
    mgr.update_quota(E(user="userA", client_id="client1"), 10000)
    check_quota(mgr, "userA", "client2", 8000, 0, expect_throttle=False)
    check_quota(mgr, "userA", "client2", 8000, 4500, expect_throttle=True)  # sum of new and earlier values
    check_quota(mgr, "userA", "client1", 10000, 0, expect_throttle=False)
    check_quota(mgr, "userA", "client1", 10000, 6000, expect_throttle=True)
    mgr.update_quota(E(user="userA", client_id="client1"), None)
    check_quota(mgr, "userA", "client6", 8000, 0, expect_throttle=True)  # throttled by the shared user quota
    mgr.update_quota(E(user="userA", client_id="client6"), 11000)
    check_quota(mgr, "userA", "client6", 11000, 8500, expect_throttle=False)
    mgr.update_quota(E(user="userA", client_id=DEFAULT), 12000)
    mgr.update_quota(E(user="userA", client_id="client6"), None)
    check_quota(mgr, "userA", "client6", 12000, 4000, expect_throttle=True)  # sum of new and earlier values


# --- violation and throttle time -----------------------------------------------------------------------


def test_quota_violation() -> None:
    """ClientQuotaManagerTest.scala: testQuotaViolation (exact throttle times)."""
    mgr = new_manager()
    mgr.update_quota(ClientQuotaEntity(client_id=DEFAULT), 500)
    now = START_MS

    # 10 s of 400 B/s: under the 500 B/s quota
    for _ in range(10):
        assert mgr.maybe_record_and_get_throttle_time_ms("ANONYMOUS", "unknown", 400, now) == 0
        now += 1000

    # A spike half-way into the 11th window: (400*10 + 2300) / 10.5 s = 600 B/s,
    # so (600 - 500) / 500 * 10.5 s = 2100 ms
    now += 500
    throttle_ms = mgr.maybe_record_and_get_throttle_time_ms("ANONYMOUS", "unknown", 2300, now)
    assert throttle_ms == 2100

    mgr.throttle("ANONYMOUS", "unknown", throttle_ms, now)
    throttle_metric = mgr.metrics.metric(
        mgr.metrics.metric_name("throttle-time", "Produce", tags={"user": "", "client-id": "unknown"})
    )
    assert throttle_metric is not None
    assert throttle_metric.measurable_value(now) == 2100.0
    now += throttle_ms

    # Delays go on until the bursty sample leaves the window. The first 8: 8 old windows of 400, the
    # spike and the new 400 make 5900 bytes over 10.6 s, 600/5300 over the 500 B/s that 10.6 s allows
    # -> 1200 ms. Then the spike's window is the oldest: 5900 over 10.1 s -> 1700 ms. Then it is purged.
    delays = []
    for _ in range(10):
        delays.append(mgr.maybe_record_and_get_throttle_time_ms("ANONYMOUS", "unknown", 400, now))
        now += 1000
    assert delays == [1200] * 8 + [1700, 0]

    assert mgr.maybe_record_and_get_throttle_time_ms("ANONYMOUS", "unknown", 0, now) == 0


def test_throttle_time_capped_to_int_range() -> None:
    """ClientQuotaManagerTest.java (Kafka 4.x): testThrottleTimeCappedToIntRange."""
    mgr = new_manager()
    mgr.update_quota(ClientQuotaEntity(client_id=DEFAULT), 1)
    # 1e9 bytes at 1 B/s would be about 1e12 ms: the int throttle_time_ms field caps it
    assert mgr.maybe_record_and_get_throttle_time_ms("ANONYMOUS", "unknown", 1e9, START_MS) == INT_MAX_VALUE


# --- sensor expiry ---------------------------------------------------------------------------------------


def test_expire_throttle_time_sensor() -> None:
    """ClientQuotaManagerTest.scala: testExpireThrottleTimeSensor."""
    mgr = new_manager()
    mgr.update_quota(ClientQuotaEntity(client_id=DEFAULT), 500)

    mgr.maybe_record_and_get_throttle_time_ms("ANONYMOUS", "client1", 100, START_MS)
    mgr.metrics.remove_sensor("ProduceThrottleTime-:client1")
    assert mgr.metrics.get_sensor("ProduceThrottleTime-:client1") is None

    # No error without the throttle-time sensor; the byte-rate sensor kept its 100: 10,100 B / 10 s
    throttle_ms = mgr.maybe_record_and_get_throttle_time_ms("ANONYMOUS", "client1", 10_000, START_MS)
    assert throttle_ms == 10_200
    assert mgr.metrics.get_sensor("ProduceThrottleTime-:client1") is not None


def test_expire_quota_sensors() -> None:
    """ClientQuotaManagerTest.scala: testExpireQuotaSensors."""
    mgr = new_manager()
    mgr.update_quota(ClientQuotaEntity(client_id=DEFAULT), 500)

    mgr.maybe_record_and_get_throttle_time_ms("ANONYMOUS", "client1", 100, START_MS)
    old_byte_rate_sensor = mgr.metrics.get_sensor("Produce-:client1")
    # Kafka's test removes "Produce-ANONYMOUS:client1", a name that never existed; remove the real one
    mgr.metrics.remove_sensor("ProduceThrottleTime-:client1")
    mgr.metrics.remove_sensor("Produce-:client1")

    # A fresh byte-rate sensor: only the 10,000 counts, 1000 B/s over 10 s -> 10 s
    throttle_ms = mgr.maybe_record_and_get_throttle_time_ms("ANONYMOUS", "client1", 10_000, START_MS)
    assert throttle_ms == 10_000

    assert mgr.metrics.get_sensor("ProduceThrottleTime-:client1") is not None
    new_byte_rate_sensor = mgr.metrics.get_sensor("Produce-:client1")
    assert new_byte_rate_sensor is not None
    assert new_byte_rate_sensor is not old_byte_rate_sensor


def test_expire_sensors_after_an_hour_of_inactivity() -> None:
    """Kafka's INACTIVE_SENSOR_EXPIRATION_TIME_SECONDS (3600) applied through Metrics' expire-sensor task."""
    mgr = new_manager()
    mgr.update_quota(ClientQuotaEntity(client_id=DEFAULT), 500)
    mgr.maybe_record_and_get_throttle_time_ms("ANONYMOUS", "client1", 4000, START_MS)

    assert mgr.expire_sensors(START_MS + 3_600_000) == []  # idle exactly an hour: kept
    assert sorted(mgr.expire_sensors(START_MS + 3_600_001)) == ["Produce-:client1", "ProduceThrottleTime-:client1"]
    assert mgr.metrics.get_sensor("Produce-:client1") is None

    # The client comes back: new sensors, with no memory of the old usage (4000 + 4000 would throttle)
    later = START_MS + 3_600_001
    assert mgr.maybe_record_and_get_throttle_time_ms("ANONYMOUS", "client1", 4000, later) == 0
    assert quota_metric_value(mgr, "ANONYMOUS", "client1", later) == 400.0


# --- names ---------------------------------------------------------------------------------------------


def test_client_id_not_sanitized() -> None:
    """ClientQuotaManagerTest.scala: testClientIdNotSanitized."""
    mgr = new_manager()
    client_id = "client@#$%"
    mgr.update_quota(ClientQuotaEntity(client_id=DEFAULT), 500)

    mgr.maybe_record_and_get_throttle_time_ms("ANONYMOUS", client_id, 100, START_MS)

    # the raw client id names sensors and tags; reporters may sanitize on their side
    assert mgr.metrics.get_sensor("ProduceThrottleTime-:" + client_id) is not None
    assert mgr.metrics.get_sensor("Produce-:" + client_id) is not None
    assert mgr.quota_metric("ANONYMOUS", client_id).tags == {"user": "", "client-id": client_id}


def test_user_is_sanitized_in_metric_tags() -> None:
    """Kafka's Session.sanitizedUser: the user, unlike the client id, is URL-encoded in tags and sensor names."""
    mgr = new_manager()
    user = "CN=alice smith,O=acme*"
    mgr.update_quota(ClientQuotaEntity(user=user), 500)

    assert mgr.quota(user, "c1").bound == 500
    assert mgr.maybe_record_and_get_throttle_time_ms(user, "c1", 10_000, START_MS) == 10_000
    assert mgr.metrics.get_sensor("Produce-CN%3Dalice%20smith%2CO%3Dacme%2A:") is not None
    assert mgr.quota_metric(user, "c1").tags == {"user": "CN%3Dalice%20smith%2CO%3Dacme%2A", "client-id": ""}


# --- fetch un-record (KafkaApis.handleFetchRequest) ----------------------------------------------------------


def test_fetch_unrecord_after_throttle() -> None:
    """ClientQuotaManager.unrecordQuotaSensor as KafkaApis uses it: a throttled fetch returns no data."""
    mgr = new_manager(QuotaType.FETCH)
    mgr.update_quota(ClientQuotaEntity(user="alice"), 1000)
    now = START_MS
    assert mgr.maybe_record_and_get_throttle_time_ms("alice", "consumer-1", 5000, now) == 0

    now += 500
    rate_before = quota_metric_value(mgr, "alice", "consumer-1", now)
    assert rate_before == 5000 / 10.5

    # 13,000 bytes over 10.5 s is 1238 B/s: throttled, so the broker sends an empty response ...
    response_bytes = 8000
    throttle_ms = mgr.maybe_record_and_get_throttle_time_ms("alice", "consumer-1", response_bytes, now)
    assert throttle_ms == 2500  # 10.5 s allow 10,500 bytes: 2500 / 10,500 over, times 10.5 s
    assert quota_metric_value(mgr, "alice", "consumer-1", now) > 1000

    # ... and takes the bytes back: the rate is what it was before the fetch
    mgr.unrecord_quota_sensor("alice", "consumer-1", response_bytes, now)
    assert quota_metric_value(mgr, "alice", "consumer-1", now) == rate_before
    assert mgr.maybe_record_and_get_throttle_time_ms("alice", "consumer-1", 0, now) == 0


# --- quota types enabled: per-kind reference counting (Kafka 4.x) --------------------------------------------


def test_quota_types_enabled_updates_with_default_callback() -> None:
    """ClientQuotaManagerTest.java (Kafka 4.x): testQuotaTypesEnabledUpdatesWithDefaultCallback."""
    mgr = new_manager(QuotaType.CONTROLLER_MUTATION)
    E = ClientQuotaEntity
    U, C, UC = USER_QUOTA_ENABLED, CLIENT_ID_QUOTA_ENABLED, USER_CLIENT_ID_QUOTA_ENABLED

    steps: list[tuple[ClientQuotaEntity, float | None, int]] = [
        (E(client_id="client1"), 5, C),
        (E(user="userA"), 5, U | C),
        (E(client_id="client2"), 5, U | C),
        (E(user="userB"), 5, U | C),
        (E(user="userA", client_id="client1"), 10, UC | C | U),
        (E(user="userA", client_id="client1"), 12, UC | C | U),  # an update, not a second entity
        (E(user="userA"), None, UC | C | U),  # userB is still there
        (E(user="userB"), None, UC | C),  # the last user quota: the bit clears
        (E(client_id="client1"), None, UC | C),
        (E(client_id="client2"), None, UC),
        (E(user="userA", client_id="client1"), None, NO_QUOTAS),  # counted once although set twice
        (E(user="userA", client_id="client1"), None, NO_QUOTAS),  # removing again does not go below zero
    ]
    assert mgr.quota_types_enabled == NO_QUOTAS
    assert not mgr.quotas_enabled()
    for entity, bound, expected in steps:
        mgr.update_quota(entity, bound)
        assert mgr.quota_types_enabled == expected, f"after {entity} -> {bound}"
        assert mgr.quotas_enabled() == (expected != NO_QUOTAS)


class _FixedQuotaCallback:
    """The Java test's anonymous callback: no tags, a limit of 1.0 for everything, quotas only stored."""

    def __init__(self) -> None:
        self.quotas: dict[ClientQuotaEntity, float] = {}

    def quota_metric_tags(self, quota_type: ClientQuotaType, user: str, client_id: str) -> dict[str, str]:
        return {}

    def quota_limit(self, quota_type: ClientQuotaType, metric_tags: Mapping[str, str]) -> float | None:
        return 1.0

    def update_quota(self, quota_type: ClientQuotaType, entity: ClientQuotaEntity, new_value: float) -> None:
        self.quotas[entity] = new_value

    def remove_quota(self, quota_type: ClientQuotaType, entity: ClientQuotaEntity) -> None:
        self.quotas.pop(entity, None)

    def quota_reset_required(self, quota_type: ClientQuotaType) -> bool:
        return False

    def update_cluster_metadata(self, cluster: object) -> bool:
        return False

    def close(self) -> None:
        pass


def test_quota_types_enabled_updates_with_custom_callback() -> None:
    """ClientQuotaManagerTest.java (Kafka 4.x): testQuotaTypesEnabledUpdatesWithCustomCallback."""
    callback = _FixedQuotaCallback()
    mgr = ClientQuotaManager(CONFIG, QuotaType.CONTROLLER_MUTATION, quota_callback=callback)
    E = ClientQuotaEntity

    assert mgr.quota_types_enabled == CUSTOM_QUOTAS
    assert mgr.quotas_enabled()
    for entity in (E(client_id="client1"), E(user="userA"), E(user="userA", client_id="client1")):
        mgr.update_quota(entity, 12)
        assert mgr.quota_types_enabled == CUSTOM_QUOTAS
    assert len(callback.quotas) == 3  # the callback, not the manager, keeps the quotas

    for entity in (E(user="userA", client_id="client1"), E(user="userA"), E(client_id="client1")):
        mgr.update_quota(entity, None)
    assert callback.quotas == {}
    assert mgr.quota_types_enabled == CUSTOM_QUOTAS
    assert mgr.quotas_enabled()


def test_quota_type_bit_follows_its_last_entity() -> None:
    """Kafka 4.x ClientQuotaManager.updateQuotaTypes: two user quotas, one removed keeps the bit, both clear it."""
    mgr = new_manager()
    mgr.update_quota(ClientQuotaEntity(user="alice"), 100)
    mgr.update_quota(ClientQuotaEntity(user="bob"), 100)
    mgr.update_quota(ClientQuotaEntity(user="bob"), 200)  # re-adding the same entity does not count twice
    assert mgr.quota_types_enabled == USER_QUOTA_ENABLED

    mgr.update_quota(ClientQuotaEntity(user="alice"), None)
    assert mgr.quota_types_enabled == USER_QUOTA_ENABLED
    assert mgr.quota("bob", "c").bound == 200

    mgr.update_quota(ClientQuotaEntity(user="bob"), None)
    assert mgr.quota_types_enabled == NO_QUOTAS
    assert mgr.maybe_record_and_get_throttle_time_ms("bob", "c", 1e9, START_MS) == 0
    assert mgr.metrics.get_sensor("Produce-:c") is None  # with no quotas nothing is recorded


def test_removing_the_last_quota_of_a_kind_restores_the_single_level_tags() -> None:
    """Kafka 4.x: once only one kind of quota is left, clients go back to that kind's fixed metric tags."""
    mgr = new_manager()
    mgr.update_quota(ClientQuotaEntity(user="alice"), 1000)
    mgr.update_quota(ClientQuotaEntity(client_id="batch"), 500)
    assert mgr.quota_types_enabled == USER_QUOTA_ENABLED | CLIENT_ID_QUOTA_ENABLED

    # several levels: bob matches no user-level entry, so he falls through to client-id tags
    assert mgr.quota_metric("bob", "batch").tags == {"user": "", "client-id": "batch"}
    assert mgr.quota("bob", "batch").bound == 500

    mgr.update_quota(ClientQuotaEntity(client_id="batch"), None)
    assert mgr.quota_types_enabled == USER_QUOTA_ENABLED
    # user quotas only: every client is tagged by its user, quota or not
    assert mgr.quota_metric("bob", "batch").tags == {"user": "bob", "client-id": ""}
    assert mgr.quota("bob", "batch").bound == UNLIMITED


@pytest.mark.parametrize(
    ("entity", "bit"),
    [
        (ClientQuotaEntity(user=DEFAULT), USER_QUOTA_ENABLED),
        (ClientQuotaEntity(client_id=DEFAULT), CLIENT_ID_QUOTA_ENABLED),
        (ClientQuotaEntity(user=DEFAULT, client_id=DEFAULT), USER_CLIENT_ID_QUOTA_ENABLED),
        (ClientQuotaEntity(user="alice", client_id=DEFAULT), USER_CLIENT_ID_QUOTA_ENABLED),
        (ClientQuotaEntity(user=DEFAULT, client_id="c1"), USER_CLIENT_ID_QUOTA_ENABLED),
    ],
)
def test_default_entities_count_in_their_kind(entity: ClientQuotaEntity, bit: int) -> None:
    """Kafka 4.x ClientQuotaManager.updateQuotaTypes: a default entity counts for the kind of its components."""
    mgr = new_manager()
    mgr.update_quota(entity, 100)
    assert mgr.quota_types_enabled == bit
    mgr.update_quota(entity, None)
    assert mgr.quota_types_enabled == NO_QUOTAS
