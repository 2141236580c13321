"""Multi-head latent attention (DeepSeek-V2, section 2.1) against the paper's equations, its
factored-MHA reading, and the naive form its absorbed decoding must equal.

Cached decoding of whole models with padding and a beam reorder, several new tokens on a
cache, the plain-math twin and the exporters' refusals run with the other attention variants
(`VARIANTS` in test_attention_variants.py).
"""

import math

import pytest
import torch
from torch.testing import assert_close

from transformer_mt import kernels
from transformer_mt.config import ModelConfig, load_config
from transformer_mt.inference.packed import pack_linears, packing_available
from transformer_mt.inference.quantize import quantize_int8
from transformer_mt.model import (
    KVCache,
    LatentAttention,
    MultiHeadAttention,
    build_model,
    causal_mask,
)

from ..test_config import write
from .tiny import BOS, KERNELS, V, padded_batch, tiny_cfg

TOL = dict(atol=1e-5, rtol=1e-5)
D, H, RANK = 32, 4, 12  # a latent smaller than d_model and not a multiple of the head size
ROPE_DIMS = [0, 4]  # d_R: no decoupled rotary part (sinusoidal, learned, t5, alibi), or rope's


def latent_attention(rope_dim: int, kernel=kernels.attention) -> LatentAttention:
    torch.manual_seed(0)
    attn = LatentAttention(D, H, RANK, rope_dim, max_positions=64, kernel=kernel).eval()
    with torch.no_grad():  # non-zero biases, so that the forms must agree on them too
        for module in (attn.q_proj, attn.latent_proj, attn.k_rope_proj, attn.q_rope_proj):
            if module is not None:
                module.bias.normal_()
    return attn


# --- the definition -------------------------------------------------------------------------


def paper_reference(attn: LatentAttention, x, keep, causal: bool):
    """DeepSeek-V2 eq. 9-19 without query compression, in loops over rows, heads, queries i and
    keys j; keep (B, T) True at real keys."""
    b, t, _ = x.shape
    h, dh, dr = attn.n_heads, attn.head_dim, attn.rope_dim
    c = attn.latent_proj(x)  # c_t = W_DKV h_t, (B, T, r)
    q = attn.q_proj(x).view(b, t, h, dh)
    if dr:
        k_rope = attn.rope(attn.k_rope_proj(x)[:, None], 0)[:, 0]  # (B, T, d_R)
        q_rope = attn.rope(attn.q_rope_proj(x).view(b, t, h, dr).transpose(1, 2), 0)
    out = torch.zeros(b, t, h, dh)
    for row in range(b):
        for head in range(h):
            for i in range(t):
                seen = [j for j in range(t) if keep[row, j] and (j <= i or not causal)]
                scores = torch.full((t,), float("-inf"))
                for j in seen:
                    key = attn.key_up[head] @ c[row, j]  # k_j,h = W_UK,h c_j
                    score = q[row, i, head] @ key
                    if dr:
                        score = score + q_rope[row, head, i] @ k_rope[row, j]
                    scores[j] = score / math.sqrt(dh + dr)
                alpha = scores.softmax(0)
                for j in seen:  # v_j,h = W_UV,h c_j
                    out[row, i, head] += alpha[j] * (attn.value_up[head] @ c[row, j])
    return attn.out_proj(out.reshape(b, t, h * dh))


@pytest.mark.parametrize("rope_dim", ROPE_DIMS)
@pytest.mark.parametrize("case", ["padded", "causal"])
def test_naive_form_equals_the_papers_equations(rope_dim, case):
    """Encoder-like (padded keys) and decoder-like (causal) self-attention, through SDPA and
    through the plain math that returns the weights."""
    attn = latent_attention(rope_dim)
    x = torch.randn(2, 6, D)
    keep = torch.ones(2, 6, dtype=torch.bool)
    causal = case == "causal"
    if not causal:
        keep[1, 4:] = False
    mask = None if causal else keep[:, None, None, :]
    with torch.no_grad():
        expected = paper_reference(attn, x, keep, causal)
        for need_weights in (False, True):
            out, weights = attn(x, x, mask, is_causal=causal, need_weights=need_weights)
            assert_close(out, expected, **TOL)
        assert weights.shape == (2, H, 6, 6)


def test_without_rope_it_is_mha_whose_key_value_projections_are_factored():
    """W_K,h = W_UK,h W_DKV and W_V,h = W_UV,h W_DKV (the down-projection's bias carried
    through): copied into a standard MHA, the outputs agree."""
    attn = latent_attention(0)
    mha = MultiHeadAttention(D, H).eval()
    with torch.no_grad():
        for name in ("q_proj", "out_proj"):
            getattr(mha, name).load_state_dict(getattr(attn, name).state_dict())
        for up, proj in ((attn.key_up, mha.k_proj), (attn.value_up, mha.v_proj)):
            up = up.reshape(D, RANK)  # (H * Dh, r)
            proj.weight.copy_(up @ attn.latent_proj.weight)
            proj.bias.copy_(up @ attn.latent_proj.bias)
    x = torch.randn(2, 5, D)
    mask = torch.tensor([[True] * 5, [True] * 3 + [False] * 2])[:, None, None, :]
    with torch.no_grad():
        assert_close(attn(x, x, mask)[0], mha(x, x, mask)[0], **TOL)
        assert_close(attn(x, x, is_causal=True)[0], mha(x, x, is_causal=True)[0], **TOL)


