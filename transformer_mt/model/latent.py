"""Multi-head latent attention, MLA (DeepSeek-AI 2024, "DeepSeek-V2", section 2.1).

Keys and values of all heads are up-projections of one shared latent vector per position, so
a decoding cache holds that latent instead of H heads of keys and values. For the input h_t
(D) at position t, heads h = 1..H of size Dh:

    c_t = W_DKV h_t                              the latent, size r (mla_kv_rank), shared
    k_t,h = W_UK,h c_t,    v_t,h = W_UV,h c_t    per-head keys and values (eq. 9-11)
    q_t,h = W_Q,h h_t

The paper's model takes r = 4 Dh and d_R = Dh / 2 (section 3.1.2), a cache of 4.5 Dh numbers
per token and layer, against 2 H Dh for MHA.

RoPE (model/rope.py) cannot rotate k_j,h: a rotation that differs per key position j would
sit between q_h and W_UK,h, and W_UK,h could no longer be folded into the query (below). With
`positions: rope`, positions enter through a small decoupled part instead (section 2.1.3,
eq. 14-18), of size d_R (mla_rope_dim), whose key is shared by the heads and cached next to
the latent:

    k^R_t = RoPE(W_KR h_t),    q^R_t,h = RoPE(W_QR,h h_t)
    score_t,j,h = (q_t,h · k_j,h + q^R_t,h · k^R_j) / sqrt(Dh + d_R)

and the content part q_h, k_h is not rotated. Without rope there is no decoupled part
(d_R = 0): sinusoidal and learned positions are in the embeddings already, t5 and alibi add a
bias to the scores, which both forms below take as it is. The paper also compresses the
queries (eq. 12-13, and takes q^R from that compressed query) to save activation memory in
training; the decoding cache gains nothing from it, so queries come from h_t as in standard
attention.

Two forms compute the same output:

- Naive (training, full passes, attention maps): up-project keys and values for every head
  and run the standard attention kernel (SDPA or its plain-math twin, masks and biases included),
  with q = [q_h ‖ q^R_h] and k = [k_h ‖ k^R] of size Dh + d_R.
- Absorbed (`attend`, incremental decoding over the cached [c ‖ k^R], (B, 1, T, r + d_R)):
  q_h · (W_UK,h c_j) = (W_UK,hᵀ q_h) · c_j, so the query becomes q̃_h = [W_UK,hᵀ q_h ‖ q^R_h]
  (size r + d_R) and every head attends over the one cached latent, as in multi-query
  attention with a key head of size r + d_R and a value head c of size r (the first r
  features of the cached key, stored once). Since the weights of a row sum to one,
  sum_j α_j W_UV,h c_j = W_UV,h (sum_j α_j c_j): the value up-projection runs after
  attention, once per query. It could be folded into the output projection as well
  (W_O,h W_UV,h, D x r per head), but that costs D H r multiply-adds per query against
  D r + D² for the two steps: more as soon as r is above about Dh.

The up-projections have no bias: a key bias adds q_h · b to every score of a query's row,
which softmax ignores, and a value bias reaches the output as a constant that the output
projection's bias already provides. They are parameters of shape (H, Dh, r) rather than
`nn.Linear`s because the absorbed form multiplies by their transposes per head (and so
packing or int8 quantization of the linear layers, inference/, leaves them alone).

Shapes: B batch, H heads, Tq/Tk query/key length, D d_model, Dh head size (D / H), r latent
size, d_R decoupled rotary size (0 without rope).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from transformer_mt.model.attention import AttentionKernel, attention, attention_with_weights
from transformer_mt.model.rope import RotaryEmbedding


class LatentAttention(nn.Module):
    """Multi-head latent attention over one sequence (self-attention; see the module docstring).

    `forward` is the naive form, with the call signature of `MultiHeadAttention.forward`;
    `project_kv` and `attend` are the cached decoding form, as `MultiHeadAttention`'s are, so a
    decoder layer drives both modules the same way.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        kv_rank: int,
        rope_dim: int = 0,
        max_positions: int = 1024,
        dropout: float = 0.0,
        kernel: AttentionKernel = attention,
    ):
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"need d_model={d_model} divisible by n_heads={n_heads}")
        self.n_heads = n_heads
        self.head_dim = d_model // n_heads
        self.kv_rank = kv_rank
        self.rope_dim = rope_dim
        self.dropout = dropout
        self.kernel = kernel  # as `MultiHeadAttention.kernel`
        self.q_proj = nn.Linear(d_model, d_model)  # W_Q
        self.latent_proj = nn.Linear(d_model, kv_rank)  # W_DKV
        # W_UK,h and W_UV,h, initialised as a Linear r -> H * Dh would be (Xavier-uniform).
        self.key_up = nn.Parameter(torch.empty(n_heads, self.head_dim, kv_rank))
        self.value_up = nn.Parameter(torch.empty(n_heads, self.head_dim, kv_rank))
        for weight in (self.key_up, self.value_up):
            nn.init.xavier_uniform_(weight.view(d_model, kv_rank))
        self.rope = RotaryEmbedding(rope_dim, max_positions) if rope_dim else None
        self.q_rope_proj = nn.Linear(d_model, n_heads * rope_dim) if rope_dim else None  # W_QR
        self.k_rope_proj = nn.Linear(d_model, rope_dim) if rope_dim else None  # W_KR
        self.out_proj = nn.Linear(d_model, d_model)

    def project_kv(self, source: Tensor, offset: int | Tensor = 0) -> tuple[Tensor, None]:
        """What the cache holds for `source` (B, Tk, D) at positions offset..: the latent and
        the rotated key, [c ‖ k^R] (B, 1, Tk, r + d_R), and no values (they are c)."""
        latent = self.latent_proj(source)[:, None]  # (B, 1, Tk, r)
        if self.rope is not None:
            key_rope = self.rope(self.k_rope_proj(source)[:, None], offset)  # (B, 1, Tk, d_R)
            latent = torch.cat([latent, key_rope], dim=-1)
        return latent, None

    def attend(
        self,
        query: Tensor,
        keys: Tensor,
        values: None = None,
        mask: Tensor | None = None,
        offset: int | Tensor = 0,
        attn_bias: Tensor | None = None,
        kernel: AttentionKernel | None = None,
    ) -> Tensor:
        """The absorbed form: attend from `query` (B, Tq, D) at positions offset.. to cached
        latent keys [c ‖ k^R] (B, 1, Tk, r + d_R), whose first r features are the values.

        `mask` (bool, True = may attend) and `attn_bias` (float, added to the scaled scores)
        broadcast to (B, H, Tq, Tk). `kernel` computes the attention for this call (None: the
        module's own). Attention runs in the dtype of `keys` (a cache may store them
        narrower); the output is cast back.

        Returns:
            output (B, Tq, D) (no weights: `forward` gives them).
        """
        q, q_rope = self._queries(query, offset)  # (B, H, Tq, Dh), (B, H, Tq, d_R) or None
        # 1) fold W_UK into the query: q̃_h = W_UK,hᵀ q_h, so that q̃_h · c_j = q_h · k_j,h
        # einsum, as one (H, B * Tq, Dh) @ (H, Dh, r) product: `q @ self.key_up` would
        # broadcast, and copy, key_up to (B, H, Dh, r) first.
        q = torch.einsum("bhtd,hdr->bhtr", q, self.key_up)  # (B, H, Tq, r)
        if q_rope is not None:
            q = torch.cat([q, q_rope], dim=-1)  # (B, H, Tq, r + d_R)
        # The kernel divides the scores by the square root of the query's size, r + d_R; the
        # paper's (and the naive form's) divisor is sqrt(Dh + d_R).
        q = q * math.sqrt(q.size(-1) / (self.head_dim + self.rope_dim))
        # 2) every head attends over the one latent head: sum_j α_j c_j
        p = self.dropout if self.training else 0.0
        values = keys[..., : self.kv_rank]  # (B, 1, Tk, r): c, stored once in the keys
        dtype = q.dtype
        kernel = self.kernel if kernel is None else kernel
        latent = kernel(q.to(keys.dtype), keys, values, mask, False, p, attn_bias)
        # 3) up-project the attended latent: W_UV,h (sum_j α_j c_j) = sum_j α_j v_j,h
        out = torch.einsum("bhtr,hdr->bhtd", latent.to(dtype), self.value_up)  # (B, H, Tq, Dh)
        return self._merged(out)

    def forward(
        self,
        query: Tensor,
        source: Tensor,
        mask: Tensor | None = None,
        is_causal: bool = False,
        need_weights: bool = False,
        attn_bias: Tensor | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """The naive form: attention of `query` (B, Tq, D) over `source` (B, Tk, D), both from
        position 0, through per-head keys and values; arguments as `MultiHeadAttention`'s.

        Returns:
            output (B, Tq, D) and, with `need_weights`, weights (B, H, Tq, Tk), else None.
        """
        latent, _ = self.project_kv(source)  # (B, 1, Tk, r + d_R)
        c, key_rope = latent.split([self.kv_rank, self.rope_dim], dim=-1)
        # All heads' up-projections as one (B * Tk, r) @ (r, H * Dh) product each.
        keys = self._heads(c[:, 0] @ self.key_up.flatten(0, 1).t())  # (B, H, Tk, Dh)
        values = self._heads(c[:, 0] @ self.value_up.flatten(0, 1).t())  # (B, H, Tk, Dh)
        q, q_rope = self._queries(query, 0)  # (B, H, Tq, Dh), (B, H, Tq, d_R) or None
        if q_rope is not None:
            q = torch.cat([q, q_rope], dim=-1)  # (B, H, Tq, Dh + d_R)
            keys = torch.cat([keys, key_rope.expand(-1, self.n_heads, -1, -1)], dim=-1)
        p = self.dropout if self.training else 0.0
        if need_weights:
            out, weights = attention_with_weights(q, keys, values, mask, is_causal, attn_bias, p)
        else:
            out, weights = self.kernel(q, keys, values, mask, is_causal, p, attn_bias), None
        return self._merged(out), weights

    def _queries(self, query: Tensor, offset: int | Tensor) -> tuple[Tensor, Tensor | None]:
        """q_h (B, H, Tq, Dh) and, with rope, the rotated q^R_h (B, H, Tq, d_R) of `query`."""
        q = self._heads(self.q_proj(query))
        if self.rope is None:
            return q, None
        return q, self.rope(self._heads(self.q_rope_proj(query)), offset)

    def _heads(self, x: Tensor) -> Tensor:
        """(B, L, H * n) -> (B, H, L, n)."""
        b, length, _ = x.shape
        return x.view(b, length, self.n_heads, -1).transpose(1, 2)

    def _merged(self, heads: Tensor) -> Tensor:
        """(B, H, Tq, Dh) heads -> concatenated and projected, (B, Tq, D)."""
        b, _, tq, _ = heads.shape
        return self.out_proj(heads.transpose(1, 2).reshape(b, tq, -1))
