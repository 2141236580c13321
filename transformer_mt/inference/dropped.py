"""The dropped-content check: flags on a sentence's translation that say part of the source may
be missing from it, from what the model computes anyway.

Our models learn from single sentences, and a translation can stop early or merge two
sentences into one without a sign (docs/results.md: test2016 sentences joined into one line
lose most of the later ones). Sentence splitting (sentences.py) prevents most of it; this
check catches what remains. Four flags, each a score against a threshold of `Thresholds`:

- `coverage`: the share of the source's subwords that some target token aligns to (the
  alignment of `tmt translate --alignments`: each target token to the source subword its
  query attends to most, in the last decoder layer's cross-attention, cross_attention.py).
  A dropped clause leaves its subwords unaligned: low coverage.
- `length`: target subwords / source subwords outside a band.
- `copy`: chrF (0-100) of the translation against its source above a threshold, or the
  translation equal to the source: the model gave up and repeated its input.
- `empty`: a translation with no text for a source with some (its coverage and length ratio
  are then 0 too, so `coverage` and `length` fire with it).

The translation is read back as its text: re-encoded by the target tokenizer and forced
through the model with the source (one teacher-forced pass per batch of sentences, as
documents align), so that the check needs nothing of the search and the server's engine can
run it on what it decoded. The thresholds were chosen on valid2016, and the precision and
recall measured on test2016 (docs/checks.md, docs/results.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sacrebleu.metrics.base import Metric
from torch import Tensor

from transformer_mt.evaluation import build_metric
from transformer_mt.inference.cross_attention import best_sources, cross_attention
from transformer_mt.inference.languages import Direction
from transformer_mt.inference.translation import as_written, kept_as_written
from transformer_mt.inference.translator import Translator

# The flags in the order a report lists them.
FLAGS = ("empty", "copy", "length", "coverage")

# chrF (0-100) of a translation against its own source above which it is a copy: an
# untranslated source scores 100, translations sharing names with their source stay near 60
# (valid2016's highest 58.9, a sentence ending in "New York City"; a teacher's de->en
# translations of Multi30k train 62 at most, their references 60). The default of this check's
# threshold and of the filter of a teacher's translations.
MAX_SOURCE_CHRF = 80.0


@dataclass(frozen=True)
class SourceCopy:
    """How far a translation repeats its source: the copy rule, which this check and the
    filter of a teacher's translations (distill/filtering.py) both apply. A model that gave
    up writes its input back, whole or with a word changed."""

    equal: bool  # the translation has text and is the source (both stripped)
    source_chrf: float  # 0-100, of the translation against its source; 0 for no text

    @classmethod
    def measure(cls, chrf: Metric, source: str, translation: str) -> SourceCopy:
        """`chrf` is `build_metric("chrf")`, built once by the caller for all its sentences."""
        text, source = translation.strip(), source.strip()
        score = chrf.sentence_score(text, [source]).score if text else 0.0
        return cls(equal=bool(text) and text == source, source_chrf=score)

    def is_copy(self, max_source_chrf: float) -> bool:
        """The translation is its source, or its chrF against the source is above the bound."""
        return self.equal or self.source_chrf > max_source_chrf


@dataclass(frozen=True)
class Thresholds:
    """Where each flag fires. Measured with the de->en Multi30k model (42.89 BLEU) on
    valid2016 sentences, alone and joined 2-4 to a line (docs/results.md)."""

    # Coverage below this flags. Single sentences: 1.3% below 0.45, 2.9% below 0.5; lines
    # that lost a sentence: median 0.38.
    min_coverage: float = 0.45
    # Target/source subwords below this flags: 1.4% of single sentences' translations (1% of
    # the training pairs' references are below 0.63), lines that lost a sentence: median 0.49.
    min_length_ratio: float = 0.6
    # ... and above this: a translation running on (a repetition loop). No single sentence's
    # translation is above 2.0, and 0.1% of the training references are above 1.89.
    max_length_ratio: float = 2.0
    # chrF against the source above this flags (`SourceCopy`, `MAX_SOURCE_CHRF`).
    max_source_chrf: float = MAX_SOURCE_CHRF


DEFAULT_THRESHOLDS = Thresholds()


@dataclass(frozen=True)
class Scores:
    """What the check measured on one sentence's translation (see the module)."""

    coverage: float  # 0-1
    length_ratio: float  # target subwords / source subwords
    source_chrf: float  # 0-100
    empty: bool
    copy: bool  # the translation is the source (`SourceCopy.equal`)

    def flags(self, thresholds: Thresholds = DEFAULT_THRESHOLDS) -> tuple[str, ...]:
        """The flags that fire, in FLAGS order; () for a translation that passes."""
        fired = {
            "empty": self.empty,
            "copy": SourceCopy(self.copy, self.source_chrf).is_copy(thresholds.max_source_chrf),
            "length": not (
                thresholds.min_length_ratio <= self.length_ratio <= thresholds.max_length_ratio
            ),
            "coverage": self.coverage < thresholds.min_coverage,
        }
        return tuple(flag for flag in FLAGS if fired[flag])

    def to_json(self) -> dict:
        """The scores as a report shows them, rounded to what the thresholds distinguish."""
        return {
            "coverage": round(self.coverage, 3),
            "length_ratio": round(self.length_ratio, 3),
            "source_chrf": round(self.source_chrf, 1),
        }


