"""One server per data directory, or per partition log: an exclusive flock, held while serving.

A lone server, or a node of a static cluster, locks DATA_DIR/.lock: a second server on the
same directory would write the same logs. Nodes that share a data directory (with
ZooKeeper, partitions move between them) lock each partition's directory instead, for as
long as they own it: the new owner of a partition can take it only once the old one has
written what it had and let go, so two writers never meet in one log.

flock is released by the kernel when the process dies, however it dies, so a SIGKILLed
server never leaves a stale lock behind, and its partitions can be taken at once.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path


class DataDirLocked(Exception):
    pass


class PartitionLocked(Exception):
    """Another process holds the partition's log; the message names it."""


def _lock(path: Path) -> int | str:
    """flock `path` (created, with its directory): the descriptor, or who holds it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "another process"
        os.close(fd)
        return holder
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


class DataDirLock:
    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / ".lock"
        self._fd: int | None = None

    def acquire(self) -> None:
        taken = _lock(self.path)
        if isinstance(taken, str):
            raise DataDirLocked(
                f"{self.path.parent} is in use by another fastcoord server (pid {taken}); "
                "stop it, or choose another --data-dir"
            )
        self._fd = taken

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class PartitionLock(DataDirLock):
    """The lock of one partition's log directory (its .lock file)."""

    def acquire(self) -> None:
        taken = _lock(self.path)
        if isinstance(taken, str):
            raise PartitionLocked(f"{self.path.parent} is held by pid {taken}")
        self._fd = taken
