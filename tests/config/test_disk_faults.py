"""Disk faults under the real config store: a full disk (injected, and a real size-limited tmpfs), EIO on
write and on fsync, a failed segment creation, a slow fsync.

Faults enter at one seam, the log's ``_io`` (``LogIO``: create, sync_directory, write, sync, truncate);
the writer, its group commit and the store above it are the real ones. What must hold: the change in
flight is refused with a clear error (UNAVAILABLE at the admin door), nothing that is not durable is
acknowledged or visible, the store refuses every later change until reopened, and a reopen once the disk
is back recovers exactly the acknowledged changes and takes new ones; a slow fsync only delays answers.
"""

from __future__ import annotations

import bisect
import contextlib
import errno
import os
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from quotaplane.config import ClientQuotaAlteration, ConfigStore, EventLogFailedError
from quotaplane.config import _log as log_module
from quotaplane.config._log import LogIO
from quotaplane.config._segments import list_segments
from quotaplane.services.admin._servicer import ADMIN_ERRORS

T0 = 1_700_000_000_000


def _quota(user: str, value: float) -> ClientQuotaAlteration:
    return ClientQuotaAlteration({"user": user}, [("producer_byte_rate", value)])


def _quotas(store: ConfigStore) -> dict[str, float]:
    return {e["user"]: q["producer_byte_rate"] for e, q in store.describe_client_quotas([], strict=False)}


def _alter(store: ConfigStore, i: int) -> None:
    [result] = store.alter_client_quotas([_quota(f"user-{i}", float(i + 1))], now_ms=T0 + i, request_id=f"r{i}")
    assert result.ok


