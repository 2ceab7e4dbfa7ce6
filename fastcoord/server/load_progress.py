"""The progress line of a large start-up load (rich), on standard error.

Loading a big offsets log takes seconds, during which clients are answered
COORDINATOR_LOAD_IN_PROGRESS; an operator watching the terminal should see that it moves.
Work is counted in bytes of the log: the first half of a partition's bytes when it has
been read and checked (in the worker thread), the second half as its records are replayed
into the core. Small logs, which load in a
blink, get no line. Off a terminal rich prints the final line once, so a log file gets a
one-line summary.

While the line is drawn, log records go through rich's redirected standard error, so that
they print above the line instead of through it.
"""

from __future__ import annotations

import logging
import sys
from types import TracebackType
from typing import Any, TextIO

from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TaskID,
    TaskProgressColumn,
    TextColumn,
    TimeElapsedColumn,
)

# Below this a load takes well under a second: no progress line.
MIN_BYTES = 16 << 20


class LoadProgress:
    def __init__(self, log_bytes: int, partitions: int) -> None:
        self.partitions = partitions
        self._progress: Progress | None = None
        self._task: TaskID | None = None
        self._total = log_bytes
        self._handlers: list[tuple[logging.StreamHandler[Any], Any]] = []
        if log_bytes >= MIN_BYTES:
            self._progress = Progress(
                TextColumn("loading the offsets log: {task.fields[done]}/{task.fields[of]}"),
                TextColumn("partitions"),
                BarColumn(),
                TaskProgressColumn(),
                DownloadColumn(),
                TimeElapsedColumn(),
                console=Console(stderr=True),
                redirect_stderr=True,
            )

    def __enter__(self) -> LoadProgress:
        if self._progress is not None:
            self._progress.start()
            self._task = self._progress.add_task(
                "load", total=self._total, done=0, of=self.partitions
            )
            self._follow_stderr(sys.stderr)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._progress is not None:
            self._progress.stop()
            for handler, stream in self._handlers:
                handler.setStream(stream)

    def advance(self, log_bytes: float) -> None:
        """`log_bytes` more of the log's work done (counting each byte twice: read, replayed)."""
        if self._progress is not None and self._task is not None:
            self._progress.advance(self._task, log_bytes / 2)

    def partition_done(self, done: int) -> None:
        if self._progress is not None and self._task is not None:
            self._progress.update(self._task, done=done)

    def _follow_stderr(self, proxy: TextIO) -> None:
        # logging's handlers hold the real stderr; point them at rich's proxy meanwhile.
        for handler in logging.getLogger().handlers:
            if isinstance(handler, logging.StreamHandler) and handler.stream is sys.__stderr__:
                self._handlers.append((handler, handler.stream))
                handler.setStream(proxy)
