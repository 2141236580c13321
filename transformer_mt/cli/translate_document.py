"""`tmt translate --format html|markdown`: the whole input is one document, translated unit
by unit with its markup kept (docs/documents.md)."""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Callable

from transformer_mt.cli.common import device_of, open_in, open_out, set_cpu_threads
from transformer_mt.cli.translator_flags import (
    load_glossary,
    load_translator,
    print_input_warnings,
    progress_style,
)
from transformer_mt.errors import TmtError
from transformer_mt.progress import Counted, ProgressReport


def translate_one_document(args: argparse.Namespace) -> int:
    """`tmt translate` of a document, its flags checked (translate.py)."""
    from transformer_mt.documents.translate import translate_document
    from transformer_mt.documents.units import DocumentError
    from transformer_mt.inference.requests import Texts
    from transformer_mt.text_files import read_document

    _refuse_line_flags(args)
    if device_of(args) == "cpu":
        set_cpu_threads(args.quiet)
    name = "<stdin>" if args.input == "-" else args.input
    with contextlib.ExitStack() as stack:
        text = read_document(open_in(args.input, stack), name)
        # A document aligns by itself (documents/alignment.py).
        translator = load_translator(
            args, alignment_layer=None, split_sentences=args.split_sentences
        )
        glossary = load_glossary(args)
        if glossary is not None:
            translator.encoding.check_glossary(glossary)
        document = Texts.of([text], glossary=glossary)
        try:
            translated = translate_document(
                translator,
                document,
                args.format,
                alignment_layer=args.alignment_layer,
                progress=_progress(args),
            )
        except DocumentError as err:
            raise TmtError(f"{name}:{err.line}:{err.column}: {err.reason}") from None
        open_out(args.output, stack).write(translated)
    print_input_warnings(translator, "block")
    if not args.quiet:
        print(f"translated {name} ({args.format})", file=sys.stderr)
    return 0


def _progress(args: argparse.Namespace) -> Callable[[Counted, int], ProgressReport]:
    """Each pass over the document's units reported as lines are (`progress_style`)."""
    bar, every_s = progress_style(args)
    return lambda counted, total: ProgressReport(total, counted, bar, every_s)


def _refuse_line_flags(args: argparse.Namespace) -> None:
    """Refuse the flags of one thing per input line: a document is not one per line (its
    terms go in --glossary)."""
    line_flags = {
        "--ref": args.ref,
        "--prefix": args.prefix,
        "--alignments": args.alignments,
        "--report": args.report,
        "--constraints": args.constraints,
        "--nbest": args.n_best not in (None, 1),
    }
    for flag, given in line_flags.items():
        if given:
            raise TmtError(f"{flag}: for --format text only (a document is not one per line)")
