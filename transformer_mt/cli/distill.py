"""`tmt distill` and `tmt shortlist`: a teacher's translations of a training corpus for a
student, and the vocabulary map that lets a model score only the pieces a source may produce
(docs/distillation.md)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from transformer_mt.cli.common import add_device_flags, device_of, set_cpu_threads
from transformer_mt.cli.flags import DECODE_FLAGS, add_decode_flags, given_fields
from transformer_mt.errors import TmtError
from transformer_mt.shortlist.lexicon import ShortlistSettings

# The decode settings the teacher takes from flags: all but n_best, since the corpus holds
# the best translation.
TEACHER_DECODE = tuple(name for name in DECODE_FLAGS if name != "n_best")


def add_distill(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "distill",
        help="translate a config's training corpus with a teacher checkpoint into a corpus "
        "for a student (resumable: run it again to go on)",
    )
    p.add_argument(
        "--checkpoint", required=True, help="the teacher, e.g. runs/X/checkpoints/best.pt"
    )
    p.add_argument("--config", required=True, help="YAML whose data.train is translated")
    p.add_argument("--set", nargs="+", default=[], metavar="KEY=VALUE", help="config overrides")
    p.add_argument(
        "--run-dir",
        required=True,
        help="manifest, chunks of translations and log; the same command resumes there",
    )
    p.add_argument(
        "--out", "--output", help="corpus prefix written: OUT.SRC, OUT.TGT (default RUN_DIR/train)"
    )
    p.add_argument(
        "--chunk-lines",
        type=int,
        help="lines translated and written together (default 2000); a kill loses one chunk",
    )
    add_decode_flags(p, TEACHER_DECODE)
    add_device_flags(p)
    p.add_argument(
        "--no-filter",
        dest="filter",
        action="store_false",
        help="keep every pair (default: drop empty translations, copies and length outliers)",
    )
    p.add_argument("--max-length-ratio", type=float, help="longer/shorter side in characters")
    p.add_argument("--max-source-chrf", type=float, help="chrF against the source of a copy")
    p.set_defaults(handler=_run_distill)


def _run_distill(args: argparse.Namespace) -> int:
    from transformer_mt.config import load_config
    from transformer_mt.distill.filtering import FilterRules
    from transformer_mt.distill.job import TeacherSettings, distill, output_paths

    cfg = load_config(args.config, args.set)
    limits = {"max_length_ratio": args.max_length_ratio, "max_source_chrf": args.max_source_chrf}
    rules = FilterRules(**{name: value for name, value in limits.items() if value is not None})
    if not args.filter and any(value is not None for value in limits.values()):
        raise TmtError("--no-filter: keeps every pair; drop --max-length-ratio/--max-source-chrf")
    chunk = {} if args.chunk_lines is None else {"chunk_lines": args.chunk_lines}
    settings = TeacherSettings(
        device=device_of(args),
        quantize=args.quantize,
        decode=given_fields(args, TEACHER_DECODE),
        **chunk,
    )
    _check_config_file(list(output_paths(cfg.data, args.run_dir, args.out)), args.config)
    if device_of(args) == "cpu":
        set_cpu_threads()
    distill(
        args.checkpoint,
        cfg.data,
        args.run_dir,
        out=args.out,
        settings=settings,
        rules=rules if args.filter else None,
    )
    return 0


def add_shortlist(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "shortlist",
        help="learn which target pieces each source piece may produce (IBM Model 1 on a "
        "corpus), for faster translation with --shortlist",
    )
    p.add_argument("--checkpoint", required=True, help="the model the shortlist is for")
    p.add_argument(
        "--out", "--output", required=True, help="vocabulary map file to write (CTranslate2's)"
    )
    p.add_argument(
        "--config", help="YAML whose data.train is learnt from (default: the checkpoint's)"
    )
    p.add_argument("--set", nargs="+", default=[], metavar="KEY=VALUE", help="config overrides")
    defaults = ShortlistSettings()
    p.add_argument(
        "--per-source",
        type=int,
        default=defaults.per_source,
        help=f"target pieces listed per source piece (default {defaults.per_source})",
    )
    p.add_argument(
        "--min-prob",
        type=float,
        default=defaults.min_prob,
        help=f"a listed piece's least p(target | source) (default {defaults.min_prob:g})",
    )
    p.add_argument(
        "--frequent",
        type=int,
        default=defaults.frequent,
        help=f"most frequent target pieces, allowed everywhere (default {defaults.frequent})",
    )
    p.set_defaults(handler=_run_shortlist)


def _run_shortlist(args: argparse.Namespace) -> int:
    from transformer_mt.config import load_config
    from transformer_mt.shortlist.build import build_shortlist

    data = None
    if args.config is not None:
        _check_config_file([args.out], args.config)
        data = load_config(args.config, args.set).data
    elif args.set:
        raise TmtError("--set: overrides --config; give --config too")
    settings = ShortlistSettings(
        per_source=args.per_source, frequent=args.frequent, min_prob=args.min_prob
    )
    report = build_shortlist(args.checkpoint, args.out, data, settings, progress=True)
    print(f"shortlist: {report}; wrote {args.out}", file=sys.stderr)
    return 0


def _check_config_file(outputs: list[str | Path], config: str) -> None:
    """Refuse an output over the `--config` file, which the library never sees; it checks
    the corpus the config names and the checkpoint (`files.check_output`)."""
    from transformer_mt.files import check_output

    for out in outputs:
        check_output(out, [(config, "--config file")])
