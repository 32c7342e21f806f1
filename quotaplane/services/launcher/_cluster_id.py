"""The cluster id of ``up``: its data directory's ``meta.properties``, reconciled with the controller's.

Every AdminService answer carries it (``x-quotaplane-cluster-id`` trailing metadata) and the CLI checks it
when told which cluster it expects (``--cluster-id``, ``$QUOTAPLANE_CLUSTER_ID``): with fixed default ports
and no credential, a second instance, or a test, on the same host would otherwise silently talk to the
first one. The file is Kafka's (``quotaplane.meta_properties``); it is read under ``up.lock``, so two ``up``
never race to create it.

**One id per cluster, not per host.** The config controller's log directory holds the cluster's id (the
controller takes it from the ``up`` that creates it). A private ``up`` makes its data directory's id first and
the controller it starts takes it. An ``up`` that joins a running cluster (``--ray-address``: a second gateway
host, a Kubernetes frontend pod) asks the controller: a data directory without an id takes the cluster's, one
that names another cluster refuses to start, as a Kafka broker refuses a log directory of another cluster.
"""

from __future__ import annotations

from pathlib import Path

from quotaplane.meta_properties import (
    META_PROPERTIES,
    InconsistentClusterIdError,
    MetaPropertiesError,
    claim_cluster_id,
    is_cluster_id,
    read_cluster_id,
)

from ._common import LaunchError

__all__ = ["META_PROPERTIES", "adopt_cluster_id", "data_dir_cluster_id", "is_cluster_id", "local_cluster_id"]

_WRITER = "quotaplane up"


def data_dir_cluster_id(data_dir: Path) -> str:
    """The cluster id of ``data_dir``: read from its ``meta.properties``, or generated and written there the
    first time (a private ``up``). A file that holds no valid id is a LaunchError."""
    try:
        return claim_cluster_id(data_dir, None, written_by=_WRITER)
    except MetaPropertiesError as e:
        raise LaunchError(str(e)) from None


def local_cluster_id(data_dir: Path) -> str | None:
    """The id ``data_dir`` names already, or None (a joining ``up`` learns the cluster's from its controller)."""
    try:
        return read_cluster_id(data_dir)
    except MetaPropertiesError as e:
        raise LaunchError(str(e)) from None


def adopt_cluster_id(data_dir: Path, cluster_id: str) -> str:
    """``cluster_id`` (the controller's) as ``data_dir``'s: written there if it names none; a LaunchError if it
    names another cluster."""
    try:
        return claim_cluster_id(data_dir, cluster_id, written_by=_WRITER)
    except InconsistentClusterIdError as e:
        raise LaunchError(
            f"data dir {data_dir} belongs to cluster {e.stored}, but the cluster at this Ray address is "
            f"{e.expected} (the config controller's): use a data dir of that cluster, or an empty one"
        ) from None
    except MetaPropertiesError as e:
        raise LaunchError(str(e)) from None
