"""Test servers on loopback, each a subprocess started on a free port and stopped by PID:
`fastcoord serve`, the librdkafka mock cluster, and a reference responder.

Interop tests, benchmarks and the test suites of fastcoord's users all need a real server
they can start, read the log of and stop; one launcher serves them all. In a pytest suite
of your own, load this module as a plugin and ask for the fixture:

    # conftest.py
    pytest_plugins = ["fastcoord.testing"]

    # test_orders.py
    def test_orders_are_consumed(fastcoord_serve):
        consumer = KafkaConsumer("orders", bootstrap_servers=fastcoord_serve.bootstrap, ...)

or start one with settings of your own (later flags win):

    with fastcoord_server(tmp_path, "--topic", "orders:3") as server:
        ...

A fastcoord server is held to its log: stop() raises ServerFailed, failing the test that
used it, when the server exited other than cleanly or logged a traceback, an ERROR line, or
a compiled path given up for a slower one, unless the test declared that line expected:

    with fastcoord_server(tmp_path, expect=[r"cannot compact .*: disk full"]) as server:
        ...
    server.expect(r"closing connection from .*")  # or on the running server

The mock cluster and the responder are peers for benchmarks; their hosts run as
`python -m fastcoord.testing mock` and `python -m fastcoord.testing responder`, each
printing `listening on HOST:PORT` as fastcoord does and serving until SIGTERM (or until
their parent dies). CPU accounting of these processes is in fastcoord.testing_cpu.

`fastcoord loadtest --master` runs its workers on any Spark; spark_standalone() starts a
real standalone cluster on loopback for it, a master and its workers, the daemons of the
installed pyspark:

    with spark_standalone(tmp_path / "spark", workers=2, cores=2) as cluster:
        ... "--master", cluster.master_url, "--workers", "4" ...
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

import fastcoord
from fastcoord.client.blocking import Connection
from fastcoord.cluster.supervisor import free_ports
from fastcoord.pipeline.java import java_home

LOG_LEVEL_ENV = "FASTCOORD_TEST_SERVER_LOG_LEVEL"  # e.g. DEBUG: every request, to debug a test
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0
LISTENING = r"listening on ([\d.]+):(\d+)"
ADMIN = r"admin on ([\d.]+):(\d+)"
LISTENER = r"listener {name} \((\w+)\) on ([\d.]+):(\d+)"
LOADED = r"loaded \d+ groups"
# What a healthy fastcoord never logs: a traceback, an ERROR or CRITICAL record (whatever
# prefix a cluster's supervisor puts before its nodes' lines), or a compiled path given up
# for a slower one (such lines say what falls back to what).
FAILURE_LINES = (
    r"Traceback \(most recent call last\)",
    r"\b(?:ERROR|CRITICAL) [\w.]+: ",
    r"\bfalls? back to\b",
)
NODE_PREFIX = re.compile(r"^node \d+ \| ")  # fastcoord cluster's, before each node's lines
CHAINED = ("During handling of the above exception", "The above exception was the direct")
HOST_MODULE = "fastcoord.testing"  # run with -m, it hosts a peer (main)

PreExec = Callable[[], None]


class ServerFailed(AssertionError):
    """A fastcoord server exited other than cleanly, or logged what a healthy one never
    does (FAILURE_LINES) and the test had not declared it expected."""


@dataclass(eq=False)
class ServerProcess:
    """A server subprocess on loopback, where it said it listens; stop() ends it by PID."""

    name: str
    process: subprocess.Popen[bytes]
    host: str
    port: int
    log_path: Path  # its stdout and stderr
    data_dir: Path | None = None
    temporary: Path | None = None  # a directory made for it, removed by stop()
    admin_address: str | None = None  # where its admin port is, when not in its output
    # Leads a process group of its own, signalled whole: the children it starts (a Spark
    # worker's executors, their Python workers) end with it rather than outlive it.
    group: bool = False
    # Held to its log and exit status by stop() (fastcoord's own servers; peers are not).
    checked: bool = False
    expected: list[str] = field(default_factory=list)  # patterns of lines it may log
    killed: bool = False  # by kill(): its SIGKILL exit is the test's doing

    def expect(self, *patterns: str) -> None:
        """Declare lines (regular expressions, searched in each line) that this server may
        log without failing the test: the errors a test provokes on purpose."""
        self.expected.extend(patterns)

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def bootstrap(self) -> str:
        """HOST:PORT, as bootstrap.servers wants it."""
        return f"{self.host}:{self.port}"

    @property
    def admin(self) -> str:
        """HOST:PORT of its admin port (started with --admin-port), from its output."""
        if self.admin_address is not None:
            return self.admin_address
        match = re.search(ADMIN, self.log())
        if match is None:
            raise RuntimeError(f"{self.name} has no admin port: start it with --admin-port 0")
        return f"{match.group(1)}:{match.group(2)}"

    def listener(self, name: str) -> str:
        """HOST:PORT of its listener `name` (started with --listener NAME://...)."""
        match = re.search(LISTENER.format(name=re.escape(name.upper())), self.log())
        if match is None:
            raise RuntimeError(f"{self.name} has no listener {name}:\n{self.log()}")
        return f"{match.group(2)}:{match.group(3)}"

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def connect(self, timeout: float | None = 15.0) -> Connection:
        """A blocking Kafka connection to it (fastcoord.client.blocking)."""
        return Connection(self.host, self.port, timeout)

    def terminate(self) -> None:
        """Ask it to stop (SIGTERM to its PID, or its group) without waiting: stop() waits."""
        if self.process.poll() is None:
            self._signal(signal.SIGTERM)

    def kill(self) -> None:
        """SIGKILL it (a crash the test plays) and wait until it is gone; stop() then takes
        the SIGKILL exit as the test's doing."""
        self.killed = True
        if self.process.poll() is None:
            self._signal(signal.SIGKILL)
        self.process.wait(timeout=STOP_TIMEOUT_S)

    def stop(self, timeout: float = STOP_TIMEOUT_S, *, check: bool = True) -> None:
        """SIGTERM, wait up to `timeout` for it to exit, else SIGKILL; then remove the
        directory made for it, if any. A group leader's group gets the signals, and a
        SIGKILL once it has exited: what it started and left behind goes too.

        Then, if it is `checked` and `check` is true, raise ServerFailed when it exited
        other than with 0 (or by kill()), needed the SIGKILL, or logged a line of
        FAILURE_LINES that no pattern of `expected` matches."""
        _running.pop(self.pid, None)
        hung = False
        log = ""
        try:
            if self.process.poll() is None:
                self.terminate()
                try:
                    self.process.wait(timeout=timeout)
                except subprocess.TimeoutExpired:
                    hung = True
                    self._signal(signal.SIGKILL)
                    self.process.wait(timeout=timeout)
            if self.group:
                # Its PID stays its group's ID while any member lives, so this reaches
                # only what it started.
                with suppress(ProcessLookupError):
                    os.killpg(self.pid, signal.SIGKILL)
            log = self.log()  # before the directory goes
        finally:
            if self.temporary is not None:
                shutil.rmtree(self.temporary, ignore_errors=True)
                self.temporary = None
        if self.checked and check:
            problems = self.problems(log, hung)
            if problems:
                raise ServerFailed(f"{self.name} (pid {self.pid}): " + "\n".join(problems))

    def problems(self, log: str | None = None, hung: bool = False) -> list[str]:
        """What stop() fails it for: its exit, and the unexpected lines of its log."""
        found = []
        code = self.process.returncode
        if hung:
            found.append(f"did not exit within {STOP_TIMEOUT_S:.0f} s of SIGTERM")
        elif code is not None and code != 0 and not (self.killed and code == -signal.SIGKILL):
            found.append(f"exited with {_exit_status(code)}")
        lines = unexpected_lines(self.log() if log is None else log, self.expected)
        if lines:
            found.append("logged what a healthy server never logs:\n  " + "\n  ".join(lines))
        return found

    def _signal(self, signum: int) -> None:
        if self.group:
            os.killpg(self.pid, signum)
        else:
            os.kill(self.pid, signum)


_running: dict[int, ServerProcess] = {}  # stopped at exit, if a caller left any behind


def _stop_all() -> None:
    for server in list(_running.values()):
        server.stop(check=False)  # at exit no test is left to fail


def _exit_status(code: int) -> str:
    if code < 0:
        with suppress(ValueError):
            return f"signal {signal.Signals(-code).name}"
    return f"exit code {code}"


def unexpected_lines(log: str, expected: Sequence[str] = ()) -> list[str]:
    """The lines of `log` that match a FAILURE_LINES pattern and no `expected` one. A
    traceback comes whole (up to its exception's line), so the failure says what it was,
    and is expected with the record it follows (log.exception's line) or by a line of its
    own. A cluster's `node N | ` prefixes are looked through."""
    failure = re.compile("|".join(FAILURE_LINES))
    allowed = [re.compile(p) for p in expected]
    lines = log.splitlines()
    bodies = [NODE_PREFIX.sub("", line, count=1) for line in lines]
    found: list[str] = []
    owner_expected = False  # the record a following traceback belongs to was expected
    i = 0
    while i < len(lines):
        body = bodies[i]
        if body.startswith("Traceback (most recent call last)"):
            end = i + 1  # the frames are indented; the exception's line is not
            while end < len(lines) and bodies[end].startswith((" ", "\t")):
                end += 1
            block = lines[i : end + 1]
            if not owner_expected and not any(p.search(t) for p in allowed for t in block):
                found.extend(block)
            i = end + 1
            continue
        if failure.search(body):
            owner_expected = any(p.search(body) for p in allowed)
            if not owner_expected:
                found.append(lines[i])
        elif body.strip() and not body.startswith(CHAINED):
            owner_expected = False
        i += 1
    return found


def wait_for(
    what: str, check: Callable[[], object], timeout_s: float = 20, every_s: float = 0.05
) -> float:
    """Seconds it took `check` to hold (polled every `every_s`); AssertionError naming
    `what` past `timeout_s`."""
    started = time.monotonic()
    while not check():
        if time.monotonic() - started > timeout_s:
            raise AssertionError(f"{what}: not within {timeout_s} s")
        time.sleep(every_s)
    return time.monotonic() - started


def running() -> list[ServerProcess]:
    """The servers started here and not stopped yet."""
    return list(_running.values())


def child_env(root_dir: Path | None = None) -> dict[str, str]:
    """The environment of a child that must run the caller's fastcoord (or the one in
    `root_dir`, a tree with fastcoord/ in it): that directory first on PYTHONPATH (the
    child's working directory is not the caller's, and an installed fastcoord may be
    another), and unbuffered output, so that its lines reach the log as it prints them.
    Python's fault handler is on: a child that hangs is sent SIGABRT (_wait_for), and its
    log then says where each of its threads was."""
    root = str(root_dir or Path(fastcoord.__file__).absolute().parent.parent)
    rest = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p != root]
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([root, *rest]),
        "PYTHONUNBUFFERED": "1",
        "PYTHONFAULTHANDLER": "1",
    }


