"""Helpers of the streaming tests: a streamed corpus's config, cursors and whole epochs."""

from pathlib import Path

from transformer_mt.config import DataConfig
from transformer_mt.data.batching import Batch
from transformer_mt.data.streaming import StreamingBatches, StreamSettings
from transformer_mt.data.tokenizer_training import TokenizerPair

MAX_TOKENS = 300


def data_config(corpus_dir: Path, **changes) -> DataConfig:
    """Streaming over `corpus_dir/train` in chunks of 64 pairs; max_len 20 and ratio 1.6 drop
    some pairs of the Multi30k slice."""
    settings = dict(
        train=str(corpus_dir / "train"),
        valid=str(corpus_dir / "train"),  # the in-memory path reads one; a clone has no data/
        test=None,
        cache_dir=str(corpus_dir / "cache"),
        max_len=20,
        max_len_ratio=1.6,
        streaming=True,
        shuffle_buffer=64,
        workers=0,
    )
    return DataConfig(**(settings | changes))


def cursor(
    cfg: DataConfig, tokenizers: TokenizerPair, rank: int = 0, world_size: int = 1, seed: int = 1
) -> StreamingBatches:
    settings = StreamSettings(cfg, MAX_TOKENS, seed, rank, world_size)
    return StreamingBatches(settings, tokenizers.src, tokenizers.tgt)


def read_epoch(batches: StreamingBatches) -> list[Batch]:
    """The batches of the epoch the cursor stands in, to its end."""
    epoch, out = batches.position.epoch, []
    while batches.position.epoch == epoch:
        out.append(next(batches))
    return out


def numbers(batches) -> list[int]:
    """The corpus numbers of the batches' pairs, in order."""
    return [i for batch in batches for i in batch.indices.tolist()]
