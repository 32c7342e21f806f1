"""Connection quotas of the nodes a shard owns: Kafka's ``ConnectionQuotas``, one per node id.

Kafka enforces connection limits per broker, in its acceptor (``ConnectionQuotas`` in
``SocketServer.scala``): ``max.connections``, ``listener.name.<l>.max.connections``,
``max.connections.per.ip`` (+ overrides), the broker and listener creation rates and the ip entity's
``connection_creation_rate``. So the state is keyed by **node id**, the broker identity a frontend or
broker presents: the gateway routes every item by ``node:<node id>``, one shard owns all of a node's
connection state, and the node's numbers are exactly one Kafka broker's. Callers that present the same
node id (several frontends in front of one logical broker) share its budget: per-IP counts and rates
are then fleet-wide across them; distinct node ids never share anything.

A node's ``ConnectionQuotas`` is built on its first item from the image the shard holds then
(``startup_configs(image, node_id).connection_configs``: the node's own BROKER override, else the
cluster default ``""``; quota windows are read only here, as Kafka reads them at start-up), with its
own metrics registry (Kafka's metric names are per broker and would collide between nodes) and its own
``ManagerBinding(connections=..., node_id=...)``. Every later config event reaches it through
:meth:`ConnectionHost.apply` (the shard fans its events out), so limits change in place and counts and
rates survive the change.

**Listeners.** A node starts with none: the first admit naming a listener adds it (Kafka's
``addListener``) with the limits the image holds for it, ``listener.name.<name in lower case>.*``. Names
and peer addresses are checked by the core's one rule, which the gRPC service applies too
(``quotaplane.quota.normalise_listener`` and ``peer_address``): names are 1-64 of ``[A-Za-z0-9_-]`` (what
the config keys can name), compared case-insensitively and kept upper case as Kafka's
``ListenerName.normalised``. At most ``max_listeners_per_node`` per node, so a caller cannot grow a
shard's memory with made-up names. No listener is protected: ``inter.broker.listener.name`` is not a
config the log keeps.

**Attempts.** Where Kafka's acceptor would block (a broker / listener rate delay, or no free slot), the
core answers THROTTLE with a ``ConnectionAttempt``; here the caller gets an opaque ``attempt_id``
(unique in this process, starting at a random point so ids from before a shard restart do not match
new ones) and asks again with it. An attempt not asked about for ``attempt_idle_ms`` is abandoned by
:meth:`housekeeping` (the caller's client is taken to be gone; its rate recordings stay, as in Kafka).
An admit naming an attempt id this host does not know (expired, already decided, or issued before a
restart), or one issued for another connection, is asked as a new connection: it is recorded again, as
a client that reconnects would be, and another connection's attempt is never spent.

**Why only malformed items raise.** The gateway merges the items of several requests into one
micro-batch per shard, so a ValueError here fails every request in it. Conditions that depend on state
(unknown, stale or duplicated attempt ids, releases the node does not count) are therefore answered per
item; only a malformed item (which the gateway's own checks already refuse) or a listener beyond
``max_listeners_per_node`` raises.

**Items** (plain tuples, op first, each with its own ``now_ms``)::

    ("admit",   node_id, listener, ip, attempt_id | None, now_ms)
    ("release", node_id, listener, ip, now_ms)        # a counted connection closed
    ("abandon", node_id, attempt_id, now_ms)          # a THROTTLEd attempt given up

**Results**, one per item, in order::

    admit:   (decision, throttle_ms, limit, max_connections, attempt_id, counted)
             decision "ADMIT" / "THROTTLE" / "REJECT"; limit the Kafka config name ("" for ADMIT);
             max_connections the count limit's value or None; attempt_id 0 unless THROTTLE
    release: (released,)   False if the node holds no such connection (e.g. lost in a shard restart)
    abandon: (released,)   False if the attempt was not pending

:meth:`serve` validates every item before applying any: a bad item is a ValueError naming it and
nothing of the batch changes.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from quotaplane.config import (
    IP,
    ClientQuotaChange,
    ConfigChange,
    ConfigDelta,
    ConfigImage,
    ConfigResourceType,
    ManagerBinding,
    effective_broker_config,
    startup_configs,
)
from quotaplane.metrics import Metrics
from quotaplane.quota import (
    LISTENER_CONFIG_PREFIX,
    LISTENER_CONFIGS,
    Address,
    ConnectionAttempt,
    ConnectionDecision,
    ConnectionQuotas,
    ConnectionQuotasConfig,
    ConnectionState,
    Resolver,
    attempt_from_tuple,
    attempt_tuple,
    export_connection_state,
    import_connection_state,
    normalise_listener,
    peer_address,
)

from ._metric_rows import NODE_METRIC_TAG, MetricRow, metric_rows

__all__ = [
    "DEFAULT_ATTEMPT_IDLE_MS",
    "MAX_LISTENERS_PER_NODE",
    "NODE_METRIC_TAG",
    "AdmitResult",
    "ConnectionHost",
    "ConnectionNodesSnapshot",
    "NodeConnections",
    "connection_node_key",
]

log = logging.getLogger(__name__)

#: An attempt not asked about for this long is abandoned (a caller retries within one quota window,
#: at most ``quota.window.size.seconds``, or polls for a slot; a minute of silence means it is gone).
DEFAULT_ATTEMPT_IDLE_MS = 60_000
MAX_LISTENERS_PER_NODE = 64
_MAX_INT32 = 2**31 - 1
_MAX_ATTEMPT_ID = 2**63 - 1
#: Fields of an item, by its op.
_ITEM_FIELDS = {"admit": 6, "release": 5, "abandon": 4}
_CONNECTION_KEYS = ("max.connections", "max.connections.per.ip", "max.connections.per.ip.overrides")
_RATE_KEYS = ("max.connection.creation.rate",)
#: Read only when a node's state is built (Kafka reads them at start-up).
_STATIC_KEYS = ("quota.window.num", "quota.window.size.seconds")
_CONNECTION_CREATION_RATE = "connection_creation_rate"

#: ``(decision, throttle_ms, limit, max_connections, attempt_id, counted)``
AdmitResult = tuple[str, int, str, int | None, int, bool]


def connection_node_key(node_id: int) -> str:
    """The routing key of a node's connection state, as the gateway computes it (one shard owns all of it)."""
    return f"node:{node_id}"


