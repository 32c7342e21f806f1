"""What POSIX durability needs beyond ``os.fsync``: every byte written, and the directory's entry fsynced.

A new file, a rename or a deletion is an entry of its directory; fsyncing the file persists its data,
not that entry, so after a power loss the file could be missing (or back). The archive writer, the
config event log, its snapshot files and the Spark compaction job all create or rename files they
acknowledge as durable, so they share this one definition. ``os.write`` may also write fewer bytes
than it was given; :func:`write_all` loops until all of them are written.

>>> import tempfile
>>> with tempfile.TemporaryDirectory() as d:
...     fsync_directory(d)
"""

from __future__ import annotations

import os

__all__ = ["fsync_directory", "write_all"]


def fsync_directory(path: str | os.PathLike[str]) -> None:
    """Persist a directory's entries (a new file or subdirectory name), as POSIX requires for durability."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_all(fd: int, data: bytes) -> None:
    """``os.write`` until every byte is written (a write may be short)."""
    with memoryview(data) as view:
        while view:
            view = view[os.write(fd, view) :]
