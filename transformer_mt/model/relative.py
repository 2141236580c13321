"""Relative positions in self-attention: Shaw's distance embeddings, T5's bucketed bias, ALiBi.

None of the three adds a position to the embeddings. Each adds a term that depends on the
distance between key position j and query position i to the self-attention scores of the
encoder and the decoder (cross-attention gets none):

  shaw   Shaw, Uszkoreit, Vaswani (2018), "Self-Attention with Relative Position
         Representations", eq. 3-4: learned vectors a^K, a^V of size Dh, one per clipped
         distance clip(j - i, -k, k), shared by the heads of a layer, each layer its own:
             e_ij = q_i · (k_j + a^K_ij) / sqrt(Dh),   z_i = sum_j α_ij (v_j + a^V_ij)
         (a^V only with `relative_values`).
  t5     Raffel et al. (2020), "Exploring the Limits of Transfer Learning with a Unified
         Text-to-Text Transformer", section 2.1: a learned scalar per head and distance bucket,
         e_ij = q_i · k_j / sqrt(Dh) + b_h(bucket(j - i)); one table per stack (encoder,
         decoder), computed once per pass and shared by its layers. T5 itself leaves out the
         1/sqrt(Dh); here the scores keep it and the bias is added on top.
  alibi  Press, Smith, Lewis (2022), "Train Short, Test Long: Attention with Linear Biases
         Enables Input Length Extrapolation": a fixed bias -m_h · |j - i| with geometric
         slopes m_h; no parameters.

The decoder's causal mask hides every key with j > i, so a distance rule for the decoder only
matters for j <= i: T5 buckets it one-sided ("causal"), ALiBi's |j - i| is its i - j there.

Query i sits at position offset + i and key j at position j: offset is 0 in a full pass and
the cache length when decoding on top of a cache, whose keys hold positions 0, 1, ... in order.
In a server's batch the rows sit at different positions: offset is then a (B,) tensor and
every term gains a batch dimension.

Shapes: B batch, H heads, Tq/Tk query/key length, Dh head size.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from transformer_mt.config import ModelConfig


def relative_distances(
    n_queries: int, offset: int | Tensor, n_keys: int | None = None, device=None
) -> Tensor:
    """Key position j - query position (offset + i): (Tq, Tk) long for an int offset, (B, Tq,
    Tk) for per-row offsets (B,). Tk = n_keys, by default offset + Tq (with per-row offsets,
    the furthest row's); a row's keys past its own last query are slots its cache has not
    filled, which the caller masks."""
    if isinstance(offset, int):
        queries = torch.arange(offset, offset + n_queries, device=device)[:, None]  # (Tq, 1)
        last = offset + n_queries
    else:
        device = offset.device
        queries = offset[:, None, None] + torch.arange(n_queries, device=device)[:, None]
        last = int(offset.max()) + n_queries
    return torch.arange(last if n_keys is None else n_keys, device=device) - queries


class RelativeEmbeddings(nn.Module):
    """Shaw et al.'s a^K (and a^V) tables of one self-attention layer, (2k + 1, Dh) each, row
    clip(j - i, -k, k) + k for distance j - i, shared by the heads (as in the paper).

    Both terms go through the 2k + 1 distances rather than a gathered (Tq, Tk, Dh) tensor:
    q_i · a^K_ij is q_i against each table row, then picked per key; sum_j α_ij a^V_ij sums
    the weights per distance, then multiplies the table.
    """

    def __init__(self, head_dim: int, max_distance: int, values: bool):
        super().__init__()
        self.max_distance = max_distance
        self.key_embeddings = nn.Parameter(torch.empty(2 * max_distance + 1, head_dim))
        self.value_embeddings = (
            nn.Parameter(torch.empty(2 * max_distance + 1, head_dim)) if values else None
        )
        # N(0, Dh^-0.5): rows of unit expected norm, as the token embeddings per dimension.
        for table in (self.key_embeddings, self.value_embeddings):
            if table is not None:
                nn.init.normal_(table, std=head_dim**-0.5)

    def rows(self, shape: torch.Size, offset: int | Tensor, device: torch.device) -> Tensor:
        """The table row of every query-key pair, expanded to `shape` (B, H, Tq, Tk)."""
        distance = relative_distances(shape[-2], offset, shape[-1], device)
        rows = distance.clamp(-self.max_distance, self.max_distance) + self.max_distance
        return rows.unsqueeze(-3).expand(shape)  # (Tq, Tk) or (B, 1, Tq, Tk) -> (B, H, Tq, Tk)

    def scores(self, query: Tensor, offset: int | Tensor, n_keys: int) -> Tensor:
        """q_i · a^K_ij / sqrt(Dh), (B, H, Tq, Tk), for queries (B, H, Tq, Dh) at offset.. and
        keys 0..n_keys - 1."""
        table = self.key_embeddings.to(query.dtype)
        per_distance = query @ table.T / math.sqrt(query.size(-1))  # (B, H, Tq, 2k + 1)
        shape = torch.Size((*query.shape[:-1], n_keys))
        return per_distance.gather(-1, self.rows(shape, offset, query.device))

    def value_term(self, weights: Tensor, offset: int | Tensor) -> Tensor:
        """sum_j α_ij a^V_ij, (B, H, Tq, Dh), for attention weights α (B, H, Tq, Tk)."""
        rows = self.rows(weights.shape, offset, weights.device)
        per_distance = weights.new_zeros(*weights.shape[:-1], self.key_embeddings.size(0))
        per_distance.scatter_add_(-1, rows, weights)  # (B, H, Tq, 2k + 1)
        return per_distance @ self.value_embeddings.to(weights.dtype)


def relative_bucket(distance: Tensor, causal: bool, n_buckets: int, max_distance: int) -> Tensor:
    """T5's bucket (long, same shape) of each key - query position `distance` (long).

    Bidirectional: half the buckets for keys after the query, half for the others; causal:
    all of them for keys at or before the query (later keys, hidden anyway, share bucket 0).
    Of the n buckets of one direction, distances |d| < n/2 get one each, and the longer ones
    share logarithmically wider buckets up to max_distance, the last bucket holding the rest:
        bucket(d) = n/2 + floor(log(|d| / (n/2)) / log(max_distance / (n/2)) * (n - n/2)).
    """
    if causal:
        n, base, d = n_buckets, 0, (-distance).clamp(min=0)
    else:
        n = n_buckets // 2
        base, d = (distance > 0).long() * n, distance.abs()
    exact = n // 2
    ratio = d.clamp(min=exact).float() / exact  # distances below `exact` take the exact branch
    far = exact + (torch.log(ratio) / math.log(max_distance / exact) * (n - exact)).long()
    return base + torch.where(d < exact, d, far.clamp(max=n - 1))


class T5Bias(nn.Module):
    """T5's learned bias b_h(bucket(j - i)), one scalar per head and bucket."""

    def __init__(self, n_heads: int, n_buckets: int, max_distance: int, causal: bool, std: float):
        super().__init__()
        self.causal = causal
        self.max_distance = max_distance
        # A parameter, not an nn.Embedding: the model's embedding init would zero its row 0.
        self.weight = nn.Parameter(torch.empty(n_buckets, n_heads))
        nn.init.normal_(self.weight, std=std)

    def forward(self, n_queries: int, offset: int | Tensor = 0) -> Tensor:
        """(H, Tq, offset + Tq) float, or (B, H, Tq, Tk) for per-row offsets: the bias of
        queries offset.. against keys 0.. (`relative_distances`)."""
        distance = relative_distances(n_queries, offset, device=self.weight.device)
        bucket = relative_bucket(distance, self.causal, self.weight.size(0), self.max_distance)
        return self.weight[bucket].movedim(-1, -3)  # (…, Tq, Tk, H) -> (…, H, Tq, Tk)


def alibi_slopes(n_heads: int) -> list[float]:
    """The paper's slopes m_1..m_H: 2^(-8h/H) for H a power of 2. Otherwise those of the
    power of 2 below, n, followed by every other slope of 2n (2^(-4(2h-1)/n)) up to H."""

    def geometric(n: int) -> list[float]:
        return [2.0 ** (-8.0 * h / n) for h in range(1, n + 1)]

    below = 2 ** int(math.log2(n_heads))
    if below == n_heads:
        return geometric(n_heads)
    return geometric(below) + geometric(2 * below)[0::2][: n_heads - below]


class ALiBi(nn.Module):
    """Fixed linear biases -m_h · |j - i|; slopes in a buffer that checkpoints do not carry."""

    def __init__(self, n_heads: int):
        super().__init__()
        self.register_buffer("slopes", torch.tensor(alibi_slopes(n_heads)), persistent=False)

    def forward(self, n_queries: int, offset: int | Tensor = 0) -> Tensor:
        """(H, Tq, offset + Tq) float, or (B, H, Tq, Tk) for per-row offsets: the bias of
        queries offset.. against keys 0.. (`relative_distances`)."""
        distance = relative_distances(n_queries, offset, device=self.slopes.device).abs()
        return -self.slopes[:, None, None] * distance.unsqueeze(-3)


def build_position_bias(cfg: ModelConfig, causal: bool) -> nn.Module | None:
    """The bias one stack (encoder, or decoder with `causal`) shares among its layers for
    `t5` and `alibi`; None for the other positions (shaw's tables live in each layer)."""
    if cfg.positions == "t5":
        # T5's initialisation, N(0, D^-0.5).
        std = cfg.d_model**-0.5
        return T5Bias(cfg.n_heads, cfg.relative_buckets, cfg.relative_max_distance, causal, std)
    if cfg.positions == "alibi":
        return ALiBi(cfg.n_heads)
    return None
