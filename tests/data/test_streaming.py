"""Streamed training data: the in-memory path's pairs and budget, sharded over ranks and
workers, resumable mid-epoch; the lazy readers and the tokenizer sample."""

import json
import logging
import multiprocessing
import re

import pytest

from tests.corpora import slice_lines
from tests.data.streams import MAX_TOKENS, cursor, data_config, numbers, read_epoch
from transformer_mt.artifacts import rank_position, stored_position
from transformer_mt.config import ConfigError, DataConfig, TokenizerConfig, config_from_dict
from transformer_mt.data import pipeline
from transformer_mt.data.dataset import load_split, stream_pairs
from transformer_mt.data.pipeline import encode_splits, train_tokenizers_for
from transformer_mt.data.readers import DataError
from transformer_mt.data.streaming import sample_pairs
from transformer_mt.data.tokenizer import EOS_ID, PAD_ID


@pytest.fixture(scope="module")
def corpus_dir(tmp_path_factory):
    """The 400-line Multi30k slice as a text-format training corpus `train.{de,en}`."""
    directory = tmp_path_factory.mktemp("stream")
    for lang in ("de", "en"):
        (directory / f"train.{lang}").write_text(
            "\n".join(slice_lines("valid", lang)) + "\n", "utf-8"
        )
    return directory


@pytest.fixture(scope="module")
def in_memory(corpus_dir, valid_tokenizers):
    """The in-memory path's cleaned training set of the same corpus and rules."""
    cfg = data_config(corpus_dir, streaming=False)
    return encode_splits(cfg, valid_tokenizers.src, valid_tokenizers.tgt, num_threads=1)


def test_batches_hold_the_in_memory_pairs_within_the_budget(
    corpus_dir, valid_tokenizers, in_memory, caplog
):
    caplog.set_level(logging.INFO, logger="transformer_mt.data.streaming")
    batches = read_epoch(cursor(data_config(corpus_dir), valid_tokenizers))
    assert f"epoch 0 (streamed): {in_memory.clean_report}" in caplog.text
    kept = in_memory.train_keep.tolist()
    assert 0 < len(kept) < 400  # the rules dropped some pairs
    assert sorted(numbers(batches)) == kept  # each kept pair once, dropped pairs never
    row_of = {number: row for row, number in enumerate(kept)}
    for batch in batches:
        rows, width = batch.src_ids.shape
        assert rows * max(width, batch.tgt_in_ids.shape[1]) <= MAX_TOKENS
        for number, src in zip(batch.indices.tolist(), batch.src_ids, strict=True):
            ids = src[src != PAD_ID].tolist()
            assert ids == [*in_memory.train.src[row_of[number]].tolist(), EOS_ID]


@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_ranks_share_out_every_pair_once_an_epoch(corpus_dir, valid_tokenizers, world_size):
    cfg = data_config(corpus_dir)
    single = sorted(numbers(read_epoch(cursor(cfg, valid_tokenizers))))
    shares = []
    for rank in range(world_size):
        batches = cursor(cfg, valid_tokenizers, rank, world_size)
        for epoch in range(2):
            share = numbers(read_epoch(batches))
            assert len(share) == len(set(share)), (rank, epoch)  # once per epoch
            assert all(n % world_size == rank for n in share)
        shares.append(share)
    together = [n for share in shares for n in share]
    assert sorted(together) == single  # no pair on two ranks, none left out


def test_workers_do_not_change_the_batches(corpus_dir, valid_tokenizers):
    def first_batches(workers, rank):
        batches = cursor(data_config(corpus_dir, workers=workers), valid_tokenizers, rank, 2)
        return [next(batches).indices.tolist() for _ in range(12)]

    for rank in range(2):
        assert first_batches(2, rank) == first_batches(0, rank)


def test_more_workers_than_cpus_is_one_line_in_the_log(
    corpus_dir, valid_tokenizers, monkeypatch, caplog
):
    """torch's DataLoader had said it in two lines of a UserWarning on stderr."""
    import os
    import warnings

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        batches = cursor(data_config(corpus_dir, workers=2), valid_tokenizers)
        next(batches)
    assert "data.workers=2 readers on the 1 CPU(s) this process may use" in caplog.text


def test_each_epoch_has_its_own_order(corpus_dir, valid_tokenizers):
    batches = cursor(data_config(corpus_dir), valid_tokenizers)
    first, second = numbers(read_epoch(batches)), numbers(read_epoch(batches))
    assert sorted(first) == sorted(second) and first != second
    again = numbers(read_epoch(cursor(data_config(corpus_dir), valid_tokenizers)))
    assert again == first  # a pure function of the seed


@pytest.mark.parametrize("workers", [0, 2])
def test_a_restored_cursor_reads_on_as_the_uninterrupted_one(corpus_dir, valid_tokenizers, workers):
    """What a checkpoint's data position gives: restored mid-chunk, a fresh cursor reads the
    batches the first one would have read next, across chunk and epoch ends."""
    reader = cursor(data_config(corpus_dir), valid_tokenizers)
    while reader.position.chunk < 1 or reader.position.batch_index < 1:
        next(reader)  # past a chunk end, to the middle of a chunk
    state = reader.state()
    resumed = cursor(data_config(corpus_dir, workers=workers), valid_tokenizers)
    resumed.restore(state)
    expected = [next(reader).indices.tolist() for _ in range(40)]
    assert reader.position.epoch >= 1  # the comparison crossed an epoch end
    assert [next(resumed).indices.tolist() for _ in range(40)] == expected
    assert resumed.state() == reader.state()


