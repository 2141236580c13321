"""Systems compared on one test set: each one's corpus scores and, with a paired test, whether
its difference from the baseline (the first system) is more than chance.

A difference of a BLEU point on a thousand sentences may be luck. The paired tests resample
the test set's sentences, scoring every system on the same samples (Koehn 2004, paired
bootstrap resampling; Riezler and Maxwell 2005, approximate randomization), and give each
system's p-value against the baseline: the chance of a difference at least this large if the
two systems translated alike. Bootstrap resampling also gives a 95% confidence interval of
each score.

The tests are sacrebleu's (`sacrebleu.significance.PairedTest`), the implementation its
command line runs and papers cite: the numbers equal `sacrebleu REF -i BASE SYS --paired-bs`
(or `--paired-ar`) at the same settings (tests/test_comparison.py), but one: where a system
scores exactly as the baseline (the same translations, or a tie), p is 1 here. sacrebleu
counts the resamples whose difference exceeds the real one, plus one, so a system compared with
a copy of itself gets its least p (1/1001) and a significance mark, where nothing differs.
Its draws are seeded (SACREBLEU_SEED, 12345 unless set), so the same files give the same
p-values.

Every line of every system is held in memory: a paired test resamples sentences, so it needs
each sentence's statistics. Scores without a test are summed a chunk at a time
(`evaluation.evaluate_files`), whatever the size of the files.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from transformer_mt.errors import TmtError, printable
from transformer_mt.evaluation import (
    build_metric,
    check_line_counts,
    composed,
    evaluate_files,
    iter_segments,
)
from transformer_mt.files import repeated_file

Test = Literal["bs", "ar"]
TESTS: dict[str, str] = {
    "bs": "paired bootstrap resampling",
    "ar": "approximate randomization",
}
# sacrebleu's defaults: resamples of a bootstrap test, trials of approximate randomization.
DEFAULT_SAMPLES: dict[str, int] = {"bs": 1000, "ar": 10000}
# At most: bootstrap draws every resample's sentence indices at once (10,000 resamples of a
# 3,000-sentence test set hold 240 MB of them); randomization's trials run one at a time.
MAX_SAMPLES: dict[str, int] = {"bs": 10_000, "ar": 100_000}
# The most sentence indices a bootstrap test may draw (resamples x sentences, 8 bytes each):
# 2 GB of them.
MAX_BOOTSTRAP_DRAWS = 250_000_000
SIGNIFICANT = 0.05  # a p-value below this is marked


@dataclass(frozen=True)
class SystemScore:
    """One system's score in one metric.

    Attributes:
        system: the file, as named.
        metric: sacrebleu's name of the metric ("BLEU", "chrF2", "TER").
        score: the corpus score.
        mean, ci: the mean of the bootstrap resamples' scores and half the width of their
            95% interval (bootstrap resampling only; None otherwise).
        p_value: against the baseline (None for the baseline itself, and without a test).
    """

    system: str
    metric: str
    score: float
    mean: float | None = None
    ci: float | None = None
    p_value: float | None = None


@dataclass(frozen=True)
class Comparison:
    """Scores of several systems, by system and metric in the order given."""

    scores: list[SystemScore]
    signatures: dict[str, str]  # metric name -> its sacrebleu signature
    test: Test | None
    samples: int | None


def compare_files(
    hyp_paths: Sequence[str],
    ref_path: str,
    metrics: Sequence[str] = ("bleu", "chrf"),
    lowercase: bool = False,
    test: Test | None = None,
    samples: int | None = None,
    tokenize: str = "13a",
) -> Comparison:
    """The scores of each translation file against one reference file; with `test`, a paired
    test of each against the first (`samples` resamples or trials, None: sacrebleu's default).
    `tokenize`: BLEU's tokenizer (`evaluation.bleu_tokenize`).

    Raises:
        TmtError: fewer than two files for a test, a file given twice, a samples count that
            is not positive (or, for a bootstrap test, too many for the sentences), or as
            `evaluation.evaluate_files` (missing or unreadable files, line counts that differ).
    """
    if samples is not None and samples < 1:
        raise TmtError(f"{samples} samples: a paired test needs at least 1")
    if samples is not None and test is not None and samples > MAX_SAMPLES[test]:
        raise TmtError(
            f"{samples} samples: {TESTS[test]} takes at most {MAX_SAMPLES[test]:,} "
            f"(sacrebleu's default: {DEFAULT_SAMPLES[test]:,})"
        )
    if test is not None and len(hyp_paths) < 2:
        raise TmtError(
            f"a paired test compares systems: give two or more translation files (the first "
            f"is the baseline), not {len(hyp_paths)}"
        )
    twice = repeated_file(hyp_paths)
    if twice is not None:
        raise TmtError(f"{twice[0]}: given twice (also as {twice[1]}); compare different files")
    if test is None:
        return _scored(hyp_paths, ref_path, metrics, lowercase, tokenize)
    samples = samples or DEFAULT_SAMPLES[test]
    return _tested(hyp_paths, ref_path, metrics, lowercase, test, samples, tokenize)


def _scored(
    hyp_paths: Sequence[str],
    ref_path: str,
    metrics: Sequence[str],
    lowercase: bool,
    tokenize: str,
) -> Comparison:
    """Each file's scores, read a chunk at a time."""
    scores, signatures = [], {}
    for path in hyp_paths:
        for score in evaluate_files(path, ref_path, metrics, lowercase, tokenize=tokenize):
            scores.append(SystemScore(path, score.name, score.score))
            signatures[score.name] = score.signature
    return Comparison(scores, signatures, None, None)


def _tested(
    hyp_paths: Sequence[str],
    ref_path: str,
    metrics: Sequence[str],
    lowercase: bool,
    test: Test,
    samples: int,
    tokenize: str,
) -> Comparison:
    """Each file's scores, with sacrebleu's paired test against the first."""
    from sacrebleu.significance import PairedTest

    references = list(composed(iter_segments(ref_path)))
    draws = samples * len(references)
    if test == "bs" and draws > MAX_BOOTSTRAP_DRAWS:
        raise TmtError(
            f"{samples} samples of {len(references):,} sentences: paired bootstrap resampling "
            f"draws every resample's sentence indices at once ({draws * 8 / 1e9:.1f} GB); take "
            f"at most {MAX_BOOTSTRAP_DRAWS // len(references):,}"
        )
    systems = []
    for path in hyp_paths:
        lines = list(composed(iter_segments(path)))
        check_line_counts(path, len(lines), ref_path, len(references))
        systems.append((path, lines))
    paired = PairedTest(
        systems,
        {name: build_metric(name, lowercase, tokenize=tokenize) for name in metrics},
        [references],
        test_type=test,
        n_samples=samples,
    )
    signatures, columns = paired()  # columns: "System", then each metric's results
    scores = []
    for i, system in enumerate(hyp_paths):
        for metric in signatures:
            result, baseline = columns[metric][i], columns[metric][0]
            p_value = _plain(result.p_value)
            if i and float(result.score) == float(baseline.score):
                p_value = 1.0  # no difference at all (sacrebleu's formula gives its least p)
            scores.append(
                SystemScore(
                    system,
                    metric,
                    float(result.score),
                    _plain(result.mean),
                    _plain(result.ci),
                    p_value,
                )
            )
    return Comparison(scores, {k: v.format() for k, v in signatures.items()}, test, samples)


def _plain(value: float | None) -> float | None:
    """A float of Python's (sacrebleu gives numpy's, which JSON cannot write), or None."""
    return None if value is None else float(value)


def comparison_table(comparison: Comparison) -> list[str]:
    """The comparison as a Markdown table (a row per system, the first the baseline), a line
    saying what the test did, and each metric's signature."""
    systems = list(dict.fromkeys(s.system for s in comparison.scores))
    metrics = list(dict.fromkeys(s.metric for s in comparison.scores))
    found = {(s.system, s.metric): s for s in comparison.scores}
    tested = comparison.test is not None
    with_ci = comparison.test == "bs"
    header = ["system"]
    for metric in metrics:
        header += [metric, *(["± 95%"] if with_ci else []), *(["p"] if tested else [])]
    lines = ["| " + " | ".join(header) + " |", "|---" + "|---:" * (len(header) - 1) + "|"]
    for k, system in enumerate(systems):
        # A file name need not be UTF-8 (surrogates escaped), and a `|` would end its cell.
        name = printable(system).replace("|", "\\|")
        cells = [f"{name} (baseline)" if tested and k == 0 else name]
        for metric in metrics:
            score = found[system, metric]
            cells.append(f"{score.score:.2f}")
            if with_ci:
                cells.append(f"{score.ci:.2f}")
            if tested:
                cells.append(_p(score.p_value))
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    if tested:
        lines.append(
            f"{TESTS[comparison.test]} ({comparison.samples} "
            f"{'resamples' if with_ci else 'trials'}, sacrebleu) against the baseline: p is "
            "the chance of a difference this large between systems that translate alike; "
            f"* p < {SIGNIFICANT}"
        )
    lines += [f"{name}: {signature}" for name, signature in comparison.signatures.items()]
    return lines


def _p(p_value: float | None) -> str:
    if p_value is None:
        return "-"
    return f"{p_value:.4f}{' *' if p_value < SIGNIFICANT else ''}"
