"""`tmt translate` line by line: a translation (or n-best list) per input line, with the
per-line options of their files (--prefix, --constraints), a glossary, a report of dropped
content (--report) and scores against references (--ref). The Translator as the flags load it
is translator_flags.py's, which documents share.

The input is translated as it is read, a chunk at a time, and so are the references of --ref
(each chunk's translations scored as they come, `evaluation.CorpusScorer`) and the lines of
--prefix and --constraints (each chunk asked with its own): memory stays flat whatever their
size. A file given as --input is counted first, in a pass over its bytes (the
total for progress and for checking the per-line and reference files before any decoding);
piped input cannot be counted before it is read, so its lines are checked against those files
as they come. Written to a file (--output), a file's run is resumable: stopped, it keeps the
chunks done beside the output and the same command continues from there (`inference.resume`)."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import itertools
import sys
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from transformer_mt.cli.common import device_of, open_in, open_out, set_cpu_threads
from transformer_mt.cli.translate_resume import open_partial, say_kept
from transformer_mt.cli.translator_flags import (
    load_glossary,
    load_translator,
    print_input_warnings,
    progress_style,
)
from transformer_mt.errors import SettingError, TmtError
from transformer_mt.progress import ProgressReport

if TYPE_CHECKING:  # imported where used: `tmt --help` loads no model library
    from transformer_mt.evaluation import CorpusScorer
    from transformer_mt.inference.glossary import Glossary
    from transformer_mt.inference.stream import LineOptions
    from transformer_mt.inference.translator import Translation, Translator

# Lines translated (and held) at a time: enough for length-sorted batches to keep padding
# low; also the step at which an interrupted run is continued.
CHUNK_LINES = 2000


@dataclass(frozen=True)
class _LineFiles:
    """The line counts of the files of --ref, --prefix and --constraints (None: not given) and
    the glossary of --glossary, read before the model loads, so that a mistake on their last
    line costs no translation time. Each of those files is read through once here and counted
    (its UTF-8 and a constraint's phrase lengths checked), not held: it is read again beside
    the input, a chunk at a time (the references scored, the options asked with their lines).
    """

    ref_lines: int | None
    prefix_lines: int | None
    constraint_lines: int | None
    glossary: Glossary | None


@dataclass(frozen=True)
class _RefScores:
    """The scores against --ref of the translations so far: each chunk's best translations
    against the reference lines beside them, read as they come."""

    scorer: CorpusScorer
    references: Iterator[str]

    def add(self, translations: Sequence[Translation]) -> None:
        hypotheses = [translation.texts[0] for translation in translations]
        self.scorer.add(hypotheses, list(itertools.islice(self.references, len(hypotheses))))


@dataclass(frozen=True)
class _Source:
    """The input: its name in messages, its lines, and their per-line options."""

    name: str
    lines: Iterable[str]  # read as it streams
    interactive: bool  # typed at a terminal: each line is translated as it comes
    total: int | None  # None: not known before it is read (a pipe, a terminal)
    is_file: bool  # --input names a regular file (counted, then streamed)


def translate_lines(args: argparse.Namespace) -> int:
    """`tmt translate --format text`, its flags checked (translate.py)."""
    from transformer_mt.machine import keep_freed_memory

    keep_freed_memory()
    files = _read_line_files(args)
    tokenize = None if args.ref is None else _ref_tokenize(args)
    if device_of(args) == "cpu":
        set_cpu_threads(args.quiet)
    with contextlib.ExitStack() as stack:
        source = _read_source(args, files, stack)
        alignment_layer = args.alignment_layer if args.alignments else None
        translator = load_translator(
            args, alignment_layer=alignment_layer, split_sentences=args.split_sentences
        )
        scores = None if tokenize is None else _ref_scores(args.ref, tokenize, stack)
        _check_phrases(args, translator, files.glossary)
        if files.glossary is not None:
            translator.encoding.check_glossary(files.glossary)
        tabs = Counter[str]()
        source = dataclasses.replace(source, lines=_tabs_counted(source.lines, tabs))
        count = _translate(
            args, translator, source, glossary=files.glossary, stack=stack, scores=scores
        )
    print_input_warnings(translator)
    if count and tabs["one tab"] == tabs["lines"]:
        print(
            f"warning: every line of {source.name} held one TAB, as a TSV of pairs does: each "
            "was translated whole, its second column too; tmt evaluate --checkpoint CKPT "
            "--test FILE scores a TSV test set (data.format tsv)",
            file=sys.stderr,
        )
    if not args.quiet:
        print(f"translated {count} line(s)", file=sys.stderr)
    if scores is not None:
        for score in scores.scorer.scores():
            print(score.string, file=sys.stderr)
    return 0


def _check_phrases(
    args: argparse.Namespace, translator: Translator, glossary: Glossary | None
) -> None:
    """Refuse, before translating, phrases a sampling search cannot meet."""
    if translator.decode.sampling and (glossary or args.constraints):
        flag = "--glossary" if glossary else "--constraints"
        raise TmtError(
            f"{flag}: met by beam search only, and the search samples; add --no-sampling or drop it"
        )


def _ref_tokenize(args: argparse.Namespace) -> str:
    """BLEU's tokenizer for the --ref scores: that of the target language (--tgt-lang, else
    the checkpoint's), found before the model loads, so that one that is not installed
    (MeCab: Japanese, Korean) is refused before then.

    Raises:
        TmtError: naming --ref, the extra, and `tmt evaluate --tokenize` as the way without.
    """
    from transformer_mt.artifacts import stored_origin
    from transformer_mt.evaluation import bleu_tokenize, check_tokenize

    origin = stored_origin(Path(args.checkpoint[0]))
    target = args.tgt_lang or (origin.config.data.tgt_lang if origin is not None else None)
    tokenize = bleu_tokenize(target)
    try:
        check_tokenize(tokenize)
    except SettingError as err:
        raise TmtError(
            f"--ref: BLEU into {target} is tokenised by {err.value}, {err.reason}; or translate "
            "without --ref and score with tmt evaluate --tokenize char"
        ) from None
    return tokenize


def _ref_scores(path: str, tokenize: str, stack: contextlib.ExitStack) -> _RefScores:
    """BLEU (tokenised by `tokenize`, `_ref_tokenize`) and chrF against the references of
    `path`, read as the translations come."""
    from transformer_mt.evaluation import CorpusScorer, iter_segments

    scorer = CorpusScorer(["bleu", "chrf"], tokenize=tokenize)
    references = stack.enter_context(contextlib.closing(iter_segments(path)))
    return _RefScores(scorer, references)


def _read_line_files(args: argparse.Namespace) -> _LineFiles:
    """The line counts of --ref, --prefix and --constraints, each file read through once
    (its UTF-8 and phrases checked) before the model loads.

    Raises:
        TmtError: a file that is not a regular file, naming its flag: each is read twice, so
            a pipe would be empty the second time.
    """
    from transformer_mt.inference.glossary import iter_constraints
    from transformer_mt.text_files import file_problem, iter_lines

    def count(flag: str, path: str | None, read: Callable[[str], Iterator]) -> int | None:
        if path is None:
            return None
        problem = file_problem(Path(path))
        if problem is not None and problem != "missing":
            raise TmtError(
                f"{flag} {path}: {problem}; it is read twice (counted before translating, "
                "then beside the input): give a file"
            )
        return sum(1 for _ in read(path))

    return _LineFiles(
        ref_lines=count("--ref", args.ref, iter_lines),
        prefix_lines=count("--prefix", args.prefix, iter_lines),
        constraint_lines=count("--constraints", args.constraints, iter_constraints),
        glossary=load_glossary(args),
    )


def _read_source(
    args: argparse.Namespace, files: _LineFiles, stack: contextlib.ExitStack
) -> _Source:
    """The input, read as it streams: a file counted first, the reference and per-line
    files' counts checked against it, and its lines against the count as they are read (a
    file cut or grown meanwhile would give a short or long output, scored against part of
    --ref); a pipe's (or a terminal's) lines checked as they come
    (`_checked_lines`), a terminal's translated as typed."""
    from transformer_mt.text_files import count_lines, decode_lines

    interactive = args.input == "-" and sys.stdin is not None and sys.stdin.isatty()
    name = "<stdin>" if args.input == "-" else args.input
    is_file = args.input != "-" and Path(args.input).is_file()
    lines: Iterator[str] = decode_lines(open_in(args.input, stack), name)
    total = count_lines(args.input) if is_file else None
    if total is not None:
        _check_line_counts(args, files, name, total)

        def unchanged(count: int) -> None:  # the file was counted: its lines must stay so
            if count != total:
                raise TmtError(
                    f"{name}: {count} lines read, {total} counted before translating: the file "
                    "changed while it was read; translate it again once it is written"
                )

        lines = _checked_lines(lines, total, unchanged)
        return _Source(name, lines, interactive, total, is_file=True)

    def check(count: int) -> None:
        _check_line_counts(args, files, name, count)

    expected = _expected_lines(files, lines, check)
    if expected is not None:
        lines = _checked_lines(lines, expected, check)
    return _Source(name, lines, interactive, None, is_file=False)


