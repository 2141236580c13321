"""Lines in, lines out: chunking and writing translations for `tmt translate`.

The line promises of `tmt translate` that do not depend on the model: one output line per
input line (or exactly n_best lines in n-best format); each chunk is written and flushed as
soon as it is translated, and only a chunk's lines are held, so memory stays flat whatever the
input's size (docs/results.md). Input lines are decoded by `text_files.decode_lines` (invalid
UTF-8 stops with the line number); lines translated so far are counted by
`progress.ProgressReport`.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TextIO

from transformer_mt.inference.checked import translate_checked
from transformer_mt.inference.constrained import ConstraintsError
from transformer_mt.inference.glossary import Glossary
from transformer_mt.inference.nbest import format_hypothesis
from transformer_mt.inference.requests import Texts
from transformer_mt.inference.translator import Translation, Translator
from transformer_mt.progress import Counted, ProgressReport

# `translated 1200/5000 lines (24%), 41.3 sentences/s, ETA 1m32s`
TRANSLATED = Counted(verb="translated", noun="lines", rate_unit="sentences")


def format_translation(translation: Translation, index: int, nbest: int) -> str:
    """One line for 1-best; n-best lines (`inference.nbest`) otherwise.

    With alignments: the translation, a TAB, then space-separated `src_idx-tgt_idx` pairs.
    """
    if translation.alignment is not None:
        pairs = " ".join(f"{s}-{t}" for s, t in translation.alignment)
        return f"{translation.texts[0]}\t{pairs}"
    if nbest == 1:
        return translation.texts[0]
    return "\n".join(
        format_hypothesis(index, text, score)
        for text, score in zip(translation.texts, translation.scores, strict=True)
    )


@dataclass(frozen=True)
class LineOptions:
    """What the lines of a stream are asked with, chunk by chunk.

    Attributes:
        prefixes: each line's forced prefix ("": none), read as the lines are; None: none
            given.
        constraints: each line's target phrases, read as the lines are; None: none given.
        glossary: terms whose targets the translation of a sentence holding them contains,
            for every line.
        first_line: the input line (from 0) the stream's first line is: the lines before it
            were translated by an earlier run (`resume.resumable_output`), and `prefixes` and
            `constraints` start at it too.
    """

    prefixes: Iterator[str] | None = None
    constraints: Iterator[list[str]] | None = None
    glossary: Glossary | None = None
    first_line: int = 0

    def chunk(self, lines: list[str]) -> Texts:
        """The request of `lines`, the next chunk of the input, with the next options of each
        per-line source (a source that ends early leaves its option short: `Texts` refuses)."""

        def next_of(values: Iterator | None) -> list | None:
            return None if values is None else list(itertools.islice(values, len(lines)))

        return Texts.of(
            lines,
            prefixes=next_of(self.prefixes),
            constraints=next_of(self.constraints),
            glossary=self.glossary,
        )


def translate_stream(
    translator: Translator,
    lines: Iterable[str],
    out: TextIO,
    chunk_lines: int,
    *,
    options: LineOptions = LineOptions(),
    progress: ProgressReport | None = None,
    report_out: TextIO | None = None,
    chunk_done: Callable[[Sequence[Translation], int], None] | None = None,
) -> int:
    """Translate `lines` in chunks of `chunk_lines`, writing (and flushing) each chunk.

    `chunk_lines=1` gives interactive line-by-line behaviour on a terminal; a large chunk
    lets length-sorted batching keep padding low. Returns the number of lines translated.

    Args:
        options: what each line is asked with (`LineOptions`), and the input line the
            stream starts at, from which lines are numbered (n-best lists, the report, errors).
        progress: counts the lines translated (`stream_progress`); None: silent.
        report_out: check every sentence for dropped content, retry the flagged ones that
            cut (`checked.translate_checked`) and write one JSON line per input line here
            (`CheckedLine.to_json`, lines numbered from 1); not with prefixes or constraints.
        chunk_done: called once a chunk is written and flushed, with its translations and
            the number of input lines done (those before `options.first_line` included): to
            keep the best translations for scoring, or record a resumable output's progress.

    Raises:
        ConstraintsError: a line whose constraints cannot fit, numbered among all `lines`.
        TmtError: a report asked for with prefixes or constraints (`Texts.refuse_report`),
            before the first chunk is translated.
    """
    count = 0
    report = progress or stream_progress(None)
    for chunk in _chunks(lines, chunk_lines):
        start = options.first_line + count
        request = options.chunk(chunk)
        if report_out is not None:
            checked = translate_checked(translator, request, report.update)
            translations = [line.translation for line in checked]
            for number, line in enumerate(checked, start=start + 1):
                print(json.dumps(line.to_json(number), ensure_ascii=False), file=report_out)
            report_out.flush()
        else:
            try:
                translations = translator.translate(request, report.update)
            except ConstraintsError as err:
                raise err.shifted(start) from None
        for index, translation in enumerate(translations, start=start):
            print(format_translation(translation, index, translator.decode.n_best), file=out)
        count += len(translations)
        out.flush()
        report.update(count - report.done)  # the chunk's lines never searched (blank, no letter)
        if chunk_done is not None:
            chunk_done(translations, options.first_line + count)
    report.close()
    return count


def stream_progress(
    total: int | None, bar: bool = False, every_s: float | None = None
) -> ProgressReport:
    """The progress of a stream of `total` lines (None: unknown): a tqdm bar on stderr (a
    terminal), else a plain line at most every `every_s` seconds (a log file, where a bar
    would be unreadable; None: no lines)."""
    return ProgressReport(total, TRANSLATED, bar, every_s)


def _chunks(lines: Iterable[str], size: int) -> Iterator[list[str]]:
    chunk: list[str] = []
    for line in lines:
        chunk.append(line)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk
