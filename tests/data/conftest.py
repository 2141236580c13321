"""Data-test fixtures: Multi30k valid lines and a tokenizer trained on them."""

import pytest

from tests.corpora import slice_lines
from transformer_mt.config import TokenizerConfig
from transformer_mt.data.tokenizer_training import TokenizerPair, train_tokenizers


@pytest.fixture(scope="session")
def valid_texts() -> tuple[list[str], list[str]]:
    """The first 400 lines of Multi30k valid, German and English (the shipped slice)."""
    return slice_lines("valid", "de"), slice_lines("valid", "en")


@pytest.fixture(scope="session")
def valid_tokenizers(tmp_path_factory, valid_texts) -> TokenizerPair:
    """A small joint BPE model on Multi30k valid (trains in well under a second)."""
    src, tgt = valid_texts
    out = tmp_path_factory.mktemp("tok")
    return train_tokenizers(TokenizerConfig(vocab_size=500), src, tgt, out)