def _check_line_counts(args: argparse.Namespace, files: _LineFiles, name: str, count: int) -> None:
    """Refuse a --ref, --prefix or --constraints file without one line for each of the
    input's `count` lines, naming both (with --ref, an empty input too:
    `evaluation.check_line_counts`)."""
    if files.ref_lines is not None:
        from transformer_mt.evaluation import check_line_counts

        check_line_counts(name, count, args.ref, files.ref_lines)
    per_line = (
        (args.prefix, files.prefix_lines, "prefix", "one prefix line"),
        (args.constraints, files.constraint_lines, "constraint", "one line of phrases"),
    )
    for path, given, what, one in per_line:
        if given is not None and given != count:
            raise TmtError(
                f"{path}: {given} {what} line(s) for the {count} line(s) of {name}: give {one} "
                "(blank for none) per input line"
            )


def _expected_lines(
    files: _LineFiles, lines: Iterator[str], check: Callable[[int], None]
) -> int | None:
    """The lines a pipe must hold: those of its reference and per-line files (None: none
    given). When they differ, one of them cannot match: the pipe is counted (not held) and
    `check` refuses that one by name."""
    given = (files.ref_lines, files.prefix_lines, files.constraint_lines)
    counts = {count for count in given if count is not None}
    if len(counts) > 1:
        check(sum(1 for _ in lines))
    return min(counts, default=None)