@dataclass(frozen=True, slots=True)
class NodeConnections:
    """One node's connection state as plain data: the core's (``ConnectionState``) and the host's attempt ids."""

    node_id: int
    #: wire attempt id = ``id_base`` + the core's attempt id (callers hold wire ids: they keep working)
    id_base: int
    #: the attempts handed out and not yet decided here: ``(wire id, attempt as attempt_tuple, last asked ms)``
    attempts: tuple[tuple[int, tuple[Any, ...], int], ...]
    quotas: ConnectionState


@dataclass(frozen=True, slots=True)
class ConnectionNodesSnapshot:
    """The connection state of some nodes (:meth:`ConnectionHost.export_nodes`): plain data, it pickles."""

    nodes: tuple[NodeConnections, ...] = ()

    def __len__(self) -> int:
        return len(self.nodes)


def _same(pending: ConnectionAttempt | None, attempt: ConnectionAttempt) -> ConnectionAttempt:
    return pending if pending == attempt and pending is not None else attempt


def _int(value: object, what: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValueError(f"{what} must be an int in [{low}, {high}], got {value!r}")
    return value


class _Node:
    """One node's ConnectionQuotas, its binding and the attempts handed out for it."""

    __slots__ = ("attempts", "binding", "id_base", "last_asked_ms", "quotas")

    def __init__(self, quotas: ConnectionQuotas, binding: ManagerBinding, id_base: int) -> None:
        self.quotas = quotas
        self.binding = binding
        #: wire attempt id = id_base + the core's attempt id (unique per process, random start)
        self.id_base = id_base
        self.attempts: dict[int, ConnectionAttempt] = {}
        self.last_asked_ms: dict[int, int] = {}

    def forget(self, attempt_id: int) -> None:
        self.attempts.pop(attempt_id, None)
        self.last_asked_ms.pop(attempt_id, None)


class ConnectionHost:
    """Per-node ``ConnectionQuotas``, built on first use from the shard's image and bound to the config log.

    ``image_of`` returns the image the shard holds now (read when a node or a listener is added);
    ``resolver`` resolves host names of ``max.connections.per.ip.overrides`` and ip quota entities (the
    core's default: ``socket.getaddrinfo``).
    """

    def __init__(
        self,
        image_of: Callable[[], ConfigImage],
        *,
        resolver: Resolver | None = None,
        attempt_idle_ms: int = DEFAULT_ATTEMPT_IDLE_MS,
        max_listeners_per_node: int = MAX_LISTENERS_PER_NODE,
    ) -> None:
        self._image_of = image_of
        self._resolver = resolver
        self.attempt_idle_ms = _int(attempt_idle_ms, "attempt_idle_ms", 0, _MAX_INT32)
        self.max_listeners_per_node = _int(max_listeners_per_node, "max_listeners_per_node", 1, 10_000)
        self._nodes: dict[int, _Node] = {}
        #: attempts abandoned by housekeeping (their callers went silent)
        self.abandoned_attempts = 0

    # --- nodes -----------------------------------------------------------------------------------------
    def _node(self, node_id: int, now_ms: int) -> _Node:
        node = self._nodes.get(node_id)
        if node is None:
            node = self._nodes[node_id] = self._build(node_id, now_ms)
        return node

    def _build(self, node_id: int, now_ms: int) -> _Node:
        """The node's ConnectionQuotas from the image: windows at construction, then every dynamic limit
        and ip quota through the same paths a config event takes (a value this process cannot apply,
        e.g. an override naming a host it cannot resolve, is logged and skipped, as the binding does)."""
        image = self._image_of()
        configs = startup_configs(image, node_id).connection_configs
        static = {k: v for k, v in configs.items() if k in _STATIC_KEYS}
        quotas = ConnectionQuotas(
            ConnectionQuotasConfig.from_configs(static), now_ms=now_ms, metrics=Metrics(), resolver=self._resolver
        )
        dynamic = {k: v for k, v in configs.items() if k not in _STATIC_KEYS}
        try:
            quotas.reconfigure(dynamic)
        except ValueError:
            # one at a time, overrides before max.connections.per.ip (a 0 there needs them)
            for key in sorted(dynamic, key=lambda k: k != "max.connections.per.ip.overrides"):
                try:
                    quotas.reconfigure({key: dynamic[key]})
                except ValueError as e:
                    log.warning("node %s: connection config %s=%s not applied: %s", node_id, key, dynamic[key], e)
        binding = ManagerBinding(connections=quotas, node_id=node_id)
        node = _Node(quotas, binding, secrets.randbits(61) + 1)
        ip_quotas = [
            ClientQuotaChange(entity, _CONNECTION_CREATION_RATE, None, values[_CONNECTION_CREATION_RATE])
            for entity, values in image.client_quotas().items()
            if _CONNECTION_CREATION_RATE in values
        ]
        self._apply_to(node_id, node, ip_quotas, image)
        return node

    def _add_listener(self, node_id: int, node: _Node, listener: str, now_ms: int) -> None:
        """Kafka's ``addListener`` with the limits the image holds for it (None: no limit)."""
        image = self._image_of()
        limits: dict[str, int | None] = {}
        for key in LISTENER_CONFIGS:
            value = effective_broker_config(image, f"{LISTENER_CONFIG_PREFIX}{listener.lower()}.{key}", node_id)
            limits[key] = None if value is None else int(value.strip())
        node.quotas.add_listener(
            listener,
            now_ms=now_ms,
            max_connections=limits["max.connections"],
            max_connection_creation_rate=limits["max.connection.creation.rate"],
        )

    @property
    def nodes(self) -> list[int]:
        return sorted(self._nodes)

    def quotas(self, node_id: int) -> ConnectionQuotas | None:
        """The node's ConnectionQuotas, if it has been asked about (for checks and tools)."""
        node = self._nodes.get(node_id)
        return None if node is None else node.quotas

    # --- hand-over (a reshard moves whole nodes) -------------------------------------------------------
    def export_nodes(self, owns: Callable[[str], bool]) -> ConnectionNodesSnapshot:
        """A copy of the state of every node whose key (:func:`connection_node_key`) ``owns`` accepts."""
        return ConnectionNodesSnapshot(
            tuple(
                NodeConnections(
                    node_id,
                    node.id_base,
                    tuple((w, attempt_tuple(a), node.last_asked_ms[w]) for w, a in node.attempts.items()),
                    export_connection_state(node.quotas),
                )
                for node_id, node in self._nodes.items()
                if owns(connection_node_key(node_id))
            )
        )

    def forget_nodes(self, owns: Callable[[str], bool]) -> int:
        """Drop every node whose key ``owns`` accepts (its counts, attempts, binding and metrics); how many."""
        doomed = [node_id for node_id in self._nodes if owns(connection_node_key(node_id))]
        for node_id in doomed:
            del self._nodes[node_id]
        return len(doomed)

    def import_nodes(self, snapshot: ConnectionNodesSnapshot, now_ms: int) -> int:
        """Install the snapshot's nodes, each built from the image held now (limits, listener limits and IP
        quotas from the log) with the exported counts, sensors and attempts; a node held already is replaced.
        ValueError, before any change, if a node does not fit. The number of nodes imported."""
        if not isinstance(snapshot, ConnectionNodesSnapshot):
            raise ValueError(f"expected a ConnectionNodesSnapshot, got {type(snapshot).__name__}")
        _int(now_ms, "now_ms", 0, _MAX_ATTEMPT_ID)
        built: dict[int, tuple[_Node, NodeConnections, dict[int, ConnectionAttempt]]] = {}
        for entry in snapshot.nodes:
            if not isinstance(entry, NodeConnections) or not isinstance(entry.quotas, ConnectionState):
                raise ValueError(f"expected NodeConnections, got {type(entry).__name__}")
            node_id = _int(entry.node_id, "node_id", 0, _MAX_INT32)
            if node_id in built:
                raise ValueError(f"node {node_id} appears twice")
            id_base = _int(entry.id_base, "id_base", 1, _MAX_ATTEMPT_ID)
            attempts = {}
            for wire_id, values, asked_ms in entry.attempts:
                attempt = attempt_from_tuple(values)
                _int(asked_ms, "an attempt's last ask", 0, _MAX_ATTEMPT_ID)
                if wire_id != id_base + attempt.attempt_id or wire_id in attempts:
                    raise ValueError(f"node {node_id}: wire attempt id {wire_id!r} is not id_base + its attempt id")
                attempts[wire_id] = attempt
            node = self._build(node_id, now_ms)
            for listener, *_ in entry.quotas.listeners:  # the limits the image holds for it, as on the giver
                self._add_listener(node_id, node, listener, now_ms)
            entry.quotas.check(node.quotas)
            built[node_id] = (node, entry, attempts)
        for node_id, (node, entry, attempts) in built.items():
            pending = import_connection_state(node.quotas, entry.quotas, now_ms, check=False)
            node.id_base = entry.id_base
            # the core's pending object where it is the same attempt (one object per attempt, as handed out)
            node.attempts = {w: _same(pending.get(a.attempt_id), a) for w, a in attempts.items()}
            node.last_asked_ms = {w: asked_ms for w, _, asked_ms in entry.attempts}
            self._nodes[node_id] = node
        return len(built)

    # --- the config stream: the shard fans every event out to us -------------------------------------
    def apply(self, delta: ConfigDelta, image: ConfigImage) -> None:
        """One event's delta (``image`` is the image after it), applied to every node built so far."""
        self.apply_changes(delta.changes, image)

    def apply_changes(self, changes: Iterable[Any], image: ConfigImage) -> None:
        """Changes (an event's, or ``changes_between`` after a snapshot jump) for every node built so far.

        Only what a ConnectionQuotas reads is passed on: BROKER connection configs and
        ``connection_creation_rate`` client quotas; a listener's configs only once the node has that
        listener (they are read from the image when it is added)."""
        relevant = [c for c in changes if _is_connection_change(c)]
        if not relevant:
            return
        for node_id, node in self._nodes.items():
            self._apply_to(node_id, node, relevant, image)

    def _apply_to(self, node_id: int, node: _Node, changes: Sequence[Any], image: ConfigImage) -> None:
        listeners = {name.lower() for name in node.quotas.listeners}
        for change in changes:
            if (
                isinstance(change, ConfigChange)
                and change.name.startswith(LISTENER_CONFIG_PREFIX)
                and _listener_of(change.name) not in listeners
            ):
                continue  # read from the image when the listener is added
            try:
                node.binding.apply_changes([change], image)
            except ValueError as e:  # e.g. an ip entity naming a host this process cannot resolve
                log.warning("node %s: %s not applied: %s", node_id, change, e)

    # --- requests ------------------------------------------------------------------------------------
    def check(self, items: Sequence[Any]) -> list[tuple[Any, ...]]:
        """Every item valid (or ValueError naming the first bad one); the items with listeners normalised."""
        if not isinstance(items, list | tuple) or not items:
            raise ValueError("a batch must be a non-empty list of items")
        checked: list[tuple[Any, ...]] = []
        new_listeners: dict[int, set[str]] = {}
        for index, item in enumerate(items):
            try:
                checked.append(self._check_item(item, new_listeners))
            except ValueError as e:
                raise ValueError(f"item {index}: {e}") from None
        return checked

    def _check_item(self, item: object, new_listeners: dict[int, set[str]]) -> tuple[Any, ...]:
        if not isinstance(item, tuple) or not item:
            raise ValueError(f"expected a tuple starting with 'admit', 'release' or 'abandon', got {item!r}")
        op = item[0]
        fields = _ITEM_FIELDS.get(op)
        if fields is None:
            raise ValueError(f"unknown op {op!r}; expected 'admit', 'release' or 'abandon'")
        if len(item) != fields:
            raise ValueError(f"{op} takes {fields} fields, got {len(item)}")
        node_id = _int(item[1], "node_id", 0, _MAX_INT32)
        _int(item[-1], "now_ms", 0, _MAX_ATTEMPT_ID)
        if op == "abandon":
            _int(item[2], "attempt_id", 1, _MAX_ATTEMPT_ID)
            return item
        listener = normalise_listener(item[2])
        address = peer_address(item[3])
        if op == "release":
            return (op, node_id, listener, item[3], item[4])
        node = self._nodes.get(node_id)
        if node is None or not node.quotas.has_listener(listener):  # a new listener (rare): count them
            known = [] if node is None else node.quotas.listeners
            adding = new_listeners.setdefault(node_id, set())
            adding.add(listener)
            if len(known) + len(adding) > self.max_listeners_per_node:
                raise ValueError(
                    f"node {node_id} would have more than {self.max_listeners_per_node} listeners "
                    f"with {listener!r}; it has {sorted(known)}"
                )
        attempt_id = item[4]
        if attempt_id is not None:
            _int(attempt_id, "attempt_id", 1, _MAX_ATTEMPT_ID)
        return (op, node_id, listener, address, attempt_id, item[5])

    def serve(self, items: Sequence[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
        """Decide, release and abandon in the items' order (see the module docstring for the tuples)."""
        checked = self.check(items)
        results: list[tuple[Any, ...]] = []
        for item in checked:
            op = item[0]
            if op == "admit":
                results.append(self._admit(*item[1:]))
            elif op == "release":
                results.append((self._release(*item[1:]),))
            else:
                results.append((self._abandon(*item[1:]),))
        return results

    def _admit(self, node_id: int, listener: str, address: Address, attempt_id: int | None, now_ms: int) -> AdmitResult:
        node = self._node(node_id, now_ms)
        quotas = node.quotas
        if not quotas.has_listener(listener):
            self._add_listener(node_id, node, listener, now_ms)
        attempt = node.attempts.get(attempt_id) if attempt_id is not None else None
        if attempt is not None and (attempt.listener != listener or peer_address(attempt.ip) != address):
            # another connection's attempt (a caller's bug): never spend it; this one is asked anew
            log.warning(
                "node %s: attempt %s is for %s on %s, asked for %s on %s; asked as a new connection",
                node_id,
                attempt_id,
                attempt.ip,
                attempt.listener,
                address,
                listener,
            )
            attempt_id, attempt = None, None
        decision = quotas.inc(listener, str(address), now_ms, attempt=attempt)
        if attempt_id is not None and attempt is not None and not decision.throttled:
            node.forget(attempt_id)
        return self._result(node, decision, now_ms)

    @staticmethod
    def _result(node: _Node, decision: ConnectionDecision, now_ms: int) -> AdmitResult:
        wire_id = 0
        if decision.throttled:
            assert decision.attempt is not None
            wire_id = node.id_base + decision.attempt.attempt_id
            node.attempts[wire_id] = decision.attempt
            node.last_asked_ms[wire_id] = now_ms
        limit = ""
        if decision.limit is not None:
            limit = decision.limit.value.replace("<listener>", decision.listener.lower())
        return (
            decision.kind.name,
            decision.throttle_ms,
            limit,
            decision.max_connections,
            wire_id,
            decision.counted,
        )

    def _release(self, node_id: int, listener: str, ip: str, now_ms: int) -> bool:
        """``dec`` of a counted connection; False (nothing changes) if the node does not count it, which
        happens after a shard restart (Kafka's ``dec`` would throw: its counts never vanish)."""
        node = self._nodes.get(node_id)
        if node is None or not node.quotas.has_listener(listener):
            return False
        try:
            node.quotas.dec(listener, ip, now_ms)
        except ValueError:  # the ip has no connections here (the core checks before changing anything)
            return False
        return True

    def _abandon(self, node_id: int, attempt_id: int, now_ms: int) -> bool:
        node = self._nodes.get(node_id)
        attempt = node.attempts.get(attempt_id) if node is not None else None
        if node is None or attempt is None:
            return False
        node.forget(attempt_id)
        return node.quotas.abandon(attempt)

    # --- housekeeping and metrics ----------------------------------------------------------------------
    def housekeeping(self, now_ms: int) -> int:
        """Abandon attempts nobody asked about for ``attempt_idle_ms`` and expire idle IP rate sensors
        (Kafka keeps an IP's sensor an hour after its last connection); the number of attempts dropped."""
        _int(now_ms, "now_ms", 0, _MAX_ATTEMPT_ID)
        dropped = 0
        for node in self._nodes.values():
            idle = [a for a, t in node.last_asked_ms.items() if now_ms - t > self.attempt_idle_ms]
            for attempt_id in idle:
                attempt = node.attempts[attempt_id]
                node.forget(attempt_id)
                if node.quotas.abandon(attempt):
                    dropped += 1
            node.quotas.metrics.expire_sensors(now_ms)
        self.abandoned_attempts += dropped
        return dropped

    def metrics_snapshot(self, now_ms: int) -> list[MetricRow]:
        """Each node's ``socket-server-metrics`` (accept rates per broker / listener / IP, accept throttle
        times), measured at ``now_ms``, each with a ``node`` tag; rows as ``ShardActor.metrics_snapshot``."""
        rows = []
        for node_id, node in sorted(self._nodes.items()):
            rows += metric_rows(node.quotas.metrics, now_ms, node_id=node_id)
        return rows


def _listener_of(config_name: str) -> str:
    rest = config_name[len(LISTENER_CONFIG_PREFIX) :]
    for suffix in LISTENER_CONFIGS:
        if rest.endswith("." + suffix):
            return rest[: -len(suffix) - 1].lower()
    return ""


def _is_connection_change(change: object) -> bool:
    if isinstance(change, ClientQuotaChange):
        return change.key == _CONNECTION_CREATION_RATE and any(kind == IP for kind, _ in change.entity)
    if isinstance(change, ConfigChange) and change.resource_type is ConfigResourceType.BROKER:
        name = change.name
        return name in _CONNECTION_KEYS or name in _RATE_KEYS or name.startswith(LISTENER_CONFIG_PREFIX)
    return False
