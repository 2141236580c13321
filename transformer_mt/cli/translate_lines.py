"""`tmt translate` line by line: a translation (or n-best list) per input line, with the
per-line options of their files (--prefix, --constraints), a glossary, a report of dropped
content (--report) and scores against references (--ref). Also the Translator as the flags
load it, and the warnings about what it changed in the input, which documents share."""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from transformer_mt.cli.common import open_in, open_out, set_cpu_threads
from transformer_mt.cli.flags import decode_changes
from transformer_mt.errors import TmtError
from transformer_mt.progress import PROGRESS_SECONDS

if TYPE_CHECKING:  # imported where used: `tmt --help` loads no model library
    from transformer_mt.inference.glossary import Glossary
    from transformer_mt.inference.requests import Texts
    from transformer_mt.inference.translator import Translator


@dataclass(frozen=True)
class _LineFiles:
    """What the files of --ref, --prefix, --constraints and --glossary hold (None: not given),
    read before the model loads."""

    references: list[str] | None
    prefixes: list[str] | None
    constraints: list[list[str]] | None
    glossary: Glossary | None


@dataclass(frozen=True)
class _Source:
    """The input: its name in messages, its lines, and their per-line options."""

    name: str
    lines: Iterable[str]  # a stream when typed at a terminal without per-line options
    interactive: bool  # typed at a terminal: each line is translated as it comes
    total: int | None  # None: read as typed
    options: Texts | None


def translate_lines(args: argparse.Namespace) -> int:
    """`tmt translate --format text`, its flags checked (translate.py)."""
    from transformer_mt.machine import keep_freed_memory

    keep_freed_memory()
    files = _read_line_files(args)
    if args.device == "cpu":
        set_cpu_threads(args.quiet)
    best: list[str] = []
    with contextlib.ExitStack() as stack:
        source = _read_source(args, files, stack)
        alignment_layer = args.alignment_layer if args.alignments else None
        translator = load_translator(
            args, alignment_layer=alignment_layer, split_sentences=args.split_sentences
        )
        count = _translate(
            args, translator, source, glossary=files.glossary, stack=stack, best=best
        )
    print_input_warnings(translator)
    if not args.quiet:
        print(f"translated {count} line(s)", file=sys.stderr)
    if files.references is not None:
        from transformer_mt.evaluation import corpus_scores

        for score in corpus_scores(best, files.references, ["bleu", "chrf"]):
            print(score.string, file=sys.stderr)
    return 0


def load_translator(
    args: argparse.Namespace, *, alignment_layer: int | None, split_sentences: bool = True
) -> Translator:
    """The Translator of --checkpoint with the model and decode flags of `args`."""
    from transformer_mt.inference.translator import LineSettings, Translator

    lines = LineSettings(
        alignment_layer=alignment_layer,
        src_lang=args.src_lang,
        tgt_lang=args.tgt_lang,
        split_sentences=split_sentences,
    )
    return Translator.from_checkpoint(
        args.checkpoint,
        device=args.device,
        quantize=args.quantize,
        lines=lines,
        shortlist=args.shortlist,
        **decode_changes(args),
    )


def print_input_warnings(translator: Translator, unit: str = "line") -> None:
    """What the translator changed in the input (truncated lines or document blocks, language
    tags taken out), counted on stderr once the output is written."""
    if translator.truncated_lines:
        print(
            f"warning: {translator.truncated_lines} {unit}(s) longer than the model's "
            f"{translator.max_src_tokens} source tokens were truncated",
            file=sys.stderr,
        )
    if translator.tagged_lines:
        print(
            f"warning: {translator.tagged_lines} {unit}(s) held a language tag, taken out: the "
            "language comes from --tgt-lang / --src-lang only",
            file=sys.stderr,
        )


def load_glossary(args: argparse.Namespace) -> Glossary | None:
    """The glossary of --glossary (None: not given)."""
    if args.glossary is None:
        return None
    from transformer_mt.inference.glossary import Glossary

    return Glossary.load(args.glossary, args.glossary_ignore_case)


def _read_line_files(args: argparse.Namespace) -> _LineFiles:
    from transformer_mt.files import read_lines
    from transformer_mt.inference.glossary import read_constraints

    references = None
    if args.ref is not None:
        from transformer_mt.evaluation import read_segments

        references = read_segments(args.ref)
    return _LineFiles(
        references=references,
        prefixes=None if args.prefix is None else read_lines(args.prefix),
        constraints=None if args.constraints is None else read_constraints(args.constraints),
        glossary=load_glossary(args),
    )


def _read_source(
    args: argparse.Namespace, files: _LineFiles, stack: contextlib.ExitStack
) -> _Source:
    """The input, read whole unless typed at a terminal (length-sorted batches of a whole
    file keep padding low); per-line files must have as many lines as it."""
    from transformer_mt.files import decode_lines

    interactive = args.input == "-" and sys.stdin is not None and sys.stdin.isatty()
    name = "<stdin>" if args.input == "-" else args.input
    lines = decode_lines(open_in(args.input, stack), name)
    if interactive and files.prefixes is None and files.constraints is None:
        return _Source(name, lines, interactive=True, total=None, options=None)
    lines = list(lines)
    if files.references is not None:
        from transformer_mt.evaluation import check_line_counts

        check_line_counts(name, len(lines), args.ref, len(files.references))
    options = _line_options(args, files, name=name, lines=lines)
    total = None if interactive else len(lines)
    return _Source(name, lines, interactive=interactive, total=total, options=options)


def _line_options(
    args: argparse.Namespace, files: _LineFiles, *, name: str, lines: list[str]
) -> Texts | None:
    """The per-line options of `lines` from their files (None: none given); a file without
    one line per input line is refused, naming both files (`TextsCountError.field`)."""
    from transformer_mt.inference.requests import Texts, TextsCountError

    if files.prefixes is None and files.constraints is None:
        return None
    try:
        return Texts.of(lines, prefixes=files.prefixes, constraints=files.constraints)
    except TextsCountError as err:
        path, what, one = {
            "prefixes": (args.prefix, "prefix", "one prefix line"),
            "constraints": (args.constraints, "constraint", "one line of phrases"),
        }[err.field]
        raise TmtError(
            f"{path}: {err.given} {what} line(s) for the {err.n_texts} line(s) of "
            f"{name}: give {one} (blank for none) per input line"
        ) from None


def _translate(
    args: argparse.Namespace,
    translator: Translator,
    source: _Source,
    *,
    glossary: Glossary | None,
    stack: contextlib.ExitStack,
    best: list[str],
) -> int:
    """Translate `source` to --output (and --report), the best translations appended to
    `best`; the number of lines translated. A phrase that cannot be met names its line."""
    from transformer_mt.inference.constrained import ConstraintsError
    from transformer_mt.inference.stream import LineOptions, stream_progress, translate_stream

    out = open_out(args.output, stack)
    report = None if args.report is None else open_out(args.report, stack)
    bar = not args.quiet and (args.progress or (sys.stderr.isatty() and not source.interactive))
    # Without a terminal (a log file, a batch job): a plain progress line now and then.
    quiet_or_tty = args.quiet or source.interactive or sys.stderr.isatty()
    plain = None if quiet_or_tty else PROGRESS_SECONDS
    try:
        return translate_stream(
            translator,
            source.lines,
            out,
            1 if source.interactive else 2000,
            options=LineOptions(source.options, glossary),
            progress=stream_progress(source.total, bar, plain),
            collect=best,
            report_out=report,
        )
    except ConstraintsError as err:
        raise TmtError(f"{source.name}:{err.line + 1}: {err.reason}") from None
