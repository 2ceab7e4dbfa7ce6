"""`fastcoord serve | loadtest | report`: argument parsing only; the work lives elsewhere."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from fastcoord import __version__


def _serve(args: argparse.Namespace) -> int:
    # The Trio server arrives with the server issue; until then say so plainly, and show
    # what it would serve with so that the README's serve command does something honest.
    from fastcoord.protocol.versions import SERVED

    print(f"fastcoord {__version__}")
    print(f"would listen on {args.host}:{args.port} with data under {args.data_dir}")
    print("served APIs:")
    for api in sorted(SERVED.values(), key=lambda a: a.key):
        versions = f"{api.min_version}-{api.max_version}"
        print(f"  {api.key.name:<18} key {int(api.key):>2}  versions {versions}")
    print("fastcoord serve: not yet: the network server is not built yet.", file=sys.stderr)
    return 2


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fastcoord",
        description="A Kafka consumer-group coordinator that real Kafka clients use unchanged.",
    )
    parser.add_argument("--version", action="version", version=f"fastcoord {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    serve = sub.add_parser("serve", help="run the coordinator (Kafka's defaults)")
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on")
    serve.add_argument("--port", type=int, default=9092, help="port (0 picks a free one)")
    serve.add_argument("--data-dir", default="./fastcoord-data", help="where data is kept")
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
