"""`tmt translate`: its flags, and the checks of their combinations and files made before
any work. The input is translated line by line (translate_lines.py) or, with --format html or
markdown, as one document (translate_document.py)."""

from __future__ import annotations

import argparse
import math

from transformer_mt.cli.common import add_device_flags, add_language_flags
from transformer_mt.cli.flags import add_decode_flags
from transformer_mt.cli.translate_document import translate_one_document
from transformer_mt.cli.translate_lines import translate_lines
from transformer_mt.documents import FORMATS
from transformer_mt.errors import TmtError


def add_translate(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("translate", help="translate a file or stdin with a trained checkpoint")
    p.add_argument(
        "--checkpoint",
        required=True,
        nargs="+",
        metavar="CHECKPOINT",
        help="e.g. runs/X/checkpoints/best.pt; several of one vocabulary: an ensemble, each "
        "step the mean of their log-probabilities",
    )
    p.add_argument(
        "--input", default="-", help="source text, one sentence a line (default -: stdin)"
    )
    p.add_argument(
        "--output", "--out", default="-", help="where translations go (default -: stdout)"
    )
    p.add_argument(
        "--format",
        default="text",
        choices=["text", *FORMATS],
        help="text (the default): a translation per line; html, markdown: the input is one "
        "document, its markup kept (docs/documents.md)",
    )
    add_decode_flags(p)
    add_device_flags(p)
    p.add_argument(
        "--shortlist",
        metavar="FILE",
        help="vocabulary map from `tmt shortlist`: each sentence scores only the target pieces "
        "listed for its source pieces (faster; docs/distillation.md)",
    )
    add_language_flags(p)
    _add_line_flags(p)
    _add_output_flags(p)
    p.set_defaults(handler=_run_translate)


def _add_line_flags(p: argparse.ArgumentParser) -> None:
    """Files that go with the input: references, and what each line's translation holds."""
    p.add_argument("--ref", help="reference file: print BLEU and chrF on stderr at the end")
    p.add_argument(
        "--prefix",
        help="file of target prefixes, one per input line (blank: none): each translation "
        "starts with its line's prefix",
    )
    p.add_argument(
        "--glossary",
        metavar="FILE",
        help="TSV file of 'source term<TAB>target term' lines (target = source: keep it "
        "untranslated): the translation of a sentence holding a source term holds its target",
    )
    p.add_argument(
        "--glossary-ignore-case",
        action="store_true",
        help="find the glossary's source terms whatever their case",
    )
    p.add_argument(
        "--constraints",
        metavar="FILE",
        help="file of target phrases, one line per input line, TAB-separated (blank: none): "
        "each translation holds its line's phrases",
    )


def _add_output_flags(p: argparse.ArgumentParser) -> None:
    """What is written besides the translations, and how lines are cut into sentences."""
    p.add_argument(
        "--progress",
        action="store_true",
        help="a progress bar even when stderr is no terminal (in a log file, a line every 30 s "
        "without it reads better)",
    )
    p.add_argument(
        "--quiet",
        action="store_true",
        help="on stderr only errors, warnings about the input and --ref scores: no progress, "
        "no notes, no summary line",
    )
    p.add_argument(
        "--report",
        metavar="FILE",
        help="check each sentence for dropped content and write a JSON line per input line: "
        "flags, scores, whether retried and cleared; a flagged line of several sentences "
        "(--no-split) is translated again sentence by sentence (docs/checks.md)",
    )
    p.add_argument(
        "--no-split",
        dest="split_sentences",
        action="store_false",
        help="translate each line as one sentence (default: a line of several sentences is "
        "translated sentence by sentence and joined back)",
    )
    p.add_argument(
        "--alignments",
        action="store_true",
        help="append a TAB and src_idx-tgt_idx subword alignment pairs to each translation",
    )
    p.add_argument(
        "--alignment-layer",
        type=int,
        help="decoder layer whose cross-attention aligns (default -1: the last); also places "
        "a document's inline markup",
    )


def _run_translate(args: argparse.Namespace) -> int:
    _check_combinations(args)
    if args.alignment_layer is None:
        args.alignment_layer = -1  # the last layer
    _check_outputs(args)
    if args.length_penalty is not None and not math.isfinite(args.length_penalty):
        raise TmtError(
            f"--length-penalty {args.length_penalty}: must be a finite number (e.g. 0.6 or 1.0)"
        )
    if args.format != "text":
        return translate_one_document(args)
    return translate_lines(args)


def _check_combinations(args: argparse.Namespace) -> None:
    """Refuse alignments of an n-best list, an alignment layer with nothing to align, a
    report of lines it cannot retry, what an ensemble cannot give, and a glossary's case without
    a glossary."""
    if len(args.checkpoint) > 1:
        needs_one = [
            flag
            for flag, given in (
                ("--alignments", args.alignments),
                ("--shortlist", args.shortlist is not None),
                ("--report", args.report is not None),
                (f"--format {args.format}", args.format != "text"),
            )
            if given
        ]
        if needs_one:
            raise TmtError(
                f"{needs_one[0]}: needs one model (its cross-attention or its output rows), "
                f"and {len(args.checkpoint)} checkpoints make an ensemble; give one checkpoint"
            )
    if args.glossary_ignore_case and args.glossary is None:
        raise TmtError("--glossary-ignore-case: goes with --glossary; add one, or drop it")
    if args.alignments and args.n_best is not None and args.n_best > 1:
        raise TmtError(
            f"--nbest {args.n_best}: --alignments aligns the 1-best translation: drop --nbest"
        )
    if args.alignment_layer is not None and args.format == "text" and not args.alignments:
        raise TmtError(
            f"--alignment-layer {args.alignment_layer}: goes with --alignments (or a document's "
            "--format); add --alignments, or drop it"
        )
    if args.report is not None and args.format == "text":
        for flag, given in (
            ("--prefix", args.prefix),
            ("--constraints", args.constraints),
            ("--alignments", args.alignments),
        ):
            if given:
                raise TmtError(
                    f"--report: retries flagged lines cut at their sentence ends, which "
                    f"cannot keep {flag}; drop one of them"
                )


def _check_outputs(args: argparse.Namespace) -> None:
    """Refuse, before any work, an output (or report) that would overwrite an input."""
    from transformer_mt.files import check_output
    from transformer_mt.input_files import checkpoint_input_files

    inputs = [
        *(
            read
            for checkpoint in args.checkpoint
            for read in checkpoint_input_files(checkpoint, "--checkpoint")
        ),
        (args.ref, "--ref file"),
        (args.prefix, "--prefix file"),
        (args.glossary, "--glossary file"),
        (args.constraints, "--constraints file"),
        (args.shortlist, "--shortlist file"),
        (None if args.input == "-" else args.input, "--input file"),
    ]
    if args.output != "-":
        check_output(args.output, inputs)
    if args.report == "-":
        raise TmtError("--report -: give a file name (stdout carries the translations)")
    if args.report is not None:
        written = [(None if args.output == "-" else args.output, "--output file")]
        check_output(args.report, [*inputs, *written])
