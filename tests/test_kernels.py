"""The CPU attention kernels against SDPA, and the table that picks them against the if-chain
it replaced in model/attention.py (transformer_mt/kernels.py)."""

import inspect
import itertools
import warnings
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.testing import assert_close

from transformer_mt import kernels
from transformer_mt.kernels import Call, attention
from transformer_mt.model.attention import BlockMask
from transformer_mt.model.attention import attention as model_attention

from .model.test_attention import DH, TK, TQ, B, H, _random_mask

REPO = Path(__file__).resolve().parents[1]
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
    assert kernels._one_query_fits(Call(q, k, v))
    assert kernels.choose(Call(q, k, v, mask)).name == "one_query"
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
    assert kernels._batched_products_fit(Call(q, k, v))
    assert kernels.choose(Call(q, k, v, mask)).name == "batched_products"
    out = attention(q, k, v, mask)
    assert not out.isnan().any()
    assert_close(out, _sdpa_reference(q, k, v, mask), atol=1e-5, rtol=1e-5)


def test_batched_products_only_for_contiguous_float32_inference_with_few_queries():
    q, k, v = torch.randn(B, H, 5, DH), torch.randn(B, H, TK, DH), torch.randn(B, H, TK, DH)

    def eligible(*args, **kwargs) -> bool:
        return kernels._batched_products_fit(Call(*args, **kwargs))

    assert eligible(q, k, v)
    assert not eligible(q, k.transpose(2, 3).contiguous().transpose(2, 3), v)
    assert not eligible(q, k, v, dropout_p=0.1)  # dropout
    assert not eligible(q, k, v, is_causal=True)  # causal
    assert not eligible(q.bfloat16(), k.bfloat16(), v.bfloat16())
    many = kernels.BATCHED_MAX_QUERIES + 1
    assert not eligible(torch.randn(B, H, many, DH), k, v)
    assert not eligible(q.requires_grad_(), k, v)  # training: SDPA


def test_long_caches_leave_the_one_query_path_to_sdpa():
    """Its products grow with rows x keys; past ONE_QUERY_MAX_ELEMENTS, SDPA (none) runs."""
    q = torch.randn(320, 4, 1, 64)
    keys_fitting = kernels.ONE_QUERY_MAX_ELEMENTS // q.numel()
    fitting, too_many = (
        torch.randn(320, 4, keys_fitting, 64),
        torch.randn(320, 4, keys_fitting + 1, 64),
    )
    assert kernels._one_query_fits(Call(q, fitting, fitting))
    assert not kernels._one_query_fits(Call(q, too_many, too_many))


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
    monkeypatch.setattr(kernels, "_native_bf16_cpu", lambda: True)
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
    long_keys = torch.randn(B, H, kernels.CPU_MATH_MAX_KEYS + 1, DH, dtype=torch.bfloat16)
    attention(leaf, long_keys, long_keys)  # and so do long sequences
    attention(leaf.float(), k.float(), v.float(), mask, is_causal)  # and float32
    assert len(calls) == 3
    monkeypatch.setattr(kernels, "_native_bf16_cpu", lambda: False)
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


# --- the table against the if-chain it replaced ----------------------------------------------


