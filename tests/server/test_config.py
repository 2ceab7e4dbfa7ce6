"""The server's configuration: Kafka's names and defaults, flags, TOML, clear refusals."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from fastcoord import config
from fastcoord.core.config import GroupConfig


def test_defaults_are_kafkas() -> None:
    cfg = config.load()
    assert (cfg.host, cfg.port, cfg.data_dir) == ("127.0.0.1", 9092, "./fastcoord-data")
    assert cfg.offsets_topic_num_partitions == 50
    assert cfg.socket_request_max_bytes == 104_857_600
    assert cfg.connections_max_idle_ms == 600_000
    assert cfg.group_config() == GroupConfig()


def test_toml_then_overrides(tmp_path: Path) -> None:
    path = tmp_path / "fastcoord.toml"
    path.write_text('group.initial.rebalance.delay.ms = 0\n"port" = 1234\ntopics = ["t:3"]\n')
    cfg = config.load(str(path), {"port": 5678})
    assert (cfg.group_initial_rebalance_delay_ms, cfg.port) == (0, 5678)
    assert cfg.declared_topics() == {"t": 3}
    assert config.load(str(path)).port == 1234


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            {"group.max.size": 0},
            "group.max.size: expected `int` >= 1; allowed: an integer from 1 to 2147483647",
        ),
        ({"port": 70000}, "port: expected `int` <= 65535"),
        (
            {"group.min.session.timeout.ms": 10, "group.max.session.timeout.ms": 5},
            "group.min.session.timeout.ms must not exceed",
        ),
        ({"no.such.setting": 1}, "unknown setting: no.such.setting"),
        ({"topics": ["nopartitions"]}, "is not NAME:PARTITIONS"),
        ({"log.level": "LOUD"}, "log.level must be one of"),
    ],
)
def test_bad_values_are_refused_naming_the_setting(
    overrides: dict[str, object], message: str
) -> None:
    with pytest.raises(config.ConfigError, match=message.replace("`", ".").replace("(", ".")):
        config.load(overrides=overrides)


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fastcoord", "serve", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_flags_are_kafka_names_with_dashes_and_print_config_shows_the_result() -> None:
    result = run("--print-config", "--group-initial-rebalance-delay-ms", "0", "--topic", "t:3")
    assert result.returncode == 0
    assert '"group.initial.rebalance.delay.ms" = 0' in result.stdout
    assert '"topics" = ["t:3"]' in result.stdout
    # The printed configuration is a valid configuration file.
    assert result.stdout.count("\n") == len(config.fields())


def test_serve_refuses_a_bad_value_at_start() -> None:
    result = run("--group-max-size", "0")
    assert result.returncode == 2
    assert "group.max.size" in result.stderr and "allowed" in result.stderr
