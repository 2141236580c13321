"""Command line: `tmt {train,translate,evaluate,average,plot}`.

Handlers stay thin: parse, load, call the library. Errors a user can fix (`TmtError`) print one
line on stderr and exit with status 2; results go to stdout, logs and progress to stderr.
"""

from __future__ import annotations

import argparse
import sys

from transformer_mt import __version__
from transformer_mt.errors import TmtError


def _add_train(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("train", help="train a model from a YAML config")
    p.add_argument("--config", required=True, help="YAML experiment config")
    p.add_argument("--run-dir", help="output directory (default: runs/<config name>)")
    p.add_argument("--set", nargs="+", default=[], metavar="KEY=VALUE", help="config overrides")
    p.set_defaults(handler=_run_train)


def _run_train(args: argparse.Namespace) -> int:
    from transformer_mt.training.trainer import train_from_cli

    return train_from_cli(args.config, args.run_dir, args.set)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tmt", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"transformer_mt {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    for add in (_add_train,):
        add(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.handler(args)
    except TmtError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
