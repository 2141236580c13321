"""Grouped-query attention, rotary positions and sparse patterns against their slow twins."""

import pytest
import torch
from torch.testing import assert_close

from transformer_mt.config import ConfigError
from transformer_mt.errors import TmtError
from transformer_mt.interop.export_ct2 import CT2
from transformer_mt.interop.hf_marian import MARIAN
from transformer_mt.interop.limits import check_expressible
from transformer_mt.model import AttentionPattern, MultiHeadAttention, RotaryEmbedding, build_model
from transformer_mt.model.attention import attention_with_weights, causal_mask

from .test_transformer import OPTIONS
from .tiny import BOS, KERNELS, V, padded_batch, tiny_cfg

TOL = dict(atol=1e-5, rtol=1e-5)


# --- grouped-query attention ---------------------------------------------------------------


def test_gqa_with_as_many_kv_heads_is_standard_mha():
    standard = build_model(tiny_cfg(), V).eval()
    explicit = build_model(tiny_cfg(n_kv_heads=4), V).eval()
    explicit.load_state_dict(standard.state_dict())  # same keys, same shapes
    src, tgt = padded_batch([5, 3]), torch.randint(4, V, (2, 4))
    with torch.no_grad():
        assert_close(explicit(src, tgt), standard(src, tgt))


@pytest.mark.parametrize("n_kv_heads", [1, 2])
def test_gqa_equals_mha_whose_kv_heads_are_repeated(n_kv_heads):
    """Query head h reads key/value head h // (H / Hkv): copy the heads into a plain MHA."""
    d, h = 16, 4
    grouped = MultiHeadAttention(d, h, n_kv_heads=n_kv_heads).eval()
    plain = MultiHeadAttention(d, h).eval()
    group, head_dim = h // n_kv_heads, d // h
    with torch.no_grad():
        for name in ("q_proj", "out_proj"):
            getattr(plain, name).load_state_dict(getattr(grouped, name).state_dict())
        for name in ("k_proj", "v_proj"):
            src, dst = getattr(grouped, name), getattr(plain, name)
            dst.weight.copy_(
                src.weight.view(n_kv_heads, head_dim, d).repeat_interleave(group, 0).view(d, d)
            )
            dst.bias.copy_(src.bias.view(n_kv_heads, head_dim).repeat_interleave(group, 0).view(d))
    query, source = torch.randn(2, 3, d), torch.randn(2, 5, d)
    mask = torch.tensor([True] * 5)[None, None, None].expand(2, 1, 1, 5).clone()
    mask[1, ..., 3:] = False
    with torch.no_grad():
        assert_close(grouped(query, source, mask)[0], plain(query, source, mask)[0], **TOL)


@pytest.mark.parametrize("attention", KERNELS)
def test_gqa_sdpa_equals_plain_math(attention):
    q, k, v = torch.randn(2, 4, 3, 8), torch.randn(2, 2, 5, 8), torch.randn(2, 2, 5, 8)
    mask = torch.rand(2, 1, 3, 5) > 0.3
    assert_close(attention(q, k, v, mask), attention_with_weights(q, k, v, mask)[0], **TOL)


# --- cache equivalence for every variant -----------------------------------------------------

