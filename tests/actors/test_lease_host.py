"""The shard's side of leased budgets (``actors/_lease_host.py``) without Ray: renewals checked whole before any
is served, shares cut from the quota the shard itself resolves, what a gateway decided locally recorded into
the entity's sensor, and nothing leased where the image says the type is not."""

from __future__ import annotations

import math

import pytest

from quotaplane.actors._lease_host import LeaseHost
from quotaplane.config import ConfigImage, ConfigResourceType, config_event, lease_settings
from quotaplane.quota import ClientQuotaEntity, QuotaConfig, QuotaType, build_quota_managers

T0 = 1_700_000_000_000


def host(
    types: str | None = "PRODUCE", lease_ms: str | None = None, *, quiet: bool = False
) -> tuple[LeaseHost, object, ConfigImage]:
    """A lease host over managers where alice has 1000 B/s quotas; past its first lease period unless ``quiet``."""
    image = ConfigImage()
    offset = 0
    for name, value in (("quotaplane.lease.quota.types", types), ("quotaplane.lease.ms", lease_ms)):
        if value is not None:
            image.apply(offset, config_event(ConfigResourceType.BROKER, "", name, value))
            offset += 1
    quotas = build_quota_managers(QuotaConfig(), now_ms=T0)
    quotas.produce.update_quota(ClientQuotaEntity(user="alice"), 1000.0)
    quotas.fetch.update_quota(ClientQuotaEntity(user="alice"), 1000.0)
    leases = LeaseHost(lambda: quotas, lambda: image)
    if not quiet:  # the first renewal starts the book's quiet period, over by T0
        leases.serve([("PRODUCE", "PRODUCE\x00nobody\x00", "g-start", 0.0, 0.0, T0 - lease_settings(image).lease_ms)])
        leases.renewals = 0
    return leases, quotas, image


def test_settings_default_to_exact_mode_and_read_the_cluster_default() -> None:
    assert not lease_settings(ConfigImage()).enabled
    assert lease_settings(ConfigImage()).lease_ms == 1000
    _, _, image = host("produce, FETCH", "250")
    settings = lease_settings(image)
    assert settings.quota_types == {"PRODUCE", "FETCH"} and settings.lease_ms == 250


def test_a_renewal_is_granted_from_the_shards_own_quota_and_records_what_was_decided_locally() -> None:
    leases, quotas, _ = host()
    # alice's user-level sensor (one key, whatever her clients): the book splits 1000 B/s between two gateways
    [first] = leases.serve([("PRODUCE", "PRODUCE\x00alice\x00", "g0", 600.0, 0.0, T0)])
    assert first is not None and first[1] == 1000.0 and first[2] == T0 + 1000
    [second] = leases.serve([("PRODUCE", "PRODUCE\x00alice\x00", "g1", 400.0, 250.0, T0 + 10)])
    assert second is None or first[0] + second[0] <= 1000.0  # g0 holds it all until it renews
    assert [lease.holder for lease in leases.book.leases("PRODUCE\x00alice\x00", T0 + 10)] == ["g0"]
    # g1's locally decided 250 bytes are in alice's sensor, with Kafka's tags
    metric = quotas.produce.metrics.metric(quotas.produce.quota_metric("alice", "anything"))
    _, reference, _ = host()
    reference.produce.record_no_throttle("alice", "other", 250.0, T0 + 10)
    expected = reference.produce.metrics.metric(reference.produce.quota_metric("alice", "x")).measurable_value(T0 + 10)
    assert metric.measurable_value(T0 + 10) == expected > 0
    [shrunk] = leases.serve([("PRODUCE", "PRODUCE\x00alice\x00", "g0", 600.0, 0.0, T0 + 500)])
    assert shrunk[0] == pytest.approx(600.0)  # its part of the two rates
    assert leases.stats() == {"renewals": 3, "granted": 2 + (second is not None), "keys": 1, "reported_throttles": 0}


def test_nothing_is_leased_without_a_quota_or_where_the_type_is_not_leased() -> None:
    leases, _, _ = host("FETCH")
    assert (
        leases.serve(
            [
                ("PRODUCE", "PRODUCE\x00alice\x00", "g0", 10.0, 0.0, T0),  # PRODUCE is not leased here
                ("FETCH", "FETCH\x00bob\x00", "g0", 10.0, 0.0, T0),  # no quota applies to bob
                (
                    "FETCH",
                    "FETCH\x00alice\x00",
                    "g0",
                    math.nan,
                    0.0,
                    T0,
                ),  # no window yet: weighs nothing, still granted
            ]
        )[:2]
        == [None, None]
    )
    assert leases.serve([("FETCH", "FETCH\x00alice\x00", "g0", math.nan, 0.0, T0)])[0] is not None