def start(
    name: str,
    argv: Sequence[str],
    directory: Path | None = None,
    *,
    remove: bool = False,
    ready: Sequence[str] = (),
    core: int | None = None,
    preexec_fn: PreExec | None = None,
    data_dir: Path | None = None,
    root: Path | None = None,
    checked: bool = False,
    expect: Sequence[str] = (),
) -> ServerProcess:
    """Run `argv` in `directory` (a temporary one if None), its output in `server.log`
    there, pinned to `core` if given, with the fastcoord of `root` (child_env); wait until
    it prints `listening on HOST:PORT` and then matches every pattern of `ready`. Raises
    with its output if it exits first or takes over START_TIMEOUT_S. stop() removes the
    directory if this made it, or if `remove`; `checked`: stop() holds it to its log,
    bar the lines of `expect` (ServerProcess.stop)."""
    if directory is None:
        directory, remove = Path(tempfile.mkdtemp(prefix=f"fastcoord-{name.split()[0]}-")), True
    temporary = directory if remove else None
    argv = list(argv)
    taskset = shutil.which("taskset") if core is not None else None
    if taskset:
        argv = [taskset, "-c", str(core), *argv]  # taskset execs argv: the same PID
    log_path = directory / "server.log"
    try:
        with open(log_path, "wb") as out:
            process = subprocess.Popen(
                argv,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=directory,
                env=child_env(root),
                preexec_fn=preexec_fn,  # e.g. a resource limit that a fault test needs
            )
    except BaseException:
        if temporary is not None:
            shutil.rmtree(temporary, ignore_errors=True)
        raise
    server = ServerProcess(
        name, process, "127.0.0.1", 0, log_path, data_dir, temporary, checked=checked
    )
    server.expect(*expect)
    _running[server.pid] = server
    try:
        if core is not None and not taskset:
            os.sched_setaffinity(server.pid, {core})
        deadline = time.monotonic() + START_TIMEOUT_S
        host, port = _wait_for(server, LISTENING, deadline).groups()
        server.host, server.port = host, int(port)
        for pattern in ready:
            _wait_for(server, pattern, deadline)
    except BaseException:
        server.stop(check=False)  # the start's own failure says more
        raise
    return server