class FaultyIO(LogIO):
    """The real calls, with one fault armed at a time: ``fail`` names the call (``write``, ``sync``,
    ``create``, ``sync_directory``) that raises ``error`` from now on; a failing ``write`` first writes
    half of the frame for real, as a disk that fills up mid-write does."""

    def __init__(self) -> None:
        self.fail: str | None = None
        self.error = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self.sync_delay_s = 0.0
        self.syncs_done: list[tuple[float, int]] = []  # (monotonic time, file size) when each sync returned

    def _check(self, call: str) -> None:
        if self.fail == call:
            raise self.error

    def create(self, path: Path) -> int:
        self._check("create")
        return super().create(path)

    def sync_directory(self, directory: Path) -> None:
        self._check("sync_directory")
        super().sync_directory(directory)

    def write(self, fd: int, data: bytes) -> None:
        if self.fail == "write":
            super().write(fd, data[: len(data) // 2])
            raise self.error
        super().write(fd, data)

    def sync(self, fd: int) -> None:
        if self.sync_delay_s:
            time.sleep(self.sync_delay_s)
        self._check("sync")
        super().sync(fd)
        self.syncs_done.append((time.monotonic(), os.fstat(fd).st_size))


@pytest.fixture
def faulty(monkeypatch: pytest.MonkeyPatch) -> FaultyIO:
    io = FaultyIO()
    monkeypatch.setattr(log_module, "_io", io)
    return io


FAULTS = [
    pytest.param("write", errno.ENOSPC, id="disk-full-on-write"),
    pytest.param("write", errno.EIO, id="eio-on-write"),
    pytest.param("sync", errno.EIO, id="eio-on-fsync"),
    pytest.param("sync", errno.ENOSPC, id="disk-full-on-fsync"),
    pytest.param("create", errno.ENOSPC, id="disk-full-creating-a-segment"),
    pytest.param("sync_directory", errno.EIO, id="eio-on-directory-fsync"),
]


@pytest.mark.parametrize(("call", "code"), FAULTS)
def test_a_disk_fault_refuses_the_change_and_every_later_one_and_reopen_recovers_exactly_what_was_acknowledged(
    tmp_path: Path, faulty: FaultyIO, call: str, code: int
) -> None:
    segment_bytes = 1 if call in ("create", "sync_directory") else 16 * 1024 * 1024  # a new segment per frame
    with ConfigStore.open(tmp_path, segment_bytes=segment_bytes) as store:
        for i in range(5):
            _alter(store, i)
        acknowledged = store.image.copy()
        sizes = {path: path.stat().st_size for _, path in list_segments(tmp_path)}

        faulty.error = OSError(code, os.strerror(code))
        faulty.fail = call
        with pytest.raises(EventLogFailedError, match=os.strerror(code)) as refused:
            _alter(store, 5)
        # nothing of it acknowledged or visible, and the bytes written were cut back
        assert store.image == acknowledged and store.end_offset == 5 and "user-5" not in _quotas(store)
        after = {path: path.stat().st_size for _, path in list_segments(tmp_path)}
        # (a segment created before its directory fsync failed stays, empty: recovery accepts an empty last one)
        assert {path: size for path, size in after.items() if path in sizes or size} == sizes
        assert refused.value.__cause__ is not None and refused.value.__cause__.errno == code
        assert store.failure is not None and os.strerror(code) in str(store.failure)

        faulty.fail = None  # the disk is back, but the store stays stopped until it is reopened
        with pytest.raises(EventLogFailedError, match="reopen"):
            _alter(store, 6)
        with pytest.raises(EventLogFailedError):  # validate-only too: its answer would rest on a failed state
            store.alter_client_quotas([_quota("v", 1.0)], validate_only=True, now_ms=T0)
        assert _quotas(store) == {f"user-{i}": float(i + 1) for i in range(5)}  # reads still answer

        status = ADMIN_ERRORS.of(refused.value)  # what an admin client is told
        assert status.code is grpc.StatusCode.UNAVAILABLE and os.strerror(code) in status.details

    with ConfigStore.open(tmp_path, segment_bytes=segment_bytes) as store:
        assert store.image == acknowledged and store.end_offset == 5
        assert [e.request_id for _, e in store.log.read(0)] == [f"r{i}" for i in range(5)]
        _alter(store, 7)
        assert store.end_offset == 6
    with ConfigStore.open(tmp_path, segment_bytes=segment_bytes) as store:
        assert [e.request_id for _, e in store.log.read(0)] == [*(f"r{i}" for i in range(5)), "r7"]


def test_a_failed_fsync_fails_every_change_in_flight_and_acknowledges_none(tmp_path: Path, faulty: FaultyIO) -> None:
    threads = 8
    with ConfigStore.open(tmp_path) as store:
        _alter(store, 0)
        acknowledged = store.image.copy()
        faulty.error = OSError(errno.EIO, os.strerror(errno.EIO))
        faulty.sync_delay_s = 0.05  # so that changes pile up behind the failing round
        faulty.fail = "sync"
        outcomes: list[BaseException | None] = [None] * threads
        barrier = threading.Barrier(threads)

        def worker(t: int) -> None:
            barrier.wait()
            try:
                _alter(store, 100 + t)
            except BaseException as exc:  # the test inspects it
                outcomes[t] = exc

        workers = [threading.Thread(target=worker, args=(t,)) for t in range(threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join(30)
        assert all(isinstance(o, EventLogFailedError) for o in outcomes), outcomes
        assert store.image == acknowledged
    faulty.fail = None
    faulty.sync_delay_s = 0.0
    with ConfigStore.open(tmp_path) as store:
        assert store.image == acknowledged and store.end_offset == 1


def test_a_slow_fsync_delays_answers_but_loses_nothing(tmp_path: Path, faulty: FaultyIO) -> None:
    threads, per_thread, delay = 6, 3, 0.05
    answered: dict[str, float] = {}  # request id -> when its change was acknowledged
    lock = threading.Lock()
    with ConfigStore.open(tmp_path) as store:
        faulty.sync_delay_s = delay
        barrier = threading.Barrier(threads)

        def worker(t: int) -> None:
            barrier.wait()
            for j in range(per_thread):
                i = t * 100 + j
                _alter(store, i)
                with lock:
                    answered[f"r{i}"] = time.monotonic()

        workers = [threading.Thread(target=worker, args=(t,)) for t in range(threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join(60)
        assert len(answered) == threads * per_thread
        assert store.failure is None
        expected = store.image.copy()
    with ConfigStore.open(tmp_path, read_only=True) as store:
        assert store.image == expected
        [segment] = store.log._segments
        frame_end = dict(zip(segment.bases, [*segment.positions[1:], segment.size], strict=True))
        bases = sorted(frame_end)
        for offset, event in store.log.read(0):
            end = frame_end[bases[bisect.bisect_right(bases, offset) - 1]]
            # acknowledged only after an fsync that returned with the change's whole frame in the file
            acked = answered.pop(event.request_id)
            assert any(when <= acked and size >= end for when, size in faulty.syncs_done), event.request_id
    assert not answered  # every acknowledged change is in the log


# --- a real full disk ------------------------------------------------------------------------------------
@contextlib.contextmanager
def _small_tmpfs(path: Path, size: str) -> Iterator[Path]:
    """A size-limited tmpfs at ``path`` (root only): skips the test where mounting is not allowed."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        pytest.skip("mounting a size-limited tmpfs needs root")
    path.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True, text=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def _fill(path: Path) -> None:
    """Write zeros to ``path`` until the file system is full."""
    with open(path, "wb", buffering=0) as f:
        chunk = b"\0" * 4096
        with contextlib.suppress(OSError):
            while True:
                f.write(chunk)
        with contextlib.suppress(OSError):  # the last partial block
            while True:
                f.write(b"\0")


def test_a_real_full_disk_refuses_the_change_and_a_reopen_after_space_returns_recovers_it_all(tmp_path: Path) -> None:
    with _small_tmpfs(tmp_path / "small", "512k") as mount:
        directory = mount / "log"
        filler = mount / "filler"
        acknowledged_ids: list[str] = []
        with ConfigStore.open(directory) as store:
            for i in range(3):
                _alter(store, i)
                acknowledged_ids.append(f"r{i}")
            _fill(filler)
            error: EventLogFailedError | None = None
            for i in range(3, 5000):  # the segment's last page still has room for a few frames
                try:
                    _alter(store, i)
                except EventLogFailedError as exc:
                    error = exc
                    break
                acknowledged_ids.append(f"r{i}")
            assert error is not None, "the disk never filled up"
            assert os.strerror(errno.ENOSPC) in str(error)
            assert ADMIN_ERRORS.of(error).code is grpc.StatusCode.UNAVAILABLE
            acknowledged = store.image.copy()
            assert store.end_offset == len(acknowledged_ids)
            with pytest.raises(EventLogFailedError):
                _alter(store, 9999)
        filler.unlink()  # space returns
        with ConfigStore.open(directory) as store:
            assert store.image == acknowledged
            assert [e.request_id for _, e in store.log.read(0)] == acknowledged_ids
            _alter(store, 10_000)
            assert store.end_offset == len(acknowledged_ids) + 1
        with ConfigStore.open(directory) as store:
            assert [e.request_id for _, e in store.log.read(0)] == [*acknowledged_ids, "r10000"]
