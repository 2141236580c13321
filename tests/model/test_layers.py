"""Encoder/decoder layers against torch.nn.Transformer*Layer, and the feed-forward options."""

import pytest
import torch
from torch import nn
from torch.testing import assert_close

from transformer_mt.config import ModelConfig
from transformer_mt.model.attention import causal_mask
from transformer_mt.model.embeddings import (
    Embedder,
    SinusoidalPositions,
    fairseq_sinusoidal_table,
    sinusoidal_table,
)
from transformer_mt.model.layers import DecoderLayer, EncoderLayer, FeedForward

from .torch_reference import copy_attention

D, H, F = 32, 4, 64


def _cfg(pre_norm):
    return ModelConfig(d_model=D, n_heads=H, d_ff=F, dropout=0.0, pre_norm=pre_norm)


def _copy_common(ours, ref, norms):
    copy_attention(ours.self_attn, ref.self_attn)
    ref.linear1.load_state_dict(ours.ffn.fc1.state_dict())
    ref.linear2.load_state_dict(ours.ffn.fc2.state_dict())
    for mine, theirs in norms:
        theirs.load_state_dict(mine.state_dict())


def _randomise(module):
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn_like(p) * 0.3)


@pytest.mark.parametrize("pre_norm", [False, True])
def test_encoder_layer_equals_torch(pre_norm):
    ours = EncoderLayer(_cfg(pre_norm)).eval()
    _randomise(ours)
    ref = nn.TransformerEncoderLayer(D, H, F, dropout=0.0, batch_first=True, norm_first=pre_norm)
    _copy_common(ours, ref, [(ours.self_attn_norm, ref.norm1), (ours.ffn_norm, ref.norm2)])
    ref.eval()
    x = torch.randn(3, 6, D)
    keep = torch.arange(6)[None, :] < torch.tensor([6, 4, 2])[:, None]
    expected = ref(x, src_key_padding_mask=~keep)
    out = ours(x, keep[:, None, None, :])
    # torch's fast path may zero padded rows; compare real positions.
    assert_close(out[keep], expected[keep], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("pre_norm", [False, True])
def test_decoder_layer_equals_torch(pre_norm):
    ours = DecoderLayer(_cfg(pre_norm)).eval()
    _randomise(ours)
    ref = nn.TransformerDecoderLayer(D, H, F, dropout=0.0, batch_first=True, norm_first=pre_norm)
    _copy_common(
        ours,
        ref,
        [
            (ours.self_attn_norm, ref.norm1),
            (ours.cross_attn_norm, ref.norm2),
            (ours.ffn_norm, ref.norm3),
        ],
    )
    copy_attention(ours.cross_attn, ref.multihead_attn)
    ref.eval()
    x, memory = torch.randn(3, 5, D), torch.randn(3, 6, D)
    keep = torch.arange(6)[None, :] < torch.tensor([6, 4, 2])[:, None]
    expected = ref(x, memory, tgt_mask=~causal_mask(5, 5), memory_key_padding_mask=~keep)
    assert_close(ours(x, memory, keep[:, None, None, :]), expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("activation", ["relu", "gelu", "swish", "swiglu"])
def test_feed_forward_options(activation):
    ffn = FeedForward(D, F, activation, 0.0)
    x = torch.randn(2, 3, D)
    h = ffn.fc1(x)
    if activation == "swiglu":
        value, gate = h.chunk(2, -1)
        expected = ffn.fc2(value * gate * torch.sigmoid(gate))
    elif activation == "swish":
        expected = ffn.fc2(h * torch.sigmoid(h))
    else:
        expected = ffn.fc2(torch.relu(h) if activation == "relu" else nn.functional.gelu(h))
    assert_close(ffn(x), expected)


def test_a_fused_relu_layer_replaces_fc1_and_the_relu():
    ffn = FeedForward(D, F, "relu", 0.0)
    x = torch.randn(2, 3, D)
    expected = ffn(x)
    fc1, calls = ffn.fc1, []

    def fc1_relu(h):
        calls.append(h)
        return torch.relu(fc1(h)) - 1.0

    assert ffn.can_fuse_relu
    ffn.fuse_relu(LambdaModule(fc1_relu))
    assert ffn.fc1 is not fc1 and ffn.fc1_activates and not ffn.can_fuse_relu
    with pytest.raises(ValueError, match="only a relu feed-forward layer fuses, once"):
        ffn.fuse_relu(LambdaModule(fc1_relu))  # a second ReLU layer would replace the first
    # What fc1_relu returns goes to fc2 as it is: a second ReLU would undo the shift by -1.
    assert_close(ffn(x), expected - ffn.fc2.weight.sum(dim=1), rtol=1e-5, atol=1e-5)
    assert len(calls) == 1


@pytest.mark.parametrize("activation", ["gelu", "swiglu"])
def test_only_a_relu_feed_forward_fuses(activation):
    with pytest.raises(ValueError, match="only a relu"):
        FeedForward(D, F, activation, 0.0).fuse_relu(nn.Identity())


class LambdaModule(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x)


def test_sinusoidal_table_is_the_papers_formula_in_concatenated_layout():
    table = sinusoidal_table(50, 16)
    for pos in (0, 1, 7, 49):
        for i in range(8):
            angle = torch.tensor(pos / 10000 ** (2 * i / 16), dtype=torch.float64)
            assert table[pos, i].item() == pytest.approx(angle.sin().item(), abs=1e-6)
            assert table[pos, 8 + i].item() == pytest.approx(angle.cos().item(), abs=1e-6)


@pytest.mark.parametrize("offset", [0, 2])
def test_fairseq_sinusoidal_table_is_its_formula_from_the_offset(offset):
    """tensor2tensor's / fairseq's frequencies 10000^(-i/(D/2-1)): the last one is 1/10000."""
    table = fairseq_sinusoidal_table(50, 16, offset)
    for row in (0, 1, 7, 49):
        for i in range(8):
            angle = torch.tensor((row + offset) / 10000 ** (i / 7), dtype=torch.float64)
            assert table[row, i].item() == pytest.approx(angle.sin().item(), abs=1e-5)
            assert table[row, 8 + i].item() == pytest.approx(angle.cos().item(), abs=1e-5)


def test_position_offset_shifts_the_rows_of_the_papers_table():
    assert torch.equal(sinusoidal_table(10, 16, offset=3), sinusoidal_table(13, 16)[3:])


def test_pad_tokens_get_no_position_when_asked_and_the_rest_are_unchanged():
    token_embedding = nn.Embedding(10, D)
    positions = SinusoidalPositions(8, D, offset=2, fairseq=True)
    ids = torch.tensor([[4, 5, 6, 1], [7, 1, 1, 1]])  # 1: pad
    plain = Embedder(token_embedding, positions, 0.0)(ids)
    unpadded = Embedder(token_embedding, positions, 0.0, pad_id=1)(ids)
    real = ids != 1
    assert torch.equal(unpadded[real], plain[real])
    assert torch.equal(unpadded[~real], token_embedding(ids)[~real] * D**0.5)
    # A decoding step (offset 3, one position per row) masks its pads the same way.
    step = Embedder(token_embedding, positions, 0.0, pad_id=1)(ids[:, 3:], 3)
    assert torch.equal(step, unpadded[:, 3:])
