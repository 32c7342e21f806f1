"""Which implementation of the client quota managers' batch hot path runs: compiled or pure Python.

``_record_compiled`` is built from its ``.pyx`` by ``setup.py`` with Cython when the package is installed; the
pure-Python methods of ``ClientQuotaManager`` are the reference it is tested against and the fallback where it
was not built. ``QUOTAPLANE_PURE_CORE=1`` in the environment selects the pure path in a process (to compare the
two, or to rule the compiled one out while debugging).
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

__all__ = ["compiled_core", "record_compiled"]


def _load() -> ModuleType | None:
    if os.environ.get("QUOTAPLANE_PURE_CORE", "").strip() not in ("", "0"):
        return None
    try:
        # by name: the extension module has no source for the package's import-graph check to read
        return importlib.import_module(f"{__package__}._record_compiled")
    except ImportError:
        return None


#: The compiled module (``plain_width``, ``record_plain_batch``), or None on the pure path.
record_compiled: ModuleType | None = _load()


def compiled_core() -> bool:
    """Whether the client quota managers' batches run through the compiled hot path in this process."""
    return record_compiled is not None
