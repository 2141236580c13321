"""The dropped-content check's flags: each fires on a constructed case and stays quiet on a normal
one, from the source, the output and an attention matrix given by hand; and the scores of a
real model's forced pass."""

import pytest
import torch

from transformer_mt.inference.dropped import (
    FLAGS,
    Scores,
    Thresholds,
    check_translations,
    coverage,
    sentence_scores,
)
from transformer_mt.inference.translator import Translator

SOURCE = "Ein Mann fährt Rad. Zwei Hunde spielen im Schnee."
# A translation of all of SOURCE, of its first sentence only, a copy, and nothing.
WHOLE = "A man is riding a bike. Two dogs are playing in the snow."
FIRST = "A man is riding a bike."


def scores(source, output, weights, n_source=None, n_target=None):
    """The scores of one sentence whose 10 source subwords (plus EOS) and the output's words
    (one subword each) the weights (T, S) connect."""
    n_source = n_source or weights.size(1) - 1
    n_target = weights.size(0) if n_target is None else n_target
    src, tgt = list(range(n_source + 1)), list(range(n_target))
    (found,) = sentence_scores([src], [tgt], [weights], [source], [output], [(0, 0)])
    return found


def diagonal(n_target: int, n_source: int) -> torch.Tensor:
    """Target token j attends to source subword j * n_source // n_target: all of it covered."""
    weights = torch.full((n_target, n_source + 1), 0.01)
    for j in range(n_target):
        weights[j, j * n_source // n_target] = 1.0
    return weights


def first_words(n_target: int, n_source: int, n_words: int) -> torch.Tensor:
    """Every target token attends to one of the first `n_words` source subwords: the rest is
    left alone, as by a translation that dropped it."""
    weights = torch.full((n_target, n_source + 1), 0.01)
    for j in range(n_target):
        weights[j, j % n_words] = 1.0
    return weights


def test_a_normal_translation_raises_no_flag():
    found = scores(SOURCE, WHOLE, diagonal(12, 10))
    assert found.coverage == 1.0 and found.length_ratio == 1.2
    assert found.flags() == ()


def test_coverage_fires_when_the_attention_leaves_part_of_the_source_alone():
    found = scores(SOURCE, WHOLE, first_words(12, 10, 4))
    assert found.coverage == 0.4
    assert found.flags() == ("coverage",)
    assert scores(SOURCE, WHOLE, first_words(12, 10, 5)).flags() == ()  # 0.5: above 0.45


def test_length_fires_below_and_above_the_band():
    short = scores(SOURCE, FIRST, diagonal(5, 10))
    assert short.length_ratio == 0.5 and short.flags() == ("length",)
    loop = scores(SOURCE, WHOLE + " " + WHOLE, diagonal(21, 10))
    assert loop.length_ratio == 2.1 and loop.flags() == ("length",)


def test_copy_fires_on_the_source_repeated_and_on_a_near_copy():
    exact = scores(SOURCE, SOURCE, diagonal(10, 10))
    assert exact.copy and exact.source_chrf == 100.0 and exact.flags() == ("copy",)
    near = scores(SOURCE, SOURCE.replace("Rad", "Fahrrad"), diagonal(10, 10))
    assert not near.copy and near.source_chrf > 80 and near.flags() == ("copy",)
    # a translation sharing names with its source stays far below (valid2016's highest: 58.9)
    names = scores("Zwei Männer in New York City.", "Two men in New York City.", diagonal(7, 7))
    assert names.source_chrf < 80 and names.flags() == ()


def test_an_empty_output_fires_empty_with_no_coverage_and_no_length():
    found = scores(SOURCE, "  ", torch.zeros(0, 11), n_target=0)
    assert (found.coverage, found.length_ratio, found.empty) == (0.0, 0.0, True)
    assert found.flags() == ("empty", "length", "coverage")


def test_flags_follow_their_thresholds_and_keep_one_order():
    found = Scores(coverage=0.5, length_ratio=0.7, source_chrf=85.0, empty=False, copy=False)
    assert found.flags() == ("copy",)
    strict = Thresholds(min_coverage=0.6, min_length_ratio=0.8, max_source_chrf=90.0)
    assert found.flags(strict) == ("length", "coverage")
    assert set(FLAGS) == {"empty", "copy", "length", "coverage"}


def test_coverage_counts_source_subwords_reached():
    assert coverage([(0, 0), (0, 1), (2, 2)], 4) == 0.5
    assert coverage([], 3) == 0.0
    assert coverage([], 0) == 1.0


@pytest.fixture(scope="module")
def translator(checkpoint):
    return Translator.from_checkpoint(str(checkpoint), max_len_a=0.0, max_len_b=3)


def test_a_model_scores_each_sentence_and_skips_blank_ones(translator):
    """And those without a letter, never searched: a copy flagged as dropped content."""
    sources = ["ein mann fährt rad", "  ", "zwei hunde spielen im schnee", "das buch", "12:30"]
    outputs = ["mann ein", "", "", "das buch", "12:30"]
    found = check_translations(translator, sources, outputs, [translator.default] * 5)
    assert found[1] is None and found[4] is None
    # Searched all the same (a glossary's term for it), it is checked.
    (searched,) = check_translations(translator, ["2024"], ["das buch"], [translator.default])
    assert searched is not None
    ids = [translator.src_tokenizer.encode(s) for s in sources]
    out = [translator.tgt_tokenizer.encode(o) for o in outputs]
    for i in (0, 2, 3):
        assert found[i].length_ratio == len(out[i]) / len(ids[i])
        assert 0.0 <= found[i].coverage <= 1.0
    assert found[2].flags() == ("empty", "length", "coverage")
    assert "copy" in found[3].flags()


def test_checking_does_not_count_lines_again(translator):
    long = " ".join(["ein mann fährt rad"] * 40)  # over the 64 positions of the tiny model
    (found,) = check_translations(translator, [long], ["mann"], [translator.default])
    assert found is not None and translator.encoding.truncated_lines == 0


def test_a_multilingual_model_checks_without_its_language_tags(multilingual_checkpoint):
    translator = Translator.from_checkpoint(str(multilingual_checkpoint))
    direction = translator.direction("de", "en")
    assert direction.source_prefix or direction.target_prefix
    (found,) = check_translations(translator, ["ein mann"], ["mann"], [direction])
    n_source = len(translator.src_tokenizer.encode("ein mann"))
    assert found.length_ratio == len(translator.tgt_tokenizer.encode("mann")) / n_source