def _checked_lines(
    lines: Iterator[str], expected: int, check: Callable[[int], None]
) -> Iterator[str]:
    """The lines of a pipe (or a counted file) as they come, refused by `check` (with their
    number) once they pass `expected` (the rest counted, not held) or when they end short of
    it. The end is reached before the last chunk is translated, so a short input costs only
    the chunks before."""
    count = 0
    for line in lines:
        if count == expected:
            check(count + 1 + sum(1 for _ in lines))
        count += 1
        yield line
    check(count)


def _line_options(
    args: argparse.Namespace, glossary: Glossary | None, first: int, stack: contextlib.ExitStack
) -> LineOptions:
    """What the input lines from line `first` (from 0) on are asked with: the lines of --prefix
    and --constraints from that line on, read as the input's are, and the glossary."""
    from transformer_mt.inference.glossary import iter_constraints
    from transformer_mt.inference.stream import LineOptions
    from transformer_mt.text_files import iter_lines

    def from_first(path: str | None, read: Callable[[str], Iterator]) -> Iterator | None:
        if path is None:
            return None
        lines = stack.enter_context(contextlib.closing(read(path)))
        return itertools.islice(lines, first, None)

    prefixes = from_first(args.prefix, iter_lines)
    constraints = from_first(args.constraints, iter_constraints)
    return LineOptions(prefixes, constraints, glossary, first_line=first)


def _tabs_counted(lines: Iterable[str], tabs: Counter[str]) -> Iterator[str]:
    """`lines`, counted in `tabs` ("lines", and "one tab": those holding exactly one TAB)."""
    for line in lines:
        tabs["lines"] += 1
        tabs["one tab"] += line.count("\t") == 1
        yield line


def _translate(
    args: argparse.Namespace,
    translator: Translator,
    source: _Source,
    *,
    glossary: Glossary | None,
    stack: contextlib.ExitStack,
    scores: _RefScores | None,
) -> int:
    """Translate `source` to --output (and --report), each chunk's best translations added
    to `scores` (None: --ref not given); the number of lines translated, by this run and the
    earlier ones it continued. A phrase that cannot be met names its line."""
    from transformer_mt.inference.constrained import ConstraintsError
    from transformer_mt.inference.stream import translate_stream

    n_best = translator.decode.n_best
    partial = open_partial(args, source.is_file, source.total, n_best, stack)
    out = open_out(args.output, stack) if partial is None else partial.file
    first = 0 if partial is None else partial.resumed
    report = None if args.report is None else open_out(args.report, stack)

    def chunk_done(translations: Sequence[Translation], lines_done: int) -> None:
        if scores is not None:
            scores.add(translations)
        if partial is not None:
            partial.commit(lines_done)

    try:
        return first + translate_stream(
            translator,
            itertools.islice(source.lines, first, None),
            out,
            1 if source.interactive else CHUNK_LINES,
            options=_line_options(args, glossary, first, stack),
            progress=_progress(args, source, first),
            chunk_done=chunk_done,
            report_out=report,
        )
    except ConstraintsError as err:  # named by the line of the file that gave the text
        if err.field == "prefix":
            where = args.prefix or source.name
        elif args.constraints and glossary is None:
            where = args.constraints
        else:  # the line's --constraints phrases and its glossary terms are met together
            where = source.name
        raise TmtError(f"{where}:{err.line + 1}: {err.reason}") from None
    except BaseException:
        if partial is not None and partial.lines_done and not args.quiet:
            say_kept(partial)
        raise


def _progress(args: argparse.Namespace, source: _Source, first: int) -> ProgressReport:
    """The progress of the lines from `first` on (`progress_style`)."""
    from transformer_mt.inference.stream import stream_progress

    total = None if source.total is None else source.total - first
    return stream_progress(total, *progress_style(args, source.interactive))
