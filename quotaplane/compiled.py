"""Loading the package's compiled hot paths, with their pure-Python references as the fallback.

``setup.py`` builds each extension from its ``.pyx`` with Cython at install (the quota core's batch path,
``quota/_record_compiled``; a gateway's checks of a columnar usage batch, ``services/gateway/_usage_compiled``; a
shard's unpacking of one, ``actors/_unpack_compiled``; the Spark telemetry job's point decoder,
``spark/_points_compiled``; a push's zstd frame decoded with the GIL held, ``telemetry/_zstd_compiled``). Where no
C compiler was found the package installs without them, and each caller runs its pure-Python path, the reference
the compiled one is tested against. ``QUOTAPLANE_PURE_CORE=1`` in the environment selects the pure paths in a
process (to compare the two, or to rule the compiled ones out while debugging).
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

__all__ = ["load_compiled"]


def load_compiled(module: str) -> ModuleType | None:
    """The compiled extension ``module`` (a full module name), or None where it was not built or
    ``QUOTAPLANE_PURE_CORE`` asks for the pure paths."""
    if os.environ.get("QUOTAPLANE_PURE_CORE", "").strip() not in ("", "0"):
        return None
    try:
        # by name: the extension module has no source for the package's import-graph check to read
        return importlib.import_module(module)
    except ImportError:
        return None
