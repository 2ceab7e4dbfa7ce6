"""What `fastcoord serve` checks before it creates anything, and how a failed start reads.

A start that cannot succeed must say so in one line: the cause and what to do, exit code 2,
no traceback. So what can be checked is checked first, in the order that creates least:
the open-file limit against max.connections, then the data directory (a file? read-only?
a full disk?) without creating it, then the listening socket (a port in use: by whom; a
host that does not resolve or is not this machine's). Only then is the data directory
created, and if the start still fails, what it created is removed again when it is empty.
"""

from __future__ import annotations

import errno
import logging
import os
import resource
import socket
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

import trio

from fastcoord.config import ServerConfig

log = logging.getLogger("fastcoord.server")

# Descriptors the server holds besides connections: each coordinator partition's active
# segment, and a fixed part for the runtime (standard streams, epoll, Trio's wake-up pair,
# listeners, the lock), the cleaner's input and output, the event log's files, directory
# syncs and libraries' own.
FIXED_RESERVE = 64
MIN_FREE_BYTES = 1 << 20  # less than this free and even the first writes would fail


class StartupError(Exception):
    """A start that cannot succeed; the message is one line: the cause, what to do."""


# -- the open-file limit ----------------------------------------------------------------


class FileLimit(NamedTuple):
    limit: int  # the soft limit now in force
    raised_from: int  # the soft limit found at start
    reserve: int  # kept for the logs
    max_connections: int

    def describe(self) -> str:
        raised = f", raised from {self.raised_from}" if self.raised_from != self.limit else ""
        return f"open-file limit {self.limit}{raised}, less {self.reserve} kept for the logs"


def raise_file_limit() -> tuple[int, int, int]:
    """Raise the soft open-file limit to the hard one (or, with no hard limit, to the
    kernel's per-process maximum); (the limit now, the soft limit before, the hard one)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard
    if hard == resource.RLIM_INFINITY:
        try:
            target = int(Path("/proc/sys/fs/nr_open").read_text())
        except (OSError, ValueError):
            target = 1 << 20
    limit = soft
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            limit = target
        except (ValueError, OSError):
            pass
    return limit, soft, hard


def file_limit(config: ServerConfig) -> FileLimit:
    """Raise the soft open-file limit to the hard one; size max.connections by it."""
    limit, soft, hard = raise_file_limit()
    # A segment open for each partition this node owns (every one, for a lone server).
    reserve = FIXED_RESERVE + len(config.cluster_for(config.port).owned)
    allows = limit - reserve
    if config.max_connections == "auto":
        if allows < 1:
            raise StartupError(
                f"the open-file limit ({limit}) leaves no room for connections after the "
                f"{reserve} files kept for the logs; raise it (ulimit -n) or lower "
                "offsets.topic.num.partitions"
            )
        return FileLimit(limit, soft, reserve, allows)
    if config.max_connections > allows:
        raise StartupError(
            f"max.connections {config.max_connections} is more than the open-file limit "
            f"allows: {limit} files (hard limit {hard}) less {reserve} kept for the logs "
            f"leaves {max(allows, 0)}; lower max.connections (or leave it auto), or raise "
            "the hard limit (ulimit -Hn)"
        )
    return FileLimit(limit, soft, reserve, config.max_connections)


# -- the data directory -----------------------------------------------------------------


def check_data_dir(path: Path) -> None:
    """Refuse a data directory that cannot work, without creating anything."""
    hint = "choose another --data-dir, or --in-memory to keep nothing"
    if path.exists() and not path.is_dir():
        raise StartupError(f"data.dir {path} is a file, not a directory; {hint}")
    existing = path
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise StartupError(f"data.dir {path} cannot be created: {existing} is a file; {hint}")
    where = path if existing == path else existing
    try:
        stat = os.statvfs(existing)
    except OSError as exc:
        raise StartupError(f"data.dir {path}: {exc.strerror}; {hint}") from None
    if stat.f_flag & os.ST_RDONLY:
        raise StartupError(f"data.dir {path} is on a read-only file system ({where}); {hint}")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise StartupError(f"data.dir {path} is not writable by this user ({where}); {hint}")
    free = stat.f_bavail * stat.f_frsize
    if free < MIN_FREE_BYTES:
        raise StartupError(
            f"the disk of data.dir {path} is full ({free} bytes free); free some space, or {hint}"
        )


def create_data_dir(path: Path) -> list[Path]:
    """Create the data directory; return the directories created (deepest last)."""
    created = []
    missing = path
    while not missing.exists():
        created.append(missing)
        missing = missing.parent
    created.reverse()
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        remove_if_empty(created)
        raise StartupError(f"cannot create data.dir {path}: {exc.strerror}") from None
    return created


def remove_if_empty(created: Sequence[Path], lock_name: str = ".lock") -> None:
    """Undo `create_data_dir` after a failed start: remove what holds nothing but our own
    lock file and empty directories of ours."""
    for directory in reversed(created):
        try:
            entries = list(directory.iterdir())
            for entry in entries:
                if entry.name == lock_name and entry.is_file():
                    entry.unlink()
                elif entry.is_dir() and not any(entry.iterdir()):
                    entry.rmdir()
            directory.rmdir()
        except OSError:
            return  # something else is there: leave it, and its parents


# -- the listener -----------------------------------------------------------------------


async def open_listeners(
    host: str, port: int, host_flag: str = "--host", port_flag: str = "--port"
) -> list[trio.SocketListener]:
    """Listen on host:port, or say in one line why not (naming the flags to change)."""
    try:
        await trio.socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise StartupError(
            f"host {host!r} does not resolve ({exc.strerror}); give {host_flag} a name or "
            "address of this machine (127.0.0.1 for loopback)"
        ) from None
    try:
        return await trio.open_tcp_listeners(port, host=host)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            holder = port_holder(port)
            by = f" by {holder}" if holder else ""
            raise StartupError(
                f"port {port} on {host} is in use{by}; stop it, or choose another {port_flag} "
                "(0 picks a free one)"
            ) from None
        if exc.errno == errno.EADDRNOTAVAIL:
            raise StartupError(
                f"host {host!r} is not an address of this machine; give {host_flag} one that is "
                "(127.0.0.1 for loopback)"
            ) from None
        if exc.errno == errno.EACCES:
            raise StartupError(
                f"port {port} needs privileges this user lacks; choose {port_flag} 1024 or above"
            ) from None
        raise StartupError(f"cannot listen on {host}:{port}: {exc.strerror}") from None


def port_holder(port: int) -> str | None:
    """Which process listens on `port`, as /proc tells (None when it does not)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            listening = fields[3] == "0A"
            if listening and int(fields[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(f"socket:[{fields[9]}]")
    if not inodes:
        return None
    for process in Path("/proc").iterdir():
        if not process.name.isdigit():
            continue
        try:
            for fd in (process / "fd").iterdir():
                if os.readlink(fd) in inodes:
                    command = (process / "cmdline").read_bytes().replace(b"\0", b" ")
                    text = command.decode(errors="replace").strip()
                    return f"pid {process.name} ({text[:100]})"
        except OSError:
            continue  # gone, or not ours to look at
    return None
