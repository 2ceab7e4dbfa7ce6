"""What the client test peers share: a consumer group member run by another Kafka client, as
a subprocess of its own driven through lines on its stdin and followed through the events it
writes, one a line, to its stdout.

fastcoord.testing_java (Kafka's KafkaConsumer in a JVM) and fastcoord.testing_kafkajs
(kafkajs in `node`) differ in how their client is found, compiled or installed, in the
command line that runs it and in the vocabulary of its commands and events. What a test does
with a member does not differ: start it with its log in a directory, wait for what its
events say with a deadline, ask it something and wait for the answer, close it (killing it
if it does not exit in time), kill it outright, and never leave it running after the tests.
That lives here once, so that a fix to how a member is waited for, closed or cleaned up is a
fix for every client.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Generic, Self, TypeVar

ANSWER_TIMEOUT_S = 30.0
CLOSE_TIMEOUT_S = 30.0

EventT = TypeVar("EventT")
MemberT = TypeVar("MemberT", bound="PeerMember[Any]")


def cache_root(env: str, client: str) -> Path:
    """Where `client`'s built or installed pieces are kept across runs: `env` if set, else
    ~/.cache/fastcoord/CLIENT (under XDG_CACHE_HOME if that is set)."""
    if env in os.environ:
        return Path(os.environ[env])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "fastcoord" / client


def build_once(target: Path, ready: Callable[[Path], bool], build: Callable[[Path], None]) -> Path:
    """`target`, made by `build` into a directory beside it and renamed into place unless
    it is `ready` already. Concurrent test runs may both build; the first one's rename
    wins, and a half-made `target` (a run killed while renaming) is replaced."""
    if ready(target):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    building = Path(tempfile.mkdtemp(prefix="building-", dir=target.parent))
    try:
        build(building)
        # Only one that is not ready: another run's finished one may be in use already.
        if target.exists() and not ready(target):
            shutil.rmtree(target, ignore_errors=True)
        try:
            building.rename(target)
        except OSError:
            if not ready(target):
                raise
    finally:
        shutil.rmtree(building, ignore_errors=True)
    return target


class PeerMember(ABC, Generic[EventT]):
    """One member process: its events as they come (`events`, as `_parse` reads each line),
    the partitions it holds (`assignment`, kept by `_note`), and the commands that every
    client's member takes: wait, close, kill."""

    def __init__(
        self,
        name: str,
        process: subprocess.Popen[str],
        log_path: Path,
        temporary: Path | None = None,
    ) -> None:
        self.name = name
        self.process = process
        self.log_path = log_path  # its stderr: the client's log lines
        self.temporary = temporary  # a directory made for it, removed once it has exited
        self.events: list[EventT] = []
        self._assignment: frozenset[tuple[str, int]] = frozenset()
        self._changed = threading.Condition()
        self._prepare()
        self._reader = threading.Thread(target=self._read, name=f"{name}-stdout", daemon=True)
        self._reader.start()

    def _prepare(self) -> None:
        """Set up what `_note` keeps besides the assignment: the reader, which calls `_note`
        from its first event on, starts right after."""

    @abstractmethod
    def _parse(self, line: str) -> EventT:
        """The event that one stdout line (without its newline) stands for."""

    def _note(self, event: EventT) -> None:
        """Keep what `event` says of the member (its assignment, ...): called with the lock
        held, so that a waiter sees the event and what it changed together."""

    @abstractmethod
    def _send_close(self) -> None:
        """Ask the client to close its consumer, which leaves the group, and then exit."""

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exception: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def assignment(self) -> frozenset[tuple[str, int]]:
        """(topic, partition) pairs, as the member's events last left them."""
        return self._assignment

    def partitions(self, topic: str) -> frozenset[int]:
        return frozenset(p for t, p in self._assignment if t == topic)

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def _read(self) -> None:
        assert self.process.stdout is not None
        for raw in self.process.stdout:
            event = self._parse(raw.rstrip("\n"))
            with self._changed:
                self._note(event)
                self.events.append(event)
                self._changed.notify_all()
        # The end of stdout: a waiter learns that no event will come any more.
        with self._changed:
            self._changed.notify_all()

    def wait_for(self, condition: Callable[[], object], timeout: float = ANSWER_TIMEOUT_S) -> None:
        """Wait until `condition()` is true, checked at each event; raise with the member's
        events and log if it is not within `timeout`, or if the member exited."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while not condition():
                left = deadline - time.monotonic()
                if left <= 0 or (self.process.poll() is not None and not self._reader.is_alive()):
                    raise AssertionError(
                        f"{self.name}: {'timed out' if left <= 0 else 'exited'} waiting "
                        f"(exit code {self.process.poll()}); events {self.events}; "
                        f"log:\n{self.log()}"
                    )
                # Not only at events: a member that exits without a last line wakes no one.
                self._changed.wait(min(left, 0.5))

    def _await(self, matches: Callable[[EventT], bool], since: int = 0) -> EventT:
        """The first event from `events[since]` on that `matches`, once there is one."""
        found: list[EventT] = []

        def arrived() -> bool:
            for event in self.events[since:]:
                if matches(event):
                    found.append(event)
                    return True
            return False

        self.wait_for(arrived)
        return found[0]

    def _write(self, line: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(line + "\n")
        self.process.stdin.flush()

    def close(self, timeout: float = CLOSE_TIMEOUT_S) -> int:
        """Close its consumer (it leaves its group) and wait for the process to exit: its
        exit code, 0 when all went well. Killed if it does not exit within `timeout`."""
        if self.process.poll() is None:
            with contextlib.suppress(BrokenPipeError):  # it exited already
                self._send_close()
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
                raise AssertionError(
                    f"{self.name} did not exit in {timeout} s:\n{self.log()}"
                ) from None
        self._finish()
        return self.process.returncode

    def kill(self) -> None:
        """SIGKILL by PID: the member vanishes without leaving, as a crashed one does."""
        if self.process.poll() is None:
            os.kill(self.pid, signal.SIGKILL)
            self.process.wait(CLOSE_TIMEOUT_S)
        self._finish()

    def stop(self) -> None:
        """Close it if it still runs, killing it if it does not exit in time."""
        with contextlib.suppress(AssertionError):
            self.close()

    def _finish(self) -> None:
        RUNNING.pop(self.pid, None)
        self._reader.join(CLOSE_TIMEOUT_S)
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None:
                with contextlib.suppress(BrokenPipeError):
                    stream.close()
        if self.temporary is not None:
            shutil.rmtree(self.temporary, ignore_errors=True)
            self.temporary = None


# Members of every client still running, by PID: a test that failed before stopping its
# members must not leave them in their groups, or running, after pytest has gone.
RUNNING: dict[int, PeerMember[Any]] = {}


def _kill_all() -> None:
    for member in list(RUNNING.values()):
        member.kill()


atexit.register(_kill_all)


def spawn(
    member_type: type[MemberT],
    name: str,
    command: Sequence[str],
    directory: Path | None,
    *,
    client: str,
    env: Mapping[str, str] | None = None,
) -> MemberT:
    """Run `command` as the member `name`, in `directory` (a temporary fastcoord-CLIENT-*
    one if None, removed once it has exited), its stderr to `directory / NAME.log`."""
    temporary = None
    if directory is None:
        directory = temporary = Path(tempfile.mkdtemp(prefix=f"fastcoord-{client}-"))
    log_path = directory / f"{name}.log"
    try:
        with open(log_path, "wb") as log:
            process = subprocess.Popen(
                command,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
                bufsize=1,
                cwd=directory,
                env=None if env is None else dict(env),
            )
    except BaseException:
        # No member will exist to remove it once it has exited.
        if temporary is not None:
            shutil.rmtree(temporary, ignore_errors=True)
        raise
    member = member_type(name, process, log_path, temporary)
    RUNNING[member.pid] = member
    return member
