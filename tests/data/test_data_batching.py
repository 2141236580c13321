"""Token-budget batching: coverage, budget, determinism, resume, sharding, tensor layout."""

import dataclasses

import numpy as np
import pytest
import torch

from transformer_mt.data.batching import (
    BatchingError,
    collate,
    make_batches,
    make_source_batches,
    restore_order,
    shard_batches,
)
from transformer_mt.data.cursor import BatchIterator
from transformer_mt.data.encoding import EncodedCorpus
from transformer_mt.data.specials import Framing, SpecialTokens
from transformer_mt.data.token_column import TokenColumn
from transformer_mt.data.tokenizer import BOS_ID, EOS_ID, PAD_ID
from transformer_mt.errors import TmtError

MAX_TOKENS = 200


@pytest.fixture(scope="module")
def corpus() -> EncodedCorpus:
    rng = np.random.default_rng(0)
    src = [rng.integers(4, 50, size=n).tolist() for n in rng.integers(1, 30, size=600)]
    tgt = [rng.integers(4, 50, size=n).tolist() for n in rng.integers(1, 30, size=600)]
    return EncodedCorpus(TokenColumn.from_lists(src), TokenColumn.from_lists(tgt))


def epoch_batches(corpus, seed=1, epoch=0, max_tokens=MAX_TOKENS):
    return make_batches(corpus, max_tokens, seed, epoch)


def test_every_example_exactly_once(corpus):
    indices = np.concatenate(epoch_batches(corpus))
    assert sorted(indices.tolist()) == list(range(len(corpus)))


def test_no_batch_exceeds_the_budget(corpus):
    for batch in BatchIterator(corpus, MAX_TOKENS, seed=1).iterate(epoch=0):
        n_rows, src_len = batch.src_ids.shape
        assert n_rows * max(src_len, batch.tgt_in_ids.shape[1]) <= MAX_TOKENS


def test_order_is_a_function_of_seed_and_epoch(corpus):
    def as_lists(batches):
        return [b.tolist() for b in batches]

    assert as_lists(epoch_batches(corpus, 1, 3)) == as_lists(epoch_batches(corpus, 1, 3))
    assert as_lists(epoch_batches(corpus, 1, 3)) != as_lists(epoch_batches(corpus, 1, 4))
    assert as_lists(epoch_batches(corpus, 1, 3)) != as_lists(epoch_batches(corpus, 2, 3))


def test_resume_at_batch_k(corpus):
    iterator = BatchIterator(corpus, MAX_TOKENS, seed=7)
    full = [b.indices.tolist() for b in iterator.iterate(epoch=2)]
    resumed = [b.indices.tolist() for b in iterator.iterate(epoch=2, start=5)]
    assert resumed == full[5:]


def test_a_restored_iterator_reads_on_across_epoch_ends(corpus):
    """What a checkpoint's data position gives: a fresh iterator restored from `state()` reads
    the batches the first one would have read next, into the following epochs."""
    reader = BatchIterator(corpus, MAX_TOKENS, seed=7)
    per_epoch = reader.num_batches(0)
    for _ in range(per_epoch - 2):
        next(reader)
    resumed = BatchIterator(corpus, MAX_TOKENS, seed=7)
    resumed.restore(reader.state())
    expected = [next(reader).indices.tolist() for _ in range(per_epoch + 4)]
    assert [next(resumed).indices.tolist() for _ in range(per_epoch + 4)] == expected
    assert reader.state() == resumed.state() == {"epoch": 2, "batch_index": 2, "world_size": 1}


def test_a_position_past_the_epochs_end_starts_the_next_epoch(corpus, caplog):
    """A run resumed with a larger train.max_tokens cuts fewer batches than its checkpoint's
    position counts: it reads on from the next epoch instead of failing (an IndexError)."""
    reader = BatchIterator(corpus, MAX_TOKENS, seed=7)
    for _ in range(reader.num_batches(0) - 1):
        next(reader)
    resumed = BatchIterator(corpus, 4 * MAX_TOKENS, seed=7)
    resumed.restore(reader.state())
    assert "past the" in caplog.text and "starting epoch 1" in caplog.text
    expected = [b.indices.tolist() for b in resumed.iterate(epoch=1)][:2]
    resumed.restore(reader.state())
    assert [next(resumed).indices.tolist() for _ in range(2)] == expected


