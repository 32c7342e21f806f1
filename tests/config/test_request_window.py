"""``ConfigImage.applied_request_window``: the request-id window a replay would keep, from request ids alone."""

from __future__ import annotations

from quotaplane.config import ConfigImage, client_quota_event, decode_columns, encode_events


def _event(i: int, request_id: str):
    event = client_quota_event((("user", f"u{i}"),), "producer_byte_rate", float(i))
    event.request_id = request_id
    return event


def test_window_equals_a_replay_of_the_same_batches() -> None:
    batches = [["a", "a", "b"], ["c", "", "a"], ["d", "e", "e"]]  # "a" reused after others
    image = ConfigImage(max_applied_requests=2)
    window_batches, offset = [], 0
    for ids in batches:
        events = [_event(offset + i, rid) for i, rid in enumerate(ids)]
        image.replay_columns(offset, decode_columns(encode_events(events)))
        window_batches.append((list(range(offset, offset + len(ids))), ids))
        offset += len(ids)
    seeded = ConfigImage.applied_request_window((), window_batches, max_applied_requests=2)
    assert seeded == list(image.snapshot_header().applied_requests)
    assert [(r.request_id, r.first_offset, r.last_offset) for r in seeded] == [("d", 6, 6), ("e", 7, 8)]


def test_window_starts_from_a_seed() -> None:
    image = ConfigImage.replayed([_event(0, "x"), _event(1, "y"), _event(2, "z")], max_applied_requests=2)
    seed = image.snapshot_header().applied_requests
    window = ConfigImage.applied_request_window(seed, [([3, 4], ["y", "w"])], max_applied_requests=2)
    image.replay(3, [_event(3, "y"), _event(4, "w")])
    assert window == list(image.snapshot_header().applied_requests)
    assert [(r.request_id, r.first_offset, r.last_offset) for r in window] == [("z", 2, 2), ("w", 4, 4)]
    assert ConfigImage.applied_request_window(seed, [], max_applied_requests=0) == []