VARIANTS = [
    dict(n_kv_heads=1),
    dict(n_kv_heads=2, pre_norm=True),
    dict(positions="rope"),
    dict(positions="rope", n_kv_heads=2, pre_norm=True, attention_pattern="local"),
    dict(attention_pattern="local", attention_window=1),
    dict(attention_pattern="dilated", attention_dilation=2),
    dict(attention_pattern="local_dilated", attention_window=1, attention_dilation=3),
    # relative positions (test_relative_positions.py); distances reach past the clip and into
    # T5's logarithmic buckets within the test's lengths
    dict(positions="shaw", max_relative_position=2),
    dict(positions="shaw", relative_values=True, n_kv_heads=2, pre_norm=True),
    dict(positions="t5", relative_buckets=8, relative_max_distance=6),
    dict(positions="alibi", n_heads=2, attention_pattern="local", attention_window=2),
    # multi-head latent attention (test_latent_attention.py): the cache holds the latent (and
    # with rope the rotary key); decoding attends over it in the absorbed form
    dict(attention="mla", mla_kv_rank=12),
    dict(attention="mla", positions="rope", mla_rope_dim=4, pre_norm=True),
    dict(attention="mla", positions="rope", mla_encoder=True, attention_pattern="local"),
    dict(attention="mla", positions="t5", relative_buckets=8, relative_max_distance=6),
]


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("options", OPTIONS + VARIANTS)
def test_cached_decoding_equals_full_forward_with_padding_and_reorder(options, kernel):
    model = build_model(tiny_cfg(**options), V, kernel=kernel).eval()
    src = padded_batch([7, 3, 5])
    tgt = torch.randint(4, V, (3, 6))
    tgt[:, 0] = BOS
    src_mask = model.src_mask(src)
    with torch.no_grad():
        full = model(src, tgt, src_mask).log_softmax(-1)  # (B, T, V)
        memory, cache = model.encode(src, src_mask), None
        order = torch.arange(3)  # the row each row continues, and the source it reads
        for t in range(tgt.size(1)):
            if t == 3:  # a beam-style reorder mid-way: rows 2, 0, 0
                order = torch.tensor([2, 0, 0])
                cache = cache.reorder(order)
                full = model(src[order], tgt[order], model.src_mask(src[order])).log_softmax(-1)
            log_probs, cache = model.decode_step(tgt[order, t], memory, src_mask, order, cache)
            assert_close(log_probs, full[:, t], **TOL)
    kv_heads = model.cfg.kv_heads
    self_heads = 1 if model.cfg.attention == "mla" else kv_heads  # mla: one latent "head"
    for layer in cache.layers:
        assert layer.self_attn.keys.size(1) == self_heads
        assert layer.cross_attn[0].size(1) == layer.cross_attn[1].size(1) == kv_heads


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("options", [OPTIONS[0], VARIANTS[1], VARIANTS[3]])
def test_bfloat16_cache_decodes_close_to_the_float32_cache(options, kernel):
    """The int8 recipe's narrow cache: keys and values stored (and attended) in bfloat16."""
    model = build_model(tiny_cfg(**options), V, kernel=kernel).eval()
    src, tgt = padded_batch([7, 3, 5]), torch.randint(4, V, (3, 6))
    src_mask = model.src_mask(src)
    steps = {}
    with torch.no_grad():
        memory = model.encode(src, src_mask)
        for dtype in (None, torch.bfloat16):
            cache, steps[dtype] = model.decoder.new_cache(dtype=dtype), []
            for t in range(tgt.size(1)):
                rows = torch.arange(3)
                log_probs, cache = model.decode_step(tgt[:, t], memory, src_mask, rows, cache)
                steps[dtype].append(log_probs)
            layer = cache.layers[0]
            assert (
                layer.self_attn.keys.dtype == layer.cross_attn[1].dtype == (dtype or memory.dtype)
            )
    narrow, wide = torch.stack(steps[torch.bfloat16]), torch.stack(steps[None])
    assert narrow.dtype == torch.float32 and not torch.equal(narrow, wide)
    assert_close(narrow, wide, atol=0.05, rtol=0.0)  # bfloat16 keeps 8 bits of mantissa


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("options", VARIANTS[3:])
def test_several_new_tokens_on_a_cache_see_the_right_keys(options, kernel):
    """A forced prefix decoded in one call, then one more step, equals the full forward."""
    model = build_model(tiny_cfg(**options), V, kernel=kernel).eval()
    src, tgt = padded_batch([6, 4]), torch.randint(4, V, (2, 6))
    with torch.no_grad():
        full = model(src, tgt)
        src_mask = model.src_mask(src)
        memory = model.encode(src, src_mask)
        cache = model.decoder.new_cache()
        rows = model.source_rows(torch.arange(2), 2)
        head = model.decoder(tgt[:, :2], memory, src_mask, cache, rows)
        tail = model.decoder(tgt[:, 2:], memory, src_mask, cache, rows)
        logits = model.output_projection(torch.cat([head, tail], dim=1))
    assert_close(logits, full, **TOL)


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("options", [{}, *VARIANTS])
def test_plain_math_path_equals_fast_path(options, kernel):
    model = build_model(tiny_cfg(**options), V, kernel=kernel).eval()
    src, tgt = padded_batch([6, 4]), torch.randint(4, V, (2, 5))
    src_mask = model.src_mask(src)
    with torch.no_grad():
        memory = model.encoder(src, src_mask)
        slow_memory, _ = model.encoder.forward_with_weights(src, src_mask)
        assert_close(slow_memory, memory, **TOL)
        states = model.decoder(tgt, memory, src_mask)
        assert_close(model.decoder.forward_with_weights(tgt, memory, src_mask)[0], states, **TOL)


