"""Kafka's ``ClientQuotasImageTest`` (metadata module) and the describe cases of ``ClientQuotasRequestTest``
(core), ported: the image replays ClientQuotaRecords, and ``describe_client_quotas`` answers
DescribeClientQuotas as ``ClientQuotasImage.describe`` does (EXACT / DEFAULT / SPECIFIED, strict, and
its errors).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from types import EllipsisType

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quotaplane.config import (
    ClientQuotaAlteration,
    ClientQuotaFilterComponent,
    ConfigImage,
    ConfigStore,
    MatchType,
    describe_client_quotas,
    plan_alter_client_quotas,
)
from quotaplane.config import records as pb
from quotaplane.errors import Errors, InvalidRequestError, UnsupportedVersionError

T0 = 1_700_000_000_000
EXACT, DEFAULT, SPECIFIED = MatchType.EXACT, MatchType.DEFAULT, MatchType.SPECIFIED
C = ClientQuotaFilterComponent
EntityMap = dict[str, str | None]


def _record(entity: Sequence[tuple[str, str | None]], key: str, value: float | None) -> pb.Event:
    event = pb.Event()
    for entity_type, name in entity:
        component = event.client_quota.entity.add(entity_type=entity_type)
        if name is not None:
            component.entity_name = name
    event.client_quota.key = key
    if value is None:
        event.client_quota.remove = True
    else:
        event.client_quota.value = value
    return event


def _written_and_read_back(directory: Path, records: list[pb.Event]) -> ConfigImage:
    """Kafka's ``image.write`` then replay: the records go to a log on disk, the store replays them,
    writes its image as a snapshot, and a reopened store reads the image back from that snapshot."""
    with ConfigStore.open(directory, fsync=False) as store:
        if records:
            store.log.append(records)
    with ConfigStore.open(directory, fsync=False) as store:
        assert store.image == ConfigImage.replayed(records)
        store.write_snapshot()
        store.delete_segments_covered_by_snapshot()
    with ConfigStore.open(directory, fsync=False) as store:
        return store.image


# --- ClientQuotasImageTest ---------------------------------------------------------------------------
IMAGE1_RECORDS = [
    _record([("user", "foo")], "producer_byte_rate", 123.0),
    # an entity validation would refuse (user with ip): the image replays what the log holds
    _record([("user", "bar"), ("ip", "127.0.0.1")], "consumer_byte_rate", 456.0),
]
DELTA1_RECORDS = [
    _record([("user", "bar"), ("ip", "127.0.0.1")], "consumer_byte_rate", None),  # remove quota
    _record([("user", "foo")], "producer_byte_rate", 234.0),  # alter quota
    _record([("user", "foo")], "consumer_byte_rate", 999.0),  # add a quota to an entity with one
]
IMAGE1 = {
    (("user", "foo"),): {"producer_byte_rate": 123.0},
    (("ip", "127.0.0.1"), ("user", "bar")): {"consumer_byte_rate": 456.0},
}
IMAGE2 = {(("user", "foo"),): {"producer_byte_rate": 234.0, "consumer_byte_rate": 999.0}}


def _through_all_intermediate_images(tmp_path: Path, records: list[pb.Event], final: dict) -> None:
    """RecordTestUtils.TestThroughAllIntermediateImagesLeadingToFinalImageHelper: stop after each record,
    write the intermediate image and read it back, apply the rest: always the final image."""
    for stop in range(len(records) + 1):
        intermediate = _written_and_read_back(tmp_path / f"stop-{stop}", records[:stop])
        assert intermediate == ConfigImage.replayed(records[:stop]), stop
        for offset in range(stop, len(records)):
            intermediate.apply(offset, records[offset])
        assert intermediate.client_quotas() == final, stop


def test_empty_image_round_trip(tmp_path: Path) -> None:
    """ClientQuotasImageTest.testEmptyImageRoundTrip."""
    assert _written_and_read_back(tmp_path, []) == ConfigImage()


def test_image1_round_trip(tmp_path: Path) -> None:
    """ClientQuotasImageTest.testImage1RoundTrip."""
    image = ConfigImage.replayed(IMAGE1_RECORDS)
    assert image.client_quotas() == IMAGE1
    _through_all_intermediate_images(tmp_path, IMAGE1_RECORDS, IMAGE1)


def test_apply_delta1(tmp_path: Path) -> None:
    """ClientQuotasImageTest.testApplyDelta1: IMAGE1 + DELTA1 = IMAGE2 (the emptied entity disappears),
    also through every intermediate image."""
    image = ConfigImage.replayed(IMAGE1_RECORDS)
    deltas = [image.apply(image.end_offset, event) for event in DELTA1_RECORDS]
    assert image.client_quotas() == IMAGE2
    assert [len(delta.changes) for delta in deltas] == [1, 1, 1]
    _through_all_intermediate_images(tmp_path, IMAGE1_RECORDS + DELTA1_RECORDS, IMAGE2)


def test_image2_round_trip(tmp_path: Path) -> None:
    """ClientQuotasImageTest.testImage2RoundTrip."""
    image = ConfigImage.replayed(IMAGE1_RECORDS + DELTA1_RECORDS)
    read_back = _written_and_read_back(tmp_path, IMAGE1_RECORDS + DELTA1_RECORDS)
    assert read_back == image
    assert read_back.client_quotas() == IMAGE2


# --- ClientQuotasRequestTest: the match matrix -------------------------------------------------------
def _user_client(user: str | EllipsisType | None, client: str | EllipsisType | None) -> EntityMap:
    """``toClientEntity``: ``...`` leaves the type out (Scala's None), ``None`` is the default (Some(null))."""
    entity: EntityMap = {}
    if user is not ...:
        entity["user"] = user
    if client is not ...:
        entity["client-id"] = client
    return entity


MATCH_USER_CLIENT: list[tuple[EntityMap, float]] = [
    (_user_client("user-1", "client-id-1"), 50.50),
    (_user_client("user-2", "client-id-1"), 51.51),
    (_user_client("user-3", "client-id-2"), 52.52),
    (_user_client(None, "client-id-1"), 53.53),
    (_user_client("user-1", None), 54.54),
    (_user_client("user-3", None), 55.55),
    (_user_client("user-1", ...), 56.56),
    (_user_client("user-2", ...), 57.57),
    (_user_client("user-3", ...), 58.58),
    (_user_client(None, ...), 59.59),
    (_user_client(..., "client-id-2"), 60.60),
]
MATCH_IP: list[tuple[EntityMap, float]] = [({"ip": "1.2.3.4"}, 10.0), ({"ip": "2.3.4.5"}, 20.0)]
ALL_ENTITIES = MATCH_USER_CLIENT + MATCH_IP


def _key_of(entity: EntityMap) -> str:
    return "ip" if "ip" in entity else "request_percentage"


@pytest.fixture(scope="module")
def matrix_image() -> ConfigImage:
    """``setupDescribeClientQuotasMatchTest``: one request alters all 13 entities."""
    image = ConfigImage()
    plan = plan_alter_client_quotas(
        image,
        [
            ClientQuotaAlteration(e, [("connection_creation_rate" if "ip" in e else "request_percentage", v)])
            for e, v in ALL_ENTITIES
        ],
    )
    assert all(result.ok for result in plan.results)
    for event in plan.records:
        image.apply(image.end_offset, event)
    return image


def _exact_components(entity: EntityMap) -> list[ClientQuotaFilterComponent]:
    return [C.of_default_entity(t) if n is None else C.of_entity(t, n) for t, n in entity.items()]


def _as_values(found: list[tuple[EntityMap, dict[str, float]]]) -> dict[frozenset, float]:
    values = {}
    for entity, quotas in found:
        assert len(quotas) == 1
        values[frozenset(entity.items())] = next(iter(quotas.values()))
    return values


@pytest.mark.parametrize(("entity", "value"), MATCH_USER_CLIENT, ids=str)
def test_describe_match_exact(matrix_image: ConfigImage, entity: EntityMap, value: float) -> None:
    """ClientQuotasRequestTest.testDescribeClientQuotasMatchExact: a strict filter of exactly the
    entity's components finds it alone, with its value."""
    found = describe_client_quotas(matrix_image, _exact_components(entity), strict=True)
    assert found == [(entity, {"request_percentage": value})]


@pytest.mark.parametrize(
    "entity",
    [
        _user_client("user-1", "client-id-2"),
        _user_client("user-3", "client-id-1"),
        _user_client("user-2", None),
        _user_client("user-4", ...),
        _user_client(None, "client-id-2"),
        _user_client(..., "client-id-1"),
        _user_client(..., "client-id-3"),
    ],
    ids=str,
)
def test_describe_match_exact_non_matches(matrix_image: ConfigImage, entity: EntityMap) -> None:
    """testDescribeClientQuotasMatchExact: the entities not in the matrix find nothing."""
    assert describe_client_quotas(matrix_image, _exact_components(entity), strict=True) == []


PARTIAL_CASES: list[tuple[str, list[ClientQuotaFilterComponent], bool, int, Callable[[EntityMap], bool]]] = [
    ("open-ended existing user", [C.of_entity("user", "user-1")], False, 3, lambda e: e.get("user") == "user-1"),
    ("open-ended non-existent user", [C.of_entity("user", "unknown")], False, 0, lambda e: False),
    (
        "open-ended existing client id",
        [C.of_entity("client-id", "client-id-2")],
        False,
        2,
        lambda e: e.get("client-id") == "client-id-2",
    ),
    (
        "open-ended default user",
        [C.of_default_entity("user")],
        False,
        2,
        lambda e: "user" in e and e["user"] is None,
    ),
    (
        "close-ended existing user",
        [C.of_entity("user", "user-2")],
        True,
        1,
        lambda e: e.get("user") == "user-2" and "client-id" not in e,
    ),
    (
        "close-ended client id without a matching entity",
        [C.of_entity("client-id", "client-id-1")],
        True,
        0,
        lambda e: False,
    ),
    (
        "close-ended user type",
        [C.of_entity_type("user")],
        True,
        4,
        lambda e: "user" in e and "client-id" not in e,
    ),
    ("open-ended user type", [C.of_entity_type("user")], False, 10, lambda e: "user" in e),
    (
        "close-ended client id type",
        [C.of_entity_type("client-id")],
        True,
        1,
        lambda e: "client-id" in e and "user" not in e,
    ),
    ("open-ended client id type", [C.of_entity_type("client-id")], False, 7, lambda e: "client-id" in e),
    ("open-ended ip type", [C.of_entity_type("ip")], False, 2, lambda e: "ip" in e),
    ("open-ended empty filter", [], False, 13, lambda e: True),
    ("close-ended empty filter", [], True, 0, lambda e: False),
    # beyond Kafka's matrix: combinations of components
    (
        "user type and exact client id",
        [C.of_entity_type("user"), C.of_entity("client-id", "client-id-1")],
        True,
        3,
        lambda e: "user" in e and e.get("client-id") == "client-id-1",
    ),
    (
        "default user and default client id",
        [C.of_default_entity("user"), C.of_default_entity("client-id")],
        False,
        0,
        lambda e: False,
    ),
    (
        "exact user and default client id",
        [C.of_entity("user", "user-3"), C.of_default_entity("client-id")],
        True,
        1,
        lambda e: e == {"user": "user-3", "client-id": None},
    ),
    ("exact ip", [C.of_entity("ip", "2.3.4.5")], True, 1, lambda e: e == {"ip": "2.3.4.5"}),
    ("default ip (none set)", [C.of_default_entity("ip")], False, 0, lambda e: False),
]


@pytest.mark.parametrize(
    ("components", "strict", "size", "predicate"), [c[1:] for c in PARTIAL_CASES], ids=[c[0] for c in PARTIAL_CASES]
)
def test_describe_match_partial(
    matrix_image: ConfigImage,
    components: list[ClientQuotaFilterComponent],
    strict: bool,
    size: int,
    predicate: Callable[[EntityMap], bool],
) -> None:
    """ClientQuotasRequestTest.testDescribeClientQuotasMatchPartial: each filter finds exactly the
    entities Kafka's test partitions out, with their values."""
    expected = {frozenset(e.items()): v for e, v in ALL_ENTITIES if predicate(e)}
    assert len(expected) == size  # the test's own check of its expectation
    found = describe_client_quotas(matrix_image, components, strict=strict)
    assert len(found) == size
    assert _as_values(found) == pytest.approx(expected)


def test_describe_through_the_store(tmp_path: Path) -> None:
    """The same answers from ConfigStore.describe_client_quotas, before and after a reopen."""
    with ConfigStore.open(tmp_path) as store:
        results = store.alter_client_quotas(
            [
                ClientQuotaAlteration(e, [("connection_creation_rate" if "ip" in e else "request_percentage", v)])
                for e, v in ALL_ENTITIES
            ],
            now_ms=T0,
        )
        assert all(r.ok for r in results)
        assert store.log.end_offset == 13
    with ConfigStore.open(tmp_path) as store:
        assert len(store.describe_client_quotas([])) == 13
        found = store.describe_client_quotas([C.of_entity_type("user")], strict=True)
        assert _as_values(found) == {
            frozenset({("user", "user-1")}): 56.56,
            frozenset({("user", "user-2")}): 57.57,
            frozenset({("user", "user-3")}): 58.58,
            frozenset({("user", None)}): 59.59,
        }


# --- ClientQuotasImage.describe: errors --------------------------------------------------------------
@pytest.mark.parametrize(
    ("components", "error", "message"),
    [
        ([C("", EXACT, "x")], InvalidRequestError, "Invalid empty entity type."),
        ([C("", SPECIFIED)], InvalidRequestError, "Invalid empty entity type."),
        (
            [C.of_entity("user", "a"), C.of_entity("user", "b")],
            InvalidRequestError,
            "Entity type user cannot appear more than once in the filter.",
        ),
        (
            [C.of_entity_type("client-id"), C.of_default_entity("client-id")],
            InvalidRequestError,
            "Entity type client-id cannot appear more than once in the filter.",
        ),
        # the repetition is found before the component's own match error
        (
            [C.of_entity_type("user"), C("user", EXACT, None)],
            InvalidRequestError,
            "Entity type user cannot appear more than once in the filter.",
        ),
        ([C.of_entity("other", "name")], UnsupportedVersionError, "Unsupported entity type other"),
        # the type is checked before the match
        ([C("other", EXACT, None)], UnsupportedVersionError, "Unsupported entity type other"),
        ([C("User", SPECIFIED)], UnsupportedVersionError, "Unsupported entity type User"),
        (
            [C("user", EXACT, None)],
            InvalidRequestError,
            "Request specified MATCH_TYPE_EXACT, but set match string to null.",
        ),
        (
            [C("user", DEFAULT, "alice")],
            InvalidRequestError,
            "Request specified MATCH_TYPE_DEFAULT, but also specified a match string.",
        ),
        (
            [C("ip", SPECIFIED, "1.2.3.4")],
            InvalidRequestError,
            "Request specified MATCH_TYPE_SPECIFIED, but also specified a match string.",
        ),
        ([C("user", 7)], InvalidRequestError, "Unknown match type 7"),  # type: ignore[arg-type]
        (
            [C.of_entity_type("ip"), C.of_entity_type("user")],
            InvalidRequestError,
            "Invalid entity filter component combination. IP filter component should not be used with "
            "user or clientId filter component.",
        ),
        (
            [C.of_entity_type("ip"), C.of_entity_type("client-id")],
            InvalidRequestError,
            "Invalid entity filter component combination. IP filter component should not be used with "
            "user or clientId filter component.",
        ),
        (
            [C.of_entity("client-id", "c"), C.of_default_entity("ip")],
            InvalidRequestError,
            "Invalid entity filter component combination. IP filter component should not be used with "
            "user or clientId filter component.",
        ),
    ],
)
@pytest.mark.parametrize("strict", [False, True])
def test_describe_errors(
    matrix_image: ConfigImage,
    components: list[ClientQuotaFilterComponent],
    error: type[Exception],
    message: str,
    strict: bool,
) -> None:
    """ClientQuotasImage.describe's errors (testDescribeClientQuotasInvalidFilterCombination,
    testClientQuotasUnsupportedEntityTypes): the exception type decides the code, UNSUPPORTED_VERSION
    for an unknown entity type, INVALID_REQUEST otherwise."""
    with pytest.raises(error) as raised:
        describe_client_quotas(matrix_image, components, strict=strict)
    assert type(raised.value) is error
    assert str(raised.value) == message
    expected_code = Errors.UNSUPPORTED_VERSION if error is UnsupportedVersionError else Errors.INVALID_REQUEST
    assert raised.value.error is expected_code


def test_unsupported_entity_type_through_the_store(tmp_path: Path) -> None:
    """ClientQuotasRequestTest.testClientQuotasUnsupportedEntityTypes: describing {other=name}."""
    with ConfigStore.open(tmp_path) as store, pytest.raises(UnsupportedVersionError):
        store.describe_client_quotas([C.of_entity("other", "name")], strict=True)


# --- a property: describe against an independent reading of Kafka's matches() ---------------------------
_TYPES = ("user", "client-id", "ip")
_NAMES = st.sampled_from(["a", "b", None])


def _kafka_matches(entity: EntityMap, exact: EntityMap, any_name: set[str], strict: bool) -> bool:
    if strict and len(entity) != len(exact) + len(any_name):
        return False
    if any(t not in entity or entity[t] != n for t, n in exact.items()):
        return False
    return all(t in entity for t in any_name)


@st.composite
def _filters(draw: st.DrawFn) -> list[ClientQuotaFilterComponent]:
    types = draw(st.sets(st.sampled_from(_TYPES)))
    if "ip" in types and len(types) > 1:
        types.discard("ip")
    components = []
    for entity_type in sorted(types):
        kind = draw(st.sampled_from([EXACT, DEFAULT, SPECIFIED]))
        name = draw(st.sampled_from(["a", "b"])) if kind is EXACT else None
        components.append(C(entity_type, kind, name))
    return components


@st.composite
def _entities(draw: st.DrawFn) -> EntityMap:
    shape = draw(st.sampled_from([("user",), ("client-id",), ("client-id", "user"), ("ip",)]))
    return {t: draw(_NAMES) if t != "ip" else draw(st.sampled_from(["10.0.0.1", None])) for t in shape}


@settings(max_examples=150, deadline=None)
@given(entities=st.lists(_entities(), max_size=8), components=_filters(), strict=st.booleans())
def test_describe_agrees_with_kafkas_matches(entities: list[EntityMap], components: list[C], strict: bool) -> None:
    image = ConfigImage()
    for entity in entities:
        key = "connection_creation_rate" if "ip" in entity else "producer_byte_rate"
        image.apply(image.end_offset, _record(sorted(entity.items()), key, 1.0))
    exact = {c.entity_type: c.match for c in components if c.match_type is not SPECIFIED}
    any_name = {c.entity_type for c in components if c.match_type is SPECIFIED}
    expected = {frozenset(e.items()) for e in entities if _kafka_matches(e, exact, any_name, strict)}
    found = describe_client_quotas(image, components, strict=strict)
    assert {frozenset(e.items()) for e, _ in found} == expected
    assert len(found) == len(expected)
