"""What translating one line gives: its n-best translations with their search scores."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from transformer_mt.inference.sentences import Segments, SplitLines
from transformer_mt.writing_systems import has_letter

Span = tuple[int, int]  # a piece of a text: its start and end character offsets


@dataclass
class Translation:
    """The n-best translations of one input line, best first, with their search scores.

    `alignment` (with alignments on): (source index, target index) subword pairs of the best.
    `sentences`: for a line translated sentence by sentence, each sentence's place in the line
    and its translation's place in the best (start, end character offsets): what aligns the
    best sentence by sentence (documents/alignment.py); empty for a line translated whole.
    """

    texts: list[str]
    scores: list[float]
    alignment: list[tuple[int, int]] | None = None
    sentences: tuple[tuple[Span, Span], ...] = ()

    @classmethod
    def empty(cls, n_best: int, alignment: list | None = None) -> Translation:
        """The translation of a blank line: n_best empty strings, each with score 0.0 (the
        log-probability of nothing), so n-best output keeps n_best lines for every input."""
        return cls([""] * n_best, [0.0] * n_best, alignment)

    @classmethod
    def as_written(cls, text: str, n_best: int, alignment: list | None = None) -> Translation:
        """The translation of a sentence `kept_as_written`: itself, its whitespace runs as one
        space as the model reads and writes them (a TAB would split a line of `--alignments`
        output), n_best times, each with score 0.0 (as a blank line's: nothing was searched)."""
        return cls([as_written(text)] * n_best, [0.0] * n_best, alignment)

    @classmethod
    def joined(cls, segments: Segments, parts: Sequence[Translation]) -> Translation:
        """The translation of a line from those of its sentences (`segments`): the k-th
        hypothesis joins the sentences' k-th, with the sum of their scores. A line of one
        sentence keeps its translation (alignment included: only such lines have one, see
        inference/translator.py), with the text around the sentence where there is some (a
        served text's line breaks: they had been dropped around a single sentence)."""
        if len(parts) == 1:
            part = parts[0]
            if segments.separators == ("", ""):
                return part
            return cls([segments.join([text]) for text in part.texts], part.scores, part.alignment)
        n_best = range(len(parts[0].texts))
        best = [part.texts[0] for part in parts]
        places = zip(segments.source_spans, segments.spans(best), strict=True)
        return cls(
            [segments.join([part.texts[k] for part in parts]) for k in n_best],
            [sum(part.scores[k] for part in parts) for k in n_best],
            sentences=tuple(places),
        )


def joined_lines(split: SplitLines, found: Sequence[Translation]) -> list[Translation]:
    """One translation per line of `split`, from one per sentence (`Translation.joined`)."""
    return [
        Translation.joined(segments, parts)
        for segments, parts in zip(split.lines, split.regroup(found), strict=True)
    ]


def kept_as_written(sentence: str, prefix: str = "", phrases: Sequence[str] = ()) -> bool:
    """Whether `sentence` is its own translation, never searched: it holds no letter of any
    script (a number, a time, symbols, emoji, a rule such as `* * *`). The models learn from
    sentences and wrote one for such text (the Multi30k model: "2024" -> "There are two men
    are walking down.", "🐕" -> "A race race."), so that a table's numbers became captions.
    A sentence given a forced `prefix` or target `phrases` is searched: they ask for words;
    a blank one is not kept, it is blank (translated to nothing).
    """
    asked = prefix.strip() or any(phrase.strip() for phrase in phrases)
    return bool(sentence.strip()) and not asked and not has_letter(sentence)


def as_written(sentence: str) -> str:
    """What a sentence `kept_as_written` is translated to: `Translation.as_written`."""
    return " ".join(sentence.split())