def stop_each(servers: Sequence[ServerProcess]) -> None:
    """Stop every one of `servers`, then raise one ServerFailed for all that failed."""
    failures = []
    for server in servers:
        try:
            server.stop()
        except ServerFailed as exc:
            failures.append(str(exc))
    if failures:
        raise ServerFailed("\n".join(failures))


def _wait_for(server: ServerProcess, pattern: str, deadline: float) -> re.Match[str]:
    while True:
        match = re.search(pattern, server.log())
        if match:
            return match
        if server.process.poll() is not None:
            raise RuntimeError(
                f"{server.name} exited early ({server.process.returncode}):\n{server.log()}"
            )
        if time.monotonic() > deadline:
            # Its fault handler writes each thread's stack to the log: where it hangs.
            server.process.send_signal(signal.SIGABRT)
            with suppress(subprocess.TimeoutExpired):
                server.process.wait(timeout=5)
            raise TimeoutError(f"{server.name} did not log {pattern!r}:\n{server.log()}")
        time.sleep(0.02)


@contextmanager
def stopping(server: ServerProcess) -> Iterator[ServerProcess]:
    """`server`, stopped when the block ends."""
    try:
        yield server
    finally:
        server.stop()


# -- certificates ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Certificates:
    """PEM files of a test CA, a server certificate for 127.0.0.1 and localhost (so that
    clients keep hostname verification on), and client certificates from the same CA."""

    directory: Path
    ca: Path  # the CA's certificate: every client's ssl.ca.location
    server: Path  # the server's chain and key in one file: ssl.keystore.location
    clients: dict[str, tuple[Path, Path]]  # name -> (certificate chain, key), for mutual TLS

    def server_args(self) -> list[str]:
        """`fastcoord serve` flags that serve this certificate and trust this CA."""
        return [
            "--ssl-keystore-location",
            str(self.server),
            "--ssl-truststore-location",
            str(self.ca),
        ]


