"""A tiny trained model, its training corpus and shortlists written for it."""

from pathlib import Path

import pytest

from transformer_mt.artifacts import load_for_inference
from transformer_mt.shortlist.vmap import write_vmap

from ..distill.conftest import write_config, write_corpus
from ..documents.conftest import reversing_checkpoint  # noqa: F401 (the model fixture)


def target_pieces(checkpoint: Path) -> list[str]:
    """Every piece of the checkpoint's target vocabulary, in id order."""
    tokenizer = load_for_inference(checkpoint).tgt_tokenizer
    return [tokenizer.id_to_piece(i) for i in range(tokenizer.vocab_size)]


def write_always(path: Path, pieces: list[str]) -> Path:
    """A shortlist allowing `pieces` in every batch and listing no source piece."""
    write_vmap(path, pieces, {})
    return path


@pytest.fixture
def corpus_config(tmp_path):
    """A config whose data.train is a small corpus of WORDS (tests/distill)."""
    return write_config(tmp_path / "config.yaml", write_corpus(tmp_path / "corpus"))
