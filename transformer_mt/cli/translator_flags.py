"""What `tmt translate`'s flags make, for lines (translate_lines.py) and documents
(translate_document.py) alike: the Translator, the glossary, how progress is shown, and the
warnings about what was changed in the input."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from transformer_mt.cli.common import device_of
from transformer_mt.cli.flags import decode_changes
from transformer_mt.progress import PROGRESS_SECONDS

if TYPE_CHECKING:  # imported where used: `tmt --help` loads no model library
    from transformer_mt.inference.glossary import Glossary
    from transformer_mt.inference.translator import Translator


def load_translator(
    args: argparse.Namespace, *, alignment_layer: int | None, split_sentences: bool = True
) -> Translator:
    """The Translator of --checkpoint with the model and decode flags of `args`."""
    from transformer_mt.inference.line_settings import LineSettings
    from transformer_mt.inference.translator import Translator

    lines = LineSettings(
        alignment_layer=alignment_layer,
        src_lang=args.src_lang,
        tgt_lang=args.tgt_lang,
        split_sentences=split_sentences,
    )
    return Translator.from_checkpoint(
        args.checkpoint,
        device=device_of(args),
        quantize=args.quantize,
        lines=lines,
        shortlist=args.shortlist,
        **decode_changes(args),
    )


def print_input_warnings(translator: Translator, unit: str = "line") -> None:
    """What the translator changed in the input (truncated lines or document blocks, language
    tags taken out), counted on stderr once the output is written."""
    from transformer_mt.data.specials import BACK_TRANSLATION_TAG

    if translator.encoding.truncated_lines:
        print(
            f"warning: {translator.encoding.truncated_lines} {unit}(s) longer than the model's "
            f"{translator.encoding.max_src_tokens} source tokens were truncated",
            file=sys.stderr,
        )
    if translator.encoding.tagged_lines:
        print(
            f"warning: {translator.encoding.tagged_lines} {unit}(s) held a language tag or "
            f"{BACK_TRANSLATION_TAG}, taken out: the language comes from --tgt-lang / --src-lang "
            "only",
            file=sys.stderr,
        )
    if translator.unforced_lines:
        print(
            f"warning: {translator.unforced_lines} blank {unit}(s) had a --prefix or "
            "--constraints line, unused: a blank line translates to a blank one",
            file=sys.stderr,
        )


def load_glossary(args: argparse.Namespace) -> Glossary | None:
    """The glossary of --glossary (None: not given)."""
    if args.glossary is None:
        return None
    from transformer_mt.inference.glossary import Glossary

    return Glossary.load(args.glossary, args.glossary_ignore_case)


def progress_style(
    args: argparse.Namespace, interactive: bool = False
) -> tuple[bool, float | None]:
    """How `tmt translate` shows progress: (a bar, seconds between plain lines). A bar on a
    terminal (or --progress), else a plain line now and then (a log file, a batch job);
    nothing with --quiet or when reading a terminal (`interactive`)."""
    bar = not args.quiet and (args.progress or (sys.stderr.isatty() and not interactive))
    quiet_or_tty = args.quiet or interactive or sys.stderr.isatty()
    return bar, None if quiet_or_tty else PROGRESS_SECONDS