@pytest.mark.parametrize(
    "bad",
    [
        ("REQUEST", "REQUEST\x00alice\x00", "g0", 1.0, 0.0, T0),
        ("PRODUCE", "PRODUCE\x00alice\x00", "", 1.0, 0.0, T0),
        ("PRODUCE", "FETCH\x00alice\x00", "g0", 1.0, 0.0, T0),  # a key of another type
        ("PRODUCE", "PRODUCE\x00alice", "g0", 1.0, 0.0, T0),  # not a key
        ("PRODUCE", "PRODUCE\x00alice\x00", "g0", math.inf, 0.0, T0),
        ("PRODUCE", "PRODUCE\x00alice\x00", "g0", -1.0, 0.0, T0),
        ("PRODUCE", "PRODUCE\x00alice\x00", "g0", 1.0, math.inf, T0),
        ("PRODUCE", "PRODUCE\x00alice\x00", "g0", 1.0, 0.0, -1),
        ("PRODUCE", "PRODUCE\x00alice\x00", "g0", 1.0, 0.0),
        ["PRODUCE", "PRODUCE\x00alice\x00", "g0", 1.0, 0.0, T0],
    ],
)
def test_a_bad_renewal_is_refused_before_any_is_served(bad) -> None:
    leases, quotas, _ = host(quiet=True)
    good = ("PRODUCE", "PRODUCE\x00alice\x00", "g0", 1.0, 500.0, T0)
    with pytest.raises(ValueError, match="item 1"):
        leases.serve([good, bad])
    assert leases.book.keys() == 0 and leases.renewals == 0 and leases.quiet_until_ms is None
    assert quotas.produce.metrics.metric(quotas.produce.quota_metric("alice", "c")) is None  # nothing recorded
    assert QuotaType.parse(good[0]) is QuotaType.PRODUCE


def test_a_new_book_grants_nothing_for_a_lease_period_and_again_after_a_reshard() -> None:
    """Leases its previous incarnation (or a key's previous owner) granted may still be live at the gateways:
    a book that granted from nothing at once could hand the quota out twice."""
    leases, quotas, image = host(lease_ms="500", quiet=True)
    renewal = ("PRODUCE", "PRODUCE\x00alice\x00", "g0", 100.0, 40.0, T0)
    assert leases.serve([renewal]) == [None]  # the first renewal: quiet until T0 + 500
    assert quotas.produce.metrics.metric(quotas.produce.quota_metric("alice", "c")) is not None  # bytes recorded
    assert leases.serve([(*renewal[:5], T0 + 499)]) == [None]
    [granted] = leases.serve([(*renewal[:5], T0 + 500)])
    assert granted is not None and granted[0] == 1000.0
    image.apply(image.end_offset, config_event(ConfigResourceType.BROKER, "", "quotaplane.shard.count", "3"))
    assert leases.serve([(*renewal[:5], T0 + 600)]) == [None]  # a reshard: quiet again, until T0 + 1100
    assert leases.serve([(*renewal[:5], T0 + 1100)])[0] is not None


def test_throttles_answered_at_a_gateway_are_recorded_as_the_shards_own() -> None:
    leases, quotas, _ = host()
    reference, _, _ = host()
    assert leases.serve_throttles([("PRODUCE", "alice", "app", 120, T0), ("FETCH", "alice", "app", 40, T0 + 5)]) == [
        0,
        0,
    ]
    reference_quotas = reference._quotas()
    reference_quotas.produce.throttle("alice", "app", 120, T0)
    reference_quotas.fetch.throttle("alice", "app", 40, T0 + 5)
    for manager, expected in ((quotas.produce, reference_quotas.produce), (quotas.fetch, reference_quotas.fetch)):
        group = str(manager.quota_type)
        [got] = [m for n, m in manager.metrics.metrics.items() if (n.name, n.group) == ("throttle-time", group)]
        [want] = [m for n, m in expected.metrics.metrics.items() if (n.name, n.group) == ("throttle-time", group)]
        assert got.measurable_value(T0 + 10) == want.measurable_value(T0 + 10) > 0
    assert leases.stats()["reported_throttles"] == 2
    for bad in [("PRODUCE", "alice", "app", 0, T0), ("REQUEST", "a", "c", 5, T0), ("PRODUCE", "a", "c", 5, -1)]:
        with pytest.raises(ValueError, match="item 1"):
            leases.serve_throttles([("PRODUCE", "alice", "app", 1, T0), bad])
    assert leases.stats()["reported_throttles"] == 2
