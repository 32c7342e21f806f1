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

import contextlib
import os
import secrets
from collections.abc import Iterable
from pathlib import Path

__all__ = ["fsync_directory", "replace_file", "write_all"]


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


def replace_file(
    path: str | os.PathLike[str],
    data: bytes | Iterable[bytes],
    *,
    fsync: bool = True,
    sync_directory: bool = True,
    temporary_name: str | None = None,
    mode: int = 0o644,
) -> None:
    """Replace ``path`` with ``data`` (bytes, or chunks) atomically: a temporary file in the same directory,
    written (and fsynced), renamed over ``path``, then (``fsync`` and ``sync_directory``) the directory fsynced.
    A reader or a crash sees the old file or the new one, never a part; on any failure the temporary file is
    removed and the error raised. ``temporary_name`` (default: a unique hidden name) lets a single writer reuse
    one name, so that a crash between the write and the rename leaves one leftover its next write replaces.
    ``sync_directory=False`` leaves the directory's fsync to a caller that does one anyway. ``mode``: the new
    file's permissions (before the umask), set when it is created, so a secret is never readable by others.

    The bytes go through a buffered file object, not ``os.write``: a test or the crash storm that intercepts
    ``os.write`` to tear the event log's frames does not see these writes.
    """
    path = Path(path)
    temporary = path.with_name(temporary_name or f".{path.name}.tmp-{secrets.token_hex(4)}")
    chunks = [data] if isinstance(data, bytes | bytearray | memoryview) else data
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, mode)
    try:
        try:
            with os.fdopen(fd, "wb", closefd=False) as f:
                for chunk in chunks:
                    f.write(chunk)
            if fsync:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            temporary.unlink()
        raise
    if fsync and sync_directory:
        fsync_directory(path.parent)