# --- absorbed decoding against the naive form ----------------------------------------------


@pytest.mark.parametrize("rope_dim", ROPE_DIMS)
@pytest.mark.parametrize("biased", [False, True])
@pytest.mark.parametrize("kernel", KERNELS)
def test_absorbed_decoding_equals_the_naive_form_at_every_step(rope_dim, biased, kernel):
    """Step by step over a keys-only cache of [c ‖ k^R] vs the naive forward of the prefix,
    with hidden (padding) keys, a score bias like t5's or alibi's, and a beam-style reorder."""
    attn = latent_attention(rope_dim, kernel)
    b, t = 3, 7
    x = torch.randn(b, t, D)
    keep = torch.ones(b, t, dtype=torch.bool)
    keep[1, 2], keep[2, 1:3] = False, False  # hidden keys, each row's first one visible
    bias = torch.randn(H, t, t) if biased else None
    cache, order = None, torch.arange(b)
    with torch.no_grad():
        for step in range(t):
            if step == 3:  # rows 2, 0, 0
                order = torch.tensor([2, 0, 0])
                cache.reorder(order)
                x, keep = x[order], keep[order]
            latent, values = attn.project_kv(x[:, step : step + 1], step)
            assert values is None and latent.shape == (b, 1, 1, RANK + rope_dim)
            if cache is None:
                cache = KVCache.empty(latent, keys_only=True)
            keys, values, _ = cache.append(latent, None)
            assert values is None
            mask = keep[:, None, None, : step + 1]
            step_bias = None if bias is None else bias[:, step : step + 1, : step + 1]
            out = attn.attend(x[:, step : step + 1], keys, None, mask, step, step_bias)
            prefix = x[:, : step + 1]
            prefix_bias = None if bias is None else bias[:, : step + 1, : step + 1]
            causal = mask & causal_mask(step + 1, step + 1)
            naive, _ = attn(prefix, prefix, causal, attn_bias=prefix_bias)
            assert_close(out[:, 0], naive[:, step], **TOL)


@pytest.mark.parametrize(
    "options",
    [
        dict(),
        dict(n_kv_heads=2),
        dict(attention="mla"),
        dict(attention="mla", positions="rope", mla_rope_dim=4, n_decoder_layers=3),
    ],
)
@pytest.mark.parametrize("dtype", [None, torch.bfloat16])
def test_cache_bytes_per_token_are_the_configs_formula(options, dtype):
    """MLA caches only [c ‖ k^R] (B, 1, T, r + d_R) per layer, no values; every option's cache
    holds `self_attention_cache_bytes` per target token and row."""
    model = build_model(tiny_cfg(**options), V).eval()
    cfg, src, steps = model.cfg, padded_batch([5, 3]), 5
    src_mask = model.src_mask(src)
    with torch.no_grad():
        memory, cache = model.encode(src, src_mask), model.decoder.new_cache(dtype=dtype)
        for token in torch.randint(4, V, (steps,)):
            _, cache = model.decode_step(token.repeat(2), memory, src_mask, torch.arange(2), cache)
    held = 0
    for layer in cache.layers:
        keys, values = layer.self_attn.keys, layer.self_attn.values
        held += keys[:, :, :steps].nbytes + (0 if values is None else values[:, :, :steps].nbytes)
        if cfg.attention == "mla":
            assert values is None and keys.shape[:2] == (2, 1)
            assert keys.size(3) == cfg.kv_rank + cfg.latent_rope_dim
    element_size = 4 if dtype is None else 2
    assert held == 2 * steps * cfg.self_attention_cache_bytes(element_size)


def test_cache_formula_at_the_default_sizes():
    """6 layers, 8 heads of 64: MHA keeps 2 x 512 numbers per layer, MLA r = 4 x 64 (+ d_R)."""
    assert ModelConfig().self_attention_cache_bytes() == 6 * 2 * 8 * 64 * 4
    assert ModelConfig(n_kv_heads=2).self_attention_cache_bytes(2) == 6 * 2 * 2 * 64 * 2
    assert ModelConfig(attention="mla").self_attention_cache_bytes() == 6 * 256 * 4
    rope = ModelConfig(attention="mla", positions="rope")
    assert rope.self_attention_cache_bytes() == 6 * (256 + 16) * 4


# --- parameters ----------------------------------------------------------------------------


@pytest.mark.parametrize("rope_dim", ROPE_DIMS)
def test_parameter_count_formula(rope_dim):
    """q and out projections 2 (D² + D); W_DKV D r + r; W_UK, W_UV 2 H Dh r = 2 D r (no bias);
    with rope W_QR D H d_R + H d_R and W_KR D d_R + d_R."""
    attn = LatentAttention(D, H, RANK, rope_dim)
    expected = 2 * (D * D + D) + D * RANK + RANK + 2 * D * RANK
    expected += D * H * rope_dim + H * rope_dim + D * rope_dim + rope_dim
    assert sum(p.numel() for p in attn.parameters()) == expected


