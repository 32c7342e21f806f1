"""The compiled batch hot path (``_record_compiled.pyx``) against the pure-Python one it replaces.

``ClientQuotaManager.record_batch`` runs through the compiled module when it is built. The pure methods
(``_plain_width``, ``_record_plain_batch``, ``Rate.record_and_measure``) are the reference: here the same
workloads (batches of every form, quota changes between them, windows that roll and samples that expire, times
the C path must hand back to Python) run through both, and the throttle times, every sample of every sensor and
every metric value must be identical, bit for bit.
"""

from __future__ import annotations

import math
import os
import struct
import subprocess
import sys
from unittest import mock

from hypothesis import given
from hypothesis import strategies as st

from quotaplane.metrics import Avg, KafkaMetric, Rate, Sensor, WindowedSum
from quotaplane.quota import (
    ClientQuotaManager,
    ClientQuotaManagerConfig,
    ClientRequestQuotaManager,
    QuotaType,
    compiled_core,
)
from quotaplane.quota import _client as client_module
from quotaplane.quota._compiled import record_compiled

from ._client_quota_support import START_MS, metric_values
from .test_client_quota_properties import CLIENTS, SETTINGS, USERS, clients, quota_ops, users


def test_compiled_core_is_built() -> None:
    """``make test`` installs the package, which compiles the hot path: a silent fallback would hide a broken
    build (or a machine without a C compiler, where the pure path runs and this test says so)."""
    assert compiled_core(), "quotaplane.quota._record_compiled is not importable: did setup.py build it?"


def test_pure_core_is_selected_by_the_environment() -> None:
    code = "from quotaplane.quota import compiled_core; print(compiled_core())"
    env = {**os.environ, "QUOTAPLANE_PURE_CORE": "1"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# --- plain_width ---------------------------------------------------------------------------------------------

junk_values = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(-5, 10**6),
    st.sampled_from([10**400, -(10**400), 2**1024 - 1, True, False, None, "1", -0.0, 1e308]),
)
junk_names = st.one_of(st.sampled_from(USERS), st.sampled_from([None, b"x", 1, True]))
junk_times = st.one_of(st.integers(-(2**64), 2**64), st.sampled_from([True, 1.0, None, "1"]))


@st.composite
def junk_items(draw) -> list:
    """Batches mostly well formed, with now and then one field of the wrong type or value, a list instead of a
    tuple, a wrong length or no tuple at all: each must be judged as ``_plain_width`` judges it."""
    width = draw(st.sampled_from([3, 4]))
    items: list = []
    for _ in range(draw(st.integers(0, 6))):
        kind = draw(st.sampled_from(["good", "good", "good", "junk", "list", "short", "other"]))
        if kind == "other":
            items.append(draw(st.sampled_from([None, "alice", 3, ("a",)])))
            continue
        fields: list = [draw(users), draw(clients), draw(st.one_of(st.floats(0, 1e6), st.integers(0, 10**6)))]
        if width == 4:
            fields.append(START_MS + draw(st.integers(0, 100)))
        if kind == "junk":
            index = draw(st.integers(0, width - 1))
            fields[index] = draw([junk_names, junk_names, junk_values, junk_times][index])
        if kind == "short":
            fields = fields[: draw(st.integers(0, 2))] if draw(st.booleans()) else [*fields, 0, 0]
        items.append(fields if kind == "list" else tuple(fields))
    return items


@SETTINGS
@given(items=junk_items())
def test_plain_width_equals_the_reference(items) -> None:
    assert record_compiled.plain_width(items) == client_module._plain_width(items)


def test_plain_width_where_c_and_python_could_differ() -> None:
    """An int too large for a float, a sum that overflows, -0.0, NaN, a bool as a time or a value, nothing."""
    cases = (
        [("a", "b", 10**400)],
        [("a", "b", 1e308), ("a", "b", 1e308)],
        [("a", "b", -0.0)],
        [("a", "b", math.nan)],
        [("a", "b", 1.0, True)],
        [("a", "b", False)],
        [("a", "b", 1.0), ("a", "b", 1.0, START_MS)],
        [],
    )
    assert [record_compiled.plain_width(items) for items in cases] == [0, 0, 3, 0, 0, 0, 0, 0]
    assert [client_module._plain_width(items) for items in cases] == [0, 0, 3, 0, 0, 0, 0, 0]


