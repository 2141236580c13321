"""Relative positions (shaw, t5, alibi) against their papers' equations and T5's reference.

Cached decoding with padding and a beam reorder, several new tokens on a cache, the plain-math
twin and the exporters' refusals run for these options with the other attention variants
(`VARIANTS` in test_attention_variants.py).
"""

import math

import pytest
import torch
from torch.testing import assert_close

from transformer_mt.config import load_config
from transformer_mt.model import MultiHeadAttention, build_model, causal_mask
from transformer_mt.model.relative import (
    ALiBi,
    RelativeEmbeddings,
    T5Bias,
    alibi_slopes,
    relative_bucket,
)

from ..test_config import write
from .tiny import V, padded_batch, tiny_cfg

TOL = dict(atol=1e-5, rtol=1e-5)
KINDS = ["shaw", "t5", "alibi"]

# --- t5 ------------------------------------------------------------------------------------


def hf_t5_attention(causal: bool, n_buckets: int = 32, max_distance: int = 128):
    """transformers' T5Attention holding a relative bias table (decoder's when `causal`)."""
    pytest.importorskip("transformers")
    from transformers.models.t5.modeling_t5 import T5Attention, T5Config

    config = T5Config(
        d_model=32,
        d_kv=8,
        num_heads=4,
        relative_attention_num_buckets=n_buckets,
        relative_attention_max_distance=max_distance,
        is_decoder=causal,
    )
    return T5Attention(config, has_relative_attention_bias=True)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("n_buckets, max_distance", [(32, 128), (8, 6), (10, 40)])
def test_t5_buckets_equal_transformers(causal, n_buckets, max_distance):
    hf = hf_t5_attention(causal, n_buckets, max_distance)
    distance = torch.arange(-300, 301)
    expected = hf._relative_position_bucket(
        distance, bidirectional=not causal, num_buckets=n_buckets, max_distance=max_distance
    )
    assert torch.equal(relative_bucket(distance, causal, n_buckets, max_distance), expected)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("n_queries, offset", [(20, 0), (1, 150), (3, 5)])
def test_t5_bias_equals_transformers_with_copied_weights(causal, n_queries, offset):
    hf = hf_t5_attention(causal)
    ours = T5Bias(n_heads=4, n_buckets=32, max_distance=128, causal=causal, std=1.0)
    with torch.no_grad():
        ours.weight.copy_(hf.relative_attention_bias.weight)
        expected = hf.compute_bias(n_queries, offset + n_queries, past_seen_tokens=offset)
        assert torch.equal(ours(n_queries, offset), expected[0])  # (H, Tq, Tk)


def test_t5_bias_is_one_table_per_stack_encoder_bidirectional_decoder_causal():
    model = build_model(tiny_cfg(positions="t5"), V)
    encoder, decoder = model.encoder.position_bias, model.decoder.position_bias
    assert isinstance(encoder, T5Bias) and not encoder.causal
    assert isinstance(decoder, T5Bias) and decoder.causal
    assert encoder.weight.shape == decoder.weight.shape == (32, 4)  # buckets x heads


# --- shaw ----------------------------------------------------------------------------------


def shaw_reference(attn: MultiHeadAttention, x, keep, causal: bool):
    """Shaw et al. (2018) eq. 3-4 in loops over rows, heads, queries i and keys j; keep (B, T)
    True at real keys."""
    q, k, v = (attn.split_heads(proj(x)) for proj in (attn.q_proj, attn.k_proj, attn.v_proj))
    relative = attn.relative
    clip = relative.max_distance
    b, h, t, d = q.shape
    z = torch.zeros_like(q)
    for row in range(b):
        for head in range(h):
            for i in range(t):
                e = torch.full((t,), float("-inf"))
                for j in range(t):
                    if keep[row, j] and (j <= i or not causal):
                        a_k = relative.key_embeddings[max(-clip, min(clip, j - i)) + clip]
                        e[j] = q[row, head, i] @ (k[row, head, j] + a_k) / math.sqrt(d)
                alpha = e.softmax(0)
                for j in range(t):
                    value = v[row, head, j]
                    if relative.value_embeddings is not None:
                        value = (
                            value + relative.value_embeddings[max(-clip, min(clip, j - i)) + clip]
                        )
                    z[row, head, i] += alpha[j] * value
    return attn.out_proj(z.transpose(1, 2).reshape(b, t, h * d))


@pytest.mark.parametrize("relative_values", [False, True])
@pytest.mark.parametrize("case", ["padded", "causal"])
def test_shaw_attention_equals_the_papers_equations(relative_values, case):
    """Encoder-like (padded keys) and decoder-like (causal) self-attention; 7 positions reach
    past the clipping distance 2. Fast path and the weights path alike."""
    torch.manual_seed(0)
    attn = MultiHeadAttention(16, 2, relative=RelativeEmbeddings(8, 2, relative_values)).eval()
    x = torch.randn(2, 7, 16)
    keep = torch.ones(2, 7, dtype=torch.bool)
    if case == "padded":
        keep[1, 4:] = False
    causal = case == "causal"
    mask = None if causal else keep[:, None, None, :]
    with torch.no_grad():
        expected = shaw_reference(attn, x, keep, causal)
        for need_weights in (False, True):
            out, _ = attn(x, x, mask, is_causal=causal, need_weights=need_weights)
            assert_close(out, expected, **TOL)


