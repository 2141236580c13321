"""`tmt translate` line by line: a translation (or n-best list) per input line, with the
per-line options of their files (--prefix, --constraints), a glossary, a report of dropped
content (--report) and scores against references (--ref). Also the Translator as the flags
load it, and the warnings about what it changed in the input, which documents share.

A file given as --input is counted in a first pass over its bytes (the total for progress and
for the per-line files' checks) and then translated as it is read, a chunk at a time: memory
stays flat whatever its size. Written to a file (--output), such a run is resumable: stopped,
it keeps the chunks done beside the output and the same command continues from there
(`inference.resume`). Piped input is read whole, to know its total, as before."""

from __future__ import annotations

import argparse
import contextlib
import itertools
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from transformer_mt.cli.common import open_in, open_out, set_cpu_threads
from transformer_mt.cli.flags import decode_changes
from transformer_mt.errors import TmtError
from transformer_mt.progress import PROGRESS_SECONDS, ProgressReport

if TYPE_CHECKING:  # imported where used: `tmt --help` loads no model library
    from transformer_mt.inference.glossary import Glossary
    from transformer_mt.inference.requests import Texts
    from transformer_mt.inference.resume import PartialOutput
    from transformer_mt.inference.translator import Translation, Translator

# Flags that change what is said on stderr or where the output goes, not the translations:
# a run continued with another of them writes the same output.
NOT_IN_FINGERPRINT = frozenset({"output", "progress", "quiet"})
# Lines translated (and held) at a time: enough for length-sorted batches to keep padding
# low; also the step at which an interrupted run is continued.
CHUNK_LINES = 2000


@dataclass(frozen=True)
class _LineFiles:
    """What the files of --ref, --prefix, --constraints and --glossary hold (None: not given),
    read before the model loads. They are held whole: references are scored with the whole
    output at the end, and a per-line file is checked (its count, UTF-8, phrase lengths)
    before any decoding, so that a mistake on its last line costs no translation time."""

    references: list[str] | None
    prefixes: list[str] | None
    constraints: list[list[str]] | None
    glossary: Glossary | None


@dataclass(frozen=True)
class _Source:
    """The input: its name in messages, its lines, and their per-line options."""

    name: str
    lines: Iterable[str]  # read as it streams, except from a pipe (held, to count it)
    interactive: bool  # typed at a terminal: each line is translated as it comes
    total: int | None  # None: read as typed
    options: Texts | None
    is_file: bool  # --input names a regular file (counted, then streamed)


def translate_lines(args: argparse.Namespace) -> int:
    """`tmt translate --format text`, its flags checked (translate.py)."""
    from transformer_mt.machine import keep_freed_memory

    keep_freed_memory()
    files = _read_line_files(args)
    if args.device == "cpu":
        set_cpu_threads(args.quiet)
    best: list[str] | None = None if files.references is None else []
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
    if files.references is not None and best is not None:
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
    """The input: a file counted, then read as it streams; a pipe read whole to count it; a
    terminal's lines as typed. Per-line files must have as many lines as it."""
    from transformer_mt.files import decode_lines

    interactive = args.input == "-" and sys.stdin is not None and sys.stdin.isatty()
    name = "<stdin>" if args.input == "-" else args.input
    is_file = args.input != "-" and Path(args.input).is_file()
    total = _count_lines(args.input) if is_file else None
    lines: Iterable[str] = decode_lines(open_in(args.input, stack), name)
    if interactive and files.prefixes is None and files.constraints is None:
        return _Source(name, lines, interactive=True, total=None, options=None, is_file=False)
    if total is None:
        lines = list(lines)
        total = len(lines)
    if files.references is not None:
        from transformer_mt.evaluation import check_line_counts

        check_line_counts(name, total, args.ref, len(files.references))
    options = _line_options(args, files, name=name, total=total)
    total_known = None if interactive else total
    return _Source(name, lines, interactive, total_known, options, is_file=is_file)


def _count_lines(path: str) -> int:
    """The lines of the file `path` as `files.decode_lines` splits them, counted in its bytes
    (a last line without a line end counts): nothing is decoded or held."""
    count, last = 0, b"\n"
    try:
        with open(path, "rb") as f:
            while block := f.read(1 << 20):
                count += block.count(b"\n")
                last = block[-1:]
    except OSError as err:
        raise TmtError(f"{path}: {err.strerror}") from None
    return count + (last != b"\n")


