"""`CorpusScorer`: scores added a chunk at a time equal sacrebleu's `corpus_score` of them all."""

import logging
import random

import pytest

from tests.test_evaluation import HYPOTHESES, REFERENCES
from transformer_mt.errors import TmtError
from transformer_mt.evaluation import CorpusScorer, corpus_scores

METRICS = ("bleu", "chrf", "ter")


def chunked(scorer: CorpusScorer, hypotheses, references, size: int) -> CorpusScorer:
    for start in range(0, len(hypotheses), size):
        end = start + size
        scorer.add(hypotheses[start:end], references[start:end])
    return scorer


@pytest.mark.parametrize("lowercase", [False, True])
@pytest.mark.parametrize("size", [1, 2, 4, 100])
def test_chunks_score_as_the_whole_corpus(lowercase, size):
    scorer = chunked(CorpusScorer(METRICS, lowercase), HYPOTHESES, REFERENCES, size)
    assert scorer.scores() == corpus_scores(HYPOTHESES, REFERENCES, METRICS, lowercase)


def test_a_larger_random_corpus_scores_as_sacrebleu():
    rng = random.Random(0)
    words = ["the", "a", "cat", "dog", "sat", "on", "mat", "ran", "blue", ".", ",", "Zürich"]

    def sentence() -> str:
        return " ".join(rng.choice(words) for _ in range(rng.randint(0, 12)))

    references = [sentence() for _ in range(500)]
    hypotheses = [sentence() if rng.random() < 0.5 else ref for ref in references]
    scorer = chunked(CorpusScorer(METRICS), hypotheses, references, 37)
    ours, theirs = scorer.scores(), corpus_scores(hypotheses, references, METRICS)
    assert ours == theirs and scorer.segments == 500


def test_tokenised_hypotheses_are_warned_about_once(caplog):
    hypotheses = ["a cat sat ."] * 150
    scorer = chunked(CorpusScorer(), hypotheses, ["a cat sat."] * 150, 10)
    with caplog.at_level(logging.WARNING):
        scorer.scores()
    said = [r.getMessage() for r in caplog.records if r.name == "sacrebleu"]
    assert len(said) == 1 and said[0].startswith("150 hypotheses end in a tokenized period")


def test_no_segments_or_a_missing_reference_is_refused():
    scorer = CorpusScorer()
    scorer.add([], [])
    with pytest.raises(TmtError, match="no segments to score"):
        scorer.scores()
    with pytest.raises(TmtError, match="2 hypotheses but 1 references"):
        scorer.add(["a", "b"], ["a"])
