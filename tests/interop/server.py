"""Start the real `fastcoord serve` as a subprocess on a free loopback port, and stop it.

Tests talk to it with real clients. The server prints `listening on HOST:PORT`; the
fixture reads the port from that line, waits (unless told not to) until the server has
loaded its offsets log, and stops the process by PID at the end.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

LOG_LEVEL_ENV = "FASTCOORD_TEST_SERVER_LOG_LEVEL"


@dataclass
class RunningServer:
    process: subprocess.Popen[str]
    port: int
    log_path: Path

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def data_dir(self) -> Path:
        return self.log_path.parent / "data"

    def log(self) -> str:
        return self.log_path.read_text()


def command(tmp_path: Path, *args: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "fastcoord",
        "serve",
        "--port",
        "0",
        "--data-dir",
        str(tmp_path / "data"),
        *args,
    ]


def refused_start(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run `fastcoord serve` where it must refuse to start: its exit code and output."""
    return subprocess.run(command(tmp_path, *args), capture_output=True, text=True, timeout=30)


@contextmanager
def fastcoord_server(
    tmp_path: Path,
    *args: str,
    preexec_fn: Callable[[], None] | None = None,
    wait_loaded: bool = True,
) -> Iterator[RunningServer]:
    log_path = tmp_path / "server.log"
    with open(log_path, "w") as log:
        process = subprocess.Popen(
            command(
                tmp_path,
                *args,
                # FASTCOORD_TEST_SERVER_LOG_LEVEL=DEBUG logs every request, to debug a test.
                *(["--log-level", level] if (level := os.environ.get(LOG_LEVEL_ENV)) else []),
            ),
            stdout=log,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            preexec_fn=preexec_fn,  # e.g. a resource limit that a fault test needs
        )
    try:
        port = int(_wait_for(r"listening on 127\.0\.0\.1:(\d+)", process, log_path))
        if wait_loaded:
            # It answers at once, but COORDINATOR_LOAD_IN_PROGRESS until its log is loaded;
            # clients retry that, most tests would rather not.
            _wait_for(r"loaded (\d+) groups", process, log_path)
        yield RunningServer(process, port, log_path)
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)


def _wait_for(pattern: str, process: subprocess.Popen[str], log_path: Path) -> str:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        match = re.search(pattern, log_path.read_text())
        if match:
            return match.group(1)
        if process.poll() is not None:
            raise RuntimeError(f"fastcoord serve exited early:\n{log_path.read_text()}")
        time.sleep(0.02)
    raise TimeoutError(f"fastcoord serve did not log {pattern!r}:\n{log_path.read_text()}")
