"""Corpus-level BLEU, chrF and TER with sacrebleu, reported with their signatures.

Scores are computed on detokenised text (what `tmt translate` writes and what the reference
file holds), letting each metric tokenise the text its own standard way (BLEU: 13a), so the
numbers are comparable across papers (Post 2018, "A Call for Clarity in Reporting BLEU Scores").
Files are read as sacrebleu's command line reads them: UTF-8, one segment per "\\n"-separated
line, trailing whitespace stripped.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from sacrebleu.metrics import BLEU, CHRF, TER
from sacrebleu.metrics.base import Metric

from transformer_mt.errors import TmtError
from transformer_mt.files import read_lines

METRICS = ("bleu", "chrf", "ter")


@dataclass(frozen=True)
class Score:
    """One corpus-level score."""

    name: str  # sacrebleu's name: "BLEU", "chrF2", "TER"
    score: float
    signature: str  # e.g. "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0"
    string: str  # sacrebleu's one-line report, signature included


def build_metric(name: str, lowercase: bool = False) -> Metric:
    """A sacrebleu metric with its default settings, case-insensitive if `lowercase`.

    `lowercase` means the same for every metric, so TER is case-sensitive unless it is set
    (sacrebleu's own TER default is case-insensitive, its command line's `--ter-case-sensitive`).
    """
    if name == "bleu":
        return BLEU(lowercase=lowercase)
    if name == "chrf":
        return CHRF(lowercase=lowercase)
    if name == "ter":
        return TER(case_sensitive=not lowercase)
    raise TmtError(f"unknown metric {name!r} (choose from {', '.join(METRICS)})")


def corpus_scores(
    hypotheses: Sequence[str],
    references: Sequence[str],
    metrics: Sequence[str] = ("bleu", "chrf"),
    lowercase: bool = False,
) -> list[Score]:
    """Score detokenised hypotheses against one reference each.

    Args:
        hypotheses: one translation per segment.
        references: the reference of each segment, as many as hypotheses.
        metrics: names from METRICS, scored in this order.
        lowercase: compare case-insensitively.

    Raises:
        TmtError: unknown metric, no segments, or hypotheses and references differ in number.
    """
    if len(hypotheses) != len(references):
        raise TmtError(
            f"{len(hypotheses)} hypotheses but {len(references)} references: one each needed"
        )
    if not hypotheses:
        raise TmtError("no segments to score: hypotheses and references are both empty")
    scores = []
    for name in metrics:
        metric = build_metric(name, lowercase)
        result = metric.corpus_score(list(hypotheses), [list(references)])
        signature = str(metric.get_signature())
        scores.append(
            Score(result.name, result.score, signature, result.format(signature=signature))
        )
    return scores


def evaluate_files(
    hyp_path: str | Path,
    ref_path: str | Path,
    metrics: Sequence[str] = ("bleu", "chrf"),
    lowercase: bool = False,
) -> list[Score]:
    """Corpus scores of a translation file against a reference file, line by line.

    Raises:
        TmtError: a missing or unreadable file, a file that is not UTF-8 (naming the line),
            files with different line counts (naming both files and both counts), or two empty
            files.
    """
    hypotheses = read_segments(hyp_path)
    references = read_segments(ref_path)
    check_line_counts(hyp_path, len(hypotheses), ref_path, len(references))
    return corpus_scores(hypotheses, references, metrics, lowercase)


def check_line_counts(
    hyp_name: str | Path, hyp_lines: int, ref_name: str | Path, ref_lines: int
) -> None:
    """Refuse files that cannot be scored line by line, naming both.

    `tmt translate --ref` calls this before translating, so a wrong reference file costs no
    decoding time.

    Raises:
        TmtError: different line counts, or no lines at all (no corpus score is defined).
    """
    if hyp_lines != ref_lines:
        raise TmtError(
            f"{hyp_name} has {hyp_lines} lines but {ref_name} has {ref_lines}: "
            "they must match line by line"
        )
    if hyp_lines == 0:
        raise TmtError(f"{hyp_name} and {ref_name} are empty: there is nothing to score")


def read_segments(path: str | Path) -> list[str]:
    """The segments of a text file as sacrebleu's command line reads them: UTF-8 lines split at
    "\\n" only (`files.read_lines`), trailing whitespace stripped.

    Raises:
        TmtError: the file is missing, unreadable or not UTF-8 (naming the line).
    """
    return [line.rstrip() for line in read_lines(path)]