@pytest.mark.parametrize(("before", "after"), [(2, 1), (1, 2), (2, 3)])
def test_another_rank_count_resumes_without_skipping_a_pair(
    corpus_dir, valid_tokenizers, before, after
):
    """Ranks stopped mid-epoch, resumed by another rank count from the position of the rank
    furthest behind: every pair of the epoch is read, and those read twice are fewer than
    one chunk (64 pairs) per rank of either run."""
    cfg = data_config(corpus_dir)
    stopped = [cursor(cfg, valid_tokenizers, rank, before) for rank in range(before)]
    read = []
    for extra, reader in zip([1, 3], stopped, strict=False):  # ranks stop at different places
        while reader.position.chunk < 1:  # past a chunk end
            read += numbers([next(reader)])
        read += numbers(next(reader) for _ in range(extra))
    behind = rank_position(stored_position([r.state() for r in stopped]), 0, after)
    for rank in range(after):
        reader = cursor(cfg, valid_tokenizers, rank, after)
        reader.restore(behind)
        read += numbers(read_epoch(reader))
    epoch = numbers(read_epoch(cursor(cfg, valid_tokenizers)))
    assert set(read) == set(epoch)
    assert len(read) - len(epoch) < 64 * (before + after)


def test_every_pair_dropped_is_an_error(corpus_dir, valid_tokenizers):
    batches = cursor(data_config(corpus_dir, max_len=1), valid_tokenizers)
    with pytest.raises(DataError, match="no training pairs left after cleaning"):
        next(batches)


@pytest.mark.parametrize("workers", [0, 2])
def test_a_bad_line_stops_training_with_one_line(tmp_path, valid_tokenizers, workers):
    lines = [
        f"{s}\t{t}" for s, t in zip(*(slice_lines("valid", x) for x in ("de", "en")), strict=True)
    ]
    lines[300] = "no tab"
    (tmp_path / "bad.tsv").write_text("\n".join(lines) + "\n", "utf-8")
    cfg = data_config(tmp_path, format="tsv", train=str(tmp_path / "bad.tsv"), workers=workers)
    batches = cursor(cfg, valid_tokenizers)
    before = set(multiprocessing.active_children())
    with pytest.raises(DataError) as excinfo:
        read_epoch(batches)
    message = f"{tmp_path / 'bad.tsv'}:301: expected 2 tab-separated fields, found 1"
    assert str(excinfo.value) == message
    # Its readers are stopped with the error, not left to the garbage collector (which
    # stopped each in 5 s), and the next batch asked for meets the line again.
    assert set(multiprocessing.active_children()) <= before
    with pytest.raises(DataError, match=re.escape(message)):
        read_epoch(batches)


@pytest.mark.parametrize("fmt", ["text", "tsv", "jsonl"])
def test_stream_pairs_reads_what_load_split_reads(tmp_path, corpus_dir, fmt):
    src, tgt = (slice_lines("valid", lang)[:50] for lang in ("de", "en"))
    train = {"text": corpus_dir / "train", "tsv": tmp_path / "t.tsv", "jsonl": tmp_path / "t.jsonl"}
    (tmp_path / "t.tsv").write_text(
        "".join(f"{s}\t{t}\n" for s, t in zip(src, tgt, strict=True)), "utf-8"
    )
    rows = [json.dumps({"translation": {"de": s, "en": t}}) for s, t in zip(src, tgt, strict=True)]
    (tmp_path / "t.jsonl").write_text("\n".join(rows) + "\n\n", "utf-8")
    cfg = DataConfig(format=fmt, train=str(train[fmt]))
    corpus = load_split(cfg, "train")
    read = zip(corpus["src"], corpus["tgt"], [0] * len(corpus), strict=True)
    assert list(stream_pairs(cfg, "train")) == list(read)


def test_stream_pairs_reports_unequal_line_counts(tmp_path):
    (tmp_path / "t.de").write_text("a\nb\nc\n", "utf-8")
    (tmp_path / "t.en").write_text("a\n", "utf-8")
    with pytest.raises(DataError, match=r"t.de has 3 lines, .*t.en has 1$"):
        list(stream_pairs(DataConfig(train=str(tmp_path / "t")), "train"))


def test_sample_pairs_is_bounded_seeded_and_uniform():
    pairs = [(f"s{i}", f"t{i}", 0) for i in range(1000)]
    src, tgt = sample_pairs(iter(pairs), 100)
    assert len(src) == 100 and [s[1:] for s in src] == [t[1:] for t in tgt]
    assert (src, tgt) == sample_pairs(iter(pairs), 100)
    assert sample_pairs(iter(pairs[:10]), 100)[0] == [s for s, _, _ in pairs[:10]]
    late = sum(int(s[1:]) >= 500 for s in src)
    assert 30 < late < 70  # not just the first pairs


def test_a_streamed_corpus_trains_its_tokenizer_on_a_sample(corpus_dir, tmp_path, monkeypatch):
    def refuse(*args):
        raise AssertionError("the streaming path read the whole training split")

    monkeypatch.setattr(pipeline, "load_split", refuse)
    tok_cfg = TokenizerConfig(vocab_size=200, input_sentence_size=150)
    pair = train_tokenizers_for(data_config(corpus_dir), tok_cfg, tmp_path)
    assert pair.src.vocab_size == 200


@pytest.mark.parametrize(
    "data, tokenizer, message",
    [
        ({"shuffle_buffer": 0}, {}, "data.shuffle_buffer=0 must be > 0"),
        ({"workers": -1}, {}, "data.workers=-1 must be in \\[0, 64\\]"),
        ({"streaming": True}, {"bpe_dropout": 0.1}, "tokenizer.bpe_dropout needs data.streaming"),
    ],
)
def test_streaming_settings_are_checked(data, tokenizer, message):
    with pytest.raises(ConfigError, match=message) as excinfo:
        config_from_dict({"data": data, "tokenizer": tokenizer})
    assert "\n" not in str(excinfo.value)
