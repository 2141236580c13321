"""Data-test fixtures: the shared Multi30k mirror and a tokenizer trained on its valid set."""

import gzip
from pathlib import Path

import pytest

from transformer_mt.config import TokenizerConfig
from transformer_mt.data.tokenizer import TokenizerPair, train_tokenizers

MULTI30K = Path(__file__).resolve().parents[3] / "shared" / "data" / "multi30k"


def read_gz(path: Path) -> list[str]:
    return gzip.decompress(path.read_bytes()).decode("utf-8").split("\n")[:-1]


@pytest.fixture(scope="session")
def valid_texts() -> tuple[list[str], list[str]]:
    """Multi30k valid, German and English (1014 lines each)."""
    if not MULTI30K.is_dir():
        pytest.skip(f"the Multi30k mirror {MULTI30K} is absent")
    return read_gz(MULTI30K / "valid.de.gz"), read_gz(MULTI30K / "valid.en.gz")


@pytest.fixture(scope="session")
def valid_tokenizers(tmp_path_factory, valid_texts) -> TokenizerPair:
    """A small joint BPE model on Multi30k valid (trains in well under a second)."""
    src, tgt = valid_texts
    out = tmp_path_factory.mktemp("tok")
    return train_tokenizers(TokenizerConfig(vocab_size=500), src, tgt, out)