def certificates(directory: Path, clients: Sequence[str] = ("client",)) -> Certificates:
    """A CA and its certificates in `directory` (made with trustme, a test dependency).
    A client certificate's subject is CN=<name>,O=fastcoord tests."""
    import trustme

    directory.mkdir(parents=True, exist_ok=True)
    ca = trustme.CA(organization_name="fastcoord tests")
    ca.cert_pem.write_to_path(str(directory / "ca.pem"))
    server = ca.issue_cert("127.0.0.1", "localhost")
    server.private_key_and_cert_chain_pem.write_to_path(str(directory / "server.pem"))
    issued = {}
    for name in clients:
        cert = ca.issue_cert(
            f"{name}.clients.invalid", common_name=name, organization_name="fastcoord tests"
        )
        chain, key = directory / f"{name}.pem", directory / f"{name}.key"
        chain.write_bytes(b"".join(blob.bytes() for blob in cert.cert_chain_pems))
        cert.private_key_pem.write_to_path(str(key))
        issued[name] = (chain, key)
    return Certificates(directory, directory / "ca.pem", directory / "server.pem", issued)


# -- fastcoord serve ----------------------------------------------------------------------


def serve_command(directory: Path, *args: str) -> list[str]:
    """`fastcoord serve` on 127.0.0.1, port 0, its data in `directory / "data"`; `args`
    come after these, and win."""
    return [
        sys.executable,
        "-m",
        "fastcoord",
        "serve",
        "--host",
        "127.0.0.1",
        "--port",
        "0",
        "--data-dir",
        str(directory / "data"),
        *args,
    ]


def start_fastcoord(
    directory: Path | None = None,
    *args: str,
    extra_args: Sequence[str] = (),
    wait_loaded: bool = True,
    preexec_fn: PreExec | None = None,
    core: int | None = None,
    name: str = "fastcoord serve",
    root: Path | None = None,
    expect: Sequence[str] = (),
    ready: Sequence[str] = (),
) -> ServerProcess:
    """Start `fastcoord serve` (serve_command: `args`, then `extra_args`, win over its
    defaults) with its log in `directory / "server.log"`; directory None: a temporary one.
    `root`: a tree whose fastcoord to run instead of the caller's (child_env). stop()
    fails on what a healthy server never logs, bar the patterns of `expect`.

    It answers as soon as it listens, but COORDINATOR_LOAD_IN_PROGRESS until it has loaded
    its offsets log; clients retry that, most tests would rather not, so this waits for
    the `loaded N groups` line too unless `wait_loaded` is False.
    """
    made = directory is None
    if directory is None:
        directory = Path(tempfile.mkdtemp(prefix="fastcoord-serve-"))
    level = os.environ.get(LOG_LEVEL_ENV)
    argv = serve_command(directory, *args, *extra_args, *(["--log-level", level] if level else []))
    return start(
        name,
        argv,
        directory,
        remove=made,
        ready=([LOADED] if wait_loaded else []) + list(ready),
        core=core,
        preexec_fn=preexec_fn,
        data_dir=directory / "data",
        root=root,
        checked=True,
        expect=expect,
    )


