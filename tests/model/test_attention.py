"""Attention against references: plain math, torch.nn.MultiheadAttention, padding invariance.

Tests of `attention` run both kernels a model may be built with (`KERNELS`); the CPU kernels'
own tests and the table that picks them are tests/test_kernels.py's."""

import pytest
import torch
from torch import nn
from torch.testing import assert_close

from transformer_mt.model import KVCache
from transformer_mt.model import attention as attention_module
from transformer_mt.model.attention import MultiHeadAttention, attention_with_weights, causal_mask
from transformer_mt.model.layers import LayerCache

from .tiny import KERNELS
from .torch_reference import copy_attention

B, H, TQ, TK, DH, D = 3, 4, 5, 7, 8, 32


def _random_mask():
    mask = torch.rand(B, 1, TQ, TK) > 0.3
    mask[..., 0] = True  # every row keeps a key
    return mask


@pytest.mark.parametrize("attention", KERNELS)
@pytest.mark.parametrize("kind", ["none", "padding", "causal", "explicit"])
def test_sdpa_equals_plain_math(kind, attention):
    q, k, v = torch.randn(B, H, TQ, DH), torch.randn(B, H, TK, DH), torch.randn(B, H, TK, DH)
    mask, is_causal = None, False
    if kind == "padding":
        mask = torch.arange(TK)[None, None, None, :] < torch.tensor([7, 4, 1])[:, None, None, None]
    elif kind == "explicit":
        mask = _random_mask()
    elif kind == "causal":
        k, v, is_causal = k[:, :, :TQ], v[:, :, :TQ], True
    expected, weights = attention_with_weights(q, k, v, mask, is_causal)
    assert_close(attention(q, k, v, mask, is_causal), expected, atol=1e-5, rtol=1e-5)
    assert_close(weights.sum(-1), torch.ones(B, H, TQ))


@pytest.mark.parametrize("kind", ["padding", "causal", "empty_row"])
@pytest.mark.parametrize("per_row", [False, True])
@pytest.mark.parametrize("attention", KERNELS)
def test_bias_is_added_to_the_scaled_scores_on_every_path(kind, per_row, attention):
    """softmax(Q K^T / sqrt(Dh) + bias) V through SDPA (a float mask), the CPU math path (with
    dropout that drops nothing, in the table) and the oracle; a bias per head or per row and
    head."""
    q, k, v = torch.randn(B, H, TQ, DH), torch.randn(B, H, TK, DH), torch.randn(B, H, TK, DH)
    bias = torch.randn(B, H, TQ, TK) if per_row else torch.randn(H, TQ, TK)
    mask, is_causal = _random_mask(), False
    if kind == "causal":
        k, v, bias, mask, is_causal = k[:, :, :TQ], v[:, :, :TQ], bias[..., :TQ], None, True
    elif kind == "empty_row":
        mask[1, :, 2] = False
    keep = causal_mask(TQ, TQ) if is_causal else mask
    scores = (q @ k.transpose(-2, -1) / DH**0.5 + bias).masked_fill(~keep, float("-inf"))
    expected = scores.softmax(-1).nan_to_num(0.0) @ v
    assert_close(attention(q, k, v, mask, is_causal, attn_bias=bias), expected)
    assert_close(attention(q, k, v, mask, is_causal, 1e-6, attn_bias=bias), expected)
    assert_close(attention_with_weights(q, k, v, mask, is_causal, bias)[0], expected)


def test_rows_are_checked_for_keys_only_when_one_has_none():
    mask = torch.ones(B, 1, 1, TK, dtype=torch.bool)
    mask[:, ..., -2:] = False  # padding: every row keeps keys
    assert attention_module._rows_with_keys(mask) is None  # no pass over the output on the CPU
    mask[1] = False
    keep = attention_module._rows_with_keys(mask)
    assert keep is not None and keep.flatten().tolist() == [i != 1 for i in range(B)]


@pytest.mark.parametrize("attention", KERNELS)
def test_fully_masked_row_gives_zeros_not_nan(attention):
    q, k, v = torch.randn(B, H, TQ, DH), torch.randn(B, H, TK, DH), torch.randn(B, H, TK, DH)
    mask = _random_mask()
    mask[1] = False  # every key of sentence 1 masked
    out = attention(q, k, v, mask)
    oracle, weights = attention_with_weights(q, k, v, mask)
    assert not out.isnan().any() and not oracle.isnan().any()
    assert (out[1] == 0).all() and (weights[1] == 0).all()
    assert_close(out, oracle, atol=1e-5, rtol=1e-5)


def test_decoding_caches_keep_cross_attention_keys_contiguous():
    """What lets each step's cross-attention take the batched products without a copy."""
    cache = LayerCache()
    keys = torch.randn(B, TK, H, DH).transpose(1, 2)  # a projection's layout
    stored = cache.stored_cross(keys, -keys)
    assert all(t.is_contiguous() for t in stored)
    assert_close(stored[0], keys)


def test_causal_mask_is_lower_right_aligned():
    assert causal_mask(3, 3).tolist() == [[1, 0, 0], [1, 1, 0], [1, 1, 1]]
    assert causal_mask(2, 4).tolist() == [[1, 1, 1, 0], [1, 1, 1, 1]]


def _copy_into_torch_mha(ours: MultiHeadAttention) -> nn.MultiheadAttention:
    ref = nn.MultiheadAttention(D, H, batch_first=True)
    copy_attention(ours, ref)
    return ref.eval()


