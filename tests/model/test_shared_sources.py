"""Rows that read one source share its cross-attention keys/values: the fast path vs its slow
twin.

A decoding step is told which source each row reads (`sources`). The fast path passes one
memory row per sentence and row // K for its beams, so the cache holds one copy of each
sentence's keys; the slow twin passes every row its own copy of the memory (sources =
arange(B)), one copy per row. Both must decode alike through beam reorders, pruning of whole
sentences, and reorders that move rows across sentences.
"""

import pytest
import torch
from torch.testing import assert_close

from transformer_mt import kernels
from transformer_mt.config import ModelConfig
from transformer_mt.model import build_model
from transformer_mt.model.layers import SourceRows

from .tiny import KERNELS

V, PAD, BOS = 40, 0, 2
K = 3  # beams per sentence


def tiny_model(kernel=kernels.attention, **changes):
    """Built with the CPU table that loading for inference uses, unless told otherwise."""
    base = dict(d_model=32, n_heads=4, n_layers=2, d_ff=64, dropout=0.0, max_positions=64)
    return build_model(ModelConfig(**{**base, **changes}), V, kernel=kernel).eval()


def sentence_batch(lengths):
    """Source ids (N, S), right-padded: one row per sentence."""
    src = torch.randint(4, V, (len(lengths), max(lengths)))
    for row, n in enumerate(lengths):
        src[row, n:] = PAD
    return src


def test_source_rows_lay_out_grouped_rows_without_slots():
    grouped = SourceRows.of(torch.arange(4).repeat_interleave(K), 4)
    assert grouped.group == K and grouped.slots is None
    greedy = SourceRows.of(torch.arange(4), 4)
    assert greedy.group == 1 and greedy.slots is None
    # Uneven groups, out of order, and a source no row reads: each row gets its own slot.
    mixed = SourceRows.of(torch.tensor([2, 0, 2, 0, 2]), 4)
    assert mixed.group == 3
    assert mixed.slots.tolist() == [6, 0, 7, 1, 8]


# Row orders applied after steps 1, 2 and 3: a beam reorder inside each sentence, dropping the
# middle sentence (pruning), then one that moves rows across sentences.
WITHIN = [2, 2, 0, 4, 3, 3, 8, 6, 7]
PRUNE = [0, 1, 2, 6, 7, 8]
ACROSS = [3, 0, 1, 5, 4, 2]


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("pre_norm", [False, True])
def test_shared_cross_attention_decodes_like_per_row(pre_norm, kernel):
    model = tiny_model(kernel, pre_norm=pre_norm)
    sentences = sentence_batch([5, 3, 4])
    n_rows = sentences.size(0) * K
    tgt = torch.randint(4, V, (n_rows, 5))
    tgt[:, 0] = BOS
    with torch.no_grad():
        outputs = {}
        for share in (True, False):
            src_mask = model.src_mask(sentences)
            memory = model.encode(sentences, src_mask)
            sources = torch.arange(sentences.size(0)).repeat_interleave(K)
            if not share:  # the slow twin: every row its own copy of its sentence's memory
                memory, src_mask = memory[sources], src_mask[sources]
                sources = torch.arange(n_rows)
            cache = model.decoder.new_cache()
            rows, steps = torch.arange(n_rows), []
            for t in range(tgt.size(1)):
                if 1 <= t <= 3:
                    order = torch.tensor([WITHIN, PRUNE, ACROSS][t - 1])
                    cache = cache.reorder(order)
                    sources, rows = sources[order], rows[order]
                log_probs, cache = model.decode_step(tgt[rows, t], memory, src_mask, sources, cache)
                steps.append(log_probs)
            copies = cache.layers[0].cross_attn[0].size(0)
            assert copies == (sentences.size(0) if share else n_rows)  # never copied per row
            outputs[share] = steps
    for fast, slow in zip(outputs[True], outputs[False], strict=True):
        assert_close(fast, slow, atol=1e-5, rtol=1e-5)


