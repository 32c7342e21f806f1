"""ConfigStore end to end on real files: durability, audits, snapshots, listeners, describe after alter."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from quotaplane.config import (
    AlterConfigOp,
    ClientQuotaAlteration,
    ClientQuotaFilterComponent,
    ConfigImage,
    ConfigResource,
    ConfigResourceType,
    ConfigStore,
    EventLogLockedError,
    HistoryCompactedError,
    OpType,
)

T0 = 1_700_000_000_000  # 2023-11-14T22:13:20Z
MINUTE = 60_000


def _alice(key: str, value: float | None) -> ClientQuotaAlteration:
    return ClientQuotaAlteration({"user": "alice"}, [(key, value)])


def test_changes_survive_reopen_and_carry_who_when_and_request(tmp_path: Path) -> None:
    with ConfigStore.open(tmp_path) as store:
        [result] = store.alter_client_quotas(
            [_alice("producer_byte_rate", 1024.0)], now_ms=T0, principal="User:ops", request_id="req-1"
        )
        assert result.ok
        assert store.end_offset == 1
    with ConfigStore.open(tmp_path) as store:
        assert store.image.client_quota({"user": "alice"}) == {"producer_byte_rate": 1024.0}
        offset, event = store.provenance_event(("client-quota", (("user", "alice"),), "producer_byte_rate"))
        assert offset == 0
        assert (event.commit_time_ms, event.principal, event.request_id) == (T0, "User:ops", "req-1")


def test_what_was_alices_quota_at_10_42_and_which_change_set_it(tmp_path: Path) -> None:
    at = {"10:40": T0, "10:41": T0 + MINUTE, "10:43": T0 + 3 * MINUTE}
    with ConfigStore.open(tmp_path) as store:
        store.alter_client_quotas([_alice("producer_byte_rate", 1000.0)], now_ms=at["10:40"], principal="User:a")
        store.alter_client_quotas([_alice("producer_byte_rate", 2000.0)], now_ms=at["10:41"], principal="User:b")
        store.alter_client_quotas([_alice("producer_byte_rate", None)], now_ms=at["10:43"], principal="User:c")
        assert store.image.client_quota({"user": "alice"}) == {}

        then = store.image_at_time(T0 + 2 * MINUTE)  # 10:42
        assert then.client_quota({"user": "alice"}) == {"producer_byte_rate": 2000.0}
        provenance = then.provenance(("client-quota", (("user", "alice"),), "producer_byte_rate"))
        assert (provenance.offset, provenance.principal, provenance.commit_time_ms) == (1, "User:b", at["10:41"])

        history = store.history(entity={"user": "alice"})
        assert [(h.offset, h.principal, h.old, h.new) for h in history] == [
            (0, "User:a", None, 1000.0),
            (1, "User:b", 1000.0, 2000.0),
            (2, "User:c", 2000.0, None),
        ]
        assert store.image_at_time(at["10:40"] - 1) == ConfigImage()


def test_commit_times_never_decrease_even_if_the_clock_steps_back(tmp_path: Path) -> None:
    with ConfigStore.open(tmp_path) as store:
        store.alter_client_quotas([_alice("producer_byte_rate", 1.0)], now_ms=T0)
        store.alter_client_quotas([_alice("producer_byte_rate", 2.0)], now_ms=T0 - 5000)
        times = [event.commit_time_ms for _, event in store.log.read()]
        assert times == [T0, T0]


def test_a_second_writer_is_refused(tmp_path: Path) -> None:
    with ConfigStore.open(tmp_path), pytest.raises(EventLogLockedError):
        ConfigStore.open(tmp_path)


def test_listeners_see_every_delta_in_offset_order(tmp_path: Path) -> None:
    seen = []
    with ConfigStore.open(tmp_path) as store:
        store.subscribe(seen.append)
        store.alter_client_quotas(
            [
                ClientQuotaAlteration({"user": "alice"}, [("producer_byte_rate", 10.0), ("consumer_byte_rate", 20.0)]),
                ClientQuotaAlteration({"ip": "10.0.0.1"}, [("connection_creation_rate", 5.0)]),
            ],
            now_ms=T0,
        )
        store.alter_client_metrics("sub", metrics="*", interval_ms=1000, now_ms=T0)
    assert [d.offset for d in seen] == [0, 1, 2, 3]
    assert [type(d.changes[0]).__name__ for d in seen] == [
        "ClientQuotaChange",
        "ClientQuotaChange",
        "ClientQuotaChange",
        "ClientMetricsChange",
    ]
    assert seen[3].changes[0].new == {"metrics": "*", "interval.ms": "1000"}


def test_a_corrupt_snapshot_is_skipped_for_an_older_one_or_the_log(tmp_path: Path, caplog) -> None:
    with ConfigStore.open(tmp_path) as store:
        store.alter_client_quotas([_alice("producer_byte_rate", 1.0)], now_ms=T0)
        store.write_snapshot()
        store.alter_client_quotas([_alice("producer_byte_rate", 2.0)], now_ms=T0)
        newest = store.write_snapshot()
        expected = store.image.copy()
    data = bytearray(newest.read_bytes())
    data[len(data) // 2] ^= 0x40
    newest.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING), ConfigStore.open(tmp_path) as store:
        assert store.image == expected
    assert any(newest.name in r.getMessage() for r in caplog.records)


def test_history_gone_with_its_segments_and_snapshots_is_said_so(tmp_path: Path) -> None:
    with ConfigStore.open(tmp_path, segment_bytes=64) as store:
        for i in range(20):
            store.alter_client_quotas([_alice("producer_byte_rate", float(i + 1))], now_ms=T0 + i)
        snapshot = store.write_snapshot()
        deleted = store.delete_segments_covered_by_snapshot()
        assert deleted
        assert store.image_at(20) == store.image
        with pytest.raises(HistoryCompactedError):
            store.image_at(3)
    snapshot.unlink()
    with pytest.raises(HistoryCompactedError):
        ConfigStore.open(tmp_path)


def test_broker_and_topic_configs_describe_with_defaults_and_overrides(tmp_path: Path) -> None:
    cluster = ConfigResource(ConfigResourceType.BROKER, "")
    node = ConfigResource(ConfigResourceType.BROKER, "1")
    topic = ConfigResource(ConfigResourceType.TOPIC, "orders")
    with ConfigStore.open(tmp_path) as store:
        results = store.incremental_alter_configs(
            [
                (cluster, [AlterConfigOp("max.connections", OpType.SET, "1000")]),
                (node, [AlterConfigOp("max.connections", OpType.SET, "50")]),
                (topic, [AlterConfigOp("leader.replication.throttled.replicas", OpType.APPEND, "0:1")]),
            ],
            now_ms=T0,
        )
        assert all(r.ok for r in results)
        values = {e.name: (e.value, e.is_default) for e in store.describe_configs(node)}
        assert values["max.connections"] == ("50", False)
        assert values["max.connections.per.ip"] == (str(2**31 - 1), True)
        values = {e.name: e.value for e in store.describe_configs(ConfigResource(ConfigResourceType.BROKER, "2"))}
        assert values["max.connections"] == "1000"  # node 2 has no override: the cluster default
        store.incremental_alter_configs(
            [(topic, [AlterConfigOp("leader.replication.throttled.replicas", OpType.APPEND, "1:2,0:1")])], now_ms=T0
        )
        values = {e.name: e.value for e in store.describe_configs(topic)}
        assert values["leader.replication.throttled.replicas"] == "0:1,1:2"


# --- describe after alter (a property over random valid alterations) ---------------------------------
_entities = st.sampled_from(
    [
        {"user": "alice"},
        {"user": None},
        {"client-id": "app"},
        {"user": "alice", "client-id": "app"},
        {"user": "bob", "client-id": None},
        {"ip": "10.0.0.1"},
        {"ip": None},
    ]
)


@st.composite
def _alterations(draw: st.DrawFn) -> list[ClientQuotaAlteration]:
    chosen = draw(st.lists(_entities, min_size=1, max_size=4, unique_by=lambda e: tuple(sorted(e.items()))))
    alterations = []
    for entity in chosen:
        keys = ["connection_creation_rate"] if "ip" in entity else ["producer_byte_rate", "request_percentage"]
        ops = [(key, draw(st.one_of(st.none(), st.integers(1, 10**6).map(float)))) for key in keys]
        alterations.append(ClientQuotaAlteration(entity, ops))
    return alterations


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(_alterations(), min_size=1, max_size=4))
def test_describe_after_alter_returns_what_was_altered(tmp_path: Path, requests) -> None:
    directory = tmp_path / str(len(list(tmp_path.iterdir())))
    expected: dict[tuple, dict[str, float]] = {}
    with ConfigStore.open(directory, fsync=False) as store:
        for alterations in requests:
            assert all(r.ok for r in store.alter_client_quotas(alterations, now_ms=T0))
            for alteration in alterations:
                quotas = expected.setdefault(tuple(sorted(alteration.entity.items(), key=str)), {})
                for key, value in alteration.ops:
                    if value is None:
                        quotas.pop(key, None)
                    else:
                        quotas[key] = value
        for entity, quotas in expected.items():
            components = [
                ClientQuotaFilterComponent.of_default_entity(t)
                if n is None
                else ClientQuotaFilterComponent.of_entity(t, n)
                for t, n in entity
            ]
            described = store.describe_client_quotas(components, strict=True)
            assert described == ([(dict(entity), quotas)] if quotas else [])


def test_history_of_a_client_metrics_resource_and_of_a_broker_config(tmp_path: Path) -> None:
    node = ConfigResource(ConfigResourceType.BROKER, "")
    with ConfigStore.open(tmp_path) as store:
        store.alter_client_metrics("sub", metrics="*", now_ms=T0, principal="User:a")
        store.alter_client_metrics("other", metrics="*", now_ms=T0, principal="User:a")
        store.alter_client_metrics("sub", interval_ms=1000, now_ms=T0 + 1, principal="User:b")
        store.delete_client_metrics("sub", now_ms=T0 + 2, principal="User:c")
        store.incremental_alter_configs([(node, [AlterConfigOp("max.connections", OpType.SET, "10")])], now_ms=T0 + 3)
        store.incremental_alter_configs([(node, [AlterConfigOp("max.connections", OpType.DELETE)])], now_ms=T0 + 4)
        metrics = store.history(client_metrics="sub")
        assert [(h.offset, h.principal, h.key, h.old, h.new) for h in metrics] == [
            (0, "User:a", "sub", None, {"metrics": "*"}),
            (2, "User:b", "sub", {"metrics": "*"}, {"metrics": "*", "interval.ms": "1000"}),
            (3, "User:c", "sub", {"metrics": "*", "interval.ms": "1000"}, None),
        ]
        configs = store.history(resource=node, key="max.connections")
        assert [(h.offset, h.commit_time_ms, h.old, h.new) for h in configs] == [
            (4, T0 + 3, None, "10"),
            (5, T0 + 4, "10", None),
        ]
        with pytest.raises(ValueError, match="exactly one"):
            store.history(client_metrics="sub", resource=node)
