"""The replay's batch fast paths agree with the event-by-event ``apply``.

``decode_columns`` keeps the kind and entity-id lists of the batch it parsed last, and the replay takes them
from there (``kinds_and_entities``) instead of converting those columns again; any other batch (decoded
earlier, built without ``decode_columns``, grown after decoding) gets fresh lists. Whichever way a batch
comes, the image must be the one ``apply`` builds. The entity-id check of ``decode_columns`` remembers the
ids it accepted: a malformed id must still be the batch's ValueError.
"""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from quotaplane.config import ConfigImage
from quotaplane.config import _columns as columns_module
from quotaplane.config._columns import decode_columns, encode_events, kinds_and_entities
from quotaplane.config._records import client_quota_event
from quotaplane.v1 import config_events_pb2 as pb

from .strategies import event_logs


def _applied(events: list[pb.Event], **kwargs: int) -> ConfigImage:
    image = ConfigImage(**kwargs)
    for offset, event in enumerate(events):
        image.apply(offset, event)
    return image


def _batches(events: list[pb.Event], size: int) -> list[tuple[int, bytes]]:
    return [(base, encode_events(events[base : base + size])) for base in range(0, len(events), size)]


@given(event_logs(), st.data())
def test_batches_decoded_ahead_or_built_without_decoding_replay_as_apply(
    events: list[pb.Event], data: st.DataObject
) -> None:
    """Each batch is decoded just before its replay, all decoded ahead (only the last is the one
    ``decode_columns`` remembers), or parsed without ``decode_columns``: the same image as ``apply``."""
    size = data.draw(st.integers(1, 9))
    ways = data.draw(st.lists(st.sampled_from(["now", "ahead", "raw"]), min_size=1, max_size=4))
    payloads = _batches(events, size)
    ahead = [decode_columns(payload) for _, payload in payloads]
    image = ConfigImage()
    for i, (base, payload) in enumerate(payloads):
        way = ways[i % len(ways)]
        if way == "now":
            columns = decode_columns(payload)
        elif way == "ahead":
            columns = ahead[i]
        else:
            columns = pb.EventColumns.FromString(payload)
        image.replay_columns(base, columns)
    assert image == _applied(events)


@given(event_logs(), st.data())
def test_snapshot_frames_decoded_together_restore_the_image(events: list[pb.Event], data: st.DataObject) -> None:
    """``from_snapshot`` takes frames decoded all at once (the remembered lists fit only the last)."""
    head = ConfigImage.replayed(events)
    entries = head.snapshot_events()
    size = data.draw(st.integers(1, 5))
    frames = [
        decode_columns(encode_events([e for _, e in entries[i : i + size]], [o for o, _ in entries[i : i + size]]))
        for i in range(0, len(entries), size)
    ]
    assert ConfigImage.from_snapshot(head.snapshot_header(), frames) == head


def test_kinds_and_entities_reuses_only_the_last_decoded_batch() -> None:
    first = decode_columns(encode_events([client_quota_event((("user", "a"),), "producer_byte_rate", 1.0)]))
    second = decode_columns(encode_events([client_quota_event((("user", "b"),), "producer_byte_rate", 2.0)]))
    kinds, entities = kinds_and_entities(second)
    assert kinds_and_entities(second) == (kinds, entities)
    assert kinds_and_entities(second)[1] is entities  # the lists decode_columns built
    assert kinds_and_entities(first) == ([pb.RECORD_KIND_CLIENT_QUOTA], ['[["user","a"]]'])
    assert kinds_and_entities(first)[1] is not entities
    # a batch grown after decoding gets fresh lists, and the replay applies what it holds now
    second.kind.append(pb.RECORD_KIND_CLIENT_QUOTA)
    for column, value in (
        (second.commit_time_ms, 9),
        (second.principal, "User:x"),
        (second.request_id, "r"),
        (second.quota_entity, '[["user","c"]]'),
        (second.quota_key, "producer_byte_rate"),
        (second.quota_value, 3.0),
        (second.quota_remove, False),
    ):
        column.append(value)
    assert kinds_and_entities(second) == ([pb.RECORD_KIND_CLIENT_QUOTA] * 2, ['[["user","b"]]', '[["user","c"]]'])
    image = ConfigImage()
    image.replay_columns(0, second)
    assert image.client_quotas() == {
        (("user", "b"),): {"producer_byte_rate": 2.0},
        (("user", "c"),): {"producer_byte_rate": 3.0},
    }


def test_a_malformed_entity_id_fails_the_decode_after_valid_ones_are_remembered(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(columns_module, "_CANONICAL_IDS_LIMIT", 8)
    monkeypatch.setattr(columns_module, "_canonical_ids", set())
    good = [client_quota_event((("user", f"u{i}"),), "producer_byte_rate", 1.0) for i in range(20)]
    for i in range(0, 20, 5):
        decode_columns(encode_events(good[i : i + 5]))
        assert len(columns_module._canonical_ids) <= 8  # bounded: cleared when full, then refilled
    decode_columns(encode_events(good))  # ids forgotten by the clearing are checked again, and pass
    for bad in ('[["user","b"],["client-id","a"]]', '[["user"]]', "not json", '[["user","x"]] '):
        columns = pb.EventColumns.FromString(encode_events(good[:2]))
        columns.quota_entity[1] = bad
        with pytest.raises(ValueError, match="entity id"):
            decode_columns(columns.SerializeToString())


def test_a_long_log_of_new_requests_replays_as_apply_with_bulk_trims() -> None:
    """Thousands of events in log-sized batches, new entities and unique request ids, a small request
    window (bulk trims inside the replay, per event in ``apply``): the images agree."""
    events = []
    for i in range(3000):
        entity = (("client-id", f"p{i % 70}"), ("user", f"t{i % 130}"))
        event = client_quota_event(entity, "producer_byte_rate", float(1 + i % 11))
        if i % 97 == 0:
            event = client_quota_event(entity, "producer_byte_rate", None)
        event.commit_time_ms, event.principal = 1_700_000_000_000 + i, f"User:admin-{i % 3}"
        event.request_id = "" if i % 13 == 0 else str(uuid.UUID(int=i))
        events.append(event)
    image = ConfigImage(max_applied_requests=25)
    for base, payload in _batches(events, 250):
        image.replay_columns(base, decode_columns(payload))
    assert image == _applied(events, max_applied_requests=25)
    assert len(image) == len(_applied(events, max_applied_requests=25))
