"""BPE-dropout: a new segmentation of the same text each epoch, reproducible, length-bounded."""

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import datasets
import numpy as np

from transformer_mt.config import DataConfig, ExperimentConfig, TokenizerConfig, TrainConfig
from transformer_mt.data.cursor import BatchIterator
from transformer_mt.data.encoding import DropoutCorpus, encode_corpus
from transformer_mt.data.pipeline import encode_splits, prepare_data, train_tokenizers_for
from transformer_mt.data.specials import SpecialTokens


def dropout_corpus(tokenizers, texts, max_len=1000, dropout=0.1):
    src, tgt = texts[0][:200], texts[1][:200]
    tok = tokenizers.src
    deterministic = encode_corpus(datasets.Dataset.from_dict({"src": src, "tgt": tgt}), tok, tok)
    return DropoutCorpus(src, tgt, tok, tok, deterministic, dropout, seed=1, max_len=max_len)


def rows(column):
    return [column[i].tolist() for i in range(len(column))]


def test_segmentations_change_by_epoch_and_repeat_by_seed(valid_tokenizers, valid_texts):
    corpora = dropout_corpus(valid_tokenizers, valid_texts)
    first, again, second = corpora(0), corpora(0), corpora(1)
    assert rows(first.src) == rows(again.src) and rows(first.tgt) == rows(again.tgt)
    assert rows(first.src) != rows(second.src) and rows(first.tgt) != rows(second.tgt)
    deterministic = corpora.deterministic
    # Skipped merges leave more, shorter pieces overall (a single sentence can come out shorter:
    # greedy BPE is not length-optimal); the text they spell is unchanged.
    assert first.src.lengths.sum() > deterministic.src.lengths.sum()
    tok = valid_tokenizers.src
    for i in range(len(first)):
        assert tok.decode(first.tgt[i].tolist()) == tok.decode(deterministic.tgt[i].tolist())
    assert corpora.dropout > 0 and len(first) == len(deterministic)


def test_longer_than_max_len_keeps_the_deterministic_segmentation(valid_tokenizers, valid_texts):
    unbounded = dropout_corpus(valid_tokenizers, valid_texts, dropout=0.5)
    max_len = int(unbounded.deterministic.src.lengths.max())
    bounded = dropout_corpus(valid_tokenizers, valid_texts, max_len=max_len, dropout=0.5)
    sampled, kept = unbounded(0), bounded(0)
    too_long = np.flatnonzero(sampled.src.lengths > max_len)
    assert len(too_long)  # dropout 0.5 does lengthen some sources past the longest one
    assert kept.src.lengths.max() <= max_len
    for i in too_long.tolist():
        assert kept.src[i].tolist() == unbounded.deterministic.src[i].tolist()
    fits = np.flatnonzero(sampled.src.lengths <= max_len)
    assert [kept.src[i].tolist() for i in fits] == [sampled.src[i].tolist() for i in fits]


def test_batch_iterator_reads_each_epochs_segmentation(valid_tokenizers, valid_texts):
    corpora = dropout_corpus(valid_tokenizers, valid_texts)
    iterator = BatchIterator(corpora.deterministic, 400, seed=1, resample=corpora)
    for epoch in (0, 1):
        seen = {}
        for batch in iterator.iterate(epoch):
            for row, index in enumerate(batch.indices.tolist()):
                ids = batch.tgt_out_ids[row]
                seen[index] = ids[ids != 0].tolist()[:-1]  # without EOS and padding
        assert seen == dict(enumerate(rows(corpora(epoch).tgt)))


def test_source_only_keeps_the_target_segmentation(valid_tokenizers, valid_texts):
    both = dropout_corpus(valid_tokenizers, valid_texts)
    source_only = dataclasses.replace(both, target=False)
    assert rows(source_only(0).src) == rows(both(0).src)
    assert rows(source_only(0).tgt) == rows(both.deterministic.tgt) != rows(both(0).tgt)


def test_segmentation_is_the_same_in_every_process(valid_tokenizers, valid_texts, tmp_path):
    """What exact resume needs: a resumed process sees the epoch's segmentation again."""
    tok, texts = valid_tokenizers.src, valid_texts[0][:200]
    model = tmp_path / "spm.model"
    model.write_bytes(tok.model_bytes)
    (tmp_path / "texts.json").write_text(json.dumps(texts), encoding="utf-8")
    code = (
        "import json, sys; from transformer_mt.data.tokenizer import Tokenizer; "
        f"texts = json.load(open({str(tmp_path / 'texts.json')!r}, encoding='utf-8')); "
        f"print(json.dumps(Tokenizer.load({str(model)!r}).encode_dropout(texts, 0.1, 5)))"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    other = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    here = tok.encode_dropout(texts, 0.1, 5)
    assert json.loads(other.stdout) == here != tok.encode_batch(texts)
    assert tok.encode_dropout(texts, 0.0, 5) == tok.encode_batch(texts)


def test_a_sampled_pair_over_the_token_budget_keeps_its_fixed_segmentation(tmp_path, valid_texts):
    """train.max_tokens holds the longest pair's fixed segmentation and nothing more: its
    sampled ones, longer, must not stop training at some epoch."""
    for lang, lines in zip(("de", "en"), valid_texts, strict=True):
        (tmp_path / f"train.{lang}").write_text("\n".join(lines[:200]) + "\n", "utf-8")
    data = DataConfig(train=str(tmp_path / "train"), valid=str(tmp_path / "train"), test=None)
    data = dataclasses.replace(data, cache_dir=str(tmp_path / "cache"))
    tokenizer = TokenizerConfig(vocab_size=500, bpe_dropout=0.5)
    pair = train_tokenizers_for(data, tokenizer, tmp_path / "run")
    fixed = encode_splits(data, pair.src, pair.tgt).train
    max_tokens = int(np.maximum(fixed.src.lengths, fixed.tgt.lengths).max()) + 1
    config = ExperimentConfig(
        data=data, tokenizer=tokenizer, train=TrainConfig(max_tokens=max_tokens)
    )
    train = prepare_data(config, pair.src, pair.tgt, SpecialTokens()).train
    for epoch in range(3):
        for batch in train.iterate(epoch):
            rows, width = batch.src_ids.shape
            assert rows * max(width, batch.tgt_in_ids.shape[1]) <= max_tokens
