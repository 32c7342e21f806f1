"""Hypothesis strategies for config events: valid records over a small key space, so keys collide."""

from __future__ import annotations

from hypothesis import strategies as st

from quotaplane.config import ConfigResourceType
from quotaplane.v1 import config_events_pb2 as pb

USERS = st.sampled_from(["alice", "bob", None])
CLIENTS = st.sampled_from(["app-1", "app-2", None])
QUOTA_KEYS = st.sampled_from(["producer_byte_rate", "consumer_byte_rate", "request_percentage"])


@st.composite
def client_quota_events(draw: st.DrawFn) -> pb.Event:
    event = pb.Event()
    record = event.client_quota
    shape = draw(st.sampled_from(["user", "client-id", "both", "ip"]))
    if shape == "ip":
        components = [("ip", draw(st.sampled_from(["10.0.0.1", "10.0.0.2", None])))]
        key = "connection_creation_rate"
    else:
        components = []
        if shape in ("both", "client-id"):
            components.append(("client-id", draw(CLIENTS)))
        if shape in ("both", "user"):
            components.append(("user", draw(USERS)))
        key = draw(QUOTA_KEYS)
    for entity_type, name in components:
        component = record.entity.add(entity_type=entity_type)
        if name is not None:
            component.entity_name = name
    record.key = key
    if draw(st.booleans()) and draw(st.booleans()):
        record.remove = True
    else:
        record.value = float(draw(st.integers(1, 10**9)))
    return event


@st.composite
def client_metrics_events(draw: st.DrawFn) -> pb.Event:
    event = pb.Event()
    record = event.client_metrics
    record.name = draw(st.sampled_from(["sub-a", "sub-b"]))
    if draw(st.integers(0, 3)) == 0:
        record.delete = True
        return event
    if draw(st.booleans()):
        record.metrics = draw(st.sampled_from(["*", "org.apache.kafka.producer.", ""]))
    if draw(st.booleans()):
        record.interval_ms = draw(st.sampled_from([1000, 60000]))
    if draw(st.booleans()):
        record.match = draw(st.sampled_from(["client_id=app-.*", "client_software_name=librdkafka"]))
    return event


@st.composite
def config_events(draw: st.DrawFn) -> pb.Event:
    event = pb.Event()
    record = event.config
    if draw(st.booleans()):
        record.resource_type = ConfigResourceType.BROKER
        record.resource_name = draw(st.sampled_from(["", "1", "2"]))
        record.name = draw(
            st.sampled_from(["max.connections", "quota.window.num", "leader.replication.throttled.rate"])
        )
        value = str(draw(st.integers(1, 1000)))
    else:
        record.resource_type = ConfigResourceType.TOPIC
        record.resource_name = draw(st.sampled_from(["orders", "payments"]))
        record.name = "leader.replication.throttled.replicas"
        value = draw(st.sampled_from(["*", "0:1,1:2", ""]))
    if draw(st.integers(0, 3)):
        record.value = value
    return event


@st.composite
def events(draw: st.DrawFn) -> pb.Event:
    event = draw(st.one_of(client_quota_events(), client_metrics_events(), config_events()))
    event.principal = draw(st.sampled_from(["User:admin", "User:ops"]))
    event.request_id = draw(st.sampled_from(["", "r1", "r2", "r3"]))
    return event


@st.composite
def event_logs(draw: st.DrawFn, max_size: int = 60) -> list[pb.Event]:
    """Events with non-decreasing commit times, as the controller stamps them."""
    items = draw(st.lists(events(), max_size=max_size))
    time_ms = 1_700_000_000_000
    for event in items:
        time_ms += draw(st.integers(0, 5000))
        event.commit_time_ms = time_ms
    return items
