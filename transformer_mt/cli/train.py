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
    (`run_layout.run_file`). The config itself may be the config.yaml of the run it resumes:
    resuming with it rewrites it with the settings in use, as every resume does; a new run
    would write over a config the user wrote (its comments, keys left at their defaults)."""
    from transformer_mt.config import load_config
    from transformer_mt.files import resolved
    from transformer_mt.input_files import config_input_files
    from transformer_mt.run_layout import CONFIG_NAME, is_run_dir, run_file

    cfg = load_config(args.config, args.set)
    run_dir = Path(args.run_dir) if args.run_dir else Path("runs") / Path(args.config).stem
    run_real = resolved(run_dir)
    if run_real is None:  # a symlink loop: creating the run directory says so
        return
    if resolved(Path(args.config)) == run_real / CONFIG_NAME and not is_run_dir(run_real):
        raise TmtError(
            f"--config {args.config}: is the {CONFIG_NAME} a new run in {run_dir} writes; copy "
            "it out of the run directory, or train into another --run-dir"
        )
    for path, what in config_input_files(cfg, f"--config {args.config}"):
        real = resolved(path)  # None: a symlink loop, refused by name when the data is checked
        written = None if real is None else run_file(run_real, real)
        if written is not None:
            raise TmtError(
                f"{path}: the {what} is {written}, which training writes; move it, or train "
                "into another --run-dir"
            )


def add_plot(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("plot", help="draw a run's learning curves to a PNG, SVG or PDF")
    p.add_argument("run_dir", help="run directory holding metrics.jsonl")
    p.add_argument(
        "--out",
        "--output",
        help="image path, its format by its suffix: .png, .svg, .pdf (default: RUN_DIR/curves.png)",
    )
    p.set_defaults(handler=_run_plot)


def _run_plot(args: argparse.Namespace) -> int:
    from transformer_mt.training.plot import plot_run

    print(plot_run(args.run_dir, args.out))
    return 0
