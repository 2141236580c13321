"""Attention against references: plain math, torch.nn.MultiheadAttention, padding invariance."""

import pytest
import torch
from torch import nn
from torch.testing import assert_close

from transformer_mt.model import KVCache
from transformer_mt.model import attention as attention_module
from transformer_mt.model.attention import (
    CPU_MATH_MAX_KEYS,
    MultiHeadAttention,
    attention,
    attention_with_weights,
    causal_mask,
)
from transformer_mt.model.layers import LayerCache

from .torch_reference import copy_attention

B, H, TQ, TK, DH, D = 3, 4, 5, 7, 8, 32


def _random_mask():
    mask = torch.rand(B, 1, TQ, TK) > 0.3
    mask[..., 0] = True  # every row keeps a key
    return mask


@pytest.mark.parametrize("kind", ["none", "padding", "causal", "explicit"])
def test_sdpa_equals_plain_math(kind):
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
def test_bias_is_added_to_the_scaled_scores_on_every_path(kind, per_row):
    """softmax(Q K^T / sqrt(Dh) + bias) V through SDPA (a float mask), the CPU math path (with
    dropout that drops nothing) and the oracle; a bias per head or per row and head."""
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


def test_fully_masked_row_gives_zeros_not_nan():
    q, k, v = torch.randn(B, H, TQ, DH), torch.randn(B, H, TK, DH), torch.randn(B, H, TK, DH)
    mask = _random_mask()
    mask[1] = False  # every key of sentence 1 masked
    out = attention(q, k, v, mask)
    oracle, weights = attention_with_weights(q, k, v, mask)
    assert not out.isnan().any() and not oracle.isnan().any()
    assert (out[1] == 0).all() and (weights[1] == 0).all()
    assert_close(out, oracle, atol=1e-5, rtol=1e-5)


MASK_KINDS = ["none", "per_row", "per_head", "empty_row"]


def _decoding_mask(kind: str) -> torch.Tensor | None:
    """A keep-mask over TK keys: per row, per (row, head), or per row with row 1 empty."""
    if kind == "none":
        return None
    mask = torch.rand(B, H if kind == "per_head" else 1, 1, TK) > 0.4
    mask[..., 0] = True
    if kind == "empty_row":
        mask[1] = False
    return mask


def _sdpa_reference(q, k, v, mask):
    """SDPA with the key heads repeated up to H; zeros for a row with no key (SDPA: NaN)."""
    group = H // k.size(1)
    k_all, v_all = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    empty = None if mask is None else ~mask.any(-1, keepdim=True)
    out = nn.functional.scaled_dot_product_attention(
        q, k_all, v_all, attn_mask=None if mask is None else mask | empty
    )
    return out if mask is None else out.masked_fill(empty, 0.0)


