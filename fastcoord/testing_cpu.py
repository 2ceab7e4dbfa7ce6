"""CPU and memory accounting for benchmarks of test servers (fastcoord.testing): which cores
the client and the server get, the CPU time a process or thread used and waited for, and a
process's resident memory.

A rate measured on a shared host says little alone; the server's CPU time per request
and the time its process waited for a core (the host's contention) say why it moved.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager


def rss_bytes(pid: int) -> int:
    """A process's resident memory (VmRSS), in bytes; Linux only."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


def user_system_seconds(pid: int) -> tuple[float, float]:
    """(user, system) CPU time of a process, its threads included, from /proc/PID/stat (in
    clock ticks, 10 ms here: read it over seconds). The system part is the kernel's work on
    the process's behalf: for a server on loopback, its reads and writes, and the TCP of the
    other end that a write runs."""
    with open(f"/proc/{pid}/stat") as f:
        # The command name may hold spaces and parentheses: the fields follow its last ")".
        fields = f.read().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def cores() -> tuple[int | None, int | None]:
    """(client core, server core) on a machine with two or more usable cores, else None."""
    usable = sorted(os.sched_getaffinity(0))
    if len(usable) < 2:
        return None, None
    return usable[0], usable[1]


@contextmanager
def pinned(core: int | None) -> Iterator[None]:
    """Pin the calling thread (the client) to `core`, and restore its affinity after."""
    if core is None:
        yield
        return
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {core})
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


def sched_seconds(pid: int, tid: int | None = None) -> tuple[float, float] | None:
    """(time on a CPU, time runnable but waiting for one) of a process's live threads, or
    of one thread, from /proc's schedstat (nanoseconds); None off Linux.

    The wait is the host's contention: time the process was ready to run while something
    else had its core.
    """
    try:
        tids = [str(tid)] if tid is not None else os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    run = wait = 0
    for t in tids:
        try:
            with open(f"/proc/{pid}/task/{t}/schedstat") as f:
                fields = f.read().split()
            run += int(fields[0])
            wait += int(fields[1])
        except (OSError, ValueError, IndexError):
            continue  # the thread ended meanwhile
    return run / 1e9, wait / 1e9
