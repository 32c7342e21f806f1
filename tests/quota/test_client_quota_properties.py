"""Properties of the client-quota managers, checked with hypothesis.

1. ``record_batch`` is exactly one-by-one ``record_and_get_throttle_time_ms``: same throttles, same metrics.
2. Changing a bound never resets usage (Kafka's ``updateQuotaMetricConfigs`` swaps the config only).
3. ``quota()`` and the metric tags follow a brute-force model of the precedence table in Kafka's
   ``ClientQuotaManager`` Javadoc, and ``quota_types_enabled`` the 4.x per-kind reference counts.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from quotaplane.quota import (
    CLIENT_ID_QUOTA_ENABLED,
    DEFAULT,
    USER_CLIENT_ID_QUOTA_ENABLED,
    USER_QUOTA_ENABLED,
    ClientQuotaEntity,
    ClientQuotaManager,
    ClientQuotaManagerConfig,
    ClientRequestQuotaManager,
    QuotaType,
    sanitize,
)

from ._client_quota_support import START_MS, UNLIMITED, metric_values

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Few names, so that entities and requests collide often; two need sanitizing / must not be sanitized.
USERS = ["alice", "bob", "User:carol smith"]
CLIENTS = ["p1", "p2", "client@#$%"]

users = st.sampled_from(USERS)
clients = st.sampled_from(CLIENTS)
entity_users = st.sampled_from([None, DEFAULT, *USERS])
entity_clients = st.sampled_from([None, DEFAULT, *CLIENTS])
bounds = st.one_of(st.integers(1, 20_000).map(float), st.floats(0.5, 20_000.0))
values = st.one_of(st.integers(0, 50_000).map(float), st.floats(0.0, 50_000.0))


@st.composite
def client_entities(draw) -> ClientQuotaEntity:
    user = draw(entity_users)
    client_id = draw(entity_clients if user is not None else entity_clients.filter(lambda c: c is not None))
    return ClientQuotaEntity(user=user, client_id=client_id)


quota_maps = st.dictionaries(client_entities(), bounds, max_size=6)
quota_ops = st.lists(st.tuples(client_entities(), st.one_of(st.none(), bounds)), max_size=12)


@st.composite
def usage_batches(draw) -> tuple[int, list[tuple]]:
    """A batch time and items with non-decreasing times; items at the batch time may omit their own.

    The batch's form is drawn too, since ``record_batch`` takes a different path for each: every item
    ``(user, client, value)`` at the batch time, every item with its own time, or the two mixed.
    """
    form = draw(st.sampled_from(["mixed", "untimed", "timed"]))
    batch_now = START_MS + draw(st.integers(0, 5_000))
    now = batch_now
    items: list[tuple] = []
    for _ in range(draw(st.integers(1, 30))):
        if form != "untimed":
            now += draw(st.sampled_from([0, 0, 0, 1, 100, 499, 500, 999, 1000, 2500, 12_000]))
        item = (draw(users), draw(clients), draw(values))
        untimed = form == "untimed" or (form == "mixed" and now == batch_now and draw(st.booleans()))
        items.append(item if untimed else (*item, now))
    return batch_now, items


def new_manager(quota_type: QuotaType, quota_value_metric: bool) -> ClientQuotaManager:
    config = ClientQuotaManagerConfig(client_quota_value_metric_enable=quota_value_metric)
    if quota_type is QuotaType.REQUEST:
        return ClientRequestQuotaManager(config, now_ms=START_MS)
    return ClientQuotaManager(config, quota_type)


def configured_manager(quota_type: QuotaType, quota_value_metric: bool, quotas: dict) -> ClientQuotaManager:
    mgr = new_manager(quota_type, quota_value_metric)
    for entity, bound in quotas.items():
        mgr.update_quota(entity, bound)
    return mgr


def last_time(batch_now: int, items: list[tuple]) -> int:
    return max([batch_now] + [item[3] for item in items if len(item) == 4])


# --- 1. record_batch == one by one ------------------------------------------------------------------------


@SETTINGS
@given(
    quota_type=st.sampled_from([QuotaType.PRODUCE, QuotaType.FETCH, QuotaType.REQUEST]),
    quota_value_metric=st.booleans(),
    quotas=quota_maps,
    batch=usage_batches(),
)
def test_record_batch_equals_one_by_one(quota_type, quota_value_metric, quotas, batch) -> None:
    """ClientQuotaManager.record_batch: the throttles and final metrics of one-by-one recording."""
    batch_now, items = batch
    batched = configured_manager(quota_type, quota_value_metric, quotas)
    single = configured_manager(quota_type, quota_value_metric, quotas)

    throttles = batched.record_batch(items, batch_now)
    expected = [
        single.record_and_get_throttle_time_ms(item[0], item[1], item[2], item[3] if len(item) == 4 else batch_now)
        for item in items
    ]

    assert throttles == expected
    assert list(batched.metrics.sensors) == list(single.metrics.sensors)
    end = last_time(batch_now, items)
    for at in (end, end + 700, end + 11_000):
        assert metric_values(batched.metrics, at) == metric_values(single.metrics, at)


@SETTINGS
@given(
    quota_type=st.sampled_from([QuotaType.PRODUCE, QuotaType.FETCH]),
    quotas=quota_maps,
    batch=usage_batches(),
    extra=st.lists(st.tuples(users, clients, st.integers(0, 5_000)), max_size=4),
)
def test_throttle_batch_equals_one_by_one(quota_type, quotas, batch, extra) -> None:
    """ClientQuotaManager.throttle_batch: the throttle-time metrics of one ``throttle`` call per item, for
    clients with cached sensors and for clients seen first by the throttle (``extra``)."""
    batch_now, items = batch
    batched = configured_manager(quota_type, False, quotas)
    single = configured_manager(quota_type, False, quotas)
    throttles = batched.record_batch(items, batch_now)
    assert single.record_batch(items, batch_now) == throttles
    end = last_time(batch_now, items)
    thrown = [
        (item[0], item[1], ms, item[3] if len(item) == 4 else batch_now)
        for item, ms in zip(items, throttles, strict=True)
    ]
    thrown += [(user, client, ms, end) for user, client, ms in extra]

    batched.throttle_batch(thrown)
    for user, client, ms, at in thrown:
        single.throttle(user, client, ms, at)

    assert list(batched.metrics.sensors) == list(single.metrics.sensors)
    for at in (end, end + 700, end + 11_000):
        assert metric_values(batched.metrics, at) == metric_values(single.metrics, at)


# --- 2. usage survives quota changes ------------------------------------------------------------------------


@SETTINGS
@given(
    quota_type=st.sampled_from([QuotaType.PRODUCE, QuotaType.FETCH, QuotaType.REQUEST]),
    quotas=quota_maps.filter(bool),
    batch=usage_batches(),
    data=st.data(),
)
def test_usage_survives_quota_changes(quota_type, quotas, batch, data) -> None:
    """ClientQuotaManager.updateQuotaMetricConfigs: a new bound keeps every sample; the rate is unchanged."""
    batch_now, items = batch
    mgr = configured_manager(quota_type, False, quotas)
    mgr.record_batch(items, batch_now)
    now = last_time(batch_now, items) + data.draw(st.integers(0, 3000))

    entity = data.draw(st.sampled_from(sorted(quotas, key=repr)))
    new_bound = data.draw(bounds)
    before = metric_values(mgr.metrics, now)
    sensors_before = list(mgr.metrics.sensors)

    mgr.update_quota(entity, new_bound)

    assert metric_values(mgr.metrics, now) == before
    assert list(mgr.metrics.sensors) == sensors_before
    # and the new bound is the one enforced from now on, for every client it applies to
    quotas = {**quotas, entity: new_bound}
    for user, client_id in {(item[0], item[1]) for item in items}:
        expected = model_quota(quotas, user, client_id)
        assert mgr.quota(user, client_id).bound == expected
        metric = mgr.metrics.metric(mgr.quota_metric(user, client_id))
        assert metric is not None and metric.config.quota.bound == expected


# --- 3. precedence --------------------------------------------------------------------------------------------


def precedence(user: str, client_id: str) -> list[ClientQuotaEntity]:
    """The eight levels of Kafka's ClientQuotaManager Javadoc, most specific first."""
    return [
        ClientQuotaEntity(user=user, client_id=client_id),  # /config/users/<user>/clients/<client-id>
        ClientQuotaEntity(user=user, client_id=DEFAULT),  # /config/users/<user>/clients/<default>
        ClientQuotaEntity(user=user),  # /config/users/<user>
        ClientQuotaEntity(user=DEFAULT, client_id=client_id),  # /config/users/<default>/clients/<client-id>
        ClientQuotaEntity(user=DEFAULT, client_id=DEFAULT),  # /config/users/<default>/clients/<default>
        ClientQuotaEntity(user=DEFAULT),  # /config/users/<default>
        ClientQuotaEntity(client_id=client_id),  # /config/clients/<client-id>
        ClientQuotaEntity(client_id=DEFAULT),  # /config/clients/<default>
    ]