# --- rotary positions ----------------------------------------------------------------------


def test_rope_score_depends_only_on_the_offset():
    rope = RotaryEmbedding(head_dim=8, max_positions=64)
    q, k = torch.randn(1, 1, 1, 8), torch.randn(1, 1, 1, 8)

    def score(m: int, n: int) -> torch.Tensor:
        return (rope(q, m) * rope(k, n)).sum()

    assert_close(score(5, 2), score(5 + 17, 2 + 17), **TOL)
    assert_close(score(0, 9), score(30, 39), **TOL)
    assert not torch.allclose(score(5, 2), score(5, 3))  # but it does depend on the offset
    assert_close(rope(q, 0), q)  # position 0 is not rotated


def test_rope_adds_no_parameters_and_no_absolute_positions():
    model = build_model(tiny_cfg(positions="rope"), V)
    assert set(model.state_dict()) == set(build_model(tiny_cfg(), V).state_dict())
    assert model.encoder.embed.positions is None
    assert model.decoder.layers[0].cross_attn.rope is None  # cross-attention is not rotated


def test_gqa_shrinks_only_key_value_projections():
    shapes = {k: v.shape for k, v in build_model(tiny_cfg(n_kv_heads=1), V).state_dict().items()}
    default = {k: v.shape for k, v in build_model(tiny_cfg(), V).state_dict().items()}
    assert set(shapes) == set(default)
    changed = {k for k in shapes if shapes[k] != default[k]}
    assert changed and all(".k_proj." in k or ".v_proj." in k for k in changed)
    assert shapes["decoder.layers.0.cross_attn.k_proj.weight"] == (8, 32)  # one head of 8


# --- sparse patterns -----------------------------------------------------------------------


def reference_mask(kind, n_queries, n_keys, window, dilation, causal=False):
    """Plain-loop keep-mask: query i sits at position n_keys - n_queries + i."""
    rows = []
    for i in range(n_queries):
        q = n_keys - n_queries + i
        row = []
        for j in range(n_keys):
            d = q - j
            local = abs(d) <= window
            dilated = d % dilation == 0
            keep = {"local": local, "dilated": dilated, "local_dilated": local or dilated}[kind]
            row.append(keep and (j <= q or not causal))
        rows.append(row)
    return torch.tensor(rows)


@pytest.mark.parametrize("kind", ["local", "dilated", "local_dilated"])
@pytest.mark.parametrize("n_queries, n_keys", [(7, 7), (1, 9), (3, 8)])
def test_pattern_mask_equals_plain_loops(kind, n_queries, n_keys):
    pattern = AttentionPattern(kind, window=2, dilation=3)
    assert torch.equal(
        pattern.mask(n_queries, n_keys), reference_mask(kind, n_queries, n_keys, 2, 3)
    )
    expected = reference_mask(kind, n_queries, n_keys, 2, 3, causal=True)
    assert torch.equal(pattern.causal_mask(n_queries, n_keys), expected)


def test_full_pattern_has_no_mask():
    assert AttentionPattern("full").mask(4, 4) is None
    assert AttentionPattern("full").causal_mask(4, 4) is None


