"""LostUsage: the usage bytes a gateway sent that a restarted shard lacks, by when they were recorded."""

from __future__ import annotations

from quotaplane.services.gateway._lost_usage import DEFAULT_WINDOW_MS, LostUsage


def test_what_came_after_the_checkpoint_is_lost_and_what_came_before_is_not() -> None:
    sent = LostUsage()
    sent.sent(1_000, 1_010, 100.0)  # before the checkpoint at 1_500
    sent.sent(1_490, 1_510, 20.0)  # straddles it: counted whole (a bound)
    sent.sent(1_600, 1_610, 3.0)  # after it, before the restart
    sent.sent(2_500, 2_510, 7.0)  # after the restart at 2_000: the new incarnation recorded it
    assert sent.lost(2_000, 1_500) == 23.0


def test_without_a_checkpoint_the_whole_window_is_lost() -> None:
    sent = LostUsage()
    sent.sent(0, 10, 5.0)  # older than one window before the restart: the windows no longer held it
    sent.sent(5_000, 5_010, 11.0)
    sent.sent(14_000, 14_010, 13.0)
    assert sent.lost(15_000, None) == 24.0 == sent.lost(15_000, None, window_ms=DEFAULT_WINDOW_MS)
    # a checkpoint older than the window bounds nothing more than the window
    assert sent.lost(15_000, 100) == 24.0


def test_old_batches_are_dropped_past_the_horizon() -> None:
    sent = LostUsage(horizon_ms=1_000)
    for t in range(0, 10_000, 100):
        sent.sent(t, t + 5, 1.0)
    assert len(sent._sent) <= 11
    assert sent.lost(10_000, None) == len(sent._sent)
