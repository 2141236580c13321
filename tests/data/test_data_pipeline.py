"""prepare_data end to end on a Multi30k slice: tokenizer in the run dir, cached encodings."""

import gzip
from pathlib import Path

from transformer_mt.config import DataConfig, TokenizerConfig
from transformer_mt.data.encoding import encode_corpus
from transformer_mt.data.pipeline import prepare_data

MULTI30K = Path(__file__).resolve().parents[3] / "shared" / "data" / "multi30k"


def write_slice(tmp_path, split, n):
    for lang in ("de", "en"):
        lines = gzip.decompress((MULTI30K / f"valid.{lang}.gz").read_bytes()).split(b"\n")[:n]
        (tmp_path / f"{split}.{lang}").write_bytes(b"\n".join(lines) + b"\n")


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
    prepared = prepare_data(cfg, tok_cfg, tmp_path / "run")
    assert prepared.tokenizers.src_path.parent == tmp_path / "run"
    first = prepared.splits
    assert first.clean_report.total == 400
    assert len(first.train) == first.clean_report.kept < 400  # max_len=20 drops some
    assert len(first.valid) == 50  # never filtered
    assert first.train.src.lengths.max() <= 20
    assert len(first.train_keep) == len(first.train)
    row = int(first.train_keep[0])  # the raw line each kept row came from
    assert first.train.src[0].tolist() == prepared.tokenizers.src.encode(first.train_text["src"][row])
    cached = sorted(p.name for p in (tmp_path / "cache").iterdir())
    second_prepared = prepare_data(cfg, tok_cfg, tmp_path / "run")
    second = second_prepared.splits
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == cached
    assert second.train.src.values.tolist() == first.train.src.values.tolist()
    tokenizers = second_prepared.tokenizers
    fresh = encode_corpus(second.valid_text, tokenizers.src, tokenizers.tgt)
    assert fresh.tgt.values.tolist() == second.valid.tgt.values.tolist()