# --- the recording ---------------------------------------------------------------------------------------------

step_ms = st.sampled_from([0, 0, 0, 1, 7, 100, 499, 500, 999, 1000, 1001, 2500, 11_000, 12_000, 40_000])
item_values = st.one_of(
    st.floats(0.0, 50_000.0), st.integers(0, 50_000), st.integers(0, 50_000).map(float), st.just(0.0)
)


@st.composite
def workloads(draw) -> list[tuple]:
    """Steps of a run: ``("batch", now_ms, items)`` (every item at ``now_ms``, or every item with its own
    time) and ``("quotas", ops)``; now and then a last batch at 2**62 ms or later, which C hands back."""
    now = START_MS + draw(st.integers(0, 3_000))
    steps: list[tuple] = []
    for _ in range(draw(st.integers(1, 8))):
        if draw(st.integers(0, 3)) == 0:
            steps.append(("quotas", draw(quota_ops)))
            continue
        timed = draw(st.booleans())
        now += draw(step_ms)
        batch_now = now
        items: list[tuple] = []
        for _ in range(draw(st.integers(1, 40))):
            item = (draw(users), draw(clients), draw(item_values))
            if timed:
                now += draw(step_ms)
                item = (*item, now)
            items.append(item)
        steps.append(("batch", batch_now, items))
    if draw(st.booleans()):
        steps.append(("batch", 2**62 + now, [(USERS[0], CLIENTS[0], 10.0), (USERS[1], CLIENTS[1], 3)]))
    return steps


def new_manager(quota_type: QuotaType, quota_value: bool, samples: int, window_s: int, compiled: bool):
    config = ClientQuotaManagerConfig(
        num_quota_samples=samples, quota_window_size_seconds=window_s, client_quota_value_metric_enable=quota_value
    )
    if quota_type is QuotaType.REQUEST:
        mgr: ClientQuotaManager = ClientRequestQuotaManager(config, now_ms=START_MS)
    else:
        mgr = ClientQuotaManager(config, quota_type)
    if not compiled:
        mgr.record_compiled = None
    return mgr


def _samples(stat: object) -> tuple:
    """A sampled stat's samples as stored: starts, last events, values by their bits and types, counts, current."""
    return (
        list(stat._starts),
        list(stat._lasts),
        [struct.pack("<d", v) for v in stat._values],
        [type(v) for v in stat._values],
        list(stat._counts),
        stat._current,
    )


def samples_of(mgr: ClientQuotaManager) -> dict[str, tuple]:
    """Every Rate's samples as stored (floats by their bits: -0.0 and 0.0 differ, and by type), with what the
    fused call remembers for the next recording and the sensors' last recording times; and every Avg's (the
    throttle-time sensors')."""
    out: dict[str, tuple] = {}
    for name, sensor in mgr.metrics.sensors.items():
        for metric in sensor.metrics:
            stat = metric.stat
            if type(stat) is Avg:
                out[f"{name}/{metric.metric_name}"] = (*_samples(stat), sensor.last_record_time_ms)
            if type(stat) is Rate and type(stat.stat) is WindowedSum:
                out[f"{name}/{metric.metric_name}"] = (
                    *_samples(stat.stat),
                    stat.last_window_ms,
                    sensor.last_record_time_ms,
                )
    return out


def run(mgr: ClientQuotaManager, steps: list[tuple]) -> list:
    answers: list = []
    for step in steps:
        if step[0] == "quotas":
            for entity, bound in step[1]:
                mgr.update_quota(entity, bound)
        else:
            throttles = mgr.record_batch(step[2], step[1])
            answers.append(throttles)
            # as a shard does: each throttle answered goes to the client's throttle-time sensor
            throttled = [(item, t) for item, t in zip(step[2], throttles, strict=True) if t]
            mgr.throttle_batch([(item[0], item[1], t, item[3] if len(item) > 3 else step[1]) for item, t in throttled])
    return answers


