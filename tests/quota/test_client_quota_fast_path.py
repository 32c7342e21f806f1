"""The inline fast path of ClientQuotaManager gives exactly what the generic ``Sensor.record`` path gives.

Recording into a quota sensor whose only metric is a ``Rate`` is done inline (record, measure once,
compare, throttle from the measured window). Here the same workloads run with the fast path switched
off (no sensor qualifies), and throttles and every metric value must be identical.
"""

from __future__ import annotations

from unittest import mock

from hypothesis import given
from hypothesis import strategies as st

from quotaplane.quota import ClientQuotaEntity, ClientQuotaManager, ClientQuotaManagerConfig, QuotaType
from quotaplane.quota import _client as client_module

from ._client_quota_support import metric_values
from .test_client_quota_properties import SETTINGS, configured_manager, last_time, quota_maps, usage_batches


def run(quota_type: QuotaType, quotas: dict, batch: tuple[int, list[tuple]]) -> tuple[list[int], ClientQuotaManager]:
    batch_now, items = batch
    mgr = configured_manager(quota_type, False, quotas)
    throttles = [
        mgr.record_and_get_throttle_time_ms(item[0], item[1], item[2], item[3] if len(item) == 4 else batch_now)
        for item in items
    ]
    throttles += mgr.record_batch(items, last_time(batch_now, items))
    return throttles, mgr


@SETTINGS
@given(
    quota_type=st.sampled_from([QuotaType.PRODUCE, QuotaType.FETCH, QuotaType.REQUEST]),
    quotas=quota_maps,
    batch=usage_batches(),
)
def test_fast_path_equals_generic_sensor_path(quota_type, quotas, batch) -> None:
    """Throttles (incl. the request quota's one-window cap) and metrics match the generic path."""
    fast_throttles, fast = run(quota_type, quotas, batch)
    with mock.patch.object(client_module, "_single_rate_metric", return_value=None):
        generic_throttles, generic = run(quota_type, quotas, batch)
    assert all(s.rate_metric is None for s in generic._sensors.values())
    assert fast_throttles == generic_throttles
    end = last_time(*batch)
    for at in (end, end + 700, end + 11_000):
        assert metric_values(fast.metrics, at) == metric_values(generic.metrics, at)


def test_fast_path_is_taken_for_byte_rate_sensors() -> None:
    """A produce client's sensors qualify for the fast path; without this the property above proves nothing."""
    mgr = ClientQuotaManager(client_module.ClientQuotaManagerConfig(), QuotaType.PRODUCE)
    sensors = mgr.get_or_create_quota_sensors("alice", "c1", 1_700_000_000_000)
    assert sensors.rate_metric is not None
    assert sensors.rate_metric.metric_name == mgr.quota_metric("alice", "c1")


@SETTINGS
@given(
    bounds=st.lists(st.sampled_from([50.0, 400.0, 5000.0, 1e6]), min_size=2, max_size=6),
    values=st.lists(st.floats(0.0, 3000.0), min_size=1, max_size=8),
)
def test_a_new_bound_of_an_entity_with_a_quota_keeps_the_cache_and_answers_as_a_rebuilt_manager(bounds, values) -> None:
    """A bound changed on an entity that has one resolves every client's tags as before, so the manager keeps its
    cached sensors (a lease's share changes at every renewal); its answers equal a manager that goes the full
    way at every change (the entity removed and set again: cache emptied, every metric's bound set)."""
    kept = ClientQuotaManager(ClientQuotaManagerConfig(), QuotaType.PRODUCE)
    emptied = ClientQuotaManager(ClientQuotaManagerConfig(), QuotaType.PRODUCE)
    entity = ClientQuotaEntity(client_id="c")
    now = 1_700_000_000_000
    for step, bound in enumerate(bounds):
        kept.update_quota(entity, bound)
        emptied.update_quota(entity, None)  # removed and set again: the full path (cache emptied, configs set)
        emptied.update_quota(entity, bound)
        if step:
            assert kept._sensors, "the cache was kept"
        for value in values:
            now += 37
            assert kept.record_batch([("u", "c", value)], now) == emptied.record_batch([("u", "c", value)], now)
    assert metric_values(kept.metrics, now) == metric_values(emptied.metrics, now)
