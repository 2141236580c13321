"""Rotary position embedding, RoPE (Su et al. 2021, "RoFormer").

Instead of adding a position vector to the embeddings, self-attention rotates each query and
key by its position: feature pairs (x_i, x_{i + Dh/2}) are turned by the angle pos * w_i, with
w_i = base^(-2i/Dh) (the "rotate half" layout of GPT-NeoX and Llama). A rotation by m·w
dotted with one by n·w equals a rotation by (m - n)·w, so the query-key score depends only on
the distance m - n, and a cached key keeps the rotation it got when it was computed.

Shapes: B batch, H heads, L length, Dh head size.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from transformer_mt.model.embeddings import positions_of


class RotaryEmbedding(nn.Module):
    """Rotates (B, H, L, Dh) queries or keys by their positions; cos/sin tables not saved."""

    def __init__(self, head_dim: int, max_positions: int, base: float = 10000.0):
        super().__init__()
        if head_dim % 2:
            raise ValueError(f"rotary embedding needs an even head size, got {head_dim}")
        freqs = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
        angles = torch.arange(max_positions, dtype=torch.float64)[:, None] * freqs  # (P, Dh/2)
        self.register_buffer("cos", angles.cos().float(), persistent=False)
        self.register_buffer("sin", angles.sin().float(), persistent=False)

    def forward(self, x: Tensor, offset: int | Tensor = 0) -> Tensor:
        """x (B, H, L, Dh) at positions offset .. offset+L-1 -> rotated x, same shape.

        `offset` is an int, or a (B,) tensor with the first position of each row.
        """
        length = x.size(-2)
        cos = positions_of(self.cos, length, offset).to(x.dtype)  # (L, Dh/2) or (B, L, Dh/2)
        sin = positions_of(self.sin, length, offset).to(x.dtype)
        if cos.dim() == 3:  # per row: broadcast over the heads
            cos, sin = cos[:, None], sin[:, None]
        x1, x2 = x.chunk(2, dim=-1)  # (B, H, L, Dh/2) each
        return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)
