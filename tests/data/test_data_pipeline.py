"""The data path of `tmt train` on a Multi30k slice: tokenizer in the run dir, cached encodings,
batches of the kept pairs."""

import dataclasses
import itertools

import pytest

from tests.corpora import slice_lines
from transformer_mt.config import (
    ConfigError,
    DataConfig,
    ExperimentConfig,
    TokenizerConfig,
    TrainConfig,
    dump_config,
)
from transformer_mt.data.dataset import column_texts
from transformer_mt.data.encoding import encode_corpus
from transformer_mt.data.pipeline import encode_splits, prepare_data, train_tokenizers_for
from transformer_mt.data.readers import DataError
from transformer_mt.data.specials import SpecialTokens
from transformer_mt.errors import TmtError
from transformer_mt.training.run import run_training


def write_slice(tmp_path, split, n):
    """The first `n` lines of Multi30k valid as `{split}.de` and `{split}.en` in tmp_path."""
    for lang in ("de", "en"):
        lines = slice_lines("valid", lang)[:n]
        (tmp_path / f"{split}.{lang}").write_text("\n".join(lines) + "\n", "utf-8")


def test_prepare_data_twice(tmp_path):
    write_slice(tmp_path, "train", 400)
    write_slice(tmp_path, "valid", 50)
    cfg = DataConfig(
        train=str(tmp_path / "train"),
        valid=str(tmp_path / "valid"),
        cache_dir=str(tmp_path / "cache"),
        max_len=20,
    )
    tok_cfg = TokenizerConfig(vocab_size=300)
    tokenizers = train_tokenizers_for(cfg, tok_cfg, tmp_path / "run")
    assert tokenizers.src_path.parent == tmp_path / "run"
    first = encode_splits(cfg, tokenizers.src, tokenizers.tgt)
    assert first.clean_report.total == 400
    assert len(first.train) == first.clean_report.kept < 400  # max_len=20 drops some
    assert len(first.valid) == 50  # never filtered
    assert first.train.src.lengths.max() <= 20
    assert len(first.train_keep) == len(first.train)
    row = int(first.train_keep[0])  # the raw line each kept row came from
    assert first.train.src[0].tolist() == tokenizers.src.encode(first.train_text["src"][row])
    cached = sorted(p.name for p in (tmp_path / "cache").iterdir())
    tokenizers = train_tokenizers_for(cfg, tok_cfg, tmp_path / "run")
    second = encode_splits(cfg, tokenizers.src, tokenizers.tgt)
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == cached
    assert second.train.src.values.tolist() == first.train.src.values.tolist()
    fresh = encode_corpus(second.valid_text, tokenizers.src, tokenizers.tgt)
    assert fresh.tgt.values.tolist() == second.valid.tgt.values.tolist()
    data = prepare_data(
        ExperimentConfig(data=cfg, tokenizer=tok_cfg),
        tokenizers.src,
        tokenizers.tgt,
        SpecialTokens(),
    )
    batched = [i for batch in data.train.iterate(epoch=0) for i in batch.indices.tolist()]
    assert sorted(batched) == list(range(len(second.train)))  # every kept pair, once an epoch
    assert data.valid_references == column_texts(second.valid_text, "tgt")
    for streaming in (False, True):  # train.pad_to_multiple reaches both kinds of batches
        experiment = ExperimentConfig(
            data=dataclasses.replace(cfg, streaming=streaming, workers=0),
            tokenizer=tok_cfg,
            train=TrainConfig(max_tokens=200, pad_to_multiple=8),
        )
        padded = prepare_data(experiment, tokenizers.src, tokenizers.tgt, SpecialTokens())
        batches = itertools.islice(padded.train, 30)  # an epoch and more
        shapes = {(b.src_ids.shape[1], b.tgt_in_ids.shape[1]) for b in batches}
        longest = 20 + 1  # max_len and the eos or bos
        assert all(n % 8 == 0 or n == longest for shape in shapes for n in shape), shapes


def test_missing_valid_file_is_reported_before_any_work(tmp_path):
    for lang, line in (("de", "ein hund läuft"), ("en", "a dog runs")):
        (tmp_path / f"train.{lang}").write_text(f"{line}\n" * 50, "utf-8")
    (tmp_path / "valid.de").write_text("ein hund\n", "utf-8")
    cfg = DataConfig(
        train=str(tmp_path / "train"),
        valid=str(tmp_path / "valid"),
        test=str(tmp_path / "test"),  # missing too, but training does not read it
        cache_dir=str(tmp_path / "cache"),
    )
    config = tmp_path / "config.yaml"
    dump_config(ExperimentConfig(data=cfg, tokenizer=TokenizerConfig(vocab_size=20)), config)
    with pytest.raises(DataError) as err:
        run_training(config, tmp_path / "run")
    message = str(err.value)
    assert message.startswith(f"data.valid={str(tmp_path / 'valid')!r}: ")
    assert f"{tmp_path}/valid.en not found" in message and "data.test" not in message
    # Refused before the tokenizer trained (vocab_size=20 would fail there) or anything encoded.
    assert not (tmp_path / "run").exists() and not (tmp_path / "cache").exists()


def test_extra_text_teaches_the_tokenizer_words_the_corpus_lacks(tmp_path):
    """A parent's tokenizer that also learns its children's language (tokenizer.extra_text)
    splits that language's words into fewer pieces; the training pairs are unchanged."""
    write_slice(tmp_path, "train", 300)
    more = slice_lines("train", "de")  # German sentences the 300 pairs do not hold
    (tmp_path / "extra.txt").write_text("\n".join(more) + "\n", "utf-8")
    cfg = DataConfig(train=str(tmp_path / "train"), cache_dir=str(tmp_path / "cache"))
    plain = train_tokenizers_for(cfg, TokenizerConfig(vocab_size=400), tmp_path / "a")
    extra = TokenizerConfig(vocab_size=400, extra_text=(str(tmp_path / "extra.txt"),))
    taught = train_tokenizers_for(cfg, extra, tmp_path / "b")
    unseen = slice_lines("test2016", "de")[:50]
    pieces = [sum(map(len, t.src.encode_batch(unseen))) for t in (plain, taught)]
    assert pieces[1] < 0.95 * pieces[0]
    missing = TokenizerConfig(vocab_size=400, extra_text=(str(tmp_path / "nothing.txt"),))
    with pytest.raises(TmtError, match="nothing.txt"):
        train_tokenizers_for(cfg, missing, tmp_path / "c")


def test_a_length_ratio_below_one_is_refused_at_load():
    """Every pair's longer side over its shorter is at least 1: no pair would be kept."""
    with pytest.raises(ConfigError, match=r"^data\.max_len_ratio=0\.5 must be >= 1"):
        DataConfig(max_len_ratio=0.5).validate()
    DataConfig(max_len_ratio=1).validate()