def _if_chain(query, key, value, mask, is_causal, dropout_p, attn_bias, native_bf16) -> str:
    """Which kernel `model.attention.attention` ran before the table (commit f60ed3b), its
    conditions copied as they stood: the reference the table must agree with."""
    if isinstance(mask, BlockMask):
        return "model"  # flex
    cpu = query.device.type == "cpu"
    plain = dropout_p == 0.0 and not is_causal and attn_bias is None
    training = torch.is_grad_enabled() and query.requires_grad
    queries = query.size(-2) * (query.size(-3) // key.size(-3))
    if (
        plain
        and not training
        and cpu
        and query.dtype == key.dtype == value.dtype == torch.float32
        and queries <= 32
        and key.is_contiguous()
        and value.is_contiguous()
    ):
        return "batched_products"
    reduced = query.dtype in (torch.bfloat16, torch.float16)
    short = key.size(-2) <= 128
    if cpu and (dropout_p > 0.0 or (training and reduced and short and native_bf16)):
        return "math"
    small = query.numel() * key.size(-2) <= 2**22
    if plain and small and query.size(-2) == 1 and cpu:
        return "one_query"
    return "model"  # SDPA


def _block_mask():
    from torch.nn.attention.flex_attention import create_block_mask

    return create_block_mask(lambda b, h, q, k: q >= k, None, None, 128, 128, device="cpu")


# Sizes straddling each threshold: 8 / 9 queries per row x 4 query heads per key head around
# BATCHED_MAX_QUERIES (32); keys around CPU_MATH_MAX_KEYS (128) and, with 16,384 query
# elements (64 rows, 4 heads of 64), around ONE_QUERY_MAX_ELEMENTS (2^22 / 2^14 = 256 keys).
# Keys and values: contiguous, laid out as a self-attention cache (strided), or contiguous
# keys with a strided view for values (latent attention's).
CONDITIONS = dict(
    device=["cpu", "meta"],
    dtype=[torch.float32, torch.bfloat16],
    grad=[False, True],
    n_queries=[1, 8, 9],
    kv_heads=[4, 1],
    n_keys=[16, 128, 129, 256, 257],
    layout=["contiguous", "strided", "strided_values"],
    dropout_p=[0.0, 0.1],
    is_causal=[False, True],
    biased=[False, True],
    mask=["none", "dense", "block"],
)


def _keys_values(layout: str, n_keys: int, kv_heads: int, **like) -> tuple:
    """Keys and values (1, Hkv, Tk, 8): the table reads their sizes, dtype and layout only."""
    stored = torch.empty(1, n_keys, kv_heads, 16, **like).transpose(1, 2)  # (1, Hkv, Tk, 16)
    if layout == "strided":
        return stored[..., :8], stored[..., 8:]
    keys = stored[..., :8].contiguous()
    values = stored[..., 8:].contiguous() if layout == "contiguous" else keys[..., :4]
    return keys, values


@pytest.mark.parametrize("native_bf16", [False, True])
def test_the_table_picks_what_the_if_chain_picked(native_bf16, monkeypatch):
    monkeypatch.setattr(kernels, "_native_bf16_cpu", lambda: native_bf16)
    block, picked = _block_mask(), set()
    for case in itertools.product(*CONDITIONS.values()):
        device, dtype, grad, tq, hkv, tk, layout, p, causal, biased, mask_kind = case
        query = torch.empty(64, 4, tq, 64, dtype=dtype, device=device).requires_grad_(grad)
        key, value = _keys_values(layout, tk, hkv, dtype=dtype, device=device)
        masks = {"none": None, "dense": torch.ones(1, 1, 1, tk, dtype=torch.bool), "block": block}
        bias = torch.empty(4, tq, tk) if biased else None
        call = Call(query, key, value, masks[mask_kind], causal, p, bias)
        expected = _if_chain(*call, native_bf16)
        assert kernels.choose(call).name == expected, dict(zip(CONDITIONS, case, strict=True))
        picked.add(expected)
    assert picked == {"batched_products", "math", "one_query", "model"}  # every row was reached


def test_a_call_takes_the_arguments_of_the_models_attention():
    """`kernels.attention` stands in for `model.attention.attention`: same names, order and
    defaults."""
    parameters = inspect.signature(model_attention).parameters
    assert Call._fields == tuple(parameters)
    defaults = {name: p.default for name, p in parameters.items() if p.default is not p.empty}
    assert Call._field_defaults == defaults


def test_the_machine_probe_is_a_constant_to_torch_compile():
    """train.compile traces the kernel table: the cached probe of the machine had been traced
    through at every compiled step, with a warning from Dynamo that it ignores the cache."""

    def step(x):
        return x * 2 if kernels._native_bf16_cpu() else x * 3

    kernels.constant_for_compile()  # as the training step's compilation marks it
    torch._dynamo.reset()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = torch.compile(step, backend="eager", fullgraph=True)(torch.ones(2))
    assert out.tolist() == (step(torch.ones(2))).tolist()
    assert not [w for w in caught if "lru_cache" in str(w.message)]
