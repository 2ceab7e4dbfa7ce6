"""`fastcoord loadtest`: check what can be checked, start the workers, gather, report.

The parent process drives no members: it refuses a run that cannot work (an --out that
holds another run, more connections than the open-file limit allows, security settings that
contradict each other or files it cannot load, an unreachable bootstrap or admin port, a
bootstrap that refuses the login, shared connections against a server that would deadlock
them, a fault schedule it cannot apply), starts the worker processes, adds the scheduled
faults on time (loadtest/faults.py), samples the server's CPU and memory
(loadtest/sampler.py, with --admin), merges the workers' seconds into the live display and
the results under --out, and ends with the summary and an exit status: 0 passed, 1 a
threshold was exceeded, 2 the run could not start, 3 it was cut short (the server died or
stalled, a worker failed), 130 interrupted (Ctrl-C), 143 terminated (SIGTERM). Ctrl-C and
SIGTERM end a run alike: the members are told to stop and leave, and the summary is
written. Whatever was measured before an end of any kind is kept.

Against a cluster the bootstrap is one node, asked for Metadata (the probe's and each
worker's) and FindCoordinator; each member then connects to its group's coordinator, so the
members of one connection index whose groups live on different nodes open one connection
per node, which the open-file check counts once it knows how many nodes there are. With
--admin listing every node's admin port, the faults go to every node.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import multiprocessing
import resource
import signal
import ssl
import sys
import time
from dataclasses import asdict, dataclass, field
from multiprocessing.connection import Connection as Pipe
from multiprocessing.connection import wait
from pathlib import Path
from typing import Any, Protocol, cast

import numpy as np
import trio
from rich.console import Console

from fastcoord.client.connection import (
    ConnectionLost,
    connect_reason,
    connection_type,
    is_fastcoord,
)
from fastcoord.client.consumer_fleet import CONSUMER_WANTED
from fastcoord.client.fleet import FleetConfig
from fastcoord.client.login import PLAINTEXT, ClientSecurity, LoginFailed, TlsFailed
from fastcoord.loadtest import barrier, faults, results, sampler, scenarios, worker
from fastcoord.loadtest.aggregate import Aggregator, Thresholds
from fastcoord.loadtest.display import LiveDisplay, print_summary
from fastcoord.protocol.api_keys import ApiKey
from fastcoord.protocol.messages import MetadataRequest, MetadataResponse

PASSED, EXCEEDED, CANNOT_START, CUT_SHORT, INTERRUPTED = 0, 1, 2, 3, 130
TERMINATED = 128 + signal.SIGTERM  # 143, as a process ended by SIGTERM
STOP_GRACE_S = worker.LEAVE_TIMEOUT_S + 15  # after the deadline, before workers are told to stop
START_TIMEOUT_S = 180  # for a distributed run's workers to agree on a start
# Each worker of a distributed run in summary.json: where it ran, when it was ready, the
# start agreed and when it began, and what it counted itself (rows: of its own tables).
WORKER_FIELDS = (
    "host", "pid", "files", "ready_ms", "start_ms", "began_ms",
    "requests", "errors", "signals", "commits", "rebalances", "cpu_s", "rows", "errors_dropped",
)  # fmt: skip


@dataclass(frozen=True)
class Options:
    bootstrap: str
    scenario: str
    members: int
    groups: int
    members_per_connection: int
    processes: int
    duration_s: float
    heartbeat_interval_ms: int
    session_timeout_ms: int
    rebalance_timeout_ms: int
    commit_interval_ms: int
    request_timeout_ms: int
    topics: list[str]
    partitions: int
    churn_rate: float | None
    wave_size: int | None
    wave_interval_ms: int
    restart_pause_ms: int | None
    group_prefix: str
    seed: int
    out: Path
    max_error_rate: float | None
    max_p99_ms: float | None
    faults: Path | None = None  # a schedule of faults (loadtest/faults.py)
    # The server's admin port, HOST:PORT, that adds them; a cluster's, one per node,
    # HOST:PORT,HOST:PORT,...
    admin: str | None = None
    group_protocol: str = "classic"  # or "consumer": Kafka's consumer group protocol (KIP-848)
    # --warmup: the joining phase's seconds, instead of until every member is stable
    warmup_s: float | None = None
    # --master: the workers are the tasks of a Spark barrier stage there (`processes` of
    # them), rather than processes of this machine; --conf: Spark's settings
    master: str | None = None
    spark_conf: dict[str, str] = field(default_factory=dict)
    # The members' own TLS and SASL settings (--security-protocol, --sasl-*, --ssl-*).
    security: ClientSecurity = PLAINTEXT


class CannotStart(Exception):
    """The run cannot work as asked; the message says why and what to do."""


def parse_bootstrap(text: str) -> tuple[str, int]:
    first = text.split(",")[0].strip()
    host, _, port = first.rpartition(":")
    if not host or not port.isdigit():
        raise CannotStart(f"--bootstrap {text!r}: expected HOST:PORT")
    return host.strip("[]"), int(port)


def connections_per_worker(o: Options, nodes: int = 1) -> list[int]:
    """The most connections each worker opens to coordinators: one per members_per_connection
    of its members (in the order it adds them; with several SASL users, of each user's),
    and against `nodes` nodes one per node among the groups of those members, which may
    each have another coordinator. Members that share connections have two more per group
    and SASL user among them, for the JoinGroups and the SyncGroups their coordinator holds
    (client/fleet.py)."""
    counts = [
        shared + held
        for shared, held in zip(_shared_connections(o, nodes), _group_connections(o), strict=True)
    ]
    return counts


def _group_connections(o: Options) -> list[int]:
    """Each worker's groups' connections: two per group and SASL user of its members."""
    if o.members_per_connection == 1:
        return [0] * o.processes
    users = o.security.users
    counts = []
    for n in range(o.processes):
        indexes = np.arange(n, o.members, o.processes, dtype=np.int64)
        groups = indexes * o.groups // max(o.members, 1)
        counts.append(2 * len(np.unique(groups * users + indexes % users)))
    return counts


def _shared_connections(o: Options, nodes: int) -> list[int]:
    users = o.security.users
    counts = []
    for n in range(o.processes):
        indexes = np.arange(n, o.members, o.processes, dtype=np.int64)
        if users > 1 and o.members_per_connection > 1:
            counts.append(_connections_by_user(o, indexes, users, nodes))
            continue
        if nodes == 1 or o.members_per_connection == 1:
            counts.append(-(-len(indexes) // o.members_per_connection))
            continue
        # plan.group_of's rule: a group's members are consecutive, so the groups of the
        # members of one connection are the span from its first member's to its last's.
        groups = indexes * o.groups // max(o.members, 1)
        firsts = groups[:: o.members_per_connection]
        lasts = groups[o.members_per_connection - 1 :: o.members_per_connection]
        if len(lasts) < len(firsts):
            lasts = np.append(lasts, groups[-1])
        counts.append(int(np.minimum(lasts - firsts + 1, nodes).sum()))
    return counts


def _connections_by_user(o: Options, indexes: np.ndarray, users: int, nodes: int) -> int:
    """connections_per_worker's count for members dealt to connections per user (the
    fleet's rule: the k-th member of user u in share (k // per) * users + u)."""
    user = indexes % users
    order = np.lexsort((indexes, user))  # by user, then in the order they are added
    user, indexes = user[order], indexes[order]
    k = np.arange(len(indexes)) - np.searchsorted(user, user, side="left")
    share = (k // o.members_per_connection) * users + user
    firsts = np.flatnonzero(np.diff(share, prepend=-1))  # each share is one run here
    if nodes == 1:
        return len(firsts)
    lasts = np.append(firsts[1:] - 1, len(share) - 1)
    groups = indexes * o.groups // max(o.members, 1)
    return int(np.minimum(groups[lasts] - groups[firsts] + 1, nodes).sum())


def check_file_limit(o: Options, nodes: int = 1) -> None:
    """Refuse a run whose workers would run out of file descriptors midway; `nodes` is the
    cluster's size (the coordinators the members' connections may go to)."""
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY:
        return
    counts = connections_per_worker(o, nodes)
    per_worker = max(counts) + 1  # and the bootstrap's
    allowed = hard - worker.FILES_KEPT
    if per_worker <= allowed:
        return
    processes = math.ceil(sum(counts) / (allowed - 1))
    # Sharing leaves each worker two connections per group and user of its members.
    groups = max(_group_connections(dataclasses.replace(o, members_per_connection=2)))
    sharing = math.ceil(math.ceil(o.members / o.processes) / max(1, allowed - 1 - groups))
    cluster = f" (to their groups' coordinators among {nodes} nodes)" if nodes > 1 else ""
    raise CannotStart(
        f"{o.members} members at {o.members_per_connection} per connection need "
        f"{per_worker} connections{cluster} in each of {o.processes} worker process(es), but a "
        f"process may open {hard} files here ({allowed} for connections): use --processes "
        f"{processes}, or --members-per-connection {sharing} against fastcoord (the server "
        "must accept that many connections too)"
    )


@dataclass(frozen=True)
class Server:
    """What the probe learnt of the server."""

    fastcoord: bool
    nodes: int  # the brokers its Metadata lists: a cluster's nodes, 1 for a lone server


async def ask_metadata(
    address: tuple[str, int],
    timeout_s: float,
    wanted: dict[int, int] | None = None,
    security: ClientSecurity = PLAINTEXT,
) -> tuple[str | None, dict[int, int], int]:
    """The broker's cluster id, from a Metadata request on a fresh connection (secured
    and logged in as user 0, as `security` says), the versions of `wanted` (default: the
    classic members') it serves, and how many brokers the cluster has."""
    connection = connection_type(security)(address, wanted=wanted, security=security)
    await connection.open(timeout_s)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(connection.run)
        request = MetadataRequest(topics=[], allow_auto_topic_creation=False)
        response, _ = await connection.ask(request, timeout_s)
        connection.close()
    assert isinstance(response, MetadataResponse)
    return response.cluster_id, connection.versions, max(1, len(response.brokers))


def probe(o: Options, address: tuple[str, int]) -> Server:
    """Whether the server is fastcoord, and its cluster's size; CannotStart when it cannot
    be reached."""
    consumer = o.group_protocol == "consumer"
    try:
        cluster_id, versions, nodes = trio.run(
            ask_metadata, address, 10.0, CONSUMER_WANTED if consumer else None, o.security
        )
    except Exception as exc:
        raise CannotStart(unreachable(address, o.security, exc)) from None
    fastcoord = is_fastcoord(cluster_id)
    if consumer and ApiKey.CONSUMER_GROUP_HEARTBEAT not in versions:
        raise CannotStart(
            f"--group-protocol consumer needs ConsumerGroupHeartbeat: the server at "
            f"{address[0]}:{address[1]} (cluster id {cluster_id!r}) does not serve it. Use "
            "--group-protocol classic, or a server of Kafka's consumer group protocol "
            "(fastcoord, Kafka 4)."
        )
    # A consumer-protocol member never waits on a request (no JoinGroup), so members may
    # share a connection whatever the server.
    if o.members_per_connection > 1 and not fastcoord and not consumer:
        raise CannotStart(
            f"--members-per-connection {o.members_per_connection} needs fastcoord: the server at "
            f"{address[0]}:{address[1]} (cluster id {cluster_id!r}) is not, and Kafka mutes a "
            "connection while a JoinGroup on it waits, so members sharing it would wait on each "
            "other for ever. Use --members-per-connection 1 (and --processes for more members)."
        )
    return Server(fastcoord, nodes)


def unreachable(address: tuple[str, int], security: ClientSecurity, exc: BaseException) -> str:
    """Why the bootstrap could not be asked, in one line, with what to check."""
    where = f"{address[0]}:{address[1]}"
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]  # from the nursery the Metadata request ran in
    if isinstance(exc, TlsFailed):
        return f"cannot reach the bootstrap {where}: {exc}"
    if isinstance(exc, LoginFailed):
        return (
            f"cannot log in to the bootstrap {where} as {security.username(0)} with "
            f"{security.mechanism}: {exc}"
        )
    hint = "is the server running, and is --bootstrap its address?"
    if isinstance(exc, ConnectionLost):
        # A listener of another security protocol closes the connection at the first
        # bytes it does not expect, or at the first request before a login.
        hint = f"is --bootstrap a listener of --security-protocol {security.security_protocol}?"
    return f"cannot reach the bootstrap {where} ({connect_reason(exc)}): {hint}"


# Each security flag, as the fields of ClientSecurity are named after them.
def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


SASL_SETTINGS = ("sasl_mechanism", "sasl_username", "sasl_password")
TLS_SETTINGS = (
    "ssl_ca_location",
    "ssl_certificate_location",
    "ssl_key_location",
    "ssl_endpoint_identification_algorithm",
)
TLS_FILES = ("ssl_ca_location", "ssl_certificate_location", "ssl_key_location")


def check_security(s: ClientSecurity) -> None:
    """Refuse security settings that contradict each other or cannot be used: a SASL or
    TLS setting under a protocol without it, a SASL protocol without its user or password,
    several users with one name, a key without its certificate, files that cannot be
    loaded."""
    protocol = s.security_protocol
    if not s.sasl:
        given = [_flag(k) for k in SASL_SETTINGS if getattr(s, k) is not None]
        given += ["--sasl-users"] if s.sasl_users != 1 else []
        if given:
            raise CannotStart(
                f"{_need(given)} --security-protocol sasl_plaintext or sasl_ssl (it is {protocol})"
            )
    if not s.tls:
        given = [_flag(k) for k in TLS_SETTINGS if getattr(s, k) is not None]
        if given:
            raise CannotStart(
                f"{_need(given)} --security-protocol ssl or sasl_ssl (it is {protocol})"
            )
    if s.sasl:
        missing = [_flag(k) for k in ("sasl_username", "sasl_password") if not getattr(s, k)]
        if missing:
            raise CannotStart(f"--security-protocol {protocol} needs {' and '.join(missing)}")
        assert s.sasl_username is not None
        if s.sasl_users > 1 and "{n}" not in s.sasl_username:
            raise CannotStart(
                f"--sasl-users {s.sasl_users} needs {{n}} in --sasl-username (user-{{n}}, say, "
                f"for user-0 to user-{s.sasl_users - 1}): every user would be {s.sasl_username}"
            )
    if s.tls:
        if s.ssl_key_location and not s.ssl_certificate_location:
            raise CannotStart(
                "--ssl-key-location needs --ssl-certificate-location, the client certificate "
                "it is the key of"
            )
        for name in TLS_FILES:
            path = getattr(s, name)
            if path is not None and not Path(path).is_file():
                raise CannotStart(f"{_flag(name)} {path}: no such file")
        try:
            s.context()
        except (OSError, ValueError) as exc:
            raise CannotStart(_context_refusal(s, exc)) from None


def _need(flags: list[str]) -> str:
    """ "--a needs", "--a and --b need", "--a, --b and --c need"."""
    if len(flags) == 1:
        return f"{flags[0]} needs"
    return f"{', '.join(flags[:-1])} and {flags[-1]} need"


def _context_refusal(s: ClientSecurity, exc: BaseException) -> str:
    """Which TLS file could not be loaded, and ssl's reason."""
    reason = (getattr(exc, "reason", None) or str(exc)).lower().replace("_", " ")
    try:
        ssl.create_default_context(cafile=s.ssl_ca_location)
    except (OSError, ValueError):
        return f"--ssl-ca-location {s.ssl_ca_location}: cannot load CA certificates ({reason})"
    files = ", ".join(
        f"{_flag(k)} {getattr(s, k)}"
        for k in ("ssl_certificate_location", "ssl_key_location")
        if getattr(s, k)
    )
    return f"{files}: cannot load the client certificate and key ({reason})"


def plan_of(o: Options) -> scenarios.Plan:
    return scenarios.Plan(
        scenario=o.scenario,
        members=o.members,
        groups=o.groups,
        group_prefix=o.group_prefix,
        duration_s=o.duration_s,
        churn_rate=o.churn_rate if o.churn_rate is not None else max(1.0, o.members / 100),
        wave_size=o.wave_size if o.wave_size is not None else max(1, o.members // 10),
        wave_interval_ms=o.wave_interval_ms,
        restart_pause_ms=o.restart_pause_ms
        if o.restart_pause_ms is not None
        else o.session_timeout_ms // 3,
        settle_timeout_s=max(30.0, o.rebalance_timeout_ms / 1000),
    )


def fleet_config(o: Options, address: tuple[str, int]) -> FleetConfig:
    return FleetConfig(
        bootstrap=address,
        members_per_connection=o.members_per_connection,
        heartbeat_interval_ms=o.heartbeat_interval_ms,
        session_timeout_ms=o.session_timeout_ms,
        rebalance_timeout_ms=o.rebalance_timeout_ms,
        commit_interval_ms=o.commit_interval_ms,
        request_timeout_ms=o.request_timeout_ms,
        topics=list(o.topics),
        partitions=o.partitions,
        seed=o.seed,
        group_protocol=o.group_protocol,
        security=o.security,
    )


def check_out(out: Path) -> None:
    """Refuse an --out that holds another run's results: two runs must never mix."""
    if out.exists() and not out.is_dir():
        raise CannotStart(f"--out {out} is a file: give a new or empty directory")
    reason = results.earlier_run(out)
    if reason is not None:
        raise CannotStart(f"--out {reason}")


def check_admin(admin: str | None) -> list[str]:
    """--admin's addresses, each asked for /metrics once; [] without --admin."""
    if admin is None:
        return []
    addresses = faults.admin_addresses(admin)
    for address in addresses:
        reason = sampler.unreachable(address)
        if reason is not None:
            raise CannotStart(
                f"cannot read /metrics at the admin port {address} ({reason}): is the server "
                "running with --admin-port, and is --admin its address?"
            )
    return addresses


class _Signals:
    """SIGTERM counted rather than obeyed at once: the loop stops the run as for Ctrl-C."""

    def __init__(self) -> None:
        self.terms = 0

    def on_term(self, signum: int, frame: object) -> None:
        self.terms += 1


def run(o: Options, console: Console | None = None) -> int:
    """The whole run; its exit status. The live view goes to standard error, the summary
    to standard output."""
    console = console or Console(stderr=True)
    out = Console(width=None if sys.stdout.isatty() else 120)

    def refuse(reason: object) -> int:
        console.print(
            f"fastcoord loadtest: {reason}", markup=False, highlight=False, soft_wrap=True
        )
        return CANNOT_START

    try:
        address = parse_bootstrap(o.bootstrap)
        check_security(o.security)
        check_out(o.out)
        if o.master is None:
            check_file_limit(o)
        else:
            check_spark(o)
        fault_run = faults.prepare(o.faults, o.admin, o.duration_s)
        admin = check_admin(o.admin)
        server = probe(o, address)
        if server.nodes > 1 and o.master is None:
            check_file_limit(o, server.nodes)
    except (CannotStart, faults.ScheduleError) as exc:
        return refuse(exc)
    launch: Launch
    if o.master is None:
        launch = Processes(o, address)
    else:
        try:
            launch = spark_workers(o, address, server.nodes)
        except CannotStart as exc:
            return refuse(exc)
    o.out.mkdir(parents=True, exist_ok=True)
    config = {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(o).items()}
    config["security"] = o.security.described()  # never the password
    config["server_is_fastcoord"] = server.fastcoord
    config["server_nodes"] = server.nodes
    thresholds = Thresholds(o.max_error_rate, o.max_p99_ms)
    try:
        # A distributed run's workers write their own tables: the driver, the server's.
        tables = tuple(results.SCHEMAS) if o.master is None else ("server",)
        aggregator = Aggregator(o.out, config, o.processes, thresholds, tables=tables)
    except FileExistsError as exc:  # another run began writing there meanwhile
        launch.close(0)
        return refuse(f"--out {exc}")
    sampling = None
    if admin:
        sampling = sampler.ServerSampler(admin)
        aggregator.watch_server(admin)
    signals = _Signals()
    previous = signal.signal(signal.SIGTERM, signals.on_term)
    try:
        drive = _Drive(o, launch, aggregator, fault_run, sampling, signals)
        outcome, message = drive.run(console)
        if outcome == "could not start":
            return refuse(message)
        summary = aggregator.finish(outcome, message)
        if fault_run is not None:
            summary["faults"] = fault_run.finish(aggregator.per_second)
        if fault_run is not None and aggregator.results is not None:
            aggregator.results.write_summary(summary)
    finally:
        signal.signal(signal.SIGTERM, previous)
    print_summary(summary, out)
    if message:
        console.print(
            f"fastcoord loadtest: {message}", markup=False, highlight=False, soft_wrap=True
        )
    out.print(f"results in {o.out}", markup=False, highlight=False, soft_wrap=True)
    if outcome == "interrupted":
        return INTERRUPTED
    if outcome == "terminated":
        return TERMINATED
    if outcome != "completed":
        return CUT_SHORT
    return PASSED if summary["verdict"]["passed"] else EXCEEDED


class Launch(Protocol):
    """The workers, however they run: their channels (each a multiprocessing Connection)
    as they come, and the stage's own end."""

    workers: int

    def start(self) -> float | None:
        """Start the workers; the run's start (wall clock) if known now, else the workers
        say it ("started")."""

    def arrived(self) -> dict[Pipe, int]:
        """The channels to workers opened since the last call, each with its worker."""

    @property
    def ended(self) -> bool:
        """Whether every worker has ended, whatever they said."""

    @property
    def failure(self) -> str | None:
        """Why the workers ended early, as their launcher saw it, or None."""

    def close(self, grace_s: float) -> None:
        """Wait up to `grace_s` for the workers to end, then end them."""


class Processes:
    """The workers as processes of this machine (--processes)."""

    failure = None

    def __init__(self, o: Options, address: tuple[str, int]) -> None:
        self.o = o
        self.address = address
        self.workers = o.processes
        self._processes: list[multiprocessing.process.BaseProcess] = []
        self._pipes: dict[Pipe, int] = {}

    def start(self) -> float:
        context = multiprocessing.get_context("spawn")
        started = time.time()
        fleet = fleet_config(self.o, self.address)
        plan = plan_of(self.o)
        for n in range(self.workers):
            ours, theirs = context.Pipe()
            job = worker.Job(n, self.workers, fleet, plan, started)
            process = context.Process(
                target=worker.main, args=(job, theirs), name=f"loadtest-worker-{n}", daemon=True
            )
            process.start()
            theirs.close()
            self._pipes[ours] = n
            self._processes.append(process)
        return started

    def arrived(self) -> dict[Pipe, int]:
        pipes, self._pipes = self._pipes, {}
        return pipes

    @property
    def ended(self) -> bool:
        return not any(p.is_alive() for p in self._processes)

    def close(self, grace_s: float) -> None:
        for process in self._processes:
            process.join(timeout=grace_s)
            if process.is_alive():
                process.kill()
                process.join(timeout=5)


def check_spark(o: Options) -> None:
    """What can be refused of a distributed run before Spark starts."""
    try:
        import pyspark  # noqa: F401
    except ImportError:
        raise CannotStart(
            "--master needs pyspark, the report's extra: pip install 'fastcoord[report]'"
        ) from None
    from fastcoord.loadtest import spark

    try:
        spark.check_local(o.master or "", o.processes, o.spark_conf)
    except spark.SparkRefused as exc:
        raise CannotStart(str(exc)) from None


def spark_workers(o: Options, address: tuple[str, int], nodes: int) -> Launch:
    """A Spark session on --master and its barrier stage of workers, or CannotStart."""
    from fastcoord.loadtest import spark

    session = spark.session(o.master or "", o.spark_conf)
    try:
        spark.check_cluster(session, o.master or "", o.processes)
    except spark.SparkRefused as exc:
        session.stop()
        raise CannotStart(str(exc)) from None
    host = session.sparkContext.getConf().get("spark.driver.host", "127.0.0.1")

    def job(driver: tuple[str, int], authkey: bytes) -> barrier.TaskJob:
        return barrier.TaskJob(
            workers=o.processes,
            fleet=fleet_config(o, address),
            plan=plan_of(o),
            out=str(o.out.resolve()),
            driver=driver,
            authkey=authkey,
            connections=tuple(connections_per_worker(o, nodes)),
        )

    return spark.SparkWorkers(session, job, o.processes, host)


class _Drive:
    """The run's loop: the workers' messages into the aggregator and the live view, the
    faults and the server's samples on time, the stop when it is due."""

    def __init__(
        self,
        o: Options,
        launch: Launch,
        aggregator: Aggregator,
        fault_run: faults.FaultRun | None = None,
        sampling: sampler.ServerSampler | None = None,
        signals: _Signals | None = None,
    ) -> None:
        self.o = o
        self.launch = launch
        self.aggregator = aggregator
        self.fault_run = fault_run
        self.sampling = sampling
        self.signals = signals or _Signals()
        self.pipes: dict[Pipe, int] = {}
        self.done: set[int] = set()
        self.started: float | None = None
        self.stopping_at: float | None = None
        self.deadline = time.time() + START_TIMEOUT_S
        self.outcome: str = "completed"
        self.message: str | None = None
        self.workers: dict[int, dict[str, Any]] = {}  # a distributed run's, by worker

    def begin(self, started: float) -> None:
        """The run's start is known: its seconds, faults and samples count from it."""
        self.started = started
        self.aggregator.start(round(started * 1000))
        if self.fault_run is not None:
            self.fault_run.start(started)
        if self.sampling is not None:
            self.sampling.start(started)
        self.deadline = started + self.o.duration_s + STOP_GRACE_S

    def stop_all(self) -> None:
        if self.stopping_at is not None:
            return
        self.stopping_at = time.time()
        if self.started is not None:
            self.aggregator.stopped(self.stopping_at - self.started)
        for pipe in self.pipes:
            with contextlib.suppress(OSError):  # that worker has ended
                pipe.send("stop")

    def end(self, outcome: str, message: str | None) -> None:
        """The run ends early (the first reason counts): the workers are told to stop."""
        if self.outcome == "completed":
            self.outcome, self.message = outcome, message
        self.stop_all()

    def finished(self) -> bool:
        if len(self.done) >= self.launch.workers:
            return True
        # The stage is over: whoever has not said so never will.
        return self.launch.ended and all(n in self.done for n in self.pipes.values())

    def run(self, console: Console) -> tuple[str, str | None]:
        """Run the workers to their end; (outcome, message)."""
        started = self.launch.start()
        if started is not None:
            self.begin(started)
        terms = 0
        next_show = next_flush = time.time() + 1
        with LiveDisplay(console) as display:
            while not self.finished():
                try:
                    self._step()
                    now = time.time()
                    if now >= next_show and self.started is not None:
                        next_show = now + 1
                        display.update(self.aggregator.snapshot())
                    if now >= next_flush and self.started is not None:
                        # Each flush is a file per table: every few seconds, not every second.
                        next_flush = now + results.FLUSH_S
                        self._note_workers()
                        if self.sampling is not None:
                            self.aggregator.add_server(*self.sampling.take())
                        self.aggregator.flush()
                    if self.signals.terms > terms:
                        terms = self.signals.terms
                        if self.stopping_at is not None:
                            break
                        self.end(
                            "terminated", "terminated by SIGTERM: the members were told to stop"
                        )
                    if now > self.deadline:
                        if self.started is None:
                            self.end(
                                "could not start",
                                f"the workers did not start within {START_TIMEOUT_S} s",
                            )
                        self.stop_all()
                    if self.stopping_at is not None and now > self.stopping_at + STOP_GRACE_S:
                        break
                except KeyboardInterrupt:
                    if self.stopping_at is not None:
                        break
                    self.end("interrupted", "interrupted: the members were told to stop")
        self.launch.close(5)
        self._note_workers()
        failure = self.launch.failure
        if failure is not None and self.outcome == "completed":
            self.outcome, self.message = "cut short", failure
        if self.started is None and self.outcome in ("completed", "cut short"):
            self.outcome = "could not start"
            self.message = self.message or "the workers ended before the run started"
        if self.fault_run is not None:
            self.fault_run.stop()
        if self.sampling is not None:
            self.sampling.stop()
            if self.started is not None:
                self.aggregator.add_server(*self.sampling.take())
        return self.outcome, self.message

    def _step(self) -> None:
        """Wait a moment for the workers' messages, and act on them."""
        self.pipes.update(self.launch.arrived())
        failure = self.launch.failure
        if failure is not None:
            self.end("cut short" if self.started is not None else "could not start", failure)
        live = [p for p, n in self.pipes.items() if n not in self.done]
        if not live:
            time.sleep(0.25)
            return
        for ready in wait(live, timeout=0.25):
            pipe = cast(Pipe, ready)
            n = self.pipes[pipe]
            try:
                kind, body = pipe.recv()
            except (EOFError, OSError):
                self.done.add(n)
                if self.stopping_at is None:
                    what = f"worker {n}" if self.o.master is None else f"worker {n}'s Spark task"
                    self.end("cut short", f"{what} ended without a word")
                continue
            self._hear(n, kind, body)

    def _hear(self, n: int, kind: str, body: Any) -> None:
        if kind == "second":
            self.aggregator.add(body)
        elif kind == "started":  # a distributed run's worker, with the agreed start
            self.workers.setdefault(n, {}).update(body)
            if self.started is None:
                self.begin(body["start_ms"] / 1000)
        elif kind == "ready":
            if self.o.master is not None:
                self.workers.setdefault(n, {}).update(body)
        elif kind == "result":  # a distributed run's worker's own totals, at its end
            self.workers.setdefault(n, {}).update(body)
            self.aggregator.rows_elsewhere.update(body["rows"])
        elif kind == "refused":
            self.end("could not start", str(body))
        elif kind in ("aborted", "failed"):
            self.end("cut short", str(body) if kind == "aborted" else f"worker {n}: {body}")
            if kind == "failed":
                self.done.add(n)
        elif kind == "done":
            self.done.add(n)

    def _note_workers(self) -> None:
        if self.o.master is not None:
            self.aggregator.sections["workers"] = self.workers_section()

    def workers_section(self) -> dict[str, Any]:
        """summary.json's `workers` of a distributed run: each worker's host, process,
        open-file limit, readiness and start, and what it counted itself; the spread of
        the starts."""
        listed: list[dict[str, Any]] = [
            {"worker": n, **{k: self.workers[n].get(k) for k in WORKER_FIELDS}}
            for n in sorted(self.workers)
        ]
        began = [int(w["began_ms"]) for w in listed if w.get("began_ms") is not None]
        return {
            "master": self.o.master,
            "count": self.launch.workers,
            "start_ms": round(self.started * 1000) if self.started is not None else None,
            "start_spread_ms": max(began) - min(began) if began else None,
            "each": listed,
        }
