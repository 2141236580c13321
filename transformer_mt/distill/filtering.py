"""Which teacher translations a student learns from: the rules that drop bad ones.

A teacher's beam search fails on training data in a few recognisable ways, which the student
pipelines of Bergamot and OPUS-MT filter out before a student learns to repeat them: it writes
nothing, it copies the source (names, lists, or a model that gave up), or its translation is
far longer or shorter than the source (a repetition loop, a clause dropped). Each rule needs
no model and runs in the time of reading the corpus; each dropped pair is counted under the
first rule it breaks, in the order empty, copy, length ratio, as the training data's own
cleaning counts (`data.cleaning.select_training_pairs`).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from transformer_mt.errors import SettingError
from transformer_mt.evaluation import build_metric
from transformer_mt.inference.dropped import MAX_SOURCE_CHRF, SourceCopy

# The rules in the order they are tried: a pair breaking several counts under the first.
RULES = ("empty", "copy", "length_ratio")


@dataclass(frozen=True)
class FilterRules:
    """The thresholds of the rules; a pair within all of them is kept."""

    # Longer side / shorter side, in characters, above which the pair is dropped. Characters,
    # not subwords, so that the rule needs no tokenizer. Multi30k's de->en training pairs have
    # a median of 1.17; 2 drops 15 of their 29,000 references, misaligned ones among them.
    max_length_ratio: float = 2.0
    # chrF (0-100) of the translation against its own source above which it is a copy
    # (`SourceCopy`, the dropped-content check's rule): the teacher's de->en translations of
    # Multi30k train score 62 at most (names). A translation equal to its source is a copy
    # whatever this says.
    max_source_chrf: float = MAX_SOURCE_CHRF

    def validate(self) -> None:
        """Raises SettingError for a threshold that cannot be met or cannot drop anything
        useful: a ratio below 1, a chrF outside 0-100 (NaN included)."""
        if not self.max_length_ratio >= 1.0:
            raise SettingError(
                "max_length_ratio", self.max_length_ratio, "must be at least 1 (longer/shorter)"
            )
        if not 0.0 <= self.max_source_chrf <= 100.0:
            raise SettingError("max_source_chrf", self.max_source_chrf, "must be in [0, 100]")


DEFAULT_RULES = FilterRules()


@dataclass(frozen=True)
class FilterReport:
    """How many pairs were kept, and how many each rule dropped."""

    total: int
    kept: int
    empty: int
    copy: int
    length_ratio: int

    def __str__(self) -> str:
        return (
            f"kept {self.kept} of {self.total} pairs; dropped {self.empty} empty, "
            f"{self.copy} copies of the source, {self.length_ratio} outside the length ratio"
        )


class TeacherFilter:
    """`rules` applied pair by pair, counting what each drops (`report`); None keeps every
    pair and counts them."""

    def __init__(self, rules: FilterRules | None):
        if rules is not None:
            rules.validate()
        self.rules = rules
        self._chrf = build_metric("chrf")
        self._counts: Counter[str | None] = Counter()

    def verdict(self, source: str, translation: str) -> str | None:
        """The first rule of RULES that (`source`, `translation`) breaks, counted; None when
        the pair is kept."""
        rule = None
        if self.rules is not None:
            rule = self._broken_rule(self.rules, source.strip(), translation.strip())
        self._counts[rule] += 1
        return rule

    def _broken_rule(self, rules: FilterRules, source: str, translation: str) -> str | None:
        if not source or not translation:
            return "empty"
        if SourceCopy.measure(self._chrf, source, translation).is_copy(rules.max_source_chrf):
            return "copy"
        longer, shorter = sorted((len(source), len(translation)), reverse=True)
        if longer > rules.max_length_ratio * shorter:
            return "length_ratio"
        return None

    @property
    def report(self) -> FilterReport:
        """The counts of the pairs judged so far."""
        dropped = {rule: self._counts[rule] for rule in RULES}
        return FilterReport(total=sum(self._counts.values()), kept=self._counts[None], **dropped)
