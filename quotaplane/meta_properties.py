"""``meta.properties``: the cluster id a directory belongs to, in Kafka's form.

Kafka writes a ``meta.properties`` into every log directory (``cluster.id=...``, ``version=...``) and a node
refuses to start on a directory of another cluster (``InconsistentClusterIdException``). quotaplane keeps one
in each ``quotaplane up`` data directory and one in the config controller's log directory: the controller's
is the cluster's identity, and every ``up`` that joins the cluster (``--ray-address``) takes it into a data
directory that has none, or refuses to start on one that names another cluster.

The id is Kafka's (``Uuid.randomUuid()``: 22 characters of base64url, as ``kafka-storage.sh random-uuid``
prints). The file is written whole (a temporary file, fsync, rename, fsync of the directory), so a crash never
leaves a half-written id that the next start would replace with a new one.
"""

from __future__ import annotations

import base64
import binascii
from pathlib import Path

from quotaplane.durable import replace_file

__all__ = [
    "META_PROPERTIES",
    "InconsistentClusterIdError",
    "MetaPropertiesError",
    "claim_cluster_id",
    "is_cluster_id",
    "read_cluster_id",
    "write_cluster_id",
]

#: The file holding the cluster id (``cluster.id=<id>``), named and shaped as Kafka's.
META_PROPERTIES = "meta.properties"
_KEY = "cluster.id"


class MetaPropertiesError(ValueError):
    """A ``meta.properties`` that cannot be read, holds no valid cluster id, or cannot be written."""


class InconsistentClusterIdError(MetaPropertiesError):
    """A directory that belongs to another cluster than the one it is used for (Kafka's
    ``InconsistentClusterIdException``)."""

    def __init__(self, path: Path, stored: str, expected: str) -> None:
        super().__init__(
            f"{path} belongs to cluster {stored}, not to cluster {expected}: a directory of another cluster "
            "(move it away, or start with that cluster's directory)"
        )
        self.path = path
        self.stored = stored
        self.expected = expected

    def __reduce__(self) -> tuple[type[InconsistentClusterIdError], tuple[Path, str, str]]:
        # Ray pickles an actor's exception to its caller: rebuild it from the fields, not the message
        return type(self), (self.path, self.stored, self.expected)


def is_cluster_id(text: str) -> bool:
    """Whether ``text`` is a Kafka Uuid's string form: 22 base64url characters for 16 bytes."""
    if len(text) != 22 or not all(c.isascii() and (c.isalnum() or c in "-_") for c in text):
        return False
    try:
        return len(base64.urlsafe_b64decode(text + "==")) == 16
    except (binascii.Error, ValueError):
        return False


def read_cluster_id(directory: Path) -> str | None:
    """The cluster id in ``directory/meta.properties``; None when there is no such file. A file that exists but
    holds no valid id is a MetaPropertiesError: replacing it would give the data a new identity that clients
    configured with the old one would refuse."""
    path = directory / META_PROPERTIES
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as e:
        raise MetaPropertiesError(
            f"cannot read the cluster id from {path}: {getattr(e, 'strerror', None) or e}"
        ) from None
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() == _KEY and not line.lstrip().startswith(("#", "!")):
            if is_cluster_id(value.strip()):
                return value.strip()
            raise MetaPropertiesError(f"{path}: {_KEY} {value.strip()!r} is not a cluster id (22 base64url characters)")
    raise MetaPropertiesError(f"{path} has no {_KEY}= line")


def write_cluster_id(directory: Path, cluster_id: str, *, written_by: str) -> None:
    """Write ``directory/meta.properties`` naming ``cluster_id``, durably (see the module docstring)."""
    if not is_cluster_id(cluster_id):
        raise MetaPropertiesError(f"{cluster_id!r} is not a cluster id (22 base64url characters)")
    path = directory / META_PROPERTIES
    text = f"# written by {written_by}: the cluster this directory belongs to\nversion=1\n{_KEY}={cluster_id}\n"
    try:
        replace_file(path, text.encode("utf-8"))
    except OSError as e:
        raise MetaPropertiesError(f"cannot write the cluster id to {path}: {e.strerror or e}") from None


def claim_cluster_id(directory: Path, cluster_id: str | None, *, written_by: str) -> str:
    """The cluster id of ``directory``, reconciled with ``cluster_id`` (the one its user expects, or None for
    any): a directory without one takes ``cluster_id`` (a new random id if None); one that names another is
    an InconsistentClusterIdError."""
    stored = read_cluster_id(directory)
    if stored is None:
        if cluster_id is None:
            from quotaplane.kafka_uuid import random_uuid

            cluster_id = str(random_uuid())
        write_cluster_id(directory, cluster_id, written_by=written_by)
        return cluster_id
    if cluster_id is not None and stored != cluster_id:
        raise InconsistentClusterIdError(directory / META_PROPERTIES, stored, cluster_id)
    return stored
