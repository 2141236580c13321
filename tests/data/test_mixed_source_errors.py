"""Errors of a training pair in a `data.train` list name its source (`data.train[k]='path'`)
and its number among that source's pairs, not its place in the mixed stream, in memory and
streamed; a reader's error in a listed source names the source too."""

import pytest

from tests.corpora import slice_lines
from transformer_mt.config import (
    DataConfig,
    ExperimentConfig,
    TokenizerConfig,
    TrainConfig,
    TrainSource,
)
from transformer_mt.data.batching import BatchingError
from transformer_mt.data.dataset import load_split, stream_pairs
from transformer_mt.data.pipeline import prepare_data, train_tokenizers_for
from transformer_mt.data.readers import DataError
from transformer_mt.data.specials import SpecialTokens

LONG_LINE = 37  # the line of source 1 too long for the budget, counted from 1


def write_pair(directory, name, de, en):
    for lang, lines in (("de", de), ("en", en)):
        (directory / f"{name}.{lang}").write_text("".join(f"{line}\n" for line in lines))
    return str(directory / name)


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    """Source 0: 100 pairs; source 1: 200 pairs, its line LONG_LINE ten sentences long."""
    root = tmp_path_factory.mktemp("mixed")
    de, en = slice_lines("train", "de"), slice_lines("train", "en")
    long_de, long_en = de[100:300], en[100:300]
    long_de[LONG_LINE - 1] = " ".join(de[:10])
    long_en[LONG_LINE - 1] = " ".join(en[:10])
    sources = (
        TrainSource(write_pair(root, "short", de[:100], en[:100])),
        TrainSource(write_pair(root, "long", long_de, long_en)),
    )
    data = DataConfig(train=sources, valid=sources[0].path, test=None, cache_dir=str(root / "c"))
    tokenizer = TokenizerConfig(vocab_size=500)
    return data, tokenizer, train_tokenizers_for(data, tokenizer, root / "run"), root


@pytest.mark.parametrize("streaming", [False, True])
def test_a_pair_over_the_budget_is_named_by_its_source_and_number(mixed, streaming):
    data, tokenizer, pair, root = mixed
    data = DataConfig(**{**data.__dict__, "streaming": streaming, "workers": 0})
    config = ExperimentConfig(data=data, tokenizer=tokenizer, train=TrainConfig(max_tokens=100))
    expected = rf"^data\.train\[1\]='{root}/long': training pair {LONG_LINE} \('"
    with pytest.raises(BatchingError, match=expected):
        train = prepare_data(config, pair.src, pair.tgt, SpecialTokens()).train
        for _ in range(200):
            next(train)


def test_unequal_line_counts_in_a_listed_source_name_it(tmp_path):
    de, en = slice_lines("train", "de"), slice_lines("train", "en")
    short = write_pair(tmp_path, "short", de[:100], en[:100])
    uneven = write_pair(tmp_path, "uneven", de[100:200], en[100:199])
    data = DataConfig(train=(TrainSource(short), TrainSource(uneven)))
    expected = rf"^data\.train\[1\]='{uneven}': .*uneven\.en"
    with pytest.raises(DataError, match=expected):
        load_split(data, "train")
    with pytest.raises(DataError, match=expected):
        list(stream_pairs(data, "train"))
