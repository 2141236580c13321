"""`tmt score`: the log-probability of each sentence pair of two parallel files by forced
decoding, or an n-best list rescored and reranked (`inference.scoring`)."""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path

from transformer_mt.cli.common import (
    add_device_flag,
    add_language_flags,
    device_of,
    open_out,
    set_cpu_threads,
)
from transformer_mt.errors import TmtError


def add_score(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "score",
        help="log-probability of each sentence pair by forced decoding; rerank n-best lists",
    )
    p.add_argument("--checkpoint", required=True, help="e.g. runs/X/checkpoints/best.pt")
    p.add_argument("--src", required=True, help="source text, one sentence per line")
    given = p.add_mutually_exclusive_group(required=True)
    given.add_argument(
        "--tgt", help="target text parallel to --src: writes `total<TAB>per_token` per pair"
    )
    given.add_argument(
        "--nbest",
        help="`index ||| text ||| score` lines (tmt translate --nbest): written back with the "
        "log-probability as the score, each source's best first",
    )
    p.add_argument("--output", "--out", default="-", help="file to write (default -: stdout)")
    p.add_argument(
        "--batch-tokens", type=int, help="rows x longest row per pass (default: decode.max_tokens)"
    )
    add_device_flag(p)
    add_language_flags(p)
    p.set_defaults(handler=_run_score)


def _run_score(args: argparse.Namespace) -> int:
    from transformer_mt.files import check_output
    from transformer_mt.inference.line_settings import LineSettings
    from transformer_mt.inference.scoring import refuse_unequal, rescore_nbest, score_files
    from transformer_mt.inference.translator import Translator
    from transformer_mt.input_files import checkpoint_input_files
    from transformer_mt.progress import Counted, ProgressReport
    from transformer_mt.text_files import count_lines

    if args.batch_tokens is not None and args.batch_tokens < 1:
        raise TmtError(f"--batch-tokens {args.batch_tokens}: must be at least 1 (e.g. 4096)")
    _read_stdin(args)
    inputs = [
        *checkpoint_input_files(args.checkpoint, "--checkpoint"),
        (args.src, "--src file"),
        (args.tgt, "--tgt file"),
        (args.nbest, "--nbest file"),
    ]
    if args.output != "-":
        check_output(args.output, inputs)
    if device_of(args) == "cpu":
        set_cpu_threads(quiet=True)
    # The total, for the time left, and the targets' count checked before the model loads; a
    # pipe is read once, as it comes (its count is checked when it ends).
    sources = count_lines(args.src) if Path(args.src).is_file() else None
    pairs = args.tgt is not None
    if pairs and sources is not None and Path(args.tgt).is_file():
        refuse_unequal(args.src, args.tgt)(sources, count_lines(args.tgt))
    if pairs:
        counted = Counted("scored", "pairs", "pairs")
    else:
        counted = Counted("reranked", "sources", "sources")
    lines = LineSettings(src_lang=args.src_lang, tgt_lang=args.tgt_lang)
    translator = Translator.from_checkpoint(args.checkpoint, device=device_of(args), lines=lines)
    with contextlib.ExitStack() as stack:
        out = open_out(args.output, stack)
        report = ProgressReport.on_stderr(sources, counted)  # a bar, or a line every 30 s
        stack.callback(report.close)
        if pairs:
            counts = score_files(
                translator, args.src, args.tgt, out, args.batch_tokens, report.update
            )
        else:
            counts = rescore_nbest(
                translator, args.src, args.nbest, out, args.batch_tokens, report.update
            )
    if counts.unscored:
        print(f"warning: {counts.unscored} pair(s) with a blank source: nan", file=sys.stderr)
    if counts.cut:
        print(
            f"warning: {counts.cut} pair(s) longer than the model's position table: "
            "scored as far as it reaches",
            file=sys.stderr,
        )
    if counts.unknown:
        print(
            f"warning: {counts.unknown} target(s) hold characters the target vocabulary lacks, "
            "scored as its unknown piece (⁇): those scores are of another text",
            file=sys.stderr,
        )
    return 0


def _read_stdin(args: argparse.Namespace) -> None:
    """`-` as --src, --tgt or --nbest: stdin, read as a pipe named `/dev/stdin` is (pairs as
    they come; an n-best list, read twice, is refused as a pipe is).

    Raises:
        TmtError: `-` given twice.
    """
    given = [key for key in ("src", "tgt", "nbest") if getattr(args, key) == "-"]
    if len(given) > 1:
        raise TmtError(f"--{given[1]} -: stdin is already --{given[0]}; give one of them a file")
    for key in given:
        setattr(args, key, "/dev/stdin")
