"""``ConfigImage.applied_request_window``: the request-id window a replay would keep, from request ids alone."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

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


def _reference_window(batches: list[tuple[list[int], list[str]]], limit: int) -> dict[str, tuple[int, int]]:
    """The window as first written (spans as lists, one lookup per run): the reference of the fast path."""
    requests: dict[str, list[int]] = {}
    for offsets, request_ids in batches:
        previous, span, last = None, None, -1
        for offset, request_id in zip(offsets, request_ids, strict=True):
            if request_id != previous:
                if span is not None:
                    span[1] = last
                span = None
                if request_id:
                    span = requests.get(request_id)
                    if span is None:
                        span = requests[request_id] = [offset, offset]
                previous = request_id
            last = offset
        if span is not None:
            span[1] = last
        if len(requests) > 2 * limit + 1024:
            requests = dict(list(requests.items())[len(requests) - limit :] if limit else [])
    return {request_id: (span[0], span[1]) for request_id, span in requests.items()}


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.lists(st.integers(-1, 12), min_size=1, max_size=400), max_size=8),
    st.sampled_from([0, 1, 3, 50]),
)
def test_the_bulk_window_equals_the_reference(batch_codes: list[list[int]], limit: int) -> None:
    """Batches of new ids (the dict.update path), repeats inside a batch, empty ids and ids seen before
    (the loop) give the reference's window, bulk trims included, with the same order."""
    fresh = iter(range(10**9))
    batches, offset = [], 0
    for codes in batch_codes:
        # -1: no request id; 0..4: a few reused ids; above: an id never seen before
        ids = ["" if c < 0 else f"r{c}" if c < 5 else f"new-{next(fresh)}" for c in codes]
        batches.append((list(range(offset, offset + len(ids))), ids))
        offset += len(ids)
    expected = _reference_window(batches, limit)
    image = ConfigImage(max_applied_requests=limit)
    for offsets, ids in batches:
        image._remember_requests(range(offsets[0], offsets[-1] + 1), ids)
    assert list(image._applied_requests) == list(expected)
    assert {rid: image.applied_request(rid) for rid in expected} == expected
    assert image.applied_request("") is None
    window = ConfigImage.applied_request_window((), batches, max_applied_requests=limit)
    kept = list(expected.items())[max(0, len(expected) - limit) :] if limit else []
    assert [(r.request_id, r.first_offset, r.last_offset) for r in window] == [(k, *s) for k, s in kept]