def coverage(alignment: Sequence[tuple[int, int]], n_source: int) -> float:
    """The share of `n_source` source subwords that `alignment`'s (source, target) pairs
    reach; 0 for no pairs, 1 for no source."""
    if n_source == 0:
        return 1.0
    return len({s for s, _ in alignment}) / n_source


def sentence_scores(
    sources: Sequence[Sequence[int]],
    targets: Sequence[Sequence[int]],
    weights: Sequence[Tensor],
    source_texts: Sequence[str],
    target_texts: Sequence[str],
    tags: Sequence[tuple[int, int]],
) -> list[Scores]:
    """The scores of each sentence from what the model read and wrote.

    Args:
        sources: source ids as the encoder read them (source tags, subwords, EOS).
        targets: target ids re-encoded from the text (target tags first), no BOS or EOS.
        weights: per sentence its (T, S) cross-attention (`cross_attention`).
        source_texts, target_texts: the sentence and its translation.
        tags: per sentence (source tags, target tags): how many ids of each are language tags.
    """
    chrf = build_metric("chrf")
    found = []
    for src, tgt, weight, source, target, (source_tags, target_tags) in zip(
        sources, targets, weights, source_texts, target_texts, tags, strict=True
    ):
        n_source = len(src) - source_tags - 1  # the EOS is no word
        n_target = len(tgt) - target_tags
        pairs = best_sources(weight, source_tags, target_tags) if n_target else []
        copied = SourceCopy.measure(chrf, source, target)
        found.append(
            Scores(
                coverage=coverage(pairs, n_source),
                length_ratio=n_target / max(1, n_source),
                source_chrf=copied.source_chrf,
                empty=not target.strip(),
                copy=copied.equal,
            )
        )
    return found


def check_translations(
    translator: Translator,
    sources: Sequence[str],
    outputs: Sequence[str],
    directions: Sequence[Direction],
    layer: int = -1,
) -> list[Scores | None]:
    """The scores of each (source sentence, translation) pair, translated in its direction;
    None for a source with nothing to translate (blank, or `kept_as_written` and so
    translated: never searched).
    One teacher-forced pass of `translator`'s model per batch of `decode.max_tokens`, through
    decoder layer `layer`."""
    rows = [
        (translator.encoding.source_ids(source, direction, count=False), direction)
        for source, direction in zip(sources, directions, strict=True)
    ]
    kept = [
        kept_as_written(s) and as_written(s) == o for s, o in zip(sources, outputs, strict=True)
    ]
    todo = [i for i, (ids, _) in enumerate(rows) if ids and not kept[i]]
    eos = translator.specials.eos
    src = [[*rows[i][0], eos] for i in todo]
    tgt = [translator.encoding.prefix_ids(outputs[i], rows[i][1]) for i in todo]
    weights = cross_attention(
        translator.model, src, tgt, layer, translator.specials.bos, translator.decode.max_tokens
    )
    tags = [(len(rows[i][1].source_prefix), len(rows[i][1].target_prefix)) for i in todo]
    scores = sentence_scores(
        src, tgt, weights, [sources[i] for i in todo], [outputs[i] for i in todo], tags
    )
    found: list[Scores | None] = [None] * len(sources)
    for i, score in zip(todo, scores, strict=True):
        found[i] = score
    return found
