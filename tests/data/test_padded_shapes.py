"""Batch lengths padded to multiples (`train.pad_to_multiple`): the budget holds with the padding,
every pair is read once, the shapes are few, and the padding adds nothing but pad ids."""

import numpy as np
import pytest
import torch

from tests.data.streams import MAX_TOKENS as STREAM_TOKENS
from tests.data.streams import data_config, read_epoch
from transformer_mt.data.batching import collate, make_batches, padded_lengths
from transformer_mt.data.cursor import BatchIterator
from transformer_mt.data.encoding import EncodedCorpus
from transformer_mt.data.streaming import StreamingBatches, StreamSettings
from transformer_mt.data.token_column import TokenColumn
from transformer_mt.data.tokenizer import PAD_ID

MAX_TOKENS = 512


@pytest.fixture(scope="module")
def corpus() -> EncodedCorpus:
    """2,000 pairs of Multi30k-like lengths (source ~ N(14, 4), target ~ source +- 20%)."""
    rng = np.random.default_rng(0)
    src_lens = np.clip(rng.normal(14, 4, 2000).round(), 1, 40).astype(int)
    tgt_lens = np.clip((src_lens * rng.normal(1.0, 0.2, 2000)).round(), 1, 40).astype(int)

    def column(lengths):
        return TokenColumn.from_lists([rng.integers(4, 50, n).tolist() for n in lengths])

    return EncodedCorpus(column(src_lens), column(tgt_lens))


def shapes(batches) -> list[tuple[int, int, int]]:
    return [(*b.src_ids.shape, b.tgt_in_ids.shape[1]) for b in batches]


def test_padded_lengths_round_up_within_the_longest():
    lengths = np.array([1, 8, 9, 17, 21])
    assert padded_lengths(lengths, 8).tolist() == [8, 8, 16, 21, 21]
    assert padded_lengths(lengths, 1).tolist() == lengths.tolist()
    assert padded_lengths(np.array([], dtype=np.int64), 8).tolist() == []


@pytest.mark.parametrize("multiple", [1, 8])
def test_every_pair_once_and_the_budget_holds_with_the_padding(corpus, multiple):
    longest_src = int(corpus.src.lengths.max()) + 1
    longest_tgt = int(corpus.tgt.lengths.max()) + 1
    batches = list(BatchIterator(corpus, MAX_TOKENS, 1, pad_to_multiple=multiple).iterate(0))
    indices = np.concatenate([b.indices.numpy() for b in batches])
    assert sorted(indices.tolist()) == list(range(len(corpus)))
    for rows, src_len, tgt_len in shapes(batches):
        assert rows * max(src_len, tgt_len) <= MAX_TOKENS
        assert src_len % multiple == 0 or src_len == longest_src
        assert tgt_len % multiple == 0 or tgt_len == longest_tgt


def test_few_shapes_with_padding_over_epochs(corpus):
    """Multi30k at 2,048 tokens: 175 shapes an epoch at the longest row, 17 padded to 8."""
    plain, padded = (
        BatchIterator(corpus, MAX_TOKENS, 1, pad_to_multiple=multiple) for multiple in (1, 8)
    )
    plain_shapes = set(shapes(plain.iterate(0)))
    padded_shapes = {s for epoch in range(3) for s in shapes(padded.iterate(epoch))}
    assert len(padded_shapes) * 3 < len(plain_shapes)


def test_padding_only_appends_pad_ids(corpus):
    indices = np.arange(40, 57)
    plain, padded = (collate(corpus, indices, pad_to_multiple=m) for m in (1, 8))
    for name in ("src_ids", "tgt_in_ids", "tgt_out_ids"):
        short, long = getattr(plain, name), getattr(padded, name)
        assert long.shape[1] % 8 == 0 and long.shape[1] >= short.shape[1]
        assert torch.equal(long[:, : short.shape[1]], short)
        assert (long[:, short.shape[1] :] == PAD_ID).all()
    assert torch.equal(padded.src_mask, padded.src_ids.ne(PAD_ID)[:, None, None, :])
    assert padded.n_tgt_tokens == plain.n_tgt_tokens


def test_a_multiple_of_one_cuts_the_batches_it_always_cut(corpus):
    default = make_batches(corpus, MAX_TOKENS, 3, 2)
    explicit = make_batches(corpus, MAX_TOKENS, 3, 2, pad_to_multiple=1)
    assert [b.tolist() for b in default] == [b.tolist() for b in explicit]


def test_a_pair_at_the_budget_still_fits():
    """Padding stops at the longest row, so a pair that fits the budget alone still does."""
    corpus = EncodedCorpus(TokenColumn.from_lists([[5] * 20]), TokenColumn.from_lists([[6] * 9]))
    (batch,) = make_batches(corpus, 21, 1, 0, pad_to_multiple=8)
    padded = collate(corpus, batch, pad_to_multiple=8)
    assert padded.src_ids.shape == (1, 21) and padded.tgt_in_ids.shape == (1, 10)


def test_streamed_batches_are_padded_within_the_budget(tmp_path, valid_tokenizers):
    """The streaming twin, over the 400-line Multi30k slice in chunks of 64 pairs."""
    from tests.corpora import slice_lines

    for lang in ("de", "en"):
        text = "\n".join(slice_lines("valid", lang)) + "\n"
        (tmp_path / f"train.{lang}").write_text(text, "utf-8")
    settings = StreamSettings(data_config(tmp_path), STREAM_TOKENS, 1, pad_to_multiple=8)
    batches = read_epoch(StreamingBatches(settings, valid_tokenizers.src, valid_tokenizers.tgt))
    plain = StreamSettings(data_config(tmp_path), STREAM_TOKENS, 1)
    unpadded = read_epoch(StreamingBatches(plain, valid_tokenizers.src, valid_tokenizers.tgt))
    assert sorted(i for b in batches for i in b.indices.tolist()) == sorted(
        i for b in unpadded for i in b.indices.tolist()
    )
    assert sum(b.n_tgt_tokens for b in batches) == sum(b.n_tgt_tokens for b in unpadded)
    for rows, src_len, tgt_len in shapes(batches):
        assert rows * max(src_len, tgt_len) <= STREAM_TOKENS
    assert len(set(shapes(batches))) < len(set(shapes(unpadded)))
