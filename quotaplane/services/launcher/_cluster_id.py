"""The cluster id: generated once per data directory and kept in ``DATA_DIR/meta.properties``.

Every AdminService answer carries it (``x-quotaplane-cluster-id`` trailing metadata) and the CLI checks it
when told which cluster it expects (``--cluster-id``, ``$QUOTAPLANE_CLUSTER_ID``): with fixed default ports
and no credential, a second instance, or a test, on the same host would otherwise silently talk to the
first one. The id is Kafka's (``Uuid.randomUuid()``, 22 characters of base64url, as ``kafka-storage.sh
random-uuid`` prints) and the file is Kafka's ``meta.properties`` form, written whole (a temporary file,
fsync, rename, fsync of the directory) so a crash never leaves a half-written id that a restart would
replace. It is read under ``up.lock``, so two ``up`` never race to create it.
"""

from __future__ import annotations

import base64
import binascii
import os
from pathlib import Path

from ._common import LaunchError

__all__ = ["META_PROPERTIES", "data_dir_cluster_id", "is_cluster_id"]

#: The file in DATA_DIR holding the cluster id (``cluster.id=<id>``), named and shaped as Kafka's.
META_PROPERTIES = "meta.properties"
_KEY = "cluster.id"


def is_cluster_id(text: str) -> bool:
    """Whether ``text`` is a Kafka Uuid's string form: 22 base64url characters for 16 bytes."""
    if len(text) != 22 or not all(c.isascii() and (c.isalnum() or c in "-_") for c in text):
        return False
    try:
        return len(base64.urlsafe_b64decode(text + "==")) == 16
    except (binascii.Error, ValueError):
        return False


def data_dir_cluster_id(data_dir: Path) -> str:
    """The cluster id of ``data_dir``: read from its ``meta.properties``, or generated and written there the
    first time. A file that exists but holds no valid id is a LaunchError: replacing it would give the data a
    new identity that clients configured with the old one would refuse."""
    path = data_dir / META_PROPERTIES
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return _create(path)
    except (OSError, UnicodeDecodeError) as e:
        raise LaunchError(f"cannot read the cluster id from {path}: {getattr(e, 'strerror', None) or e}") from None
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() == _KEY and not line.lstrip().startswith(("#", "!")):
            if is_cluster_id(value.strip()):
                return value.strip()
            raise LaunchError(f"{path}: {_KEY} {value.strip()!r} is not a cluster id (22 base64url characters)")
    raise LaunchError(f"{path} has no {_KEY}= line")


def _create(path: Path) -> str:
    from quotaplane.kafka_uuid import random_uuid

    cluster_id = str(random_uuid())
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(temporary, "w", encoding="utf-8") as f:
            f.write(f"# written by quotaplane up: this data directory's cluster id\nversion=1\n{_KEY}={cluster_id}\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(temporary, path)
        fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as e:
        temporary.unlink(missing_ok=True)
        raise LaunchError(f"cannot write the cluster id to {path}: {e.strerror or e}") from None
    return cluster_id