def test_pruning_keeps_sharing():
    model = tiny_model()
    sentences = sentence_batch([4, 2, 3])
    src_mask = model.src_mask(sentences)
    sources = torch.arange(3).repeat_interleave(K)
    with torch.no_grad():
        memory = model.encode(sentences, src_mask)
        tokens = torch.full((3 * K,), BOS)
        _, cache = model.decode_step(tokens, memory, src_mask, sources, None)
        order, kept = torch.tensor(PRUNE), torch.tensor([0, 2])
        cache.reorder(order, kept)
        assert cache.layers[0].cross_attn[0].size(0) == 2  # one copy per remaining sentence
        pruned = torch.arange(2).repeat_interleave(K)
        log_probs, _ = model.decode_step(tokens[order], memory[kept], src_mask[kept], pruned, cache)
        per_row = torch.arange(3 * K)
        _, fresh = model.decode_step(tokens, memory[sources], src_mask[sources], per_row, None)
        expected, _ = model.decode_step(
            tokens[order], memory[sources], src_mask[sources], order, fresh.reorder(order)
        )
    assert_close(log_probs, expected, atol=1e-5, rtol=1e-5)


def test_rows_repeated_after_the_first_step_share_one_copy():
    """Beam search's first step: one row per sentence, then each repeated K times."""
    model = tiny_model()
    sentences = sentence_batch([4, 2, 3])
    src_mask = model.src_mask(sentences)
    expand = torch.arange(3).repeat_interleave(K)
    with torch.no_grad():
        memory = model.encode(sentences, src_mask)
        tokens = torch.full((3,), BOS)
        _, cache = model.decode_step(tokens, memory, src_mask, torch.arange(3), None)
        cache.reorder(expand)
        assert cache.layers[0].cross_attn[0].size(0) == 3  # not repeated
        step = torch.randint(4, V, (3 * K,))
        log_probs, _ = model.decode_step(step, memory, src_mask, expand, cache)
        _, plain = model.decode_step(tokens, memory, src_mask, torch.arange(3), None)
        plain.reorder(expand, expand)  # the slow twin: one copy per row
        assert plain.layers[0].cross_attn[0].size(0) == 3 * K
        expected, _ = model.decode_step(
            step, memory[expand], src_mask[expand], torch.arange(3 * K), plain
        )
    assert_close(log_probs, expected, atol=1e-5, rtol=1e-5)


def test_dropping_every_row_keeps_nothing():
    """The last reorder of a search keeps no row and no source."""
    model = tiny_model()
    sentences = sentence_batch([4, 2, 3])
    src_mask = model.src_mask(sentences)
    sources = torch.arange(3).repeat_interleave(K)
    with torch.no_grad():
        memory = model.encode(sentences, src_mask)
        tokens = torch.full((3 * K,), BOS)
        _, cache = model.decode_step(tokens, memory, src_mask, sources, None)
        cache.reorder(torch.tensor(WITHIN))
        nothing = torch.zeros(0, dtype=torch.long)
        cache.reorder(nothing, nothing)
    for layer in cache.layers:
        assert layer.cross_attn[0].size(0) == 0 and layer.self_attn.keys.size(0) == 0


@pytest.mark.parametrize("kernel", KERNELS)
def test_a_step_given_the_laid_out_sources_is_one_graph(kernel):
    """The layout reads the index's values (bincount, a sortedness check); given it laid out,
    a cached step has nothing data-dependent left for torch.compile to break its graph at."""
    model = tiny_model(kernel)
    sentences = sentence_batch([5, 3, 4])
    src_mask = model.src_mask(sentences)
    with torch.inference_mode():
        memory = model.encode(sentences, src_mask)
        for sources in (torch.arange(3).repeat_interleave(K), torch.tensor([2, 0, 2, 1])):
            rows = model.source_rows(sources, 3)
            tokens = torch.full((sources.numel(),), BOS)
            _, cache = model.decode_step(tokens, memory, src_mask, rows, None)
            explained = torch._dynamo.explain(model.decode_step)(
                tokens, memory, src_mask, rows, cache
            )
            assert explained.graph_break_count == 0, explained.break_reasons
            assert explained.graph_count == 1
