"""Translations checked for dropped content (dropped.py), a retry of the flagged ones that can
be cut at sentence ends, and a report of what was found: `tmt translate --report FILE` and the
server's `"report": true` (serve/engine/) both go through `check_sentences`.

The retry: a flagged sentence that holds several sentences (a line translated whole, `tmt
translate --no-split`) is cut at its sentence ends (`split_line`, by the rules of its source
language), its sentences translated alone as one line's, and their translations joined with
the text that was between them. Its translation replaces the first, whether or not the check
passes each of its sentences (`cleared`): on valid2016 sentences joined 2, 3 and 4 to a line,
BLEU went from 24.0/14.4/9.0 to 33.5/43.5/45.7 with the retry kept always, to 32.8/41.7/42.7
kept only when cleared, and to 32.9/41.9/39.3 kept only when the check passes its whole
translation (scripts/bench_dropped.py, docs/results.md). A single sentence that is flagged is
reported, not retried: both retries tried for it lost. Cut after its commas and semicolons,
the model writes whole captions for fragments ("Frauen," -> "Women are walking."; BLEU 28.9
-> 20.5 on the 20 flagged valid2016 sentences), and a beam of 10 instead of 5 changed 5 of
those 20 translations.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from transformer_mt.inference.dropped import (
    DEFAULT_THRESHOLDS,
    Scores,
    Thresholds,
    check_translations,
)
from transformer_mt.inference.languages import Direction
from transformer_mt.inference.requests import Texts
from transformer_mt.inference.sentences import SplitLines, split_line
from transformer_mt.inference.translation import Translation, joined_lines
from transformer_mt.inference.translator import Translator

# retranslate(parts, owners): one translation per sentence of `parts.sentences`, each line of
# `parts` the retry of sentence owners[line] of those checked (its direction, its settings).
Retranslate = Callable[[SplitLines, Sequence[int]], list[Translation]]


@dataclass(frozen=True)
class SentenceReport:
    """The check of one sentence: its flags and scores, and the retry's outcome."""

    source: str
    flags: tuple[str, ...]
    scores: Scores
    retried: bool = False  # flagged, cut at its sentence ends and translated again
    cleared: bool | None = None  # each sentence of the retry passes the check (None: no retry)

    def to_json(self) -> dict:
        return {
            "source": self.source,
            "flags": list(self.flags),
            "scores": self.scores.to_json(),
            "retried": self.retried,
            "cleared": self.cleared,
        }


@dataclass(frozen=True)
class CheckedLine:
    """A line's translation (retried sentences replaced) and its sentences' reports (none for
    a blank line)."""

    translation: Translation
    sentences: tuple[SentenceReport, ...]

    def to_json(self, line: int) -> dict:
        """The report line of input line `line` (1-based)."""
        return {"line": line, "sentences": [s.to_json() for s in self.sentences]}


def check_sentences(
    translator: Translator,
    sentences: Sequence[str],
    directions: Sequence[Direction],
    found: Sequence[Translation],
    retranslate: Retranslate | None,
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
) -> list[tuple[Translation, SentenceReport | None]]:
    """Check each sentence's translation `found` (its best) and retry the flagged ones that
    hold several sentences (see the module). Per sentence: its translation and its report
    (None for a sentence with nothing to translate).

    Args:
        directions: the direction of each sentence (its tags, its sentence rules).
        retranslate: translates the parts (see Retranslate), as the first pass did; None: no
            retry (sentences that were translated one by one have nothing to cut).
    """
    outputs = [t.texts[0] for t in found]
    scores = check_translations(translator, sentences, outputs, directions)
    results: list[tuple[Translation, SentenceReport | None]] = [
        (translation, None if s is None else SentenceReport(text, s.flags(thresholds), s))
        for translation, text, s in zip(found, sentences, scores, strict=True)
    ]
    if retranslate is None:
        return results
    cuts = {
        i: split_line(sentences[i], translator.sentence_language(directions[i]))
        for i, (_, report) in enumerate(results)
        if report is not None and report.flags
    }
    retried = [i for i, segments in cuts.items() if len(segments.sentences) > 1]
    if retried:
        parts = SplitLines(tuple(cuts[i] for i in retried))
        pieces = parts.regroup(retranslate(parts, retried))
        part_directions = [directions[retried[line]] for line in parts.owners]
        passed = _passed(translator, parts, pieces, part_directions, thresholds)
        for i, segments, mine, cleared in zip(retried, parts.lines, pieces, passed, strict=True):
            report = results[i][1]
            report = SentenceReport(report.source, report.flags, report.scores, True, cleared)
            results[i] = (Translation.joined(segments, mine), report)
    return results


def _passed(
    translator: Translator,
    parts: SplitLines,
    pieces: Sequence[Sequence[Translation]],
    directions: Sequence[Direction],
    thresholds: Thresholds,
) -> list[bool]:
    """Per line of `parts`, whether the check passes the translation (`pieces`, per line) of
    each of its sentences; `directions`: one per sentence of `parts`."""
    outputs = [translation.texts[0] for mine in pieces for translation in mine]
    scores = check_translations(translator, parts.sentences, outputs, directions)
    return [
        all(s is None or not s.flags(thresholds) for s in mine) for mine in parts.regroup(scores)
    ]


def checked_lines(
    split: SplitLines, results: Sequence[tuple[Translation, SentenceReport | None]]
) -> list[CheckedLine]:
    """One `CheckedLine` per line of `split`, from `check_sentences`' results of its
    sentences."""
    lines = joined_lines(split, [translation for translation, _ in results])
    reports = [tuple(r for _, r in mine if r is not None) for mine in split.regroup(results)]
    return [CheckedLine(*line) for line in zip(lines, reports, strict=True)]


def translate_checked(
    translator: Translator,
    texts: Texts | Sequence[str],
    on_batch: Callable[[int], None] | None = None,
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
) -> list[CheckedLine]:
    """`translator.translate(texts)` checked sentence by sentence, flagged sentences retried
    where they cut (see the module); each retry with its text's direction and glossary.

    Raises:
        TmtError: texts with prefixes or constraints (`Texts.refuse_report`).
    """
    request = Texts.plain(texts)
    request.refuse_report()
    directions = translator.directions_of(request)
    split = translator.split(request, directions)
    found = translator.translate_sentences(request, split, directions, on_batch)
    owners = split.owners

    def retranslate(parts: SplitLines, retried: Sequence[int]) -> list[Translation]:
        texts_of = [owners[sentence] for sentence in retried]  # the text of each part
        again = request.picked(texts_of).of_texts([split.sentences[i] for i in retried])
        return translator.translate_sentences(again, parts, [directions[t] for t in texts_of])

    sentence_directions = [directions[line] for line in owners]
    checked = check_sentences(
        translator, split.sentences, sentence_directions, found, retranslate, thresholds
    )
    return checked_lines(split, checked)
