"""From a config to encoded splits: the one path by which `tmt train` and library users read data.

    read train -> train (or reuse) tokenizers -> encode (cached) -> clean
    read valid -> encode (cached), never filtered (it is scored against all its references)

`tmt train` checks every corpus file first (`dataset.check_sources`), then calls
`encode_splits` with the tokenizers it trained or resumed, then batches; `prepare_data` checks
and trains the tokenizers first, for users who start from a config. Batches come from
`BatchIterator(prepared.train, max_tokens, seed)`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import datasets
import numpy as np

from transformer_mt.config import DataConfig, TokenizerConfig
from transformer_mt.data.dataset import (
    CleanReport,
    DataError,
    check_sources,
    load_split,
    select_training_pairs,
)
from transformer_mt.data.encoding import EncodedCorpus, encode_corpus
from transformer_mt.data.tokenizer import Tokenizer, TokenizerPair, train_tokenizers


@dataclass(frozen=True)
class EncodedSplits:
    """Encoded training and validation data, with the raw text each row came from."""

    train: EncodedCorpus  # cleaned; row i is raw training pair train_keep[i]
    train_keep: np.ndarray  # (N,) int64 row of each kept pair in train_text
    train_text: datasets.Dataset  # raw `src`/`tgt` training strings, every line
    valid: EncodedCorpus  # every validation pair, in file order
    valid_text: datasets.Dataset  # raw `src`/`tgt` strings of valid (BLEU references)
    clean_report: CleanReport


@dataclass(frozen=True)
class PreparedData:
    """`EncodedSplits` plus the tokenizers that produced them."""

    splits: EncodedSplits
    tokenizers: TokenizerPair


def encode_splits(
    data_cfg: DataConfig, src_tok: Tokenizer, tgt_tok: Tokenizer, num_threads: int = -1
) -> EncodedSplits:
    """Read, encode (cached in `data_cfg.cache_dir` as Arrow) and clean train; encode valid.

    Raises:
        DataError: one line naming the file at fault, or no training pair left after cleaning.
    """
    cache_dir = Path(data_cfg.cache_dir)
    train_text = load_split(data_cfg, "train")
    train_all = encode_corpus(train_text, src_tok, tgt_tok, cache_dir, num_threads)
    keep, report = select_training_pairs(
        train_all.src.lengths, train_all.tgt.lengths, data_cfg.max_len, data_cfg.max_len_ratio
    )
    if not len(keep):
        raise DataError(f"{data_cfg.train}: no training pairs left after cleaning ({report})")
    valid_text = load_split(data_cfg, "valid")
    valid = encode_corpus(valid_text, src_tok, tgt_tok, cache_dir, num_threads)
    return EncodedSplits(train_all.select(keep), keep, train_text, valid, valid_text, report)


def prepare_data(
    data_cfg: DataConfig, tokenizer_cfg: TokenizerConfig, run_dir: str | Path, num_threads: int = -1
) -> PreparedData:
    """Train (or reuse) the tokenizers of `tokenizer_cfg` on train, then `encode_splits`.

    The tokenizer model files are written into `run_dir` (so that translation needs nothing
    else) and kept in `data_cfg.cache_dir` too, so the next run with the same corpus and
    settings skips training them.

    The train and valid files are checked first (`check_sources`), so that a missing valid
    file is reported before the tokenizer is trained.

    Raises:
        DataError, TokenizerError: one-line messages for bad files or settings.
    """
    check_sources(data_cfg, ("train", "valid"))
    tokenizers = train_tokenizers_for(data_cfg, tokenizer_cfg, run_dir)
    splits = encode_splits(data_cfg, tokenizers.src, tokenizers.tgt, num_threads)
    return PreparedData(splits, tokenizers)


def train_tokenizers_for(
    data_cfg: DataConfig, tokenizer_cfg: TokenizerConfig, run_dir: str | Path
) -> TokenizerPair:
    """Tokenizers trained (or reused from `data_cfg.cache_dir`) on the training split."""
    corpus = load_split(data_cfg, "train")
    return train_tokenizers(
        tokenizer_cfg,
        corpus["src"],
        corpus["tgt"],
        run_dir,
        cache_dir=Path(data_cfg.cache_dir) / "tokenizers",
    )
