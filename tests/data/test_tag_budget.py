"""The token budget counts the language tags that frame each pair: every batch `collate`
builds of a multilingual corpus, in memory and streamed, padded or not, holds at most
train.max_tokens tokens, and a pair that fits only without its tags is refused before
training."""

import itertools

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
from transformer_mt.data.pipeline import prepare_data, train_tokenizers_for
from transformer_mt.data.specials import own_specials

MAX_TOKENS = 128


@pytest.fixture(scope="module")
def tagged(tmp_path_factory):
    """de->en and en->de over the Multi30k train slice, each source led by its tag, with the
    run's tokenizers and model specials."""
    root = tmp_path_factory.mktemp("tagged")
    for lang in ("de", "en"):
        (root / f"train.{lang}").write_text("\n".join(slice_lines("train", lang)) + "\n")
    sources = (
        TrainSource(str(root / "train"), src_lang="de", tgt_lang="en"),
        TrainSource(str(root / "train"), src_lang="en", tgt_lang="de", weight=2),
    )
    data = DataConfig(
        train=sources, valid=str(root / "train"), test=None, cache_dir=str(root / "cache")
    )
    tokenizer = TokenizerConfig(vocab_size=500, language_tags=("en", "de"))
    pair = train_tokenizers_for(data, tokenizer, root / "run")
    return data, tokenizer, pair, own_specials(pair.tgt, tokenizer.language_tags)


def experiment(tagged, max_tokens=MAX_TOKENS, multiple=1, **data_changes) -> ExperimentConfig:
    data, tokenizer, _, _ = tagged
    return ExperimentConfig(
        data=DataConfig(**{**data.__dict__, **data_changes}),
        tokenizer=tokenizer,
        train=TrainConfig(max_tokens=max_tokens, pad_to_multiple=multiple),
    )


@pytest.mark.parametrize("streaming", [False, True])
@pytest.mark.parametrize("multiple", [1, 8])
def test_every_batch_with_its_tags_holds_the_budget(tagged, streaming, multiple):
    _, _, pair, specials = tagged
    config = experiment(
        tagged, multiple=multiple, streaming=streaming, workers=0, shuffle_buffer=200
    )
    data = prepare_data(config, pair.src, pair.tgt, specials)
    tags = {specials.language_tags["en"], specials.language_tags["de"]}
    batches = list(itertools.islice(data.train, 80))
    assert all(int(b.src_ids[0, 0]) in tags for b in batches)  # tagged, as trained
    costs = [b.src_ids.shape[0] * max(b.src_ids.shape[1], b.tgt_in_ids.shape[1]) for b in batches]
    assert max(costs) <= MAX_TOKENS, costs
    assert max(costs) > MAX_TOKENS * 0.8  # batches are filled, not merely small


def test_a_pair_over_the_budget_only_with_its_tag_is_refused(tagged):
    """Its longest row without the tag is exactly the budget: with it, one over."""
    _, _, pair, specials = tagged
    longest = max(
        len(pair.src.encode(line)) for lang in ("de", "en") for line in slice_lines("train", lang)
    )
    config = experiment(tagged, max_tokens=longest + 1, max_len=longest)
    with pytest.raises(BatchingError, match=rf"takes {longest + 2} tokens, more than"):
        prepare_data(config, pair.src, pair.tgt, specials)
