"""`tmt train` and `tmt plot`: a run directory trained from a YAML config, and the run's
learning curves."""

from __future__ import annotations

import argparse
from pathlib import Path

from transformer_mt.errors import TmtError


def add_train(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("train", help="train a model from a YAML config")
    p.add_argument("--config", required=True, help="YAML experiment config")
    p.add_argument("--run-dir", help="output directory (default: runs/<config name>)")
    p.add_argument("--set", nargs="+", default=[], metavar="KEY=VALUE", help="config overrides")
    p.set_defaults(handler=_run_train)


def _run_train(args: argparse.Namespace) -> int:
    from transformer_mt.training.run import run_training

    _check_run_dir(args)
    return run_training(args.config, args.run_dir, args.set)


def _check_run_dir(args: argparse.Namespace) -> None:
    """Refuse a run directory where training would write over a file it reads: a corpus,
    tokenizer text or parent checkpoint of the config named like a file the run writes
    (`run_layout.run_file`). The config itself may be the run's config.yaml: resuming with
    it rewrites it with the settings in use, as every resume does."""
    from transformer_mt.artifacts import config_input_files
    from transformer_mt.config import load_config
    from transformer_mt.run_layout import run_file

    cfg = load_config(args.config, args.set)
    run_dir = Path(args.run_dir) if args.run_dir else Path("runs") / Path(args.config).stem
    for path, what in config_input_files(cfg, f"--config {args.config}"):
        written = run_file(run_dir.resolve(), path.resolve())
        if written is not None:
            raise TmtError(
                f"{path}: the {what} is {written}, which training writes; move it, or train "
                "into another --run-dir"
            )


def add_plot(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("plot", help="draw a run's learning curves to a PNG")
    p.add_argument("run_dir", help="run directory holding metrics.jsonl")
    p.add_argument("--out", help="PNG path (default: RUN_DIR/curves.png)")
    p.set_defaults(handler=_run_plot)


def _run_plot(args: argparse.Namespace) -> int:
    from transformer_mt.training.plot import plot_run

    print(plot_run(args.run_dir, args.out))
    return 0
