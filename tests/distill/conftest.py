"""A tiny teacher that writes several words per line, and a corpus and config for it."""

import random
from pathlib import Path

import pytest

from transformer_mt.config import DataConfig

from ..conftest import WORDS
from ..documents.conftest import reversing_checkpoint  # noqa: F401 (the teacher fixture)


def write_corpus(directory: Path, src_lang: str = "de", tgt_lang: str = "en") -> DataConfig:
    """directory/train.{src_lang,tgt_lang}: 23 lines of WORDS, one blank source line among
    them (its translation is empty: the filter's "empty" rule); the data section naming it."""
    rng = random.Random(1)
    sources = [" ".join(rng.sample(WORDS, rng.randint(1, 6))) for _ in range(22)]
    sources.insert(5, "")
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"train.{src_lang}").write_text("".join(f"{s}\n" for s in sources))
    (directory / f"train.{tgt_lang}").write_text("".join(f"ref {k}\n" for k in range(23)))
    return DataConfig(src_lang=src_lang, tgt_lang=tgt_lang, train=str(directory / "train"))


def write_config(path: Path, data: DataConfig) -> Path:
    """A YAML config whose data section is `data`'s direction and training corpus."""
    path.write_text(
        f"data:\n  src_lang: {data.src_lang}\n  tgt_lang: {data.tgt_lang}\n"
        f"  train: {data.train}\n  test: null\n"
    )
    return path


@pytest.fixture
def corpus(tmp_path) -> DataConfig:
    return write_corpus(tmp_path / "corpus")