@pytest.mark.parametrize(("before", "after"), [(2, 1), (1, 2), (3, 2), (2, 4)])
def test_another_rank_count_resumes_at_the_first_unread_batches(corpus, before, after):
    """w ranks stopped at index i have read the epoch's first i * w batches; w' ranks
    restored from that position read on from batch ceil(i * w / w') * w': nothing read twice,
    fewer than w' batches skipped, and exactly the rest when w' divides i * w."""
    everything = [b.tolist() for b in epoch_batches(corpus, seed=7, epoch=1)]
    stopped = [BatchIterator(corpus, MAX_TOKENS, 7, rank, before) for rank in range(before)]
    read = []
    for reader in stopped:
        reader.restore({"epoch": 1, "batch_index": 0})
        read += [next(reader).indices.tolist() for _ in range(3)]
    resumed = [BatchIterator(corpus, MAX_TOKENS, 7, rank, after) for rank in range(after)]
    rest = []
    for reader in resumed:
        reader.restore(stopped[0].state())
        rest += [b.indices.tolist() for b in reader.iterate(1, reader.position.batch_index)]
    assert sorted(read) == sorted(everything[: 3 * before])
    start = -(-3 * before // after) * after
    usable = len(everything) - len(everything) % after
    assert sorted(rest) == sorted(everything[start:usable])
    assert start - 3 * before < after and (start == 3 * before) == (3 * before % after == 0)


def test_shards_are_disjoint_and_equal(corpus):
    batches = epoch_batches(corpus)
    shards = [shard_batches(batches, rank, 3) for rank in range(3)]
    assert len({len(s) for s in shards}) == 1
    seen = [i for shard in shards for b in shard for i in b.tolist()]
    assert len(seen) == len(set(seen))
    assert BatchIterator(corpus, MAX_TOKENS, 1, rank=1, world_size=3).num_batches(0) == len(
        shards[1]
    )


def test_batch_layout():
    corpus = EncodedCorpus(
        TokenColumn.from_lists([[10, 11, 12], [13]]), TokenColumn.from_lists([[20], [21, 22]])
    )
    batch = collate(corpus, np.array([1, 0]))
    assert batch.src_ids.tolist() == [[13, EOS_ID, PAD_ID, PAD_ID], [10, 11, 12, EOS_ID]]
    assert batch.tgt_in_ids.tolist() == [[BOS_ID, 21, 22], [BOS_ID, 20, PAD_ID]]
    assert batch.tgt_out_ids.tolist() == [[21, 22, EOS_ID], [20, EOS_ID, PAD_ID]]
    assert batch.src_mask.shape == (2, 1, 1, 4) and batch.src_mask.dtype == torch.bool
    assert batch.src_mask[:, 0, 0].tolist() == [[True, True, False, False], [True] * 4]
    assert batch.indices.tolist() == [1, 0]
    assert batch.n_tgt_tokens == 5
    assert batch.src_ids.dtype == torch.int64
    moved = batch.to("cpu")
    assert torch.equal(moved.tgt_out_ids, batch.tgt_out_ids)


def test_batch_layout_of_a_model_with_its_own_ids_and_language_tags():
    """NLLB's framing: the source language's code first, the decoder started from eos (2) and
    the target language's code forced first; pad 1."""
    nllb = SpecialTokens(pad=1, unk=3, bos=2, eos=2, never=(1,), language_tags={"de": 7, "en": 8})
    nllb = dataclasses.replace(nllb, source_tag="source", target_tag=True)
    corpus = EncodedCorpus(
        TokenColumn.from_lists([[10, 11, 12], [13]]), TokenColumn.from_lists([[20], [21, 22]])
    )
    batch = collate(corpus, np.array([1, 0]), Framing.of(nllb, [("de", "en")]))
    assert batch.src_ids.tolist() == [[7, 13, 2, 1, 1], [7, 10, 11, 12, 2]]
    assert batch.tgt_in_ids.tolist() == [[2, 8, 21, 22], [2, 8, 20, 1]]
    assert batch.tgt_out_ids.tolist() == [[8, 21, 22, 2], [8, 20, 2, 1]]
    assert batch.src_mask[:, 0, 0].tolist() == [[True, True, True, False, False], [True] * 5]
    assert batch.n_tgt_tokens == 7
    with pytest.raises(TmtError, match=r"data.tgt_lang fr: the model has no such language"):
        Framing.of(nllb, [("de", "fr")])


def test_oversized_example_is_an_error():
    corpus = EncodedCorpus(TokenColumn.from_lists([[5] * 50]), TokenColumn.from_lists([[5]]))
    with pytest.raises(BatchingError, match="max_tokens=20"):
        make_batches(corpus, 20, seed=1, epoch=0)


def test_source_batches_restore_order():
    sources = [[5, 6, 7], [8], [9] * 5, [4, 4]]
    batches = make_source_batches(sources, max_tokens=8)
    for batch in batches:
        assert batch.src_ids.numel() <= 8 or batch.src_ids.shape[0] == 1
    order = [i for b in batches for i in b.indices.tolist()]
    assert order[0] == 2  # longest first
    rows = [row[row != PAD_ID][:-1].tolist() for b in batches for row in b.src_ids]
    assert restore_order(order, rows) == sources


def test_token_column_select_round_trip():
    column = TokenColumn.from_lists([[1, 2], [], [3, 4, 5]])
    picked = column.select(np.array([2, 1, 0]))
    assert [picked[i].tolist() for i in range(3)] == [[3, 4, 5], [], [1, 2]]
    assert TokenColumn.from_arrow(column.to_arrow()).values.tolist() == [1, 2, 3, 4, 5]


def test_data_package_does_not_use_torch_nn():
    from pathlib import Path

    package = Path(__file__).resolve().parents[2] / "transformer_mt" / "data"
    for source in package.glob("*.py"):
        text = source.read_text("utf-8")
        assert "torch.nn" not in text and "from torch import nn" not in text, source.name
