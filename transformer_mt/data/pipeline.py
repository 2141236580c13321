"""From a config to what the trainer consumes: tokenizers in the run directory, encoded splits.

    read train -> strip whitespace -> train (or reuse) tokenizers -> encode (cached) -> clean
    read valid -> encode (cached), never filtered

Batches then come from `BatchIterator(prepared.train, max_tokens, seed)`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import datasets

from transformer_mt.config import DataConfig, TokenizerConfig
from transformer_mt.data.dataset import (
    CleanReport,
    column_texts,
    load_split,
    select_training_pairs,
)
from transformer_mt.data.encoding import EncodedCorpus, encode_corpus
from transformer_mt.data.tokenizer import TokenizerPair, train_tokenizers

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PreparedData:
    """Encoded training and validation data plus the tokenizers that produced them."""

    train: EncodedCorpus  # cleaned; row i is raw training pair train_indices[i]
    valid: EncodedCorpus  # every validation pair, in file order
    valid_text: datasets.Dataset  # raw `src`/`tgt` strings of valid (BLEU references)
    tokenizers: TokenizerPair
    clean_report: CleanReport


def prepare_data(
    data_cfg: DataConfig, tokenizer_cfg: TokenizerConfig, run_dir: str | Path, num_threads: int = -1
) -> PreparedData:
    """Read, tokenize, encode and clean the corpus of `data_cfg` for training.

    The tokenizer model files are written into `run_dir` (so that translation needs nothing
    else) and kept in `data_cfg.cache_dir` too, so the next run with the same corpus and
    settings skips training them; encoded splits are cached there as Arrow.

    Raises:
        DataError, TokenizerError: one-line messages for bad files or settings.
    """
    cache_dir = Path(data_cfg.cache_dir)
    train_text = _strip(load_split(data_cfg, "train"))
    tokenizers = train_tokenizers(
        tokenizer_cfg,
        column_texts(train_text, "src"),
        column_texts(train_text, "tgt"),
        out_dir=run_dir,
        cache_dir=cache_dir / "tokenizers",
    )
    train_all = encode_corpus(train_text, tokenizers.src, tokenizers.tgt, cache_dir, num_threads)
    keep, report = select_training_pairs(
        train_all.src.lengths, train_all.tgt.lengths, data_cfg.max_len, data_cfg.max_len_ratio
    )
    valid_text = load_split(data_cfg, "valid")
    valid = encode_corpus(valid_text, tokenizers.src, tokenizers.tgt, cache_dir, num_threads)
    return PreparedData(train_all.select(keep), valid, valid_text, tokenizers, report)


def _strip(corpus: datasets.Dataset) -> datasets.Dataset:
    """Training text without leading/trailing whitespace (hashes and tokenizer input agree)."""
    return datasets.Dataset.from_dict(
        {name: [line.strip() for line in column_texts(corpus, name)] for name in ("src", "tgt")}
    )
