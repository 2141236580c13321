"""A tiny model that writes several words per line, and a Translator of it."""

import random

import pytest

from transformer_mt.artifacts import load_for_inference
from transformer_mt.inference.translator import Translator

from ..conftest import WORDS, fit_tiny_checkpoint, save_tiny_checkpoint


@pytest.fixture(scope="session")
def reversing_checkpoint(tmp_path_factory):
    """The tiny test model after 150 full-batch Adam steps on reversing the word order of short
    sentences of WORDS.

    Untrained, it writes one long run of pieces, a single "word" that leaves a document's inline
    markup nothing to go around; a little training gives translations of several words, so
    that placing markup is exercised. The tests compare with what this model translates, never
    with a reference.
    """
    directory = tmp_path_factory.mktemp("reversing")
    path = save_tiny_checkpoint(directory)
    tokenizer = load_for_inference(path).src_tokenizer
    rng = random.Random(0)
    texts = [" ".join(rng.sample(WORDS, rng.randint(2, 7))) for _ in range(64)]
    pairs = [(tokenizer.encode(t), tokenizer.encode(" ".join(t.split()[::-1]))) for t in texts]
    return fit_tiny_checkpoint(path, pairs, 1e-2, 150, directory / "trained.pt")


@pytest.fixture
def translator(reversing_checkpoint):
    """Greedy, as `tmt translate --beam-size 1` would load it."""
    return Translator.from_checkpoint(str(reversing_checkpoint), beam_size=1)
