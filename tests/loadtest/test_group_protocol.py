"""`--group-protocol`: parsed, carried to the workers' fleets, and checked against what the
server serves before a run starts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from fastcoord.cli import build_parser
from fastcoord.client.consumer_fleet import ConsumerFleet
from fastcoord.client.fleet import Fleet
from fastcoord.loadtest import run
from fastcoord.loadtest.run import CannotStart, Options
from fastcoord.protocol.api_keys import ApiKey


def options(**kw: Any) -> Options:
    args = build_parser().parse_args(["loadtest", *kw.pop("argv", [])])
    base: dict[str, Any] = {
        "bootstrap": args.bootstrap,
        "scenario": args.scenario,
        "members": args.members,
        "groups": args.groups,
        "members_per_connection": args.members_per_connection,
        "processes": args.processes,
        "duration_s": args.duration,
        "heartbeat_interval_ms": args.heartbeat_interval_ms,
        "session_timeout_ms": args.session_timeout_ms,
        "rebalance_timeout_ms": args.rebalance_timeout_ms,
        "commit_interval_ms": args.commit_interval_ms,
        "request_timeout_ms": args.request_timeout_ms,
        "topics": [args.topics],
        "partitions": args.partitions,
        "churn_rate": None,
        "wave_size": None,
        "wave_interval_ms": args.wave_interval_ms,
        "restart_pause_ms": None,
        "group_prefix": args.group_prefix,
        "seed": 0,
        "out": Path("unused"),
        "max_error_rate": None,
        "max_p99_ms": None,
        "group_protocol": args.group_protocol,
    }
    return Options(**{**base, **kw})


def test_classic_is_the_default_and_consumer_reaches_the_fleet() -> None:
    assert options().group_protocol == "classic"
    o = options(argv=["--group-protocol", "consumer"])
    assert o.group_protocol == "consumer"
    config = run.fleet_config(o, ("127.0.0.1", 9092))
    assert config.group_protocol == "consumer"
    assert run.fleet_config(options(), ("127.0.0.1", 9092)).group_protocol == "classic"
    assert issubclass(ConsumerFleet, Fleet)
    with pytest.raises(SystemExit):
        build_parser().parse_args(["loadtest", "--group-protocol", "eager"])


def served(monkeypatch: pytest.MonkeyPatch, cluster_id: str, apis: set[int]) -> None:
    def fake(*_: Any) -> tuple[str, dict[int, int], int]:
        return cluster_id, dict.fromkeys(apis, 1), 1

    monkeypatch.setattr(run.trio, "run", fake)


def test_a_server_without_consumer_group_heartbeat_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    served(monkeypatch, "kafka-cluster", {ApiKey.HEARTBEAT})
    with pytest.raises(CannotStart, match="needs ConsumerGroupHeartbeat"):
        run.probe(options(group_protocol="consumer"), ("127.0.0.1", 9092))
    # The classic protocol does not ask for it.
    assert run.probe(options(), ("127.0.0.1", 9092)) == run.Server(fastcoord=False, nodes=1)


def test_consumer_members_may_share_connections_whatever_the_server(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    served(monkeypatch, "kafka-cluster", {ApiKey.CONSUMER_GROUP_HEARTBEAT})
    shared = {"members_per_connection": 10}
    # No JoinGroup to wait on, so a broker that mutes a connection during one does not matter.
    server = run.probe(options(group_protocol="consumer", **shared), ("127.0.0.1", 9092))
    assert server.fastcoord is False
    with pytest.raises(CannotStart, match="Kafka mutes a connection"):
        run.probe(options(**shared), ("127.0.0.1", 9092))
