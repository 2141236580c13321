"""Tiny models and padded batches shared by the model tests."""

import pytest
import torch

from transformer_mt import kernels
from transformer_mt.config import ModelConfig
from transformer_mt.model.attention import attention

V, PAD, BOS, EOS = 40, 0, 2, 3

# The paper-era options every model test is parametrised over (attention variants add theirs).
OPTIONS = [
    dict(pre_norm=False),
    dict(pre_norm=True),
    dict(pre_norm=True, positions="learned", activation="swiglu"),
    dict(share_embeddings=False, tie_output=False, activation="gelu", n_decoder_layers=3),
    # OPUS-MT Marian's options, and M2M100/NLLB's (positions from pad id + 1; PAD is 0 here).
    dict(activation="swish", output_bias=True, scale_embeddings=False),
    dict(pre_norm=True, positions="sinusoidal_fairseq", position_offset=PAD + 1),
]

# The kernels a model may be built with: its own (SDPA), and the CPU table that loading and
# training build it with (transformer_mt/kernels.py). Attention and decoding tests run both.
KERNELS = [pytest.param(attention, id="model"), pytest.param(kernels.attention, id="table")]


def tiny_cfg(**changes) -> ModelConfig:
    base = dict(d_model=32, n_heads=4, n_layers=2, d_ff=64, dropout=0.0, max_positions=64)
    return ModelConfig(**{**base, **changes})


def padded_batch(lengths: list[int]) -> torch.Tensor:
    """Random ids (B, L) right-padded with PAD to the longest length."""
    ids = torch.randint(4, V, (len(lengths), max(lengths)))
    for row, n in enumerate(lengths):
        ids[row, n:] = PAD
    return ids