def model_quota(quotas: dict[ClientQuotaEntity, float], user: str, client_id: str) -> float:
    """The bound of the most specific configured level, or Long.MAX_VALUE."""
    for entity in precedence(user, client_id):
        if entity in quotas:
            return quotas[entity]
    return UNLIMITED


def kind(entity: ClientQuotaEntity) -> int:
    if entity.user is not None and entity.client_id is not None:
        return USER_CLIENT_ID_QUOTA_ENABLED
    return USER_QUOTA_ENABLED if entity.user is not None else CLIENT_ID_QUOTA_ENABLED


def model_tags(quotas: dict[ClientQuotaEntity, float], user: str, client_id: str) -> dict[str, str]:
    """Which sensor a request shares: fixed tags with one kind of quota, else by the level that matched."""
    kinds = {kind(entity) for entity in quotas}
    both, user_only, client_only = (sanitize(user), client_id), (sanitize(user), ""), ("", client_id)
    if kinds <= {CLIENT_ID_QUOTA_ENABLED}:
        tags = client_only
    elif kinds == {USER_QUOTA_ENABLED}:
        tags = user_only
    elif kinds == {USER_CLIENT_ID_QUOTA_ENABLED}:
        tags = both
    else:
        level = next((i for i, e in enumerate(precedence(user, client_id)) if e in quotas), None)
        # levels 1, 2, 4, 5 keep both tags; 3 and 6 (a user quota) share it across the user's clients;
        # 7, 8 and no match share by client id
        tags = {0: both, 1: both, 2: user_only, 3: both, 4: both, 5: user_only}.get(level, client_only)
    return {"user": tags[0], "client-id": tags[1]}


