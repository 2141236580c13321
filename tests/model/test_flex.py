"""The flex_attention backend against the dense-mask SDPA path it must equal."""

import pytest
import torch
from torch.testing import assert_close

from transformer_mt.config import ConfigError
from transformer_mt.model import AttentionPattern, build_model
from transformer_mt.model.attention import attention

from .test_attention_variants import reference_mask
from .tiny import BOS, V, padded_batch, tiny_cfg

TOL = dict(atol=1e-5, rtol=1e-5)
KINDS = ["local", "dilated", "local_dilated"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("causal", [False, True])
def test_block_mask_attention_equals_plain_loop_mask(kind, causal):
    """300 keys span three 128-key blocks, so whole blocks are skipped, others cut per key."""
    torch.manual_seed(0)
    length, window, dilation = 300, 5, 64
    q = torch.randn(3, 4, length, 8)
    k, v = torch.randn(3, 2, length, 8), torch.randn(3, 2, length, 8)  # grouped: 2 kv heads
    lengths = torch.tensor([300, 170, 1])
    key_keep = torch.arange(length)[None, :] < lengths[:, None]  # (B, L)
    pattern = AttentionPattern(kind, window, dilation)
    block_mask = pattern.block_mask(length, length, key_keep, causal)
    dense = reference_mask(kind, length, length, window, dilation, causal)
    expected = attention(q, k, v, key_keep[:, None, None, :] & dense)
    assert_close(attention(q, k, v, block_mask), expected, **TOL)


@pytest.mark.parametrize("per_row", [False, True])
def test_block_mask_attention_adds_a_bias_as_the_dense_path_does(per_row):
    """A relative-position bias, (H, Tq, Tk) shared by the rows or (B, H, Tq, Tk) per row,
    through flex's score_mod against SDPA with the bias in its float mask."""
    torch.manual_seed(0)
    length = 200
    q = torch.randn(2, 4, length, 8)
    k, v = torch.randn(2, 2, length, 8), torch.randn(2, 2, length, 8)
    bias = torch.randn(2, 4, length, length) if per_row else torch.randn(4, length, length)
    key_keep = torch.arange(length)[None, :] < torch.tensor([200, 90])[:, None]
    pattern = AttentionPattern("local", 7)
    block_mask = pattern.block_mask(length, length, key_keep, causal=True)
    dense = key_keep[:, None, None, :] & reference_mask("local", length, length, 7, 8, True)
    expected = attention(q, k, v, dense, attn_bias=bias)
    assert_close(attention(q, k, v, block_mask, attn_bias=bias), expected, **TOL)


def test_local_block_mask_skips_blocks():
    block_mask = AttentionPattern("local", window=16).block_mask(1024, 1024)
    # 8 x 8 blocks of 128; a window of 16 reaches only the neighbouring blocks: 22 of 64.
    assert block_mask.sparsity() == pytest.approx(100 * (1 - 22 / 64))


@pytest.mark.parametrize(
    "options",
    [
        dict(attention_pattern="local", attention_window=2),
        dict(attention_pattern="local_dilated", attention_window=1, n_kv_heads=2, pre_norm=True),
        dict(attention_pattern="full", positions="rope"),
        # relative positions through flex's score_mod
        dict(attention_pattern="local", attention_window=2, positions="t5"),
        dict(attention_pattern="full", positions="alibi", n_kv_heads=2),
        dict(attention_pattern="local_dilated", attention_window=1, positions="shaw"),
        dict(attention_pattern="local", attention="mla", positions="t5", mla_encoder=True),
        # latent attention's naive form: query/key heads of Dh + d_R, value heads of Dh
        dict(attention_pattern="local", attention="mla", positions="rope", mla_encoder=True),
    ],
)
def test_flex_model_equals_sdpa_model_with_the_same_weights(options):
    sdpa = build_model(tiny_cfg(**options), V).eval()
    flex = build_model(tiny_cfg(**options, attention_backend="flex"), V).eval()
    flex.load_state_dict(sdpa.state_dict())
    src, tgt = padded_batch([9, 4, 6]), torch.randint(4, V, (3, 7))
    tgt[:, 0] = BOS
    with torch.no_grad():
        assert_close(flex(src, tgt), sdpa(src, tgt), **TOL)
        # decoding steps keep dense masks on top of a flex-encoded memory
        src_mask = flex.src_mask(src)
        memory, cache = flex.encode(src, src_mask), None
        full = sdpa(src, tgt).log_softmax(-1)
        for t in range(tgt.size(1)):
            log_probs, cache = flex.decode_step(tgt[:, t], memory, src_mask, torch.arange(3), cache)
            assert_close(log_probs, full[:, t], **TOL)


def test_flex_backend_refuses_attention_dropout():
    with pytest.raises(ConfigError, match="attention_backend=flex needs model.attn_dropout=0"):
        tiny_cfg(attention_backend="flex", attn_dropout=0.1).validate()