@pytest.mark.parametrize("kind", ["local", "dilated", "local_dilated"])
def test_pattern_weights_sum_to_one_over_allowed_keys_and_zero_elsewhere(kind):
    reach = {"attention_window": 1} if "local" in kind else {}
    reach |= {"attention_dilation": 3} if "dilated" in kind else {}
    model = build_model(tiny_cfg(attention_pattern=kind, **reach), V).eval()
    src, tgt = padded_batch([8, 5]), torch.randint(4, V, (2, 7))
    pattern = AttentionPattern(kind, 1, 3)
    with torch.no_grad():
        maps = model.attention_maps(src, tgt)
    allowed = model.src_mask(src) & pattern.mask(8, 8)  # (B, 1, S, S)
    for weights, keep in (
        *((w, allowed) for w in maps.encoder),
        *((w, pattern.causal_mask(7, 7)) for w in maps.decoder),
        *((w, model.src_mask(src)) for w in maps.cross),
    ):
        keep = keep.expand_as(weights)
        assert torch.all(weights[~keep] == 0)
        sums = weights.sum(-1)  # rows with any allowed key sum to one
        assert_close(sums[keep.any(-1)], torch.ones_like(sums[keep.any(-1)]), **TOL)


def test_attention_maps_shapes():
    model = build_model(tiny_cfg(n_decoder_layers=3, n_kv_heads=2), V).eval()
    with torch.no_grad():
        maps = model.attention_maps(padded_batch([5, 4]), torch.randint(4, V, (2, 3)))
    assert [w.shape for w in maps.encoder] == [(2, 4, 5, 5)] * 2
    assert [w.shape for w in maps.decoder] == [(2, 4, 3, 3)] * 3
    assert [w.shape for w in maps.cross] == [(2, 4, 3, 5)] * 3
    assert torch.all(maps.decoder[0][..., ~causal_mask(3, 3)] == 0)


# --- config and interop --------------------------------------------------------------------


@pytest.mark.parametrize(
    "changes, message",
    [
        (dict(n_kv_heads=3), "model.n_kv_heads=3 must be >= 1 and divide model.n_heads=4"),
        (dict(n_kv_heads=0), "model.n_kv_heads=0"),
        (dict(attention_window=0), "model.attention_window=0 must be >= 1"),
        (dict(attention_dilation=1), "model.attention_dilation=1 must be >= 2"),
        (dict(positions="rope", d_model=36, n_heads=4), "even head size"),
    ],
)
def test_config_validation(changes, message):
    with pytest.raises(ConfigError, match=message):
        tiny_cfg(**changes).validate()


@pytest.mark.parametrize(
    "changes, name, ct2_takes_it",
    [
        (dict(n_kv_heads=2), "model.n_kv_heads=2", True),
        (dict(positions="rope"), "model.positions=rope", True),
        (dict(positions="shaw"), "model.positions=shaw", True),
        (dict(positions="t5"), "model.positions=t5", True),
        (dict(positions="alibi"), "model.positions=alibi", False),
        (dict(attention_pattern="local"), "model.attention_pattern=local", False),
        (dict(attention="mla"), "model.attention=mla", False),
    ],
)
def test_marian_and_ctranslate2_refuse_what_they_cannot_express(changes, name, ct2_takes_it):
    with pytest.raises(TmtError, match="cannot map to Hugging Face Marian: .*" + name):
        check_expressible(MARIAN, tiny_cfg(**changes))
    if ct2_takes_it:  # its spec has these (parity in tests/inference/test_export.py)
        check_expressible(CT2, tiny_cfg(**changes))
    else:
        with pytest.raises(TmtError, match="cannot export to CTranslate2: .*" + name):
            check_expressible(CT2, tiny_cfg(**changes))
    check_expressible(MARIAN, tiny_cfg(n_kv_heads=4))  # as many kv heads as heads: plain MHA
    check_expressible(CT2, tiny_cfg(n_kv_heads=4))