@contextmanager
def fastcoord_server(
    directory: Path | None = None,
    *args: str,
    extra_args: Sequence[str] = (),
    wait_loaded: bool = True,
    preexec_fn: PreExec | None = None,
    core: int | None = None,
    expect: Sequence[str] = (),
) -> Iterator[ServerProcess]:
    """start_fastcoord for the length of a `with` block."""
    with stopping(
        start_fastcoord(
            directory,
            *args,
            extra_args=extra_args,
            wait_loaded=wait_loaded,
            preexec_fn=preexec_fn,
            core=core,
            expect=expect,
        )
    ) as server:
        yield server


def refused_start(directory: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run `fastcoord serve` where it must refuse to start: its exit code and output."""
    return subprocess.run(
        serve_command(directory, *args),
        capture_output=True,
        text=True,
        timeout=START_TIMEOUT_S,
        env=child_env(),
    )


# -- a cluster of fastcoord nodes -----------------------------------------------------------


def cluster_list(ports: Sequence[int], host: str = "127.0.0.1") -> str:
    """The --cluster value of nodes 0, 1, ... at these ports."""
    return ",".join(f"{i}@{host}:{port}" for i, port in enumerate(ports))


def start_node(
    directory: Path,
    node_id: int,
    cluster: str,
    *args: str,
    wait_loaded: bool = True,
    core: int | None = None,
) -> ServerProcess:
    """Node `node_id` of the cluster `cluster` (a --cluster list), its log and data in
    `directory` (kept: a node restarted there finds its data again)."""
    directory.mkdir(parents=True, exist_ok=True)
    return start_fastcoord(
        directory,
        "--node-id",
        str(node_id),
        "--cluster",
        cluster,
        *args,
        wait_loaded=wait_loaded,
        core=core,
        name=f"fastcoord node {node_id}",
    )


# A node kept in ZooKeeper has joined once it says so (it loads what the map gives it after).
JOINED = r"joined the cluster kept in ZooKeeper"
# What such a node may log on purpose: ZooKeeper's connection lost and back (kazoo's own
# lines, and the node's), a partition's lock still held by its old owner for a moment.
ZOOKEEPER_EXPECTED = (
    r"kazoo\.client: Connection dropped",
    r"kazoo\.client: Transition to CONNECTING",
    r"ZooKeeper connection lost: serving for",
    r"ZooKeeper unreachable for a third of the session timeout",
    r"ZooKeeper session expired",
)


def start_zookeeper_node(
    directory: Path,
    node_id: int,
    zookeeper: str,
    data_dir: Path,
    *args: str,
    expect: Sequence[str] = (),
) -> ServerProcess:
    """Node `node_id` of the cluster kept in ZooKeeper at `zookeeper`, its log in
    `directory` and its partitions' logs in the shared `data_dir`, with an admin port;
    returned once it has joined."""
    directory.mkdir(parents=True, exist_ok=True)
    return start_fastcoord(
        directory,
        "--node-id",
        str(node_id),
        "--zookeeper",
        zookeeper,
        "--data-dir",
        str(data_dir),
        "--admin-port",
        "0",
        *args,
        wait_loaded=False,
        name=f"fastcoord node {node_id}",
        expect=(*ZOOKEEPER_EXPECTED, *expect),
        ready=[JOINED],
    )


@contextmanager
def fastcoord_cluster(
    directory: Path, nodes: int = 3, *args: str, cores: Sequence[int] | None = None
) -> Iterator[list[ServerProcess]]:
    """`nodes` fastcoord nodes on free loopback ports, node i in `directory / f"node-{i}"`,
    started one after another (each checks the ones already up), stopped by PID when the
    block ends. `cores`: node i pinned to cores[i % len(cores)]."""
    cluster = cluster_list(free_ports(nodes))
    servers: list[ServerProcess] = []
    try:
        for i in range(nodes):
            core = None if not cores else cores[i % len(cores)]
            servers.append(start_node(directory / f"node-{i}", i, cluster, *args, core=core))
        yield servers
    finally:
        stop_each(servers)


CLUSTER_ADMIN = r"cluster admin on ([\d.]+):(\d+)"


def start_cluster(directory: Path, nodes: int, *args: str) -> ServerProcess:
    """`fastcoord cluster --nodes N` on free loopback ports (its nodes' admin ports and its
    own too), its data under `directory / "data"`, its output in `directory /
    "server.log"`; returned once every node listens. Its `admin` is the cluster's admin
    port (/v1/cluster), its `bootstrap` node 0's address; stop() stops every node."""
    directory.mkdir(parents=True, exist_ok=True)
    argv = [
        sys.executable,
        "-m",
        "fastcoord",
        "cluster",
        "--nodes",
        str(nodes),
        "--host",
        "127.0.0.1",
        "--port",
        "0",
        "--admin-port",
        "0",
        "--data-dir",
        str(directory / "data"),
        *args,
    ]
    server = start("fastcoord cluster", argv, directory, ready=[CLUSTER_ADMIN], checked=True)
    match = re.search(CLUSTER_ADMIN, server.log())
    assert match is not None  # start() waited for it
    server.admin_address = f"{match.group(1)}:{match.group(2)}"
    return server


# -- a standalone Spark cluster -------------------------------------------------------------

SPARK_START_TIMEOUT_S = 60.0  # for the master, then for its workers: JVMs, on a busy machine
SPARK_MASTER = r"Starting Spark master at (spark://[\d.]+:\d+)"
SPARK_ALIVE = r"New state: ALIVE"  # elected leader: it accepts workers and applications
SPARK_WORKER = r"Starting Spark worker ([\d.]+):(\d+) with"
SPARK_REGISTERED = r"Successfully registered with master"
LOG_TAIL_LINES = 30


@dataclass(frozen=True)
class SparkStandalone:
    """A standalone Spark cluster on loopback (spark_standalone): where its master is, for
    --master, and its daemons, each stopped by PID with its process group."""

    master_url: str  # spark://127.0.0.1:PORT
    web_ui: str  # the master's page, http://127.0.0.1:PORT
    master: ServerProcess
    workers: tuple[ServerProcess, ...]
    cores: int  # each worker's

    @property
    def pids(self) -> list[int]:
        """The master's PID, then each worker's."""
        return [self.master.pid, *(w.pid for w in self.workers)]

    @property
    def slots(self) -> int:
        """The tasks it runs at once (spark.task.cpus=1): a barrier stage's most."""
        return len(self.workers) * self.cores


def spark_class() -> Path:
    """The installed pyspark's `bin/spark-class`, which runs a Spark daemon in the
    foreground (the pip package has no sbin/start-master.sh, nor needs it)."""
    import pyspark

    return Path(pyspark.__file__).parent / "bin" / "spark-class"


def spark_env(directory: Path) -> dict[str, str]:
    """The environment of a Spark daemon: the caller's fastcoord (child_env), which the
    executors' Python workers import; the installed pyspark as SPARK_HOME, not another
    that the caller's environment may name; a usable Java; loopback only."""
    home, _ = java_home()
    return {
        **child_env(),
        "SPARK_HOME": str(spark_class().parent.parent),
        "JAVA_HOME": str(home),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_LOG_DIR": str(directory / "logs"),
        "PYSPARK_PYTHON": sys.executable,
    }


def start_spark_daemon(
    name: str, argv: Sequence[str], directory: Path, log_path: Path, env: dict[str, str]
) -> ServerProcess:
    """Run a Spark daemon in a process group of its own, its output in `log_path`; not
    waited for (spark_standalone waits for what each must log)."""
    with open(log_path, "wb") as out:
        process = subprocess.Popen(
            list(argv),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=directory,
            env=env,
            start_new_session=True,  # its executors join its group, and go with it
        )
    server = ServerProcess(name, process, "127.0.0.1", 0, log_path, group=True)
    _running[server.pid] = server
    return server


@contextmanager
def spark_standalone(
    directory: Path, workers: int = 2, cores: int = 2
) -> Iterator[SparkStandalone]:
    """A standalone Spark master and `workers` workers of `cores` cores and 1 GiB each, on
    free loopback ports, for the length of a `with` block: yielded once every worker has
    registered with the master. Their output goes to `directory / "logs"` (master.log,
    worker-N.log), worker N's applications to `directory / f"worker-{N}"`. Every daemon is
    stopped by PID when the block ends, however it ends, its process group with it."""
    logs = directory / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    env = spark_env(directory)
    spark = str(spark_class())
    port, web_port = free_ports(2)
    daemons: list[ServerProcess] = []
    try:
        master = start_spark_daemon(
            "spark master",
            [
                spark,
                "org.apache.spark.deploy.master.Master",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--webui-port",
                str(web_port),
            ],
            directory,
            logs / "master.log",
            env,
        )
        daemons.append(master)
        deadline = time.monotonic() + SPARK_START_TIMEOUT_S
        master_url = _spark_wait(daemons, master, SPARK_MASTER, deadline).group(1)
        master.port = port
        _spark_wait(daemons, master, SPARK_ALIVE, deadline)

        for n in range(workers):  # started together: their JVMs start in parallel
            work_dir = directory / f"worker-{n}"
            work_dir.mkdir(exist_ok=True)
            daemons.append(
                start_spark_daemon(
                    f"spark worker {n}",
                    [
                        spark,
                        "org.apache.spark.deploy.worker.Worker",
                        master_url,
                        "--host",
                        "127.0.0.1",
                        "--cores",
                        str(cores),
                        "--memory",
                        "1g",
                        "--webui-port",
                        "0",
                        "--work-dir",
                        str(work_dir),
                    ],
                    directory,
                    logs / f"worker-{n}.log",
                    {**env, "SPARK_WORKER_DIR": str(work_dir)},
                )
            )
        deadline = time.monotonic() + SPARK_START_TIMEOUT_S
        for worker in daemons[1:]:
            worker.port = int(_spark_wait(daemons, worker, SPARK_WORKER, deadline).group(2))
            _spark_wait(daemons, worker, SPARK_REGISTERED, deadline)
            # The master's word too: a worker counts once the master has it.
            _spark_wait(
                daemons, master, rf"Registering worker 127\.0\.0\.1:{worker.port} ", deadline
            )
        yield SparkStandalone(
            master_url, f"http://127.0.0.1:{web_port}", master, tuple(daemons[1:]), cores
        )
    finally:
        # The workers first, so that none of them is left looking for a master that is gone.
        for daemon in reversed(daemons):
            daemon.stop()


def _spark_wait(
    daemons: Sequence[ServerProcess], daemon: ServerProcess, pattern: str, deadline: float
) -> re.Match[str]:
    """What `daemon` logs that matches `pattern`; raises with the tail of every daemon's log
    (a worker that does not register may be the master's doing) if it exits or the
    deadline passes first."""
    while True:
        match = re.search(pattern, daemon.log())
        if match:
            return match
        if daemon.process.poll() is not None:
            problem: type[Exception] = RuntimeError
            what = f"{daemon.name} exited early ({daemon.process.returncode})"
        elif time.monotonic() > deadline:
            problem = TimeoutError
            what = f"{daemon.name} did not log {pattern!r} within {SPARK_START_TIMEOUT_S:.0f} s"
        else:
            time.sleep(0.1)
            continue
        tails = "".join(
            f"\n--- {d.name} ({d.log_path}), its last lines:\n"
            + "\n".join(d.log().splitlines()[-LOG_TAIL_LINES:])
            for d in daemons
        )
        raise problem(what + tails)


# -- the peers of benchmarks ----------------------------------------------------------------


def start_mock(core: int | None = None) -> ServerProcess:
    """The librdkafka mock cluster, hosted by `python -m fastcoord.testing mock`."""
    return start("librdkafka mock", [sys.executable, "-m", HOST_MODULE, "mock"], core=core)


def start_responder(core: int | None = None) -> ServerProcess:
    """The reference responder, `python -m fastcoord.testing responder`."""
    return start("responder", [sys.executable, "-m", HOST_MODULE, "responder"], core=core)


@contextmanager
def mock_cluster(core: int | None = None) -> Iterator[ServerProcess]:
    with stopping(start_mock(core)) as server:
        yield server


@contextmanager
def responder(core: int | None = None) -> Iterator[ServerProcess]:
    with stopping(start_responder(core)) as server:
        yield server


def serve_mock() -> int:
    """Hold a librdkafka mock cluster until SIGTERM; print its address like fastcoord does.

    The cluster lives inside a confluent-kafka client: a Producer with
    test.mock.num.brokers=1. Its address comes from the cluster's own metadata (its one
    broker's host and port), not from the bootstrap.servers=HOST:PORT of the debug='mock'
    log line: with debug='mock' left on, the mock logs every request it serves through a
    Python logger in this process, on the mock's core (it cost the mock about 40% of its
    core and a third of its heartbeat rate). So this runs with no `debug` setting.
    """
    import confluent_kafka

    signals: list[int] = []

    def on_signal(signum: int, _frame: object) -> None:
        signals.append(signum)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    producer = confluent_kafka.Producer({"test.mock.num.brokers": 1})
    brokers = producer.list_topics(timeout=START_TIMEOUT_S).brokers
    if len(brokers) != 1:
        print(f"the mock cluster has {len(brokers)} brokers, not 1", flush=True)
        return 1
    (broker,) = brokers.values()
    print(
        f"listening on {broker.host}:{broker.port} "
        f"(librdkafka {confluent_kafka.libversion()[0]} mock cluster)",
        flush=True,
    )
    parent = os.getppid()
    while not signals and os.getppid() == parent:  # also end if the caller died
        producer.poll(0.2)
    del producer
    return 0


# Heartbeat v3 response frame: size, correlation id, throttle_time_ms, error_code.
_HB_RESPONSE = struct.Struct(">iiih")
_SIZE = struct.Struct(">i")


def serve_responder() -> int:
    """A benchmark client's ceiling: answer each request frame at once with a Heartbeat v3
    NONE (which also reads as an ApiVersions v0 answer of error 0 and no APIs).

    No Kafka server does less per heartbeat (it keeps no state and decodes nothing but the
    correlation id), so what a client measures against it is the most it can measure on
    this machine. One connection at a time; frames of one length are answered with numpy.
    """
    listener = socket.create_server(("127.0.0.1", 0))
    print(f"listening on 127.0.0.1:{listener.getsockname()[1]} (reference responder)", flush=True)
    parent = os.getppid()
    listener.settimeout(1.0)
    while os.getppid() == parent:
        try:
            conn, _ = listener.accept()
        except TimeoutError:
            continue
        with conn:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            _respond(conn)
    return 0


def _respond(conn: socket.socket) -> None:
    answer = np.frombuffer(_HB_RESPONSE.pack(_HB_RESPONSE.size - 4, 0, 0, 0), dtype=np.uint8)
    pending = b""
    while True:
        try:
            data = conn.recv(262144)
        except ConnectionResetError:
            return
        if not data:
            return
        if pending:
            data = pending + data
        pos = 0
        out: list[bytes] = []
        if len(data) >= 4:
            length = 4 + _SIZE.unpack_from(data)[0]
            count = len(data) // length
            if count >= 8:
                frames = np.frombuffer(data, dtype=np.uint8, count=count * length)
                frames = frames.reshape(count, length)
                sizes = frames[:, :4].copy().view(">i4").ravel()
                if (sizes == length - 4).all():
                    answers = np.empty((count, answer.size), dtype=np.uint8)
                    answers[:] = answer
                    answers[:, 4:8] = frames[:, 8:12]
                    out.append(answers.tobytes())
                    pos = count * length
        while len(data) - pos >= 4:
            (size,) = _SIZE.unpack_from(data, pos)
            if len(data) - pos < 4 + size:
                break
            (correlation_id,) = _SIZE.unpack_from(data, pos + 8)
            out.append(_HB_RESPONSE.pack(_HB_RESPONSE.size - 4, correlation_id, 0, 0))
            pos += 4 + size
        pending = data[pos:]
        if out:
            conn.sendall(b"".join(out))


# -- pytest -------------------------------------------------------------------------------

try:
    import pytest
except ImportError:  # pytest is for test suites, not a serving dependency
    pass
else:

    @pytest.fixture
    def fastcoord_serve(tmp_path: Path) -> Iterator[ServerProcess]:
        """A `fastcoord serve` on its default settings (port 0, its data and log in
        tmp_path), its offsets log loaded; stopped by PID after the test."""
        with fastcoord_server(tmp_path) as server:
            yield server


HOSTS: dict[str, Callable[[], int]] = {"mock": serve_mock, "responder": serve_responder}


def main(argv: Sequence[str]) -> int:
    if len(argv) != 1 or argv[0] not in HOSTS:
        print(f"usage: python -m {HOST_MODULE} {'|'.join(HOSTS)}", file=sys.stderr)
        return 2
    return HOSTS[argv[0]]()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
