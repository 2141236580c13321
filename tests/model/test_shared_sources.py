"""Rows that share a source share cross-attention keys/values: the fast path vs its slow twin.

`DecoderCache(share_sources=False)` keeps one cross-attention copy per row (the plain path);
the default finds groups of rows with equal memory (the beams of a sentence) and keeps one copy
per group. Both must decode alike through beam reorders, pruning of whole sentences, and
reorders that move rows across sentences (which turn sharing off).
"""

import pytest
import torch
from torch.testing import assert_close

from transformer_mt import kernels
from transformer_mt.config import ModelConfig
from transformer_mt.model import build_model
from transformer_mt.model.transformer import rows_per_source

from .tiny import KERNELS

V, PAD, BOS = 40, 0, 2
K = 3  # beams per sentence


def tiny_model(kernel=kernels.attention, **changes):
    """Built with the CPU table that loading for inference uses, unless told otherwise."""
    base = dict(d_model=32, n_heads=4, n_layers=2, d_ff=64, dropout=0.0, max_positions=64)
    return build_model(ModelConfig(**{**base, **changes}), V, kernel=kernel).eval()


def beam_batch(lengths):
    """Source ids (B, S) right-padded, then each row repeated K times as search does."""
    src = torch.randint(4, V, (len(lengths), max(lengths)))
    for row, n in enumerate(lengths):
        src[row, n:] = PAD
    return src.repeat_interleave(K, dim=0)


def test_rows_per_source_finds_the_beam_size():
    memory = torch.randn(4, 5, 8)
    assert rows_per_source(memory) == 1
    assert rows_per_source(memory.repeat_interleave(K, dim=0)) == K
    # Two equal sentences next to each other: groups of K still work (2K would not divide).
    twins = torch.cat([memory[:1], memory[:1], memory[1:]]).repeat_interleave(K, dim=0)
    assert rows_per_source(twins) == K


# Row orders applied after steps 1, 2 and 3: a beam reorder inside each sentence, dropping the
# middle sentence (pruning), then one that moves rows across sentences.
WITHIN = [2, 2, 0, 4, 3, 3, 8, 6, 7]
PRUNE = [0, 1, 2, 6, 7, 8]
ACROSS = [3, 0, 1, 5, 4, 2]


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("pre_norm", [False, True])
def test_shared_cross_attention_decodes_like_per_row(pre_norm, kernel):
    model = tiny_model(kernel, pre_norm=pre_norm)
    src = beam_batch([5, 3, 4])
    tgt = torch.randint(4, V, (src.size(0), 5))
    tgt[:, 0] = BOS
    with torch.no_grad():
        outputs = {}
        for share in (True, False):
            src_mask = model.src_mask(src)
            memory = model.encode(src, src_mask)
            cache = model.decoder.new_cache(share_sources=share)
            rows, steps = torch.arange(src.size(0)), []
            for t in range(tgt.size(1)):
                if 1 <= t <= 3:
                    order = torch.tensor([WITHIN, PRUNE, ACROSS][t - 1])
                    cache = cache.reorder(order)
                    memory, src_mask, rows = memory[order], src_mask[order], rows[order]
                log_probs, cache = model.decode_step(tgt[rows, t], memory, src_mask, cache)
                steps.append(log_probs)
                if share and t == 1:
                    assert cache.source_group == K  # shared through a beam reorder
            assert cache.source_group == 1  # ACROSS ended sharing (or it never started)
            outputs[share] = steps
    for fast, slow in zip(outputs[True], outputs[False], strict=True):
        assert_close(fast, slow, atol=1e-5, rtol=1e-5)


def test_pruning_keeps_sharing():
    model = tiny_model()
    src = beam_batch([4, 2, 3])
    src_mask = model.src_mask(src)
    with torch.no_grad():
        memory = model.encode(src, src_mask)
        tokens = torch.full((src.size(0),), BOS)
        _, cache = model.decode_step(tokens, memory, src_mask, None)
        order = torch.tensor(PRUNE)
        cache.reorder(order)
        assert cache.source_group == K
        assert cache.layers[0].cross_attn[0].size(0) == 2  # one copy per remaining sentence
        log_probs, _ = model.decode_step(tokens[order], memory[order], src_mask[order], cache)
        fresh = model.decoder.new_cache(share_sources=False)
        _, fresh = model.decode_step(tokens, memory, src_mask, fresh)
        expected, _ = model.decode_step(
            tokens[order], memory[order], src_mask[order], fresh.reorder(order)
        )
    assert_close(log_probs, expected, atol=1e-5, rtol=1e-5)


def test_rows_repeated_after_the_first_step_share_one_copy():
    """Beam search's first step: one row per sentence, then each repeated K times."""
    model = tiny_model()
    sentences = beam_batch([4, 2, 3])[::K]
    src_mask = model.src_mask(sentences)
    expand = torch.arange(3).repeat_interleave(K)
    with torch.no_grad():
        memory = model.encode(sentences, src_mask)
        tokens = torch.full((3,), BOS)
        _, cache = model.decode_step(tokens, memory, src_mask, None)
        cache.reorder(expand)
        assert cache.source_group == K
        assert cache.layers[0].cross_attn[0].size(0) == 3  # not repeated
        step = torch.randint(4, V, (3 * K,))
        log_probs, _ = model.decode_step(step, memory[expand], src_mask[expand], cache)
        plain = model.decoder.new_cache(share_sources=False)
        _, plain = model.decode_step(tokens, memory, src_mask, plain)
        plain = plain.reorder(expand)
        expected, _ = model.decode_step(step, memory[expand], src_mask[expand], plain)
    assert_close(log_probs, expected, atol=1e-5, rtol=1e-5)


def test_dropping_every_row_keeps_nothing():
    """The last reorder of a search keeps no row. It must not turn sharing off, which would
    first repeat every source's keys and values K times, for nothing."""
    model = tiny_model()
    src = beam_batch([4, 2, 3])
    src_mask = model.src_mask(src)
    with torch.no_grad():
        memory = model.encode(src, src_mask)
        _, cache = model.decode_step(torch.full((src.size(0),), BOS), memory, src_mask, None)
        cache.reorder(torch.tensor(WITHIN))
        cache.reorder(torch.zeros(0, dtype=torch.long))
    assert cache.source_group == K
    for layer in cache.layers:
        assert layer.cross_attn[0].size(0) == 0 and layer.self_attn.keys.size(0) == 0