@SETTINGS
@given(
    quota_type=st.sampled_from([QuotaType.PRODUCE, QuotaType.FETCH, QuotaType.REQUEST]),
    quota_value=st.booleans(),
    samples=st.sampled_from([1, 2, 11]),
    window_s=st.sampled_from([1, 2]),
    steps=workloads(),
)
def test_compiled_batches_equal_the_pure_path(quota_type, quota_value, samples, window_s, steps) -> None:
    compiled = new_manager(quota_type, quota_value, samples, window_s, compiled=True)
    pure = new_manager(quota_type, quota_value, samples, window_s, compiled=False)
    assert run(compiled, steps) == run(pure, steps)
    assert samples_of(compiled) == samples_of(pure)
    end = max((s[1] for s in steps if s[0] == "batch"), default=START_MS)
    for at in (end, end + 700, end + 11_000):
        assert metric_values(compiled.metrics, at) == metric_values(pure.metrics, at)


def test_the_c_path_records_most_items() -> None:
    """A steady client's recordings stay in C, the roll-over of a sample once a window and the purge after a
    silence included: the reference ``record_and_measure`` is called back only for the client's first recording
    (it has no fast path yet). Without this the equality above could be the reference's alone."""
    mgr = ClientQuotaManager(ClientQuotaManagerConfig(), QuotaType.PRODUCE)
    items = [("alice", "c1", 100.0, START_MS + i) for i in range(5_000)]  # 5 windows of 1 s
    reference = Rate.record_and_measure
    with mock.patch.object(Rate, "record_and_measure", autospec=True, side_effect=reference) as called:
        throttles = mgr.record_batch(items, START_MS)
    assert throttles == [0] * 5_000  # no quota: Kafka's unlimited bound
    assert called.call_count == 1
    mgr.update_quota(client_module.ClientQuotaEntity(user="alice"), 1.0)
    with mock.patch.object(Rate, "record_and_measure", autospec=True, side_effect=reference) as called:
        throttles = mgr.record_batch([("alice", "c1", 100.0, START_MS + 5_000 + i) for i in range(5_000)], START_MS)
    assert all(t > 0 for t in throttles)
    assert called.call_count <= 1  # the quota's new sensor config: the client's first recording under it
    # 25 s of silence, then one recording every 3 s: each rolls a sample over and purges the ones 11 s old
    later = [("alice", "c1", 100.0, START_MS + 35_000 + 3_000 * i) for i in range(50)]
    with mock.patch.object(Rate, "record_and_measure", autospec=True, side_effect=reference) as called:
        mgr.record_batch(later, START_MS)
    assert called.call_count == 0


def test_the_c_path_records_most_throttle_times() -> None:
    """A throttled client's throttle times stay in C within a sample; ``Sensor.record`` is called back for the
    first recording and once a window (the sample rolls over: Kafka's default 30 s windows for this sensor, one
    recording landing exactly on each window's end), and the Avg it measures is the reference's."""
    items = [("alice", "c1", 7 + i % 5, START_MS + 100 * i) for i in range(950)]  # 95 s: 4 windows of 30 s
    managers = []
    for compiled in (True, False):
        mgr = ClientQuotaManager(ClientQuotaManagerConfig(), QuotaType.PRODUCE)
        if not compiled:
            mgr.record_compiled = None
        mgr.record_batch([("alice", "c1", 1.0)], START_MS)  # the client's sensors
        with mock.patch.object(Sensor, "record", autospec=True, side_effect=Sensor.record) as called:
            mgr.throttle_batch(items)
        managers.append((mgr, called.call_count))
    (compiled_mgr, compiled_calls), (pure_mgr, pure_calls) = managers
    assert pure_calls == 950
    assert compiled_calls == 4  # the first recording, and the roll-overs at 30, 60 and 90 s
    assert samples_of(compiled_mgr) == samples_of(pure_mgr)
    end = START_MS + 95_000
    assert metric_values(compiled_mgr.metrics, end) == metric_values(pure_mgr.metrics, end)