def _line_options(
    args: argparse.Namespace, files: _LineFiles, *, name: str, total: int
) -> Texts | None:
    """The per-line options of the `total` input lines from their files (None: none given);
    a file without one line per input line is refused, naming both files
    (`TextsCountError.field`). The lines themselves come chunk by chunk
    (`LineOptions.chunk`); blanks stand in for them here."""
    from transformer_mt.inference.requests import Texts, TextsCountError

    if files.prefixes is None and files.constraints is None:
        return None
    try:
        return Texts.of([""] * total, prefixes=files.prefixes, constraints=files.constraints)
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
    best: list[str] | None,
) -> int:
    """Translate `source` to --output (and --report), the best translations appended to
    `best` (None: not kept); the number of lines translated, by this run and the earlier
    ones it continued. A phrase that cannot be met names its line."""
    from transformer_mt.inference.constrained import ConstraintsError
    from transformer_mt.inference.stream import LineOptions, translate_stream

    partial = _open_partial(args, source, stack)
    out = open_out(args.output, stack) if partial is None else partial.file
    first = 0 if partial is None else partial.resumed
    report = None if args.report is None else open_out(args.report, stack)

    def chunk_done(translations: Sequence[Translation], lines_done: int) -> None:
        if best is not None:
            best.extend(translation.texts[0] for translation in translations)
        if partial is not None:
            partial.commit(lines_done)

    try:
        return first + translate_stream(
            translator,
            itertools.islice(source.lines, first, None),
            out,
            1 if source.interactive else CHUNK_LINES,
            options=LineOptions(source.options, glossary, first_line=first),
            progress=_progress(args, source, first),
            chunk_done=chunk_done,
            report_out=report,
        )
    except ConstraintsError as err:
        raise TmtError(f"{source.name}:{err.line + 1}: {err.reason}") from None
    except BaseException:
        if partial is not None and partial.lines_done and not args.quiet:
            _say_kept(partial)
        raise


def _say_kept(partial: PartialOutput) -> None:
    """Where the lines an interrupted run finished wait for the same command to continue."""
    print(
        f"note: {partial.lines_done} translated line(s) kept in {partial.partial}; "
        "the same command continues from there",
        file=sys.stderr,
    )


def _progress(args: argparse.Namespace, source: _Source, first: int) -> ProgressReport:
    """The progress of the lines from `first` on: a bar on a terminal (or --progress), else a
    plain line now and then (a log file, a batch job); nothing with --quiet or when reading
    a terminal."""
    from transformer_mt.inference.stream import stream_progress

    bar = not args.quiet and (args.progress or (sys.stderr.isatty() and not source.interactive))
    quiet_or_tty = args.quiet or source.interactive or sys.stderr.isatty()
    total = None if source.total is None else source.total - first
    return stream_progress(total, bar, None if quiet_or_tty else PROGRESS_SECONDS)


def _open_partial(
    args: argparse.Namespace, source: _Source, stack: contextlib.ExitStack
) -> PartialOutput | None:
    """The resumable output of a file translated to a file (None: another run), saying on
    stderr what became of an earlier run's partial. Not with --ref, whose scores need the
    translations of every chunk, nor --report, a second output."""
    output = Path(args.output)
    stream = output.exists() and not output.is_file()  # a device, a FIFO
    if args.output == "-" or stream or not source.is_file or args.ref or args.report:
        return None
    from transformer_mt.inference.resume import resumable_output

    partial = stack.enter_context(resumable_output(args.output, _fingerprint(args)))
    if args.quiet:
        return partial
    if partial.note is not None:
        print(f"note: {partial.note}", file=sys.stderr)
    if partial.resumed:
        print(
            f"note: continuing {partial.partial}: {partial.resumed} of {source.total} lines "
            "were translated by an earlier run",
            file=sys.stderr,
        )
    return partial


def _fingerprint(args: argparse.Namespace) -> dict[str, object]:
    """What decides the translations of a run: the identity (path, size, modification time)
    of each file it reads, and every flag but those in NOT_IN_FINGERPRINT."""
    from transformer_mt.inference.resume import file_identity

    checkpoints = args.checkpoint if isinstance(args.checkpoint, list) else [args.checkpoint]
    files = {
        "--checkpoint file": [file_identity(path) for path in checkpoints],
        **{
            f"{flag} file": file_identity(path)
            for flag, path in (
                ("--input", args.input),
                ("--prefix", args.prefix),
                ("--constraints", args.constraints),
                ("--glossary", args.glossary),
                ("--shortlist", args.shortlist),
            )
            if path is not None
        },
    }
    simple = (str, int, float, bool, type(None), list, tuple)
    flags = {
        f"--{key.replace('_', '-')}": value
        for key, value in sorted(vars(args).items())
        if key not in NOT_IN_FINGERPRINT and isinstance(value, simple)
    }
    return {**files, **flags}