@SETTINGS
@given(ops=quota_ops)
def test_quota_resolution_matches_the_precedence_table(ops) -> None:
    """ClientQuotaManager: quota(), metric tags and quota_types_enabled follow Kafka's precedence model."""
    mgr = ClientQuotaManager(ClientQuotaManagerConfig(), QuotaType.PRODUCE)
    quotas: dict[ClientQuotaEntity, float] = {}
    for entity, bound in ops:
        mgr.update_quota(entity, bound)
        if bound is None:
            quotas.pop(entity, None)
        else:
            quotas[entity] = bound

    expected_kinds = 0
    for entity in quotas:
        expected_kinds |= kind(entity)
    assert mgr.quota_types_enabled == expected_kinds

    for user in USERS:
        for client_id in CLIENTS:
            assert mgr.quota(user, client_id).bound == model_quota(quotas, user, client_id), (user, client_id)
            assert mgr.quota_metric(user, client_id).tags == model_tags(quotas, user, client_id), (user, client_id)


@SETTINGS
@given(ops=quota_ops, batch=usage_batches())
def test_recorded_sensors_follow_the_precedence_table(ops, batch) -> None:
    """ClientQuotaManager.getOrCreateQuotaSensors: each recording lands in the sensor of its model tags."""
    batch_now, items = batch
    mgr = ClientQuotaManager(ClientQuotaManagerConfig(), QuotaType.FETCH)
    quotas: dict[ClientQuotaEntity, float] = {}
    for entity, bound in ops:
        mgr.update_quota(entity, bound)
        if bound is None:
            quotas.pop(entity, None)
        else:
            quotas[entity] = bound

    mgr.record_batch(items, batch_now)
    expected_sensors = set()
    for user, client_id, *_ in items:
        tags = model_tags(quotas, user, client_id)
        expected_sensors |= {
            f"Fetch-{tags['user']}:{tags['client-id']}",
            f"FetchThrottleTime-{tags['user']}:{tags['client-id']}",
        }
        metric = mgr.metrics.metric(mgr.client_quota_metric_name(tags))
        assert metric is not None
        assert metric.config.quota.bound == model_quota(quotas, user, client_id)
    assert set(mgr.metrics.sensors) == expected_sensors
