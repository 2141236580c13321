"""Paragraphs made of test sentences: BLEU on lines of n consecutive sentences joined by a
space, scored against the references joined the same way.

Two questions ask it. How a model does on inputs longer than those it was trained on (length
generalisation, where positional encodings are said to differ): translate with
`Translator(split_sentences=False)`, so that the model sees the whole line. And how much of
that loss the `Translator`'s sentence splitting wins back (inference/sentences.py): the same
lines with splitting on, against single sentences (n = 1). scripts/run_experiment.py
(`--joined`), scripts/bench_variants.py and scripts/bench_splitters.py build their lines here.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from transformer_mt.evaluation import corpus_scores
from transformer_mt.inference.translator import Translator


def sentence_groups(texts: Sequence[str], n: int) -> list[list[str]]:
    """`texts` in groups of n consecutive ones, the sentences of one paragraph each; a last,
    shorter group is left out, so that every paragraph holds exactly n."""
    return [list(texts[i : i + n]) for i in range(0, len(texts) - n + 1, n)]


def joined(texts: Sequence[str], n: int) -> list[str]:
    """The paragraphs of `sentence_groups(texts, n)`, each joined by single spaces."""
    return [" ".join(group) for group in sentence_groups(texts, n)]


def joined_bleu(
    translator: Translator, sources: Sequence[str], references: Sequence[str], n: int
) -> tuple[float, float]:
    """Cased BLEU of `translator` on lines that join n consecutive sources, scored against
    the joined references, and the mean length of those lines in source subwords (the whole
    line, before any splitting), both rounded as the results tables print them."""
    joined_src, joined_ref = joined(sources, n), joined(references, n)
    hypotheses = [t.texts[0] for t in translator.translate(joined_src)]
    bleu = corpus_scores(hypotheses, joined_ref, ["bleu"])[0].score
    length = statistics.mean(len(translator.encoding.source_ids(line)) for line in joined_src)
    return round(bleu, 2), round(length, 1)