def test_a_throttle_time_sensor_of_another_shape_is_recorded_by_the_reference() -> None:
    """A sensor with a parent, or of a subclass, is recorded through ``Sensor.record`` (its parents and properties
    honoured), never in C."""

    class WatchedSensor(Sensor):
        __slots__ = ()

    mgr = ClientQuotaManager(ClientQuotaManagerConfig(), QuotaType.PRODUCE)
    mgr.record_batch([("alice", "c1", 1.0), ("bob", "c2", 1.0)], START_MS)
    sensors = mgr._cached_sensors()
    sensors[("alice", "c1")].throttle_time_sensor.__class__ = WatchedSensor
    parent = mgr.metrics.sensor("a-parent", now_ms=START_MS)
    sensors[("bob", "c2")].throttle_time_sensor.parents = (parent,)
    with mock.patch.object(Sensor, "record", autospec=True, side_effect=Sensor.record) as called:
        mgr.throttle_batch([("alice", "c1", 5, START_MS + 1), ("bob", "c2", 6, START_MS + 2)])
    recorded = [call.args[0] for call in called.call_args_list]
    assert recorded[0] is sensors[("alice", "c1")].throttle_time_sensor
    assert recorded[1] is sensors[("bob", "c2")].throttle_time_sensor and recorded[2] is parent


def test_an_object_of_a_subclass_is_read_and_written_through_its_attributes() -> None:
    """The compiled loop reads and writes slots by their offset only in objects of exactly the class the offset
    was taken from: a subclass's property of the same name is honoured, as the reference honours it."""
    written: list[int] = []
    read: list[object] = []

    class WatchedSensor(Sensor):
        __slots__ = ()

        @property
        def last_record_time_ms(self) -> int:
            return Sensor.last_record_time_ms.__get__(self)

        @last_record_time_ms.setter
        def last_record_time_ms(self, now_ms: int) -> None:
            written.append(now_ms)
            Sensor.last_record_time_ms.__set__(self, now_ms)

    class WatchedMetric(KafkaMetric):
        __slots__ = ()

        @property
        def config(self) -> object:
            value = KafkaMetric.config.__get__(self)
            read.append(value)
            return value

        @config.setter
        def config(self, config: object) -> None:
            KafkaMetric.config.__set__(self, config)

    mgr = ClientQuotaManager(ClientQuotaManagerConfig(), QuotaType.PRODUCE)
    mgr.update_quota(client_module.ClientQuotaEntity(user="alice"), 1_000.0)
    mgr.record_batch([("alice", "c1", 100.0)], START_MS)  # the client's sensors and fast path
    quota_sensor, metric, _, _ = mgr._fast_paths["alice"]["c1"]
    quota_sensor.__class__ = WatchedSensor
    metric.__class__ = WatchedMetric
    throttles = mgr.record_batch([("alice", "c1", 100.0, START_MS + 10), ("alice", "c1", 50_000.0, START_MS + 20)], 0)
    assert written == [START_MS + 10, START_MS + 20]
    assert len(read) >= 2 and all(config is KafkaMetric.config.__get__(metric) for config in read)
    assert throttles[0] == 0 and throttles[1] > 0


def test_a_sample_past_the_c_range_sends_later_recordings_back_whole() -> None:
    """A time at or past 2**62 ms is recorded by the reference and stays in the samples; a later recording at an
    ordinary time then meets it in a sample the C roll-over would read, so that recording goes back to Python
    before anything is changed, and both paths end in the same state."""
    steps = [
        ("batch", START_MS, [(USERS[0], CLIENTS[0], 10.0), (USERS[1], CLIENTS[1], 3.0)]),
        ("batch", 2**62 + START_MS, [(USERS[0], CLIENTS[0], 10.0)]),
        ("batch", START_MS + 1_500, [(USERS[0], CLIENTS[0], 7.0, START_MS + 1_500 + i) for i in range(3)]),
        ("batch", START_MS + 40_000, [(USERS[0], CLIENTS[0], 5.0), (USERS[1], CLIENTS[1], 2.0)]),
    ]
    compiled = new_manager(QuotaType.PRODUCE, False, 11, 1, compiled=True)
    pure = new_manager(QuotaType.PRODUCE, False, 11, 1, compiled=False)
    assert run(compiled, steps) == run(pure, steps)
    assert samples_of(compiled) == samples_of(pure)