@pytest.mark.parametrize("kv_heads", [H, 2, 1])
@pytest.mark.parametrize("mask_kind", MASK_KINDS)
def test_one_query_path_equals_sdpa(kv_heads, mask_kind):
    """A decoding step's attention (one float32 query per row, keys in a cache laid out
    (B, T, Hkv, Dh) in memory) against SDPA itself, with grouped key heads and masks."""
    q = torch.randn(B, 1, H, DH).transpose(1, 2)  # (B, H, 1, Dh), as split_heads makes it
    k, v = (torch.randn(B, TK + 3, kv_heads, DH).transpose(1, 2)[:, :, :TK] for _ in "kv")
    mask = _decoding_mask(mask_kind)
    assert attention_module._one_query_on_cpu(q, k, 0.0, False, None)
    assert_close(attention(q, k, v, mask), _sdpa_reference(q, k, v, mask), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("kv_heads", [H, 2, 1])
@pytest.mark.parametrize("mask_kind", MASK_KINDS)
@pytest.mark.parametrize("n_queries", [1, 5])
def test_batched_products_path_equals_sdpa(kv_heads, mask_kind, n_queries):
    """A few queries per row over contiguous keys (a decoding cache's cross-attention: the K
    beams of one source) against SDPA itself, with grouped key heads and masks."""
    q = torch.randn(B, n_queries, H, DH).transpose(1, 2)  # (B, H, Tq, Dh), as split_heads
    k, v = torch.randn(B, kv_heads, TK, DH), torch.randn(B, kv_heads, TK, DH)
    mask = _decoding_mask(mask_kind)
    assert attention_module._products_on_cpu(q, k, v, 0.0, False, None)
    out = attention(q, k, v, mask)
    assert not out.isnan().any()
    assert_close(out, _sdpa_reference(q, k, v, mask), atol=1e-5, rtol=1e-5)


def test_batched_products_only_for_contiguous_float32_inference_with_few_queries():
    q, k, v = torch.randn(B, H, 5, DH), torch.randn(B, H, TK, DH), torch.randn(B, H, TK, DH)
    eligible = attention_module._products_on_cpu
    assert eligible(q, k, v, 0.0, False, None)
    assert not eligible(q, k.transpose(2, 3).contiguous().transpose(2, 3), v, 0.0, False, None)
    assert not eligible(q, k, v, 0.1, False, None)  # dropout
    assert not eligible(q, k, v, 0.0, True, None)  # causal
    assert not eligible(q.bfloat16(), k.bfloat16(), v.bfloat16(), 0.0, False, None)
    many = attention_module.BATCHED_MAX_QUERIES + 1
    assert not eligible(torch.randn(B, H, many, DH), k, v, 0.0, False, None)
    assert not eligible(q.requires_grad_(), k, v, 0.0, False, None)  # training: SDPA


def test_decoding_caches_keep_cross_attention_keys_contiguous():
    """What lets each step's cross-attention take the batched products without a copy."""
    cache = LayerCache()
    keys = torch.randn(B, TK, H, DH).transpose(1, 2)  # a projection's layout
    stored = cache.stored_cross(keys, -keys)
    assert all(t.is_contiguous() for t in stored)
    assert_close(stored[0], keys)


def test_long_caches_leave_the_one_query_path_to_sdpa():
    """Its products grow with rows x keys; past ONE_QUERY_MAX_ELEMENTS, SDPA (none) runs."""
    q = torch.randn(320, 4, 1, 64)
    keys_fitting = attention_module.ONE_QUERY_MAX_ELEMENTS // q.numel()
    assert attention_module._one_query_on_cpu(
        q, torch.randn(320, 4, keys_fitting, 64), 0.0, False, None
    )
    assert not attention_module._one_query_on_cpu(
        q, torch.randn(320, 4, keys_fitting + 1, 64), 0.0, False, None
    )


def test_one_query_path_computes_a_bf16_cache_in_float32():
    """An int8 model's bfloat16 cache: products and sums in float32, the result rounded once."""
    q = torch.randn(B, 1, H, DH).transpose(1, 2).bfloat16()
    k, v = (torch.randn(B, TK, H, DH).transpose(1, 2).bfloat16() for _ in "kv")
    mask = torch.rand(B, 1, 1, TK) > 0.4
    mask[..., 0] = True
    expected = nn.functional.scaled_dot_product_attention(
        q.float(), k.float(), v.float(), attn_mask=mask
    )
    out = attention(q, k, v, mask)
    assert out.dtype == torch.bfloat16
    # Within one bfloat16 rounding step of the float32 result (2^-8 relative).
    assert_close(out.float(), expected, atol=1e-3, rtol=2**-8)


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


@pytest.mark.parametrize("kind", ["padding", "causal", "gqa"])
def test_cpu_dropout_path_equals_sdpa_when_nothing_is_dropped(kind):
    # p = 1e-6 rounds to no dropped 16-bit level: the math path with dropout, nothing dropped.
    q, k, v = torch.randn(B, H, TQ, DH), torch.randn(B, H, TK, DH), torch.randn(B, H, TK, DH)
    mask, is_causal = _random_mask(), False
    mask[1, :, 2] = False  # a row with no key: zeros either way
    if kind == "causal":
        k, v, mask, is_causal = k[:, :, :TQ], v[:, :, :TQ], None, True
    elif kind == "gqa":
        k, v = k[:, :2], v[:, :2]
    expected = attention(q, k, v, mask, is_causal)
    assert_close(attention(q, k, v, mask, is_causal, dropout_p=1e-6), expected)


@pytest.mark.parametrize("kind", ["padding", "causal"])
def test_cpu_bf16_training_path_equals_sdpa(kind, monkeypatch):
    # Short keys, bf16, gradients wanted: the math path, with SDPA's outputs and gradients.
    monkeypatch.setattr(attention_module, "_native_bf16_cpu", lambda: True)
    torch.manual_seed(0)
    q, k, v = (torch.randn(B, H, TQ, DH, dtype=torch.bfloat16) for _ in range(3))
    mask, is_causal = _random_mask()[..., :TQ], False
    if kind == "causal":
        mask, is_causal = None, True
    outputs, grads = [], []
    for fn in (attention, torch.nn.functional.scaled_dot_product_attention):
        leaves = [t.clone().requires_grad_() for t in (q, k, v)]
        out = fn(*leaves, mask, is_causal=is_causal)
        out.float().square().sum().backward()
        outputs.append(out)
        grads.append([t.grad for t in leaves])
    assert_close(outputs[0], outputs[1], atol=2e-2, rtol=2e-2)
    for ours, theirs in zip(*grads, strict=True):
        assert_close(ours, theirs, atol=5e-2, rtol=5e-2)

    calls = []
    real_sdpa = torch.nn.functional.scaled_dot_product_attention

    def counting_sdpa(*args, **kwargs):
        calls.append(args[0].shape)
        return real_sdpa(*args, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", counting_sdpa)
    leaf = q.clone().requires_grad_()
    attention(leaf, k, v, mask, is_causal)
    assert not calls  # the math path ran
    with torch.no_grad():
        attention(leaf, k, v, mask, is_causal)  # inference keeps SDPA's kernel
    long_keys = torch.randn(B, H, CPU_MATH_MAX_KEYS + 1, DH, dtype=torch.bfloat16)
    attention(leaf, long_keys, long_keys)  # and so do long sequences
    attention(leaf.float(), k.float(), v.float(), mask, is_causal)  # and float32
    assert len(calls) == 3
    monkeypatch.setattr(attention_module, "_native_bf16_cpu", lambda: False)
    attention(leaf, k, v, mask, is_causal)  # emulated bf16: the threshold does not apply
    assert len(calls) == 4


def test_cpu_dropout_path_is_unbiased():
    # E[dropout(W)] = W, so averaged over many masks the output approaches the dropout-free one.
    torch.manual_seed(0)
    q, k, v = torch.randn(2, 2, 3, 4), torch.randn(2, 2, 5, 4), torch.randn(2, 2, 5, 4)
    expected = attention(q, k, v)
    runs = torch.stack([attention(q, k, v, dropout_p=0.3) for _ in range(4000)])
    assert not torch.equal(runs[0], runs[1])
    assert_close(runs.mean(0), expected, atol=0.05, rtol=0)
