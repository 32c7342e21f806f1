"""ConnectionState's cached telemetry context (the message and its serialized form) against a context built afresh
for every request."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from quotaplane.services.frontend._state import ConnectionState
from quotaplane.v1 import telemetry_pb2 as tele_pb


def fresh_context(state: ConnectionState) -> tele_pb.RequestContext:
    """The context as the frontend built it for every request before it was cached."""
    context = tele_pb.RequestContext(
        connection_id=state.connection_id,
        client_id=state.client_id,
        client_source_address=state.address,
        client_source_port=state.port,
        principal=state.principal,
    )
    if state.client_software_name is not None:
        context.client_software_name = state.client_software_name
        context.client_software_version = state.client_software_version or ""
    return context


_CHANGES = st.one_of(
    st.tuples(st.just("client_id"), st.sampled_from(["", "producer-1", "consumer-1"])),
    st.tuples(st.just("principal"), st.sampled_from(["User:ANONYMOUS", "User:alice"])),
    st.tuples(st.just("client_software_name"), st.sampled_from([None, "librdkafka", "apache-kafka-java"])),
    st.tuples(st.just("client_software_version"), st.sampled_from([None, "2.16.0", "3.9.0"])),
)


@given(st.lists(st.lists(_CHANGES, max_size=3), min_size=1, max_size=12))
@settings(max_examples=200, deadline=None)
def test_the_cached_context_is_the_one_built_afresh(requests: list[list[tuple[str, object]]]) -> None:
    state = ConnectionState("kafka-test-1", "10.0.0.7", 51234, sasl=False)
    for changes in requests:  # between two requests, any of the fields the context carries may change
        for field, value in changes:
            setattr(state, field, value)
        assert state.telemetry_context().SerializeToString() == fresh_context(state).SerializeToString()
        assert state.telemetry_context_wire() == fresh_context(state).SerializeToString()  # a columnar push's form
