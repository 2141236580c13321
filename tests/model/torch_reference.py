"""Copy our attention weights into torch.nn.MultiheadAttention, the reference implementation."""

import torch
from torch import nn

from transformer_mt.model.attention import MultiHeadAttention


def copy_attention(ours: MultiHeadAttention, ref: nn.MultiheadAttention) -> None:
    """torch packs q/k/v into one in_proj matrix: stack ours in that order."""
    with torch.no_grad():
        ref.in_proj_weight.copy_(
            torch.cat([ours.q_proj.weight, ours.k_proj.weight, ours.v_proj.weight])
        )
        ref.in_proj_bias.copy_(torch.cat([ours.q_proj.bias, ours.k_proj.bias, ours.v_proj.bias]))
        ref.out_proj.weight.copy_(ours.out_proj.weight)
        ref.out_proj.bias.copy_(ours.out_proj.bias)
