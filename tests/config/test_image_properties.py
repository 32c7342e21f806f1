"""Properties of the ConfigImage over random event logs (valid records, colliding keys).

- the delta path (``apply``) and the batch path (``replay``) build the same image;
- a snapshot plus the tail replays to the same image as the whole log (in memory and through files);
- ``image_at(k)`` is the image of the first k events, ``image_at_time`` the image of the events committed
  by then;
- every live value's provenance is the last event that set it.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from quotaplane.config import ConfigImage, ConfigStore, EventLog
from quotaplane.config._columns import decode_columns, encode_events, events_of
from quotaplane.config._image import CLIENT_METRICS, CONFIG, QUOTA
from quotaplane.v1 import config_events_pb2 as pb

from .strategies import event_logs

FILE_SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _applied(events: list[pb.Event]) -> ConfigImage:
    image = ConfigImage()
    for offset, event in enumerate(events):
        image.apply(offset, event)
    return image


def _naive(events: list[pb.Event]) -> dict[tuple, object]:
    """A straightforward model: the last value per config key (removals drop the key)."""
    state: dict[tuple, object] = {}
    for event in events:
        kind = event.WhichOneof("record")
        if kind == "client_quota":
            r = event.client_quota
            entity = tuple(
                sorted((e.entity_type, e.entity_name if e.HasField("entity_name") else None) for e in r.entity)
            )
            key = (QUOTA, entity, r.key)
            if r.remove:
                state.pop(key, None)
            else:
                state[key] = r.value
        elif kind == "client_metrics":
            r = event.client_metrics
            configs = {}
            if r.HasField("metrics"):
                configs["metrics"] = r.metrics
            if r.HasField("interval_ms"):
                configs["interval.ms"] = str(r.interval_ms)
            if r.HasField("match"):
                configs["match"] = r.match
            if r.delete or not configs:
                state.pop((CLIENT_METRICS, r.name), None)
            else:
                state[(CLIENT_METRICS, r.name)] = configs
        else:
            r = event.config
            key = (CONFIG, r.resource_type, r.resource_name, r.name)
            if r.HasField("value"):
                state[key] = r.value
            else:
                state.pop(key, None)
    return state


def _image_state(image: ConfigImage) -> dict[tuple, object]:
    state: dict[tuple, object] = {}
    for entity, quotas in image.client_quotas().items():
        for key, value in quotas.items():
            state[(QUOTA, entity, key)] = value
    for name, configs in image.client_metrics().items():
        state[(CLIENT_METRICS, name)] = configs
    for rtype, rname in image.config_resources():
        for key, value in image.configs(rtype, rname).items():
            state[(CONFIG, int(rtype), rname, key)] = value
    return state


@given(event_logs())
def test_apply_and_replay_agree_with_a_naive_model(events: list[pb.Event]) -> None:
    applied = _applied(events)
    replayed = ConfigImage.replayed(events)
    assert applied == replayed
    assert _image_state(replayed) == _naive(events)
    assert replayed.end_offset == len(events)
    assert replayed.last_commit_time_ms == (events[-1].commit_time_ms if events else 0)


@given(event_logs())
def test_provenance_is_the_last_event_that_set_each_key(events: list[pb.Event]) -> None:
    image = ConfigImage.replayed(events)
    for key in _naive(events):
        provenance = image.provenance(key)
        assert provenance is not None
        # no later event touches this key
        later = _naive(events[provenance.offset + 1 :]).keys() | set()
        assert key not in later or _naive(events[: provenance.offset + 1]).get(key) == _naive(events).get(key)
        event = events[provenance.offset]
        assert (provenance.commit_time_ms, provenance.principal, provenance.request_id) == (
            event.commit_time_ms,
            event.principal,
            event.request_id,
        )
        assert _naive(events[: provenance.offset + 1])[key] == _naive(events)[key]
        for offset in range(provenance.offset + 1, len(events)):
            assert _naive(events[: offset + 1]).get(key) == _naive(events[:offset]).get(key)


@given(event_logs(), st.data())
def test_deltas_describe_each_change(events: list[pb.Event], data: st.DataObject) -> None:
    image = ConfigImage()
    for offset, event in enumerate(events):
        before = _image_state(image)
        delta = image.apply(offset, event)
        after = _image_state(image)
        changed = {k for k in before.keys() | after.keys() if before.get(k) != after.get(k)}
        assert len(delta.changes) == (1 if changed else 0)
        assert delta.provenance.offset == offset


@given(event_logs(), st.data())
def test_snapshot_plus_tail_equals_everything_in_memory(events: list[pb.Event], data: st.DataObject) -> None:
    k = data.draw(st.integers(0, len(events)))
    head = ConfigImage.replayed(events[:k])
    entries = head.snapshot_events()
    frames = [
        decode_columns(encode_events([e for _, e in entries[i : i + 3]], [o for o, _ in entries[i : i + 3]]))
        for i in range(0, len(entries), 3)
    ]
    restored = ConfigImage.from_snapshot(head.snapshot_header(), frames)
    assert restored == head
    restored.replay(k, events[k:])
    assert restored == ConfigImage.replayed(events)


@given(event_logs(), st.data())
def test_replaying_column_batches_equals_applying_events(events: list[pb.Event], data: st.DataObject) -> None:
    """The log's fast path (EventColumns batches, straddling the image's end offset) == one event at a time."""
    size = data.draw(st.integers(1, 7))
    k = data.draw(st.integers(0, len(events)))
    image = ConfigImage.replayed(events[:k])
    start = data.draw(st.integers(0, k))  # batches may begin below the image's end offset
    for base in range(start - start % size, len(events), size):
        batch = events[base : base + size]
        columns = decode_columns(encode_events(batch))
        assert events_of(columns) == batch
        image.replay_columns(base, columns)
    assert image == _applied(events)


@FILE_SETTINGS
@given(event_logs(max_size=40), st.data())
def test_log_snapshot_and_image_at_through_files(events: list[pb.Event], data: st.DataObject) -> None:
    k = data.draw(st.integers(0, len(events)))
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        with EventLog.open(directory, fsync=False, segment_bytes=512) as log:
            if events[:k]:
                log.append(events[:k])
        with ConfigStore.open(directory, fsync=False) as store:
            store.write_snapshot()
            if events[k:]:
                store.log.append(events[k:])
        with ConfigStore.open(directory, fsync=False) as store:  # newest snapshot + tail
            assert store.image == ConfigImage.replayed(events)
            j = data.draw(st.integers(0, len(events)))
            assert store.image_at(j) == ConfigImage.replayed(events[:j])
            if events:
                t = data.draw(st.sampled_from([e.commit_time_ms for e in events]))
                committed = [e for e in events if e.commit_time_ms <= t]
                assert store.image_at_time(t) == ConfigImage.replayed(committed)
            assert store.image_at_time(0) == ConfigImage()
            # deleting the segments the snapshot covers keeps opening and recent audits working
            store.delete_segments_covered_by_snapshot()
        with ConfigStore.open(directory, fsync=False) as store:
            assert store.image == ConfigImage.replayed(events)
            assert store.image_at(len(events)) == store.image
            assert store.image_at(k) == ConfigImage.replayed(events[:k])
