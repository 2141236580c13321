"""IBM Model 1 and the lists it gives."""

import numpy as np
import pytest

from transformer_mt.errors import SettingError
from transformer_mt.shortlist.build import other_case, widen
from transformer_mt.shortlist.lexicon import ShortlistSettings, frequent, model1

# Source 1 ("der") always with target 5 ("the"); content words 10, 11, 12 with 20, 21, 22.
PAIRS = [
    ([1, 10, 11], [5, 20, 21]),
    ([1, 10, 12], [5, 20, 22]),
    ([1, 11, 12], [5, 21, 22]),
    ([1, 10], [5, 20]),
]


def test_model1_lists_translations_before_the_word_every_sentence_has():
    """Raw co-occurrence ties p(5 | 10) with p(20 | 10) (both in every sentence with 10); Model
    1 explains 5 by 1, which is in every sentence too, and keeps 20 on top for 10."""
    lists = model1(PAIRS).best(1)
    assert lists == {1: [5], 10: [20], 11: [21], 12: [22]}


def test_probabilities_of_each_source_sum_to_one_over_its_targets():
    lexicon = model1(PAIRS)
    for source in np.unique(lexicon.sources):
        assert lexicon.probs[lexicon.sources == source].sum() == pytest.approx(1.0)


def test_best_keeps_k_and_the_probability_floor():
    lexicon = model1(PAIRS)
    for k in (1, 2, 3):
        assert all(len(targets) <= k for targets in lexicon.best(k).values())
    floor = 0.2
    kept = lexicon.best(10, min_prob=floor)
    for source, targets in kept.items():
        for target in targets:
            entry = (lexicon.sources == source) & (lexicon.targets == target)
            assert lexicon.probs[entry][0] >= floor
    assert sum(map(len, kept.values())) < sum(map(len, lexicon.best(10).values()))


def test_empty_corpus_and_empty_targets_give_an_empty_lexicon():
    assert model1([]).best(5) == {}
    assert model1([([1, 2], [])]).best(5) == {}


def test_frequent_counts_and_breaks_ties_by_id():
    assert frequent([[5, 7, 7], [5, 9], [9, 7]], 2) == [7, 5]


def test_settings_are_checked():
    with pytest.raises(SettingError, match="per_source=-1"):
        ShortlistSettings(per_source=-1).validate()
    with pytest.raises(SettingError, match="min_prob=2"):
        ShortlistSettings(min_prob=2.0).validate()


def test_widen_adds_the_other_case_and_the_piece_itself_where_the_vocabulary_has_them():
    vocabulary = {"▁man", "▁Man", "▁men", "▁Berlin", "s"}
    lists = {"▁Mann": ["▁man", "▁men"], "▁Berlin": [], "▁xyz": [], "s": ["s"]}
    assert widen(lists, vocabulary) == {
        "▁Mann": ["▁man", "▁men", "▁Man"],  # no "▁Men", no "▁Mann" in the target vocabulary
        "▁Berlin": ["▁Berlin"],  # copied: names and numbers
        "s": ["s"],  # no "S"
    }
    assert [other_case(p) for p in ("▁man", "Man", "ing", "▁", "")] == [
        "▁Man",
        "man",
        "Ing",
        "▁",
        "",
    ]