@pytest.mark.parametrize("mla_encoder", [False, True])
def test_where_latent_attention_sits_and_every_parameter_learns(mla_encoder):
    cfg = tiny_cfg(attention="mla", positions="rope", mla_rope_dim=4, mla_encoder=mla_encoder)
    model = build_model(cfg, V)
    assert all(isinstance(layer.self_attn, LatentAttention) for layer in model.decoder.layers)
    assert all(isinstance(layer.cross_attn, MultiHeadAttention) for layer in model.decoder.layers)
    encoder_kind = LatentAttention if mla_encoder else MultiHeadAttention
    assert all(isinstance(layer.self_attn, encoder_kind) for layer in model.encoder.layers)
    keys = {k for k in model.state_dict() if k.startswith("decoder.layers.0.self_attn.")}
    linears = ("q_proj", "latent_proj", "q_rope_proj", "k_rope_proj", "out_proj")
    expected = {f"{name}.{p}" for name in linears for p in ("weight", "bias")}
    expected |= {"key_up", "value_up"}
    assert keys == {f"decoder.layers.0.self_attn.{name}" for name in expected}
    model(padded_batch([5, 3]), torch.randint(4, V, (2, 4))).sum().backward()
    latent = [m for m in model.modules() if isinstance(m, LatentAttention)]
    assert len(latent) == 2 * (1 + mla_encoder)
    assert all(p.grad.abs().sum() > 0 for m in latent for p in m.parameters())


def test_default_latent_size_is_four_head_sizes():
    assert tiny_cfg(attention="mla").kv_rank == 4 * 8
    assert ModelConfig(attention="mla").kv_rank == 256
    assert tiny_cfg(attention="mla", mla_kv_rank=12).kv_rank == 12
    assert tiny_cfg(attention="mla").latent_rope_dim == 0  # d_R only with rope
    assert tiny_cfg(attention="mla", positions="rope").latent_rope_dim == 16


# --- through the model ---------------------------------------------------------------------


def test_attention_maps_come_from_the_naive_form():
    model = build_model(tiny_cfg(attention="mla", positions="rope", mla_encoder=True), V).eval()
    with torch.no_grad():
        maps = model.attention_maps(padded_batch([6, 4]), torch.randint(4, V, (2, 5)))
    assert [w.shape for w in maps.decoder] == [(2, H, 5, 5)] * 2
    assert [w.shape for w in maps.encoder] == [(2, H, 6, 6)] * 2
    for weights in maps.decoder:
        assert torch.all(weights[..., ~causal_mask(5, 5)] == 0)
    for weights in maps.encoder + maps.decoder:
        assert_close(weights.sum(-1), torch.ones(weights.shape[:-1]), **TOL)


@pytest.mark.parametrize("rewrite, tolerance", [("packed", 1e-4), ("int8", 0.25)])
def test_inference_rewrites_of_the_linear_layers_keep_latent_decoding(rewrite, tolerance):
    """Packed and int8 inference replace every nn.Linear; the up-projections W_UK, W_UV, which
    the absorbed form multiplies by per head, are parameters and stay as they are. Decoding is
    compared with the float32 model's full forward: int8 quantises activations with one scale
    per call, so it agrees only to ~0.1 in log-probability here (as it does with MHA)."""
    model = build_model(tiny_cfg(attention="mla", positions="rope", mla_rope_dim=4), V).eval()
    src, tgt = padded_batch([6, 3]), torch.randint(4, V, (2, 5))
    tgt[:, 0] = BOS
    src_mask = model.src_mask(src)
    with torch.no_grad():
        full = model(src, tgt, src_mask).log_softmax(-1)
    if rewrite == "int8":
        model = quantize_int8(model)
    elif not packing_available():
        pytest.skip("oneDNN packing is not available in this torch")
    else:
        pack_linears(model)
    assert isinstance(model.decoder.layers[0].self_attn.key_up, torch.nn.Parameter)
    with torch.no_grad():
        memory, cache = model.encode(src, src_mask), None
        rows = torch.arange(2)  # each row reads its own source
        for t in range(tgt.size(1)):
            log_probs, cache = model.decode_step(tgt[:, t], memory, src_mask, rows, cache)
            assert_close(log_probs, full[:, t], atol=tolerance, rtol=0.0)


# --- config --------------------------------------------------------------------------------


def test_config_takes_the_latent_settings(tmp_path):
    path = write(tmp_path, "model: {attention: mla, positions: rope, mla_kv_rank: 48}\n")
    cfg = load_config(path, ["model.mla_rope_dim=8", "model.mla_encoder=true"]).model
    assert (cfg.attention, cfg.kv_rank, cfg.latent_rope_dim, cfg.mla_encoder) == (
        "mla",
        48,
        8,
        True,
    )
    flex = write(tmp_path, "model: {attention: mla, attention_backend: flex}\n")
    assert load_config(flex).model.attention_backend == "flex"  # naive form through flex
