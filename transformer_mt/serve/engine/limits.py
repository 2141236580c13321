"""How much the engine takes on (`ServeLimits`), and what that makes of its KV pool and its
self-attention groups for one model."""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from transformer_mt.config import ModelConfig
from transformer_mt.errors import SettingError
from transformer_mt.machine import available_memory, gib, memory_left
from transformer_mt.serve.engine.paged import BlockPool

if TYPE_CHECKING:
    from transformer_mt.inference.translator import Translator

log = logging.getLogger(__name__)

# The most the KV pool takes when --kv-blocks is not given (see `new_pool`).
DEFAULT_KV_BYTES = 512 * 2**20
# Positions a KV block holds, at most: far past the sentences a server translates; a block of
# 10**20 would overflow the pool's allocation.
MAX_BLOCK_SIZE = 65_536


@dataclass(frozen=True)
class ServeLimits:
    """How much the engine takes on; None: a default derived from the model and checkpoint."""

    max_batch_tokens: int | None = None  # source tokens decoded together (None: decode.max_tokens)
    max_queue: int = 1024  # sentences waiting for admission
    kv_blocks: int | None = None  # blocks in the KV pool (None: DEFAULT_KV_BYTES of them)
    block_size: int = 1  # positions per KV block (measured: docs/serving.md, Performance)
    group_rows: int = 256  # hypotheses per self-attention group of similar length (0: one)
    cache_entries: int = 256  # entries of each cache (translations, encoder outputs)
    max_request_sentences: int = 256
    max_sentence_chars: int = 10_000
    max_beam_size: int = 32

    def __post_init__(self) -> None:
        # A queue of none would answer every request 413.
        at_least_one = ("max_batch_tokens", "max_queue", "kv_blocks", "block_size")
        for name in (*at_least_one, "max_request_sentences"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise SettingError(name, value, "must be at least 1")
        if self.block_size > MAX_BLOCK_SIZE:
            raise SettingError("block_size", self.block_size, f"must be at most {MAX_BLOCK_SIZE}")
        if self.cache_entries < 0:
            raise SettingError("cache_entries", self.cache_entries, "must be 0 or more")


def group_rows(cfg: ModelConfig, limits: ServeLimits) -> int:
    """Hypotheses per self-attention group (`PagedDecoderCache.group_rows`): 0, one view of the
    batch padded to its longest row, for models whose self-attention is not plain attention
    (relative position terms, or latent attention, whose absorbed form attends through the
    model's own layer); `limits.group_rows` otherwise."""
    one_view = cfg.relative_positions or cfg.attention == "mla"
    return 0 if one_view else limits.group_rows


def new_pool(translator: Translator, limits: ServeLimits, max_batch_tokens: int) -> BlockPool:
    """The KV pool: `limits.kv_blocks` blocks, or by default enough for `max_batch_tokens`
    source tokens at the checkpoint's beam size with outputs up to 4x the source (short
    sentences need more blocks per token), and at least for one sentence as long as the
    position table; at most DEFAULT_KV_BYTES of them.

    Raises:
        SettingError: `limits.kv_blocks` blocks would take more memory than the device has
            available (a pool allocated past it fails in torch's allocator, or is killed).
    """
    cfg = translator.model.cfg
    dtype = translator.cache_dtype or next(translator.model.parameters()).dtype
    n_blocks = limits.kv_blocks
    block_bytes = BlockPool.for_model(cfg, 1, limits.block_size, dtype).block_bytes
    available = available_memory(translator.device)
    if n_blocks is not None and available is not None and n_blocks * block_bytes > available:
        raise SettingError(
            "kv_blocks",
            n_blocks,
            f"a KV pool of {gib(n_blocks * block_bytes)} ({block_bytes:,} bytes a block), and "
            f"{memory_left(translator.device, available)}",
        )
    beam, size = translator.decode.beam_size, limits.block_size
    if n_blocks is None:
        wanted = math.ceil(4 * max_batch_tokens * beam / size)
        longest = beam * (math.ceil(cfg.max_positions / size) + 1)
        n_blocks = max(1, longest, min(wanted, DEFAULT_KV_BYTES // block_bytes))
    reach = longest_output(n_blocks, size, beam)
    if reach < cfg.max_positions:  # only a pool given: said at start, before the first refusal
        log.warning(
            "a KV pool of %d blocks of %d position(s) holds outputs of up to %d positions at "
            "beam %d, fewer than the model's %d: longer ones are refused",
            n_blocks,
            size,
            max(reach, 0),
            beam,
            cfg.max_positions,
        )
    return BlockPool.for_model(cfg, n_blocks, limits.block_size, dtype, translator.device)


def longest_output(n_blocks: int, block_size: int, beam_size: int) -> int:
    """The most output positions a sentence at `beam_size` may have in a pool of `n_blocks`,
    as admission counts a sentence's blocks (`beam_size * (ceil(positions / block_size) + 1)`);
    below 1, none fits."""
    return (n_blocks // beam_size - 1) * block_size
