"""Token embeddings scaled by sqrt(d_model) plus positional encodings (paper section 3.4-3.5).

Sinusoidal positions use the concatenated layout [sin(pos * w_0..w_{D/2-1}), cos(...)] of
tensor2tensor, fairseq and Marian. The paper interleaves sin and cos (PE(pos, 2i) = sin,
PE(pos, 2i+1) = cos); the two differ only by a fixed permutation of the model dimensions,
which the network absorbs, and the concatenated layout lets Marian and M2M100 weights load
unchanged. Two frequency formulas, i = 0 .. D/2-1:
  sinusoidal:          w_i = 10000^(-i / (D/2))      the paper's, and Marian's
  sinusoidal_fairseq:  w_i = 10000^(-i / (D/2 - 1))  tensor2tensor, fairseq, M2M100/NLLB
Positions are numbered from `position_offset` (fairseq and M2M100 start at padding id + 1).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from transformer_mt.config import ModelConfig
from transformer_mt.model.dropout import Dropout


def sinusoidal_table(n_positions: int, d_model: int, offset: int = 0) -> Tensor:
    """(n_positions, d_model) float32 table of positions offset .. offset+n_positions-1: first
    half sines, second half cosines, w_i = 10000^(-i / (D/2)) (computed in float64)."""
    positions = torch.arange(offset, offset + n_positions, dtype=torch.float64)[:, None]  # (P, 1)
    freqs = torch.pow(10000.0, -torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    angles = positions * freqs  # (P, D/2)
    return torch.cat([angles.sin(), angles.cos()], dim=-1).float()


def fairseq_sinusoidal_table(n_positions: int, d_model: int, offset: int = 0) -> Tensor:
    """As `sinusoidal_table` with w_i = 10000^(-i / (D/2 - 1)), computed in float32 as
    fairseq computes it: the table its models (M2M100, NLLB) were trained with, to the bit."""
    half = d_model // 2
    freqs = torch.exp(torch.arange(half, dtype=torch.float32) * -(math.log(10000) / (half - 1)))
    positions = torch.arange(offset, offset + n_positions, dtype=torch.float32)[:, None]
    angles = positions * freqs  # (P, D/2)
    return torch.cat([angles.sin(), angles.cos()], dim=-1)


class SinusoidalPositions(nn.Module):
    """Fixed positional encodings; a non-persistent buffer, so checkpoints do not carry it.

    Row p holds position offset + p: a decoding step at cache length t reads row t, whatever
    the offset."""

    def __init__(self, max_positions: int, d_model: int, offset: int = 0, fairseq: bool = False):
        super().__init__()
        table = (fairseq_sinusoidal_table if fairseq else sinusoidal_table)(
            max_positions, d_model, offset
        )
        self.register_buffer("table", table, persistent=False)

    def forward(self, length: int, offset: int | Tensor = 0) -> Tensor:
        """Encodings of positions offset .. offset+length-1, (length, D); see `positions_of`."""
        return positions_of(self.table, length, offset)


class LearnedPositions(nn.Module):
    """Trained position embeddings (as in BERT / fairseq's learned option)."""

    def __init__(self, max_positions: int, d_model: int):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(max_positions, d_model))
        nn.init.normal_(self.weight, std=d_model**-0.5)

    def forward(self, length: int, offset: int | Tensor = 0) -> Tensor:
        """Embeddings of positions offset .. offset+length-1, (length, D); see `positions_of`."""
        return positions_of(self.weight, length, offset)


def positions_of(table: Tensor, length: int, offset: int | Tensor) -> Tensor:
    """Rows offset .. offset+length-1 of `table` (P, ...): (length, ...) for an int offset;
    for a (B,) tensor of offsets, one per batch row (rows decoded at different steps, as a
    server's batch is), (B, length, ...)."""
    if isinstance(offset, int):
        check_range(length, offset, table.size(0))
        return table[offset : offset + length]
    if offset.numel():
        check_range(length, int(offset.max()), table.size(0))
    return table[offset[:, None] + torch.arange(length, device=offset.device)]


def check_range(length: int, offset: int, max_positions: int) -> None:
    """Refuse positions beyond the table, with a message that says what to do."""
    if offset + length > max_positions:
        raise ValueError(
            f"sequence reaches position {offset + length}, beyond model.max_positions="
            f"{max_positions}; truncate the input or raise max_positions"
        )


class Embedder(nn.Module):
    """ids -> dropout(token_embedding(ids) * sqrt(D) + positions).

    `token_embedding` may be shared between encoder, decoder and the output projection; the
    sqrt(D) scale keeps embeddings of std D^-0.5 (their init) on the scale of the positions
    (`scale` False: no scale, for models trained without it). `positions` is None with
    positions that live in self-attention instead (rope, relative). With `pad_id`, tokens
    `pad_id` get no position (fairseq's, and M2M100's, zero vector): only their own outputs
    change, which nothing reads.
    """

    def __init__(
        self,
        token_embedding: nn.Embedding,
        positions: nn.Module | None,
        dropout: float,
        scale: bool = True,
        pad_id: int | None = None,
    ) -> None:
        super().__init__()
        self.token_embedding = token_embedding
        self.positions = positions
        self.scale = math.sqrt(token_embedding.embedding_dim) if scale else None
        self.pad_id = pad_id
        self.dropout = Dropout(dropout)

    def forward(self, ids: Tensor, offset: int | Tensor = 0) -> Tensor:
        """(B, L) ids, first position `offset` (an int, or (B,) one per row) -> (B, L, D)."""
        x = self.token_embedding(ids)
        if self.scale is not None:
            x = x * self.scale
        if self.positions is not None:
            positions = self.positions(ids.size(1), offset)  # (L, D) or (B, L, D)
            if self.pad_id is not None:
                positions = positions * (ids != self.pad_id)[..., None]  # (B, L, D)
            x = x + positions
        return self.dropout(x)


def build_positions(cfg: ModelConfig) -> nn.Module | None:
    """The absolute positions of ModelConfig.positions (sinusoidal, sinusoidal_fairseq,
    learned).

    None for the others (rope, shaw, t5, alibi): they act inside self-attention
    (model/rope.py, model/relative.py) and add nothing to the embeddings.
    """
    if cfg.positions in ("sinusoidal", "sinusoidal_fairseq"):
        fairseq = cfg.positions == "sinusoidal_fairseq"
        return SinusoidalPositions(cfg.max_positions, cfg.d_model, cfg.position_offset, fairseq)
    if cfg.positions == "learned":
        return LearnedPositions(cfg.max_positions, cfg.d_model)
    return None
