"""IBM Model 1 and the lists it gives."""

import numpy as np
import pytest

from transformer_mt.errors import SettingError
from transformer_mt.shortlist import lexicon as lexicon_module
from transformer_mt.shortlist.build import other_case, widen
from transformer_mt.shortlist.corpus import Chunk, EncodedCorpus
from transformer_mt.shortlist.lexicon import ShortlistSettings, frequent, model1

# Source 1 ("der") always with target 5 ("the"); content words 10, 11, 12 with 20, 21, 22.
PAIRS = [
    ([1, 10, 11], [5, 20, 21]),
    ([1, 10, 12], [5, 20, 22]),
    ([1, 11, 12], [5, 21, 22]),
    ([1, 10], [5, 20]),
]


def read(pairs, chunk=100):
    """`model1`'s reader of `pairs`, `chunk` pairs a chunk."""
    chunks = [pairs[i : i + chunk] for i in range(0, len(pairs), chunk)]
    return lambda: [Chunk.of([s for s, _ in c], [t for _, t in c]) for c in chunks]


def model1_by_hand(pairs, iterations):
    """The textbook EM with dictionaries, one pair at a time: p(t | s), NULL as None."""
    probs = {(s, t): 1.0 for src, tgt in pairs for s in [None, *src] for t in tgt}
    for _ in range(iterations):
        counts = dict.fromkeys(probs, 0.0)
        for src, tgt in pairs:
            for t in tgt:
                total = sum(probs[s, t] for s in [None, *src])
                for s in [None, *src]:
                    counts[s, t] += probs[s, t] / total
        per_source = {}
        for (s, _), count in counts.items():
            per_source[s] = per_source.get(s, 0.0) + count
        probs = {(s, t): count / per_source[s] for (s, t), count in counts.items()}
    return {key: p for key, p in probs.items() if key[0] is not None}


def test_model1_lists_translations_before_the_word_every_sentence_has():
    """Raw co-occurrence ties p(5 | 10) with p(20 | 10) (both in every sentence with 10); Model
    1 explains 5 by 1, which is in every sentence too, and keeps 20 on top for 10."""
    lists = model1(read(PAIRS)).best(1)
    assert lists == {1: [5], 10: [20], 11: [21], 12: [22]}


def test_probabilities_of_each_source_sum_to_one_over_its_targets():
    lexicon = model1(read(PAIRS))
    for source in np.unique(lexicon.sources):
        assert lexicon.probs[lexicon.sources == source].sum() == pytest.approx(1.0)


def test_best_keeps_k_and_the_probability_floor():
    lexicon = model1(read(PAIRS))
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
    assert model1(read([])).best(5) == {}
    assert model1(read([([1, 2], [])])).best(5) == {}


def test_model1_equals_the_textbook_em_in_any_chunks_and_blocks(monkeypatch):
    """Random pairs (some with an empty side) in chunks of 7 pairs, blocks of about 50
    co-occurrences, and a cache that keeps the first chunks only: the probabilities of the
    by-hand EM."""
    rng = np.random.default_rng(0)
    pairs = [
        (
            rng.integers(0, 30, rng.integers(0, 6)).tolist(),
            rng.integers(0, 25, rng.integers(0, 6)).tolist(),
        )
        for _ in range(60)
    ]
    expected = model1_by_hand(pairs, 3)
    monkeypatch.setattr(lexicon_module, "BLOCK_ENTRIES", 50)
    monkeypatch.setattr(lexicon_module, "CACHED_BYTES", 2000)
    for chunk in (1, 7, 1000):
        found = model1(read(pairs, chunk), 3)
        pairs_found = zip(found.sources.tolist(), found.targets.tolist(), strict=True)
        got = dict(zip(pairs_found, found.probs.tolist(), strict=True))
        assert got.keys() == expected.keys()
        assert all(got[key] == pytest.approx(p, rel=1e-12) for key, p in expected.items())


def test_the_encoded_corpus_gives_back_its_chunks_and_counts(tmp_path):
    corpus = EncodedCorpus(tmp_path, src_vocab=12, tgt_vocab=10)
    corpus.add(Chunk.of([[1, 2], [], [3]], [[5], [5, 7], []]))
    corpus.add(Chunk.of([[11]], [[9, 9]]))
    back = [
        [(c.src[a:b].tolist(), c.tgt[x:y].tolist()) for a, b, x, y in _spans(c)]
        for c in corpus.chunks()
    ]
    assert back == [[([1, 2], [5]), ([], [5, 7]), ([3], [])], [([11], [9, 9])]]
    assert corpus.pairs == 4
    assert corpus.target_counts.tolist() == [0, 0, 0, 0, 0, 2, 0, 1, 0, 2]
    assert np.flatnonzero(corpus.source_seen).tolist() == [1, 2, 3, 11]


def _spans(chunk):
    src_starts = np.r_[0, chunk.src_ends[:-1]]
    tgt_starts = np.r_[0, chunk.tgt_ends[:-1]]
    return zip(src_starts, chunk.src_ends, tgt_starts, chunk.tgt_ends, strict=True)


def test_frequent_counts_and_breaks_ties_by_id():
    assert frequent(np.bincount([5, 7, 7, 5, 9, 9, 7]), 2) == [7, 5]
    assert frequent(np.bincount([3, 3]), 5) == [3]  # only ids that occur


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