@pytest.mark.parametrize("use", ["self", "cross", "causal_self"])
def test_mha_equals_torch_multihead_attention(use):
    ours = MultiHeadAttention(D, H).eval()
    ref = _copy_into_torch_mha(ours)
    x = torch.randn(B, TQ, D)
    source = x if use != "cross" else torch.randn(B, TK, D)
    lengths = torch.tensor([source.size(1), 3, 1])
    keep = torch.arange(source.size(1))[None, :] < lengths[:, None]  # (B, Tk) True = real
    if use == "causal_self":
        out, _ = ours(x, source, is_causal=True)
        blocked = ~causal_mask(TQ, TQ)  # torch's convention: True = blocked
        expected, _ = ref(x, source, source, attn_mask=blocked, need_weights=False)
    else:
        out, _ = ours(x, source, keep[:, None, None, :])
        expected, _ = ref(x, source, source, key_padding_mask=~keep, need_weights=False)
    assert_close(out, expected, atol=1e-5, rtol=1e-5)


def test_mha_weights_path_equals_fast_path():
    ours = MultiHeadAttention(D, H).eval()
    x, memory = torch.randn(B, TQ, D), torch.randn(B, TK, D)
    mask = _random_mask()
    fast, none = ours(x, memory, mask)
    slow, weights = ours(x, memory, mask, need_weights=True)
    assert none is None and weights.shape == (B, H, TQ, TK)
    assert_close(fast, slow, atol=1e-5, rtol=1e-5)


def test_padded_keys_change_nothing():
    ours = MultiHeadAttention(D, H).eval()
    x, memory = torch.randn(B, TQ, D), torch.randn(B, TK, D)
    keep = torch.arange(TK)[None, :] < torch.tensor([TK, 4, 2])[:, None]
    mask = keep[:, None, None, :]
    garbage = torch.where(keep[..., None], memory, torch.randn(B, TK, D) * 100)
    assert_close(ours(x, memory, mask)[0], ours(x, garbage, mask)[0], atol=1e-5, rtol=1e-5)


def test_kv_cache_grows_without_losing_steps_and_reorders():
    steps = [torch.randn(B, H, 1, DH) for _ in range(40)]  # past the initial capacity
    cache = KVCache.empty(steps[0], capacity=4)
    for s in steps:
        keys, values, valid = cache.append(s, -s)
        assert valid is None
    assert cache.length == 40
    assert_close(keys, torch.cat(steps, dim=2))
    assert_close(values, -torch.cat(steps, dim=2))
    capacity = cache.keys.size(2)
    cache.reorder(torch.tensor([2, 0]))
    assert_close(cache.keys[:, :, : cache.length], torch.cat(steps, dim=2)[[2, 0]])
    assert cache.keys.size(2) == cache.values.size(2) == capacity  # the next append fits


def test_kv_cache_reorders_through_growth_and_pruning():
    # Beam reorders between appends; rows shrink (pruning) while the capacity grows.
    cache = KVCache.empty(torch.zeros(B, H, 1, DH), capacity=2)
    reference = torch.empty(B, H, 0, DH)
    orders = [[2, 2, 0], [1, 0, 2], [0, 2], [1, 1], [0], [0]]
    for order in orders:
        step = torch.randn(reference.size(0), H, 1, DH)
        keys, values, _ = cache.append(step, -step)
        reference = torch.cat([reference, step], dim=2)
        assert_close(keys, reference)
        assert_close(values, -reference)
        cache.reorder(torch.tensor(order))
        reference = reference[order]
        assert_close(cache.keys[:, :, : cache.length], reference)
        assert_close(cache.values[:, :, : cache.length], -reference)


def test_kv_cache_reorders_alternate_between_two_buffers():
    cache = KVCache.empty(torch.zeros(B, H, 1, DH), capacity=8)
    reference = torch.empty(B, H, 0, DH)
    storages = []
    for order in [[2, 0, 1], [1, 1, 0], [0, 2], [1, 0]]:
        step = torch.randn(reference.size(0), H, 1, DH)
        cache.append(step, -step)
        reference = torch.cat([reference, step], dim=2)[order]
        cache.reorder(torch.tensor(order))
        storages.append(cache.keys.untyped_storage().data_ptr())
        assert_close(cache.keys[:, :, : cache.length], reference)
        assert_close(cache.values[:, :, : cache.length], -reference)
    # Each reorder writes into the buffer the one before it left: two buffers in turn.
    assert storages[0] != storages[1] and storages[2:] == storages[:2]


def test_kv_cache_copies_only_the_changed_rows_when_their_sources_stay():
    """A beam reorder where each moved row continues a row that stays is done in place."""
    cache = KVCache.empty(torch.zeros(B, H, 1, DH), capacity=8)
    reference = torch.empty(B, H, 0, DH)
    for order in [[0, 0, 2], [0, 1, 0], [1, 1, 2]]:
        step = torch.randn(B, H, 1, DH)
        cache.append(step, -step)
        reference = torch.cat([reference, step], dim=2)[order]
        storage = cache.keys.untyped_storage().data_ptr()
        cache.reorder(torch.tensor(order))
        assert cache.keys.untyped_storage().data_ptr() == storage  # no other buffer
        assert_close(cache.keys[:, :, : cache.length], reference)
        assert_close(cache.values[:, :, : cache.length], -reference)
