"""`tmt evaluate`: a translation file scored against a reference file, or a checkpoint's test
set translated and scored in each of its directions."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import sys

from transformer_mt.cli.common import add_device_flag, device_of, set_cpu_threads
from transformer_mt.errors import SettingError, TmtError, shown_value
from transformer_mt.evaluation import TOKENIZERS
from transformer_mt.langid import INSTALL, installed


def add_evaluate(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "evaluate",
        help="score a translation file against a reference file, or a checkpoint's test set in "
        "each of its directions",
    )
    p.add_argument(
        "--hyp",
        nargs="+",
        help="detokenised translations, one per line; several files: a table of systems, the "
        "first the baseline of --paired",
    )
    p.add_argument("--ref", help="detokenised references, one per line")
    p.add_argument(
        "--metrics",
        nargs="+",
        choices=["bleu", "chrf", "ter"],
        help="with --hyp/--ref (default: bleu chrf)",
    )
    p.add_argument("--lowercase", action="store_true", help="with --hyp/--ref: ignore case")
    p.add_argument(
        "--tgt-lang",
        metavar="LANG",
        help="with --hyp/--ref: the references' language, which picks BLEU's tokenizer as "
        "sacrebleu does: zh for Chinese, ja-mecab for Japanese, ko-mecab for Korean (MeCab: "
        "the ja and ko extras), char for th, lo, km, my; 13a for the others (the default)",
    )
    p.add_argument(
        "--tokenize",
        choices=TOKENIZERS,
        help="with --hyp/--ref: BLEU's tokenizer, instead of the one --tgt-lang picks",
    )
    p.add_argument(
        "--paired",
        choices=["bs", "ar"],
        help="with several --hyp: sacrebleu's paired test of each against the first, bootstrap "
        "resampling (bs: also 95%% confidence intervals) or approximate randomization (ar)",
    )
    p.add_argument(
        "--paired-samples",
        type=int,
        metavar="N",
        help="with --paired: resamples (bs, default 1000, at most 10000) or trials (ar, "
        "default 10000, at most 100000)",
    )
    p.add_argument("--json", action="store_true", help="print a JSON list instead of lines")
    p.add_argument(
        "--checkpoint", help="instead of --hyp/--ref: translate the test set and score it"
    )
    p.add_argument("--test", help="with --checkpoint: the test split (default: its data.test)")
    p.add_argument(
        "--directions",
        nargs="+",
        metavar="SRC-TGT",
        help="with --checkpoint: e.g. de-en fr-de (default: every direction of the model)",
    )
    p.add_argument(
        "--pivot", metavar="LANG", help="also score zero-shot directions through LANG (e.g. en)"
    )
    p.add_argument(
        "--no-off-target",
        action="store_true",
        help="skip identifying the language of each output (done where the langid extra is)",
    )
    p.add_argument("--beam-size", type=int, help="override the checkpoint's decode.beam_size")
    add_device_flag(p)
    p.set_defaults(handler=_run_evaluate)


def _run_evaluate(args: argparse.Namespace) -> int:
    from transformer_mt.cli.common import open_out

    with contextlib.ExitStack() as stack:
        out = open_out("-", stack, flag=None)  # a closed stdout is refused before the work
        evaluate = _evaluate_files if args.checkpoint is None else _evaluate_directions
        lines = evaluate(args)
        out.write("".join(f"{line}\n" for line in lines))
    return 0


# Flags that only `--checkpoint` reads, and those only `--hyp`/`--ref` read, by their argparse
# names: one given with the other mode is refused, not ignored.
_CHECKPOINT_FLAGS = ("test", "directions", "pivot", "no_off_target", "beam_size")
_FILE_FLAGS = ("metrics", "lowercase", "tgt_lang", "tokenize", "paired", "paired_samples")


def _evaluate_files(args: argparse.Namespace) -> list[str]:
    """`tmt evaluate --hyp --ref`: a line per metric, or the JSON list."""
    if args.hyp is None or args.ref is None:
        raise TmtError("evaluate: give --hyp and --ref, or --checkpoint")
    _refuse_flags(args, _CHECKPOINT_FLAGS, "--checkpoint, not with --hyp and --ref")
    if args.device != "auto":  # its default, which files leave unread
        raise TmtError("evaluate: --device goes with --checkpoint, not with --hyp and --ref")

    if args.paired_samples is not None and args.paired is None:
        raise TmtError("evaluate: --paired-samples goes with --paired")
    metrics = list(dict.fromkeys(args.metrics or ["bleu", "chrf"]))  # each scored once
    from transformer_mt.evaluation import bleu_tokenize, check_tokenize

    tokenize = args.tokenize or bleu_tokenize(args.tgt_lang)
    if "bleu" in metrics:
        try:
            check_tokenize(tokenize)  # before reading the files
        except SettingError as err:
            if args.tokenize is not None:
                raise
            raise TmtError(
                f"--tgt-lang {shown_value(args.tgt_lang)}: BLEU tokenised by {tokenize}, "
                f"{err.reason}; or give --tokenize char"
            ) from None
    if len(args.hyp) > 1 or args.paired is not None:
        return _compare(args, metrics, tokenize)

    from transformer_mt.evaluation import evaluate_files
    from transformer_mt.progress import Counted, ProgressReport

    report = ProgressReport.on_stderr(None, Counted("scored", "lines", "lines"))
    try:
        scores = evaluate_files(
            args.hyp[0], args.ref, metrics, args.lowercase, report.update, tokenize
        )
    finally:
        report.close()
    if args.json:
        return [json.dumps([dataclasses.asdict(s) for s in scores], indent=1)]
    return [score.string for score in scores]


def _compare(args: argparse.Namespace, metrics: list[str], tokenize: str) -> list[str]:
    """`tmt evaluate --hyp A B ... --ref R [--paired bs|ar]`: a table of systems, or JSON."""
    from transformer_mt.comparison import compare_files, comparison_table

    found = compare_files(
        args.hyp, args.ref, metrics, args.lowercase, args.paired, args.paired_samples, tokenize
    )
    if args.json:
        return [json.dumps(dataclasses.asdict(found), indent=1)]
    return comparison_table(found)


def _evaluate_directions(args: argparse.Namespace) -> list[str]:
    """`tmt evaluate --checkpoint`: one table of BLEU, chrF and off-target rate by direction."""
    from transformer_mt.inference.direction_scores import directions_table, score_directions

    if args.hyp is not None or args.ref is not None:
        raise TmtError("evaluate: give --hyp and --ref, or --checkpoint, not both")
    _refuse_flags(
        args,
        _FILE_FLAGS,
        "--hyp and --ref, not with --checkpoint (its table scores BLEU and chrF as cased)",
    )
    directions = None
    if args.directions is not None:
        directions = list(dict.fromkeys(map(_direction, args.directions)))  # each scored once
    from transformer_mt.progress import ProgressReport

    decode = {} if args.beam_size is None else {"beam_size": args.beam_size}
    off_target = not args.no_off_target and installed()
    if not args.no_off_target and not off_target:  # a plain install: scored all the same
        print(
            f"note: the off-target rate needs lingua-language-detector: {INSTALL}", file=sys.stderr
        )
    device = device_of(args)
    if device == "cpu":
        set_cpu_threads(quiet=True)
    scores = score_directions(
        args.checkpoint,
        test=args.test,
        directions=directions,
        pivot=args.pivot,
        off_target=off_target,
        progress=lambda counted, total: ProgressReport.on_stderr(total, counted),
        device=device,
        **decode,
    )
    if args.json:
        return [json.dumps([dataclasses.asdict(s) for s in scores], indent=1)]
    return [directions_table(scores), "", *_table_signatures(scores)]


def _refuse_flags(args: argparse.Namespace, names: tuple[str, ...], goes_with: str) -> None:
    """A one-line error for the first flag of `names` given, which the other mode reads."""
    for name in names:
        if getattr(args, name) not in (None, False):
            flag = "--" + name.replace("_", "-")
            raise TmtError(f"evaluate: {flag} goes with {goes_with}")


def _table_signatures(scores: list) -> list[str]:
    """The sacreBLEU signatures of the table's BLEU (one per tokenizer its target languages
    take) and chrF: every direction is scored by `corpus_scores` with one reference, whose
    signature does not depend on the text (sacrebleu only gives it after scoring, hence the
    one-word corpus)."""
    from transformer_mt.evaluation import corpus_scores

    lines = []
    for tokenize in dict.fromkeys(score.tokenize for score in scores):
        (bleu,) = corpus_scores(["x"], ["x"], ["bleu"], tokenize=tokenize)
        targets = sorted({s.tgt_lang for s in scores if s.tokenize == tokenize})
        lines.append(f"{bleu.name} (into {', '.join(targets)}): {bleu.signature}")
    (chrf,) = corpus_scores(["x"], ["x"], ["chrf"])
    return [*lines, f"{chrf.name}: {chrf.signature}"]


def _direction(text: str) -> tuple[str, str]:
    """`de-en` as ("de", "en"); a one-line error for anything else."""
    src, sep, tgt = text.partition("-")
    if not sep or not src or not tgt or "-" in tgt:
        raise TmtError(f"--directions {shown_value(repr(text))}: expected SRC-TGT, e.g. de-en")
    return src, tgt
