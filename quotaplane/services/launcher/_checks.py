"""The cheap checks ``up`` makes before Ray starts: flags, ports, the data directory and its lock.

Fail fast, in one line: a bad ``--shards``, a busy port or a data directory in use costs no Ray start-up,
and every failure is a :class:`LaunchError` the operator reads at once.
"""

from __future__ import annotations

import errno
import fcntl
import os
import socket
from collections.abc import Mapping, Sequence
from pathlib import Path

from ._common import LOCK_FILE, LaunchError, host_port

__all__ = [
    "SOCKET_PATH_MAX",
    "check_port",
    "check_port_free",
    "checked_resources",
    "parse_resource_flags",
    "port_is_free",
    "prepare_data_dir",
    "ray_temp_dir_for",
]

#: The longest unix socket path Linux accepts (``sun_path`` is 108 bytes with its NUL).
SOCKET_PATH_MAX = 107
#: What Ray appends to its temp dir for its longest socket: the session directory (date with microseconds
#: and a pid of up to 7 digits), ``sockets/`` and ``plasma_store`` with a possible ``.N`` suffix.
_RAY_SOCKET_SUFFIX = "/session_2000-01-01_00-00-00_000000_4194304/sockets/plasma_store.99"


def ray_temp_dir_for(data_dir: Path) -> Path | None:
    """``DATA_DIR/ray`` when Ray's socket paths under it fit the unix limit, else None."""
    candidate = data_dir.absolute() / "ray"
    if len(os.fsencode(candidate)) + len(_RAY_SOCKET_SUFFIX) > SOCKET_PATH_MAX:
        return None
    return candidate


def parse_resource_flags(flag: str, values: Sequence[str] | None) -> dict[str, float] | None:
    """``NAME[=AMOUNT]`` strings (a repeatable CLI flag; the amount defaults to 1) as a resources mapping,
    None when there are none; bad syntax, a repeated name or a bad amount is a LaunchError naming ``flag``."""
    if not values:
        return None
    resources: dict[str, float] = {}
    for value in values:
        name, sep, amount_text = value.partition("=")
        name = name.strip()
        if not name or (sep and not amount_text.strip()):
            raise LaunchError(f"{flag} must be NAME or NAME=AMOUNT, got {value!r}")
        try:
            amount = float(amount_text) if sep else 1.0
        except ValueError:
            raise LaunchError(f"{flag} {value!r}: the amount must be a number, got {amount_text!r}") from None
        if name in resources:
            raise LaunchError(f"{flag} {name!r} is given twice")
        resources[name] = amount
    return checked_resources(flag, resources)


def checked_resources(what: str, resources: Mapping[str, float] | None) -> dict[str, float] | None:
    """The actors' own check of Ray custom resources, its refusal as a LaunchError."""
    from quotaplane.actors import check_resources  # imports Ray: only when resources are checked

    try:
        return check_resources(resources, what)
    except ValueError as e:
        raise LaunchError(str(e)) from None


def check_port(flag: str, port: int | None, *, optional: bool = False) -> None:
    """LaunchError unless ``port`` is an int in 0..65535 (or, if ``optional``, None: no listener)."""
    if port is None and optional:
        return
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise LaunchError(f"{flag} must be in 0..65535, got {port!r}")


def check_port_free(host: str, port: int, what: str = "the admin service") -> None:
    """Bind the admin address once before anything starts, so a busy port costs no Ray start-up.
    ``SO_REUSEADDR`` as gRPC sets it: a port left in TIME_WAIT by a previous run is free, a listener is not."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as e:
        raise LaunchError(f"cannot resolve --host {host!r}: {e.strerror}") from None
    family, type_, proto, _, sockaddr = infos[0]
    with socket.socket(family, type_, proto) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(sockaddr)
        except OSError as e:
            reason = "the port is in use" if e.errno == errno.EADDRINUSE else e.strerror or str(e)
            raise LaunchError(f"cannot listen on {host_port(host, port)} for {what}: {reason}") from None


def port_is_free(host: str, port: int) -> bool:
    """Whether ``check_port_free`` would pass now."""
    try:
        check_port_free(host, port)
    except LaunchError:
        return False
    return True


def prepare_data_dir(data_dir: Path) -> int:
    """Create DATA_DIR, prove it writable, and take its ``up.lock``; return the lock's descriptor."""
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
        (data_dir / "config").mkdir(exist_ok=True)
        probe = data_dir / f".write-test-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
        fd = os.open(data_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as e:
        raise LaunchError(f"cannot use data dir {data_dir}: {e.strerror or e}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise LaunchError(f"data dir {data_dir} is in use by another quotaplane up") from None
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    return fd
