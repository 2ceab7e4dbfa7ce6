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

    overrides = {
        s.name: value for s in config.SETTINGS if (value := getattr(args, s.attr)) is not None
    }
    try:
        cfg = config.load(args.config, overrides)
    except config.ConfigError as exc:
        print(f"fastcoord serve: {exc}", file=sys.stderr)
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
    if setting.doc.unit in ("ms", "bytes", "minutes"):
        return str(setting.doc.unit.upper())
    named = {"topics": "NAME:PARTITIONS", "data_dir": "DIR", "host": "HOST"}
    return named.get(setting.attr, {int: "N", float: "X"}.get(base, "HOST"))


def _add_setting_flags(parser: argparse.ArgumentParser) -> None:
    from fastcoord import config

    groups = {name: parser.add_argument_group(f"{name} settings") for name in config.SECTIONS}
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
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    result: int = args.func(args)
    return result