def test_shaw_tables_are_per_layer_and_shared_by_heads():
    model = build_model(tiny_cfg(positions="shaw", max_relative_position=3), V)
    tables = [layer.self_attn.relative.key_embeddings for layer in model.encoder.layers]
    assert tables[0] is not tables[1]
    assert tables[0].shape == (2 * 3 + 1, 32 // 4)  # distances -3..3, head size
    assert model.decoder.layers[0].self_attn.relative.value_embeddings is None


# --- alibi ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "n_heads, expected",
    [
        (8, [2.0**-h for h in range(1, 9)]),  # 2^(-8h/8)
        (4, [2.0**-2, 2.0**-4, 2.0**-6, 2.0**-8]),  # 2^(-8h/4)
        # not powers of 2: the 4 (8) slopes of the power below, then every other one of 8 (16)
        (6, [2.0**-2, 2.0**-4, 2.0**-6, 2.0**-8, 2.0**-1, 2.0**-3]),
        (12, [2.0**-h for h in range(1, 9)] + [2.0**-0.5, 2.0**-1.5, 2.0**-2.5, 2.0**-3.5]),
    ],
)
def test_alibi_slopes_are_the_papers(n_heads, expected):
    assert alibi_slopes(n_heads) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("n_queries, offset", [(5, 0), (1, 7), (3, 4)])
def test_alibi_bias_is_minus_slope_times_distance(n_queries, offset):
    slopes = alibi_slopes(6)
    expected = [
        [[-m * abs(offset + i - j) for j in range(offset + n_queries)] for i in range(n_queries)]
        for m in slopes
    ]
    assert_close(ALiBi(6)(n_queries, offset), torch.tensor(expected), **TOL)


# --- all three ------------------------------------------------------------------------------


@pytest.mark.parametrize("positions", KINDS)
def test_no_absolute_positions_and_where_the_parameters_live(positions):
    cfg = tiny_cfg(positions=positions, relative_values=positions == "shaw")
    model = build_model(cfg, V)
    assert model.encoder.embed.positions is None and model.decoder.embed.positions is None
    assert model.decoder.layers[0].cross_attn.relative is None  # cross-attention: no terms
    extra = set(model.state_dict()) - set(build_model(tiny_cfg(), V).state_dict())
    shaw = {
        f"{side}.layers.{i}.self_attn.relative.{kind}_embeddings"
        for side in ("encoder", "decoder")
        for i in range(2)
        for kind in ("key", "value")
    }
    t5 = {"encoder.position_bias.weight", "decoder.position_bias.weight"}
    assert extra == {"shaw": shaw, "t5": t5, "alibi": set()}[positions]
    # every new parameter learns
    model(padded_batch([5, 3]), torch.randint(4, V, (2, 4))).sum().backward()
    assert all(model.get_parameter(name).grad.abs().sum() > 0 for name in extra)


@pytest.mark.parametrize("positions", KINDS)
def test_attention_maps_are_causal_and_normalised(positions):
    model = build_model(tiny_cfg(positions=positions), V).eval()
    src = padded_batch([6, 4])
    with torch.no_grad():
        maps = model.attention_maps(src, torch.randint(4, V, (2, 5)))
    for weights in maps.decoder:
        assert torch.all(weights[..., ~causal_mask(5, 5)] == 0)
    for weights in maps.encoder + maps.decoder:
        assert_close(weights.sum(-1), torch.ones(weights.shape[:-1]), **TOL)


def test_per_row_offsets_give_each_row_its_own_terms():
    """A server's batch: rows at positions 0, 3, 6 get, for their one query, the terms of
    their own offset on the keys they hold; the slots past them are padding."""
    torch.manual_seed(0)
    offsets = torch.tensor([0, 3, 6])
    modules = {"t5": T5Bias(4, 8, 12, causal=True, std=1.0), "alibi": ALiBi(4)}
    for name, module in modules.items():
        batched = module(1, offsets)  # (3, H, 1, 7)
        assert batched.shape == (3, 4, 1, 7), name
        for row, offset in enumerate(offsets.tolist()):
            assert_close(batched[row, :, :, : offset + 1], module(1, offset), **TOL)
    shaw = RelativeEmbeddings(8, max_distance=4, values=True)
    query = torch.randn(3, 4, 1, 8)
    scores = shaw.scores(query, offsets, n_keys=9)  # keys beyond the furthest row: padding
    weights = torch.rand(3, 4, 1, 9)
    for row, offset in enumerate(offsets.tolist()):
        weights[row, :, :, offset + 1 :] = 0.0  # masked keys weigh nothing
    values = shaw.value_term(weights, offsets)
    for row, offset in enumerate(offsets.tolist()):
        keys = offset + 1
        alone = shaw.scores(query[row : row + 1], offset, keys)
        assert_close(scores[row : row + 1, :, :, :keys], alone, **TOL)
        own = weights[row : row + 1, :, :, :keys]
        assert_close(values[row : row + 1], shaw.value_term(own, offset), **TOL)


# --- config --------------------------------------------------------------------------------


def test_config_takes_the_relative_settings(tmp_path):
    path = write(tmp_path, "model: {positions: shaw, max_relative_position: 8}\n")
    cfg = load_config(path, ["model.relative_values=true"]).model
    assert (cfg.positions, cfg.max_relative_position, cfg.relative_values) == ("shaw", 8, True)
    overrides = ["model.relative_buckets=16", "model.relative_max_distance=64"]
    cfg = load_config(write(tmp_path, "model: {positions: t5}\n"), overrides).model
    assert (cfg.relative_buckets, cfg.relative_max_distance) == (16, 64)
