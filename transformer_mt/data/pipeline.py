"""From a config to what training reads: the one path of `tmt train` and library users.

    read train -> encode with the run's tokenizers (cached) -> take out the language tags
        written in the text (`typed_tags`) -> clean -> batch (BPE-dropout: a new segmentation
        every epoch, its tags taken out too)
    read valid -> encode (cached) -> take out tags; never filtered (BLEU scores it against
        all its references)

With `data.streaming` the training split is never read whole: the tokenizers learn from a
sample of it, and `streaming.StreamingBatches` reads, encodes, cleans and batches it while
training runs; valid is read as above.

`tmt train` checks every corpus file first (`locations.check_sources`), takes the tokenizers from
the checkpoint it resumes or trains (or renumbers given ones: `train_tokenizers_for`), then
calls `prepare_data`.

Example:
    pair = train_tokenizers_for(config.data, config.tokenizer, run_dir)
    data = prepare_data(config, pair.src, pair.tgt, SpecialTokens())
    batch = next(data.train)
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import datasets
import numpy as np

from transformer_mt.config import DataConfig, ExperimentConfig, TokenizerConfig
from transformer_mt.data.batching import (
    Batch,
    BatchingError,
    collate,
    framed_lengths,
    make_batches,
    oversized_pair,
    pair_too_long,
)
from transformer_mt.data.cleaning import CleanReport, select_training_pairs
from transformer_mt.data.cursor import BatchIterator
from transformer_mt.data.dataset import (
    column_texts,
    describe_split,
    load_split,
    pair_origin,
    stream_pairs,
)
from transformer_mt.data.encoding import DropoutCorpus, EncodedCorpus, encode_corpus
from transformer_mt.data.readers import DataError
from transformer_mt.data.specials import (
    BACK_TRANSLATION_TAG,
    OWN_SPECIALS,
    Framing,
    SpecialTokens,
)
from transformer_mt.data.streaming import (
    StreamingBatches,
    StreamSettings,
    sample_pairs,
)
from transformer_mt.data.tokenizer import Tokenizer
from transformer_mt.data.tokenizer_adopt import adopt_tokenizers, changed_files
from transformer_mt.data.tokenizer_training import TokenizerPair, train_tokenizers
from transformer_mt.data.typed_tags import log_taken_out, training_tags
from transformer_mt.text_files import read_lines

log = logging.getLogger(__name__)


@dataclass
class TrainData:
    """What the training loop consumes: resumable training batches and a fixed validation set."""

    train: BatchIterator | StreamingBatches  # this rank's share of every epoch
    valid_batches: list[Batch]  # teacher-forced valid loss
    valid_sources: list[str] | None  # raw source lines translated for BLEU (None: BLEU off)
    valid_references: list[str]  # raw target lines, one per valid source
    # `corpus_key` of the validation text (None: unknown): a checkpoint's best score names it,
    # so that a resume on other validation text does not compare scores of different sets.
    valid_key: str | None = None


@dataclass(frozen=True)
class EncodedSplits:
    """Encoded training and validation data, with the raw text each row came from."""

    train: EncodedCorpus  # cleaned; row i is raw training pair train_keep[i]
    train_keep: np.ndarray  # (N,) int64 row of each kept pair in train_text
    train_text: datasets.Dataset  # raw `src`/`tgt` training strings, every line
    valid: EncodedCorpus  # every validation pair, in file order
    valid_text: datasets.Dataset  # raw `src`/`tgt` strings of valid (BLEU references)
    clean_report: CleanReport


def encode_splits(
    data_cfg: DataConfig,
    src_tok: Tokenizer,
    tgt_tok: Tokenizer,
    num_threads: int = -1,
    specials: SpecialTokens = OWN_SPECIALS,
) -> EncodedSplits:
    """Read, encode (cached in `data_cfg.cache_dir` as Arrow) and clean train; encode valid.
    The language tags of `specials` written in the text of either are taken out
    (`typed_tags`).

    Raises:
        DataError: one line naming the file at fault, or no training pair left after cleaning.
    """
    tokenizers = (src_tok, tgt_tok)
    train_text = load_split(data_cfg, "train")
    train_all = _encode_split(data_cfg, "train", train_text, tokenizers, specials, num_threads)
    train_all.check_unknowns(describe_split(data_cfg), tokenizers)
    keep, report = select_training_pairs(
        train_all.src.lengths, train_all.tgt.lengths, data_cfg.max_len, data_cfg.max_len_ratio
    )
    log.info("%s", report)
    if not len(keep):
        raise DataError(
            f"{describe_split(data_cfg)}: no training pairs left after cleaning ({report})"
        )
    valid_text = load_split(data_cfg, "valid")
    valid = _encode_split(data_cfg, "valid", valid_text, tokenizers, specials, num_threads)
    return EncodedSplits(train_all.select(keep), keep, train_text, valid, valid_text, report)


def _encode_split(
    data_cfg: DataConfig,
    split: str,
    text: datasets.Dataset,
    tokenizers: tuple[Tokenizer, Tokenizer],
    specials: SpecialTokens,
    num_threads: int = -1,
) -> EncodedCorpus:
    """The `text` of split `split` encoded (`encode_corpus`), the language tags of `specials`
    written in it taken out, with a warning that counts them. They are taken out after the
    cache, which holds what the tokenizers give: the cache key needs no tags."""
    cached = encode_corpus(text, *tokenizers, Path(data_cfg.cache_dir), num_threads)
    encoded, found = cached.without_tags(training_tags(tokenizers, specials))
    log_taken_out(f"data.{split} {describe_split(data_cfg, split)}", found)
    return encoded


def train_tokenizers_for(
    data_cfg: DataConfig, tokenizer_cfg: TokenizerConfig, run_dir: str | Path
) -> TokenizerPair:
    """Tokenizers trained (or reused from `data_cfg.cache_dir`) on the training split, the
    source (or joint) one also on `tokenizer.extra_text`.

    Streamed, the split is sampled in one pass (`streaming.sample_pairs`), at most
    `tokenizer.input_sentence_size` pairs held; otherwise it is read whole. Each tokenizer then
    learns from at most that many sentences, sampled with a fixed seed. Data in several
    directions gives each distinct sentence of a side once. A given model
    (`tokenizer.model_file`) is renumbered instead, and the corpus is not read
    (`tokenizer_adopt`).
    """
    symbols = _whole_symbols(data_cfg)
    if tokenizer_cfg.model_file is not None:
        return adopt_tokenizers(tokenizer_cfg, run_dir, symbols)
    if data_cfg.streaming:
        sample = stream_pairs(data_cfg, "train")
        src, tgt = sample_pairs(sample, tokenizer_cfg.input_sentence_size)
    else:
        corpus = load_split(data_cfg, "train")
        src, tgt = column_texts(corpus, "src"), column_texts(corpus, "tgt")
    if len(data_cfg.directions()) > 1:
        # A multi-parallel corpus holds a language's sentences once per direction it is in:
        # each once, so that the vocabulary is shared out by language, not by direction.
        src, tgt = list(dict.fromkeys(src)), list(dict.fromkeys(tgt))
    extra = [line for path in tokenizer_cfg.extra_text for line in read_lines(path)]
    if extra:  # only then: the training side may hold millions of lines
        src = [*src, *extra]
    cache_dir = Path(data_cfg.cache_dir) / "tokenizers"
    return train_tokenizers(tokenizer_cfg, src, tgt, run_dir, cache_dir, symbols)


def unused_tokenizer_files(
    data_cfg: DataConfig, tokenizer_cfg: TokenizerConfig, src: Tokenizer, tgt: Tokenizer
) -> list[str]:
    """The given model files (`tokenizer.model_file`, ...) that no longer give the tokenizers
    `src` and `tgt` of the checkpoint a run resumes: replaced since it started, and unused."""
    held = {"src": src.model_bytes, "tgt": tgt.model_bytes}
    return changed_files(tokenizer_cfg, held, _whole_symbols(data_cfg))


def _whole_symbols(data_cfg: DataConfig) -> list[str]:
    """Pieces besides the language tags that a tokenizer must keep whole: the back-translation
    tag, when a training source is tagged."""
    return [BACK_TRANSLATION_TAG] if data_cfg.has_tagged_source() else []


def prepare_data(
    config: ExperimentConfig,
    src_tok: Tokenizer,
    tgt_tok: Tokenizer,
    specials: SpecialTokens,
    rank: int = 0,
    world_size: int = 1,
) -> TrainData:
    """Read, encode (cached), clean and batch the training set; batch the validation set.

    The validation set is not cleaned: BLEU translates every source line (the translator
    truncates what the position table cannot hold) and scores it against every reference. Its
    teacher-forced loss covers the pairs the position table holds, in batches with a budget
    large enough for the longest of them.

    Args:
        specials: the model's special ids (padding, the appended eos, the decoder's first
            input, the language tags framing each pair).
        rank, world_size: which share of every epoch this process trains on.

    Raises:
        DataError: a file at fault, no training pair left after cleaning, or no validation pair
            that fits the position table.
    """
    train_cfg = config.train
    framing = Framing.of(specials, config.data.directions())
    _check_room_for_tags(config, framing)
    train: BatchIterator | StreamingBatches
    if config.data.streaming:
        settings = StreamSettings(
            config.data,
            train_cfg.max_tokens,
            train_cfg.seed,
            rank,
            world_size,
            train_cfg.pad_to_multiple,
        )
        train = StreamingBatches(settings, src_tok, tgt_tok, framing)
        valid_text = load_split(config.data, "valid")
        valid = _encode_split(config.data, "valid", valid_text, (src_tok, tgt_tok), specials)
    else:
        splits = encode_splits(config.data, src_tok, tgt_tok, specials=specials)
        _check_pair_sizes(splits, config, framing)
        resample = _dropout_corpus(config, splits, (src_tok, tgt_tok), framing)
        train = BatchIterator(
            *(splits.train, train_cfg.max_tokens, train_cfg.seed, rank, world_size),
            *(resample, framing, train_cfg.pad_to_multiple),
        )
        valid, valid_text = splits.valid, splits.valid_text
    n_bleu = min(len(valid), train_cfg.valid_max_sentences or len(valid))
    return TrainData(
        train=train,
        valid_batches=_valid_loss_batches(valid, config, framing),
        valid_sources=column_texts(valid_text, "src")[:n_bleu],
        valid_references=column_texts(valid_text, "tgt")[:n_bleu],
        valid_key=valid.key,
    )


def _check_pair_sizes(splits: EncodedSplits, config: ExperimentConfig, framing: Framing) -> None:
    """Refuse, before training, a kept pair that alone is over `train.max_tokens` (with its
    language tags, as `framing` puts them), naming it by its number in the corpus and its
    source.

    Raises:
        BatchingError: as `batching.pair_too_long` words it.
    """
    max_tokens = config.train.max_tokens
    found = oversized_pair(splits.train, framing, max_tokens)
    if found is not None:
        row = int(splits.train_keep[found[0]])
        source = column_texts(splits.train_text, "src")[row]
        where, number = pair_origin(config.data, row)
        raise BatchingError(pair_too_long(where, number, source, found[1], max_tokens))


def _dropout_corpus(
    config: ExperimentConfig,
    splits: EncodedSplits,
    tokenizers: tuple[Tokenizer, Tokenizer],
    framing: Framing,
) -> DropoutCorpus | None:
    """The per-epoch BPE-dropout segmentation of the kept training pairs (None: dropout off).

    A sampled row keeps the deterministic segmentation when it is longer than data.max_len, or
    than what fits train.max_tokens alone beside its eos or bos and language tags: a sampled
    segmentation is longer than the fixed one that `_check_pair_sizes` let through, and a
    pair over the budget would stop the run at some later epoch.
    """
    if config.tokenizer.bpe_dropout <= 0:
        return None
    longest = min(config.data.max_len, config.train.max_tokens - 1 - framing.tags)
    src_texts, tgt_texts = (
        [texts[i] for i in splits.train_keep.tolist()]
        for texts in (column_texts(splits.train_text, side) for side in ("src", "tgt"))
    )
    return DropoutCorpus(
        src_texts,
        tgt_texts,
        *tokenizers,
        deterministic=splits.train,
        dropout=config.tokenizer.bpe_dropout,
        seed=config.train.seed,
        max_len=longest,
        target=config.tokenizer.bpe_dropout_sides == "both",
        tags=training_tags(tokenizers, framing.specials),
    )


def _check_room_for_tags(config: ExperimentConfig, framing: Framing) -> None:
    """A pair of data.max_len tokens, its language tags and its bos or eos must fit the
    position table (`ExperimentConfig.validate` counts the bos or eos only).

    Raises:
        DataError: naming data.max_len and the most it can be.
    """
    tags = framing.tags
    room = config.model.max_positions - 1 - tags
    if tags and config.data.max_len > room:
        raise DataError(
            f"data.max_len={config.data.max_len}: with the model's {tags} language tag(s) a "
            f"pair needs max_len + {tags + 1} positions of model.max_positions="
            f"{config.model.max_positions}; set data.max_len to at most {room}"
        )


def _valid_loss_batches(
    valid: EncodedCorpus, config: ExperimentConfig, framing: Framing
) -> list[Batch]:
    """Batches of the validation pairs whose sides fit the position table with their EOS/BOS.

    Raises:
        DataError: no validation pair fits.
    """
    # Positions left for the tokens after the language tags (and the one eos or bos).
    table = config.model.max_positions
    room = table - framing.tags
    fits = np.flatnonzero((valid.src.lengths < room) & (valid.tgt.lengths < room))
    if len(fits) < len(valid):
        log.warning(
            "validation loss leaves out %d of %d pairs longer than the %d tokens model."
            "max_positions leaves beside eos and language tags (BLEU translates them truncated)",
            *(len(valid) - len(fits), len(valid), room - 1),
        )
    if not len(fits):
        raise DataError(
            f"{config.data.valid}: no validation pair fits model.max_positions={table}; raise "
            "model.max_positions or validate on shorter sentences"
        )
    valid = valid.select(fits)
    longest = int(np.maximum(*framed_lengths(valid, framing)).max())
    budget = max(config.train.max_tokens, longest)
    batches = make_batches(valid, budget, seed=0, epoch=0, framing=framing)
    return [collate(valid, indices, framing) for indices in batches]
