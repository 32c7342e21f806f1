"""Which implementation of the client quota managers' batch hot path runs: compiled or pure Python.

``_record_compiled`` is built from its ``.pyx`` by ``setup.py`` with Cython when the package is installed; the
pure-Python methods of ``ClientQuotaManager`` are the reference it is tested against and the fallback where it
was not built. ``QUOTAPLANE_PURE_CORE=1`` in the environment selects the pure path in a process (to compare the
two, or to rule the compiled one out while debugging).
"""

from __future__ import annotations

from types import ModuleType

from ..compiled import load_compiled

__all__ = ["compiled_core", "record_compiled"]


#: The compiled module (``plain_width``, ``record_plain_batch``), or None on the pure path.
record_compiled: ModuleType | None = load_compiled(f"{__package__}._record_compiled")


def compiled_core() -> bool:
    """Whether the client quota managers' batches run through the compiled hot path in this process."""
    return record_compiled is not None
