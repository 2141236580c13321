"""A served text as the sentences the engine searches, and the way back to one translation per
text.

The engine does not go through `Translator.translate` (it batches sentences of many requests
step by step), yet a text must be cut into sentences as `tmt translate` cuts a line: our
models learn from single sentences and translate a paragraph by its first sentence or two
(inference/sentences.py). So the engine asks the Translator's own rule, `Translator.split`,
and joins the sentences' translations with `Translation.joined`; a served text of one line
translates byte for byte as `tmt translate` translates that line (tested).

A text may hold line breaks where a line of `tmt translate` cannot (a LibreTranslate client
sends a textarea's paragraphs as one text). Each of its lines is split as `tmt translate`
splits that line, and the line breaks (`\\n`, `\\r\\n`, `\\r`) go back verbatim, between the
translations of the lines around them; a blank line stays blank. A text with a forced prefix
or constraints of its own is one sentence, line breaks and all: the prefix starts the text's
translation and the constraints belong to the text, as the Translator keeps such a line whole.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from transformer_mt.inference.languages import Direction
from transformer_mt.inference.requests import Texts
from transformer_mt.inference.sentences import Segments, SplitLines
from transformer_mt.inference.translator import Translation, Translator

LINE_BREAK = re.compile(r"(\r\n|\r|\n)")


def split_texts(
    translator: Translator, request: Texts, directions: Sequence[Direction]
) -> SplitLines:
    """The sentences of the texts of `request` (one `Segments` per text), each split by the
    rules of its direction's source language; whole where `Texts.keeps_whole` (see the
    module)."""
    return SplitLines(
        tuple(
            Segments.whole(text)
            if request.keeps_whole(i)
            else _text_segments(translator, text, direction)
            for i, (text, direction) in enumerate(zip(request.texts, directions, strict=True))
        )
    )


def joined_translations(split: SplitLines, results: Sequence[Translation]) -> list[Translation]:
    """One translation per text of `split`, from one per sentence (`Translation.joined`)."""
    return [
        Translation.joined(segments, parts)
        for segments, parts in zip(split.lines, split.regroup(results), strict=True)
    ]


def _text_segments(translator: Translator, text: str, direction: Direction) -> Segments:
    """`text` as the sentences of its lines; a text of one line as `Translator.split` cuts it."""
    pieces = LINE_BREAK.split(text)
    lines, breaks = pieces[::2], pieces[1::2]
    if not breaks:
        return translator.split([text], [direction]).lines[0]
    split = translator.split(lines, [direction] * len(lines))
    sentences: list[str] = []
    separators = [""]
    for i, (line, segments) in enumerate(zip(lines, split.lines, strict=True)):
        if i:
            separators[-1] += breaks[i - 1]
        if not line.strip():  # a blank line: nothing to translate, kept as it is
            separators[-1] += line
            continue
        separators[-1] += segments.separators[0]
        for sentence, after in zip(segments.sentences, segments.separators[1:], strict=True):
            sentences.append(sentence)
            separators.append(after)
    if not sentences:  # blank lines only: kept as they are, around an empty sentence
        return Segments(("",), ("", text))
    return Segments(tuple(sentences), tuple(separators))
