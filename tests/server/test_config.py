"""The server's configuration: Kafka's names and defaults, flags, TOML, clear refusals."""

from __future__ import annotations

import re
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
            "group.max.size: expected `int` >= 1; allowed: an integer of at least 1 or unbounded",
        ),
        ({"port": 70000}, "port: expected `int` <= 65535"),
        (
            {"group.min.session.timeout.ms": 10, "group.max.session.timeout.ms": 5},
            "group.min.session.timeout.ms must not exceed",
        ),
        ({"no.such.setting": 1}, "unknown setting: no.such.setting"),
        ({"topics": ["nopartitions"]}, "is not NAME:PARTITIONS"),
        ({"log.level": "LOUD"}, "log.level: invalid value 'LOUD'; allowed: DEBUG, INFO, WARNING"),
        ({"fsync": "often"}, "fsync: invalid value 'often'; allowed: always, batch or never"),
        ({"max.connections": "lots"}, "max.connections: .*allowed: an integer from 1 .* or auto"),
        ({"in.memory": "maybe"}, "in.memory: expected `bool`, got `str`; allowed: true or false"),
        ({"port": "http"}, "port: expected `int`, got `str`; allowed: an integer from 0 to 65535"),
    ],
)
def test_bad_values_are_refused_naming_the_setting(
    overrides: dict[str, object], message: str
) -> None:
    with pytest.raises(config.ConfigError, match=message.replace("`", ".").replace("(", ".")):
        config.load(overrides=overrides)


def test_values_are_taken_as_flags_give_them_and_as_users_write_them() -> None:
    cfg = config.load(
        overrides={
            "group.max.size": "unbounded",
            "port": "1234",
            "in.memory": "yes",
            "log.level": "debug",
            "max.connections": "500",
        }
    )
    assert cfg.group_max_size == 2**31 - 1
    assert (cfg.port, cfg.in_memory, cfg.log_level, cfg.max_connections) == (
        1234,
        True,
        "DEBUG",
        500,
    )
    assert config.load().max_connections == "auto"


def test_the_printed_configuration_loads_back_to_the_same(tmp_path: Path) -> None:
    cfg = config.load(overrides={"topics": ["a:3", "b:1"], "group.max.size": 7})
    for printed in (cfg, config.load()):
        path = tmp_path / "printed.toml"
        path.write_text(config.to_toml(printed))
        assert config.load(str(path)) == printed
    assert '"group.max.size" = "unbounded"' in config.to_toml(config.load())


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


def test_a_boolean_flag_alone_means_true() -> None:
    result = run("--print-config", "--in-memory", "--event-log", "false", "--port", "1")
    assert result.returncode == 0, result.stderr
    assert '"in.memory" = true' in result.stdout
    assert '"event.log" = false' in result.stdout
    assert '"port" = 1' in result.stdout


def help_sections(text: str) -> dict[str, dict[str, str]]:
    """`fastcoord serve --help` as {section: {flag: its help, on one line}}."""
    out: dict[str, dict[str, str]] = {}
    for block in re.split(r"\n(?=\S)", text):
        heading, _, body = block.partition(":\n")
        entries = re.split(r"\n  (?=--)", "\n" + body)[1:]
        out[heading] = {e.split()[0]: " ".join(e.split()) for e in entries}
    return out


def test_help_groups_every_setting_with_its_meaning_allowed_values_and_default() -> None:
    result = run("--help")
    assert result.returncode == 0
    sections = help_sections(result.stdout)
    assert [h for h in sections if h.endswith(" settings")] == [
        "listener settings",
        "topics settings",
        "groups settings",
        "offsets log settings",
        "limits settings",
        "logging settings",
        "admin settings",
        "security settings",
    ]
    own = {"topics": "--topic", "listeners": "--listener", "listener_name": "--listener-name"}
    for setting in config.SETTINGS:
        flag = own.get(setting.attr, setting.flag)
        entry = sections[f"{setting.doc.section} settings"][flag]
        assert setting.doc.meaning[:20] in entry, entry
        assert f"(default: {config.render_default(setting)})" in entry, entry
    groups = sections["groups settings"]
    assert groups["--group-max-size"].endswith(
        "an integer of at least 1 or unbounded (default: unbounded)"
    )
    assert (
        "in ms; an integer of at least 0 (default: 3000)"
        in groups["--group-initial-rebalance-delay-ms"]
    )
    assert "2147483647" not in result.stdout  # written as a user writes it
    logging_ = sections["logging settings"]
    assert logging_["--log-level"].startswith("--log-level {DEBUG,INFO,WARNING,ERROR,CRITICAL}")
    assert "(default: 604800000 = 7 days)" in logging_["--event-log-retention-ms"]
    offsets_log = sections["offsets log settings"]
    assert offsets_log["--fsync"].startswith("--fsync {always,batch,never}")
    assert offsets_log["--in-memory"].startswith("--in-memory [BOOL]")
    assert "A boolean flag alone means true" in " ".join(result.stdout.split())


def test_serve_refuses_a_bad_value_at_start() -> None:
    result = run("--group-max-size", "0")
    assert result.returncode == 2
    assert "group.max.size" in result.stderr and "allowed" in result.stderr
