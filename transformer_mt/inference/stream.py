"""Lines in, lines out: chunking and writing translations for `tmt translate`.

The line promises of `tmt translate` that do not depend on the model: one output line per
input line (or exactly n_best lines in n-best format); each chunk is written and flushed as
soon as it is translated. Input lines are decoded by `files.decode_lines` (invalid UTF-8 stops
with the line number); lines translated so far are counted by `progress.ProgressReport`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import replace
from typing import TextIO

from transformer_mt.inference.checked import translate_checked
from transformer_mt.inference.constrained import ConstraintsError
from transformer_mt.inference.glossary import Glossary
from transformer_mt.inference.requests import Texts
from transformer_mt.inference.translator import Translation, Translator
from transformer_mt.progress import Counted, ProgressReport

# `translated 1200/5000 lines (24%), 41.3 sentences/s, ETA 1m32s`
TRANSLATED = Counted(verb="translated", noun="lines", rate_unit="sentences")


def format_translation(translation: Translation, index: int, nbest: int) -> str:
    """One line for 1-best; `index ||| text ||| score` lines (Moses n-best style) otherwise.

    With alignments: the translation, a TAB, then space-separated `src_idx-tgt_idx` pairs.
    """
    if translation.alignment is not None:
        pairs = " ".join(f"{s}-{t}" for s, t in translation.alignment)
        return f"{translation.texts[0]}\t{pairs}"
    if nbest == 1:
        return translation.texts[0]
    return "\n".join(
        f"{index} ||| {text} ||| {score:.4f}"
        for text, score in zip(translation.texts, translation.scores, strict=True)
    )


def translate_stream(
    translator: Translator,
    lines: Iterable[str],
    out: TextIO,
    chunk_lines: int,
    *,
    options: Texts | None = None,
    glossary: Glossary | None = None,
    progress: bool = False,
    total: int | None = None,
    collect: list[str] | None = None,
    report_every_s: float | None = None,
    report_out: TextIO | None = None,
) -> int:
    """Translate `lines` in chunks of `chunk_lines`, writing (and flushing) each chunk.

    `chunk_lines=1` gives interactive line-by-line behaviour on a terminal; a large chunk
    lets length-sorted batching keep padding low. The best translations are appended to
    `collect` when given (for scoring). Returns the number of lines translated.

    Args:
        options: the per-line options (`Texts` of the same lines: prefixes, constraints),
            each chunk translated with its lines' own; None: none.
        glossary: terms whose targets the translation of a sentence holding them contains,
            for every line (a file read as it streams has no count to give one per line).
        progress: draw a tqdm bar on stderr (a terminal).
        report_every_s: without a bar, write a plain progress line on stderr at most this
            often (a log file, where a bar is switched off and would be unreadable); None: none.
        report_out: check every sentence for dropped content, retry the flagged ones that
            cut (`checked.translate_checked`) and write one JSON line per input line here
            (`CheckedLine.to_json`, lines numbered from 1); not with prefixes or constraints.

    Raises:
        ConstraintsError: a line whose constraints cannot fit, numbered among all `lines`.
        TmtError: a report asked for with prefixes or constraints (`Texts.refuse_report`).
    """
    if report_out is not None and options is not None:
        options.refuse_report()
    count = 0
    report = ProgressReport(total, TRANSLATED, progress, report_every_s)
    for chunk in _chunks(lines, chunk_lines):
        request = Texts.of(chunk, glossary=glossary)
        if options is not None:
            lines_options = options.picked(range(count, count + len(chunk)))
            request = replace(lines_options, texts=request.texts, glossaries=request.glossaries)
        if report_out is not None:
            checked = translate_checked(translator, request, report.update)
            translations = [line.translation for line in checked]
            for number, line in enumerate(checked, start=count + 1):
                print(json.dumps(line.to_json(number), ensure_ascii=False), file=report_out)
            report_out.flush()
        else:
            try:
                translations = translator.translate(request, report.update)
            except ConstraintsError as err:
                raise err.shifted(count) from None
        for translation in translations:
            print(format_translation(translation, count, translator.decode.n_best), file=out)
            if collect is not None:
                collect.append(translation.texts[0])
            count += 1
        out.flush()
        report.update(count - report.done)  # the chunk's empty lines, never searched
    report.close()
    return count


def _chunks(lines: Iterable[str], size: int) -> Iterator[list[str]]:
    chunk: list[str] = []
    for line in lines:
        chunk.append(line)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk
