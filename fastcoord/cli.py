"""`fastcoord serve | loadtest | report`: argument parsing only; the work lives elsewhere."""

from __future__ import annotations

import argparse
import sys
import typing
from collections.abc import Sequence
from typing import Any

from fastcoord import __version__


def _serve(args: argparse.Namespace) -> int:
    from fastcoord import config
    from fastcoord.server.app import run

    overrides: dict[str, Any] = {}
    for attr, name, _, _ in config.fields():
        value = getattr(args, attr, None)
        if value is not None:
            overrides[name] = value
    try:
        cfg = config.load(args.config, overrides)
    except config.ConfigError as exc:
        print(f"fastcoord serve: {exc}", file=sys.stderr)
        return 2
    if args.print_config:
        print(config.to_toml(cfg), end="")
        return 0
    return run(cfg)


def _bool(text: str) -> bool:
    if text.lower() in ("true", "1", "yes", "on"):
        return True
    if text.lower() in ("false", "0", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"{text!r} is not true or false")


def _add_setting_flags(parser: argparse.ArgumentParser) -> None:
    from fastcoord import config

    hints = typing.get_type_hints(config.ServerConfig)
    for attr, name, _, default in config.fields():
        flag = "--" + name.replace(".", "-")
        tp = hints[attr]
        if attr == "topics":
            parser.add_argument(
                "--topic",
                dest="topics",
                action="append",
                metavar="NAME:PARTITIONS",
                help="declare a topic (repeatable); others are created on first request",
            )
            continue
        convert: Any = {bool: _bool, int: int, float: float}.get(tp, str)
        parser.add_argument(
            flag, dest=attr, type=convert, default=None, help=f"{name} (default {default!r})"
        )


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
        description="Run the coordinator. Every setting has Kafka's name and default; give "
        "it as a flag (its name with dashes) or in a TOML file (its name as the key).",
    )
    serve.add_argument("--config", metavar="FILE.toml", help="settings file (Kafka names)")
    serve.add_argument(
        "--print-config", action="store_true", help="print the effective configuration and exit"
    )
    _add_setting_flags(serve)
    serve.set_defaults(func=_serve)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    result: int = args.func(args)
    return result
