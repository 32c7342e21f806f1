"""Fixtures for the metrics-primitive tests ported from Apache Kafka."""

from __future__ import annotations

import pytest

#: A realistic wall-clock start, as Kafka's ``MockTime`` uses: 0 is a "never" sentinel in ``TokenBucket``.
START_MS = 1_700_000_000_000


class ManualClock:
    """Kafka's ``MockTime`` reduced to what the ports need: a time in ms that only ``sleep`` moves."""

    def __init__(self, now_ms: int = START_MS) -> None:
        self.now_ms = now_ms

    def sleep(self, ms: int) -> None:
        self.now_ms += ms


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()
