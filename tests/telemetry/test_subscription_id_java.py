"""The subscription id against the JVM itself.

``java/SubscriptionIds.java`` is Kafka's resolution code (ConcurrentHashMap of subscriptions, HashSet
copies, HashSet union, ``toString()``, CRC32C, ``Uuid.hashCode``) run on the machine's Java. Random
histories of puts and deletes, with metric names and subscription names chosen to collide in Java's
hash tables, are replayed through quotaplane's ``Subscriptions`` and through the JVM; every client's
subscription id, metric order and push interval must agree.
"""

from __future__ import annotations

import itertools
import random
import shutil
import subprocess
from pathlib import Path

import pytest

from quotaplane.kafka_uuid import Uuid
from quotaplane.telemetry._configs import parse_subscription
from quotaplane.telemetry._java_collections import java_hash_set_order_exact, java_string_hash_code
from quotaplane.telemetry._subscription import Subscriptions, compute_subscription_id

JAVA_SOURCE = Path(__file__).parent / "java" / "SubscriptionIds.java"

# "Aa" and "BB" have the same String.hashCode, so every word over them of one length collides.
_COLLIDING = ["".join(w) for w in itertools.product(("Aa", "BB"), repeat=3)]  # 8 names, one hash


def _run_java(lines: list[str]) -> list[str]:
    java = shutil.which("java")
    assert java is not None, "Java 17 is required by this test (the project's machines have it)"
    done = subprocess.run(
        [java, str(JAVA_SOURCE)], input="\n".join(lines) + "\n", capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def _metric_vocabulary(rng: random.Random) -> list[str]:
    words = [f"org.apache.kafka.producer.m{i}" for i in range(60)]
    words += [f"org.apache.kafka.{c}." for c in _COLLIDING]
    words += ["org.apache.kafka.consumer.", "org.apache.kafka.client.producer.partition.queue.", "é€😀.", "x"]
    rng.shuffle(words)
    return words


def _history(rng: random.Random) -> list[tuple]:
    metric_words = _metric_vocabulary(rng)
    sub_names = [f"sub-{i}" for i in range(14)] + _COLLIDING[:7]
    ops: list[tuple] = []
    for _ in range(rng.randint(5, 40)):
        roll = rng.random()
        if roll < 0.6:
            size = rng.choice([0, 1, 2, 3, 5, 8, 11, 12, 13, 24, 25, 40])
            metrics = rng.sample(metric_words, size)
            if rng.random() < 0.05:
                metrics = ["*", *metrics[:2]]
            ops.append(("PUT", rng.choice(sub_names), rng.choice([100, 1000, 30_000, 60_000, 300_000]), metrics))
        elif roll < 0.75:
            ops.append(("DEL", rng.choice(sub_names)))
        else:
            ops.append(("CLIENT", rng.getrandbits(64) - 2**63, rng.getrandbits(64) - 2**63))
    ops.append(("CLIENT", 1, 2))
    return ops


def test_string_hash_code_matches_java_on_colliding_words() -> None:
    assert len({java_string_hash_code(w) for w in _COLLIDING}) == 1


def test_subscription_ids_match_kafka_on_the_jvm() -> None:
    rng = random.Random(714)
    java_lines: list[str] = []
    expected_by_python: list[str] = []
    exact: list[bool] = []
    for _ in range(120):
        subscriptions = Subscriptions()
        java_lines.append("RESET")
        for op in _history(rng):
            if op[0] == "PUT":
                _, name, interval, metrics = op
                java_lines.append("\t".join(["PUT", name, str(interval), *metrics]))
                configs = {"metrics": ",".join(metrics), "interval.ms": str(interval)}
                subscriptions.put(parse_subscription(name, configs))
            elif op[0] == "DEL":
                java_lines.append(f"DEL\t{op[1]}")
                subscriptions.remove(op[1])
            else:
                _, msb, lsb = op
                java_lines.append(f"CLIENT\t{msb}\t{lsb}")
                resolved = subscriptions.resolve({})
                uuid = Uuid.from_parts(msb, lsb)
                expected_by_python.append(
                    f"{resolved.subscription_id(uuid)}\t[{', '.join(resolved.metrics)}]\t{resolved.push_interval_ms}"
                )
                exact.append(resolved.kafka_exact)
    # Direct computeSubscriptionId calls, as the public function.
    for _ in range(200):
        metrics = rng.sample(_metric_vocabulary(rng), rng.randint(0, 30))
        interval, msb, lsb = rng.randint(100, 3_600_000), rng.getrandbits(64) - 2**63, rng.getrandbits(64) - 2**63
        java_lines.append("\t".join(["ID", str(interval), str(msb), str(lsb), *metrics]))
        sid = compute_subscription_id(metrics, interval, Uuid.from_parts(msb, lsb))
        expected_by_python.append(f"{sid}\t")
        exact.append(java_hash_set_order_exact(metrics)[1])

    got = _run_java(java_lines)
    assert len(got) == len(expected_by_python)
    agree = [
        have.startswith(want) if want.endswith("\t") else have == want
        for want, have in zip(expected_by_python, got, strict=True)
    ]
    # Every case without a Java tree bin agrees exactly; the colliding names above make tree bins
    # happen now and then, and the emulator must have flagged every disagreement.
    unflagged = [i for i, (ok, ex) in enumerate(zip(agree, exact, strict=True)) if ex and not ok]
    assert unflagged == [], f"{len(unflagged)} exact cases differ from the JVM, first: {got[unflagged[0]]}"
    assert sum(exact) > 0.8 * len(exact), "the histories should mostly stay out of tree bins"


@pytest.mark.parametrize("size", [0, 1, 11, 12, 13, 24])
def test_copy_constructor_capacity_changes_the_order_only_where_java_does(size: int) -> None:
    """A single subscription of ``size`` prefixes: the client sees exactly the JVM's set order."""
    rng = random.Random(size)
    metrics = rng.sample(_metric_vocabulary(rng), size)
    subscriptions = Subscriptions()
    subscriptions.put(parse_subscription("s", {"metrics": ",".join(metrics), "interval.ms": "1000"}))
    resolved = subscriptions.resolve({})
    (line,) = _run_java(["\t".join(["PUT", "s", "1000", *metrics]), "CLIENT\t0\t7"])
    assert line.split("\t")[1] == "[" + ", ".join(resolved.metrics) + "]"
    assert int(line.split("\t")[0]) == resolved.subscription_id(Uuid.from_parts(0, 7))
