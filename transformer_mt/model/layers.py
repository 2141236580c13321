"""Feed-forward network and the encoder/decoder layers (Vaswani et al. 2017, sections 3.1, 3.3).

Each sub-layer is wrapped in a residual connection with LayerNorm, in one of two arrangements:
  post-norm (the paper):  x = LayerNorm(x + Dropout(Sublayer(x)))
  pre-norm:               x = x + Dropout(Sublayer(LayerNorm(x)))   (+ a final LayerNorm)
Pre-norm trains stably without long warm-up (Xiong et al. 2020); post-norm matches the paper
and Marian.

Shapes: B batch, S source length, T target length, D d_model, F d_ff.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from transformer_mt.config import ModelConfig
from transformer_mt.model.attention import (
    AttentionKernel,
    MultiHeadAttention,
    attention,
    causal_mask,
)
from transformer_mt.model.dropout import Dropout
from transformer_mt.model.kv_cache import KVCache
from transformer_mt.model.latent import LatentAttention
from transformer_mt.model.relative import RelativeEmbeddings
from transformer_mt.model.rope import RotaryEmbedding


class FeedForward(nn.Module):
    """Position-wise feed-forward network: fc2(dropout(act(fc1(x)))).

    act is relu, gelu (the exact erf form, F.gelu's default) or swish (x * sigmoid(x), SiLU).
    `swiglu` (Shazeer 2020) gates the hidden layer: fc1 produces 2F features, split into a
    value half and a SiLU-activated gate half.
    """

    def __init__(self, d_model: int, d_ff: int, activation: str, activation_dropout: float):
        super().__init__()
        self.activation = activation
        self.fc1 = nn.Linear(d_model, 2 * d_ff if activation == "swiglu" else d_ff)
        self.fc2 = nn.Linear(d_ff, d_model)
        self.dropout = Dropout(activation_dropout)
        self.fc1_activates = False  # fc1 applies the activation itself (`fuse_relu`)

    def forward(self, x: Tensor) -> Tensor:
        """(B, L, D) -> (B, L, D)."""
        h = self.fc1(x)  # (B, L, F) or (B, L, 2F)
        if not self.fc1_activates:
            h = self._activate(h)
        return self.fc2(self.dropout(h))

    def _activate(self, h: Tensor) -> Tensor:
        if self.activation == "swiglu":
            value, gate = h.chunk(2, dim=-1)
            return value * F.silu(gate)
        if self.activation == "gelu":
            return F.gelu(h)
        if self.activation == "swish":
            return F.silu(h)
        return F.relu(h)

    @property
    def can_fuse_relu(self) -> bool:
        """A ReLU network whose fc1 still returns the values before the ReLU (`fuse_relu`)."""
        return self.activation == "relu" and not self.fc1_activates

    def fuse_relu(self, fc1_relu: nn.Module) -> None:
        """Let `fc1_relu`, computing relu(fc1(x)) in one call, replace fc1 and the ReLU.

        For inference: a library that applies the ReLU to each block of the product while it
        is still in the caches saves a separate pass over the (B, L, F) hidden states, which in
        an encoder of 64 sentences of 40 tokens is 10 MB read and written per layer."""
        if not self.can_fuse_relu:
            raise ValueError(
                f"only a relu feed-forward layer fuses, once (activation {self.activation}, "
                f"fused {self.fc1_activates})"
            )
        self.fc1, self.fc1_activates = fc1_relu, True


def self_attention(
    cfg: ModelConfig, decoder: bool, kernel: AttentionKernel
) -> MultiHeadAttention | LatentAttention:
    """Self-attention with the configured key/value heads, rotary positions with `rope`,
    a layer's own relative position tables with `shaw`; latent attention with `mla` in the
    decoder (and with `mla_encoder` in the encoder too). `kernel` computes its attention."""
    if cfg.attention == "mla" and (decoder or cfg.mla_encoder):
        return LatentAttention(
            cfg.d_model,
            cfg.n_heads,
            cfg.kv_rank,
            cfg.latent_rope_dim,
            cfg.max_positions,
            cfg.attn_dropout,
            kernel,
        )
    head_dim = cfg.d_model // cfg.n_heads
    rope = RotaryEmbedding(head_dim, cfg.max_positions) if cfg.positions == "rope" else None
    relative = None
    if cfg.positions == "shaw":
        relative = RelativeEmbeddings(head_dim, cfg.max_relative_position, cfg.relative_values)
    return MultiHeadAttention(
        cfg.d_model,
        cfg.n_heads,
        cfg.attn_dropout,
        n_kv_heads=cfg.kv_heads,
        rope=rope,
        relative=relative,
        kernel=kernel,
    )


def _recorded(
    attn: MultiHeadAttention | LatentAttention,
    source: Tensor | None,
    mask: Tensor | None,
    weights: list[Tensor],
    attn_bias: Tensor | None = None,
) -> Callable[[Tensor], Tensor]:
    """Sub-layer h -> attn(h, source, mask, attn_bias) (source None: h itself) through plain
    math that appends its weights, (B, H, Tq, Tk), to `weights`."""

    def sublayer(h: Tensor) -> Tensor:
        keys_from = h if source is None else source
        out, w = attn(h, keys_from, mask, need_weights=True, attn_bias=attn_bias)
        weights.append(w)
        return out

    return sublayer


class _Residual(nn.Module):
    """What encoder and decoder layers share: the residual + LayerNorm wiring, and the
    self-attention sub-layer each of them starts with."""

    def __init__(self, cfg: ModelConfig, decoder: bool, kernel: AttentionKernel):
        super().__init__()
        self.pre_norm = cfg.pre_norm
        self.dropout = Dropout(cfg.dropout)
        self.self_attn = self_attention(cfg, decoder, kernel)
        self.self_attn_norm = nn.LayerNorm(cfg.d_model, eps=cfg.layer_norm_eps)

    def residual(self, x: Tensor, norm: nn.LayerNorm, sublayer: Callable[[Tensor], Tensor]):
        if self.pre_norm:
            return x + self.dropout(sublayer(norm(x)))
        return norm(x + self.dropout(sublayer(x)))


class EncoderLayer(_Residual):
    """Self-attention then feed-forward, each with residual + LayerNorm; `kernel` computes
    the attention."""

    def __init__(self, cfg: ModelConfig, kernel: AttentionKernel = attention):
        super().__init__(cfg, decoder=False, kernel=kernel)
        d = cfg.d_model
        self.ffn = FeedForward(d, cfg.d_ff, cfg.activation, cfg.activation_dropout)
        self.ffn_norm = nn.LayerNorm(d, eps=cfg.layer_norm_eps)

    def forward(
        self, x: Tensor, src_mask: Tensor | None, self_bias: Tensor | None = None
    ) -> Tensor:
        """x (B, S, D), src_mask (B, 1, 1 or S, S) bool keep-mask (real tokens, pattern),
        self_bias (H, S, S) float added to the self-attention scores (t5, alibi) or None.

        Returns:
            (B, S, D).
        """
        x = self.residual(
            x, self.self_attn_norm, lambda h: self.self_attn(h, h, src_mask, attn_bias=self_bias)[0]
        )
        return self.residual(x, self.ffn_norm, self.ffn)

    def forward_with_weights(
        self, x: Tensor, src_mask: Tensor | None, self_bias: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        """`forward` through plain-math attention: (B, S, D) and weights (B, H, S, S)."""
        weights: list[Tensor] = []
        x = self.residual(
            x, self.self_attn_norm, _recorded(self.self_attn, None, src_mask, weights, self_bias)
        )
        return self.residual(x, self.ffn_norm, self.ffn), weights[0]


class SelfAttentionCache(Protocol):
    """Cached self-attention keys and values of one layer (`KVCache`, or a paged cache), and
    the kernel that attends over them."""

    length: int | Tensor  # tokens cached: an int, or (B,) per row when rows differ

    def append(
        self, keys: Tensor, values: Tensor | None
    ) -> tuple[Tensor, Tensor | None, Tensor | None]:
        """Add (B, Hkv, t, Dh) keys/values; return all keys and values (B, Hkv, Tk, Dh) and a
        (B, 1, 1, Tk) bool keep-mask of the valid ones (None: all are valid). A cache may
        return the keys in a layout of its own instead (with one new position per row and
        values and mask None), which only its `kernel` reads. Values None: latent
        attention's keys-only cache (then always tensors)."""
        ...

    def kernel(self, own: AttentionKernel) -> AttentionKernel:
        """The kernel that attends over what `append` returned last: `own`, the layer's, for
        the tensors above."""
        ...


@dataclass(frozen=True)
class SourceRows:
    """Which source each decoding row reads, laid out for cross-attention: the rows of one
    source attend together, as one row with all their queries (one attention call per
    source, over one block of its keys).

    `group` G query slots per source; row b sits in slot `slots[b]` of the (N * G) slots, or,
    when `slots` is None, in slot b: the rows are already grouped, G consecutive rows per
    source in source order (beam search's rows, greedy search's one row per source).
    """

    group: int
    slots: Tensor | None  # (B,) long, or None: row b is slot b

    @classmethod
    def of(cls, sources: Tensor, n_sources: int) -> SourceRows:
        """The layout of rows reading sources `sources` (B,) long, each in [0, n_sources)."""
        rows = sources.numel()
        counts = torch.bincount(sources, minlength=n_sources)  # (N,) rows per source
        group = int(counts.max()) if rows else 1
        if group * n_sources == rows and bool((sources[1:] >= sources[:-1]).all()):
            return cls(group, None)
        # Row b's rank among the rows of its source, in row order.
        order = sources.argsort(stable=True)
        starts = counts.cumsum(0) - counts  # (N,) first sorted position of each source
        rank = torch.empty_like(sources)
        rank[order] = torch.arange(rows, device=sources.device) - starts[sources[order]]
        return cls(group, sources * group + rank)

    def source_of_rows(self, rows: int, device: torch.device) -> Tensor:
        """(rows,) long: the source each of the `rows` rows reads."""
        slots = torch.arange(rows, device=device) if self.slots is None else self.slots
        return slots // self.group


@dataclass
class LayerCache:
    """Incremental-decoding state of one decoder layer.

    self_attn grows by one step per call, one row per batch row; cross_attn holds the keys
    and values of the encoder memory, (N, Hkv, S, Dh) each, one row per source (not per
    batch row): computed on the first step and reused afterwards, read by each row through
    the source index the decoding step is given (`SourceRows`).
    """

    self_attn: SelfAttentionCache | None = None
    cross_attn: tuple[Tensor, Tensor] | None = None
    dtype: torch.dtype | None = None  # keys and values are stored in it; None: as computed

    def stored(self, keys: Tensor, values: Tensor | None) -> tuple[Tensor, Tensor | None]:
        """`keys`, `values` (None: keys only) in the cache's dtype (attention then runs in it,
        see `attend`)."""
        if self.dtype is None:
            return keys, values
        return keys.to(self.dtype), None if values is None else values.to(self.dtype)

    def stored_cross(self, keys: Tensor, values: Tensor) -> tuple[Tensor, Tensor]:
        """Cross-attention `keys`, `values` as `stored`, each (N, Hkv, S, Dh) in memory: one
        block per (source, head), which the batched products of transformer_mt/kernels.py read
        in place at every step (the projections' own layout, (N, S, Hkv, Dh), would be copied
        each time)."""
        keys, values = self.stored(keys, values)
        return keys.contiguous(), values.contiguous()

    def reorder(self, indices: Tensor, sources: Tensor | None = None) -> None:
        """Keep batch rows `indices` (B',) and, when given, cross-attention sources `sources`
        (N',) long (None: every source, where it is)."""
        if self.self_attn is not None:
            self.self_attn.reorder(indices)
        if self.cross_attn is not None and sources is not None:
            keys, values = self.cross_attn
            self.cross_attn = (keys.index_select(0, sources), values.index_select(0, sources))


class DecoderLayer(_Residual):
    """Masked self-attention, cross-attention over the encoder memory, then feed-forward;
    `kernel` computes both attentions."""

    def __init__(self, cfg: ModelConfig, kernel: AttentionKernel = attention):
        super().__init__(cfg, decoder=True, kernel=kernel)
        d = cfg.d_model
        self.cross_attn = MultiHeadAttention(
            d, cfg.n_heads, cfg.attn_dropout, n_kv_heads=cfg.kv_heads, kernel=kernel
        )
        self.cross_attn_norm = nn.LayerNorm(d, eps=cfg.layer_norm_eps)
        self.ffn = FeedForward(d, cfg.d_ff, cfg.activation, cfg.activation_dropout)
        self.ffn_norm = nn.LayerNorm(d, eps=cfg.layer_norm_eps)

    def forward(
        self,
        x: Tensor,
        memory: Tensor,
        src_mask: Tensor | None,
        cache: LayerCache | None = None,
        self_mask: Tensor | None = None,
        self_bias: Tensor | None = None,
        sources: SourceRows | None = None,
    ) -> Tensor:
        """Decode target states.

        Args:
            x: (B, T, D) target states; with a cache, only the new positions.
            memory: (B, S, D) encoder output; with a cache (N, S, D), one row per source.
            src_mask: (B, 1, 1, S) bool, True = real source token; with a cache (N, 1, 1, S).
            cache: None in training (causal attention over x); otherwise updated in place.
            self_mask: (T, past + T) bool keep-mask of a sparse pattern, or a flex BlockMask,
                causality included; None: plain causal attention.
            self_bias: (H, T, past + T) float added to the self-attention scores (t5, alibi)
                or None.
            sources: with a cache, which of the N sources each row of x reads.

        Returns:
            (B, T, D).
        """
        x = self.residual(
            x, self.self_attn_norm, lambda h: self._self_attend(h, cache, self_mask, self_bias)
        )
        x = self.residual(
            x,
            self.cross_attn_norm,
            lambda h: self._cross_attend(h, memory, src_mask, cache, sources),
        )
        return self.residual(x, self.ffn_norm, self.ffn)

    def forward_with_weights(
        self,
        x: Tensor,
        memory: Tensor,
        src_mask: Tensor | None,
        self_mask: Tensor,
        self_bias: Tensor | None = None,
    ) -> tuple[Tensor, Tensor, Tensor]:
        """Full (uncached) `forward` through plain-math attention.

        `self_mask` (T, T) must include causality. Returns the states (B, T, D), self-attention
        weights (B, H, T, T) and cross-attention weights (B, H, T, S).
        """
        weights: list[Tensor] = []
        x = self.residual(
            x, self.self_attn_norm, _recorded(self.self_attn, None, self_mask, weights, self_bias)
        )
        x = self.residual(
            x, self.cross_attn_norm, _recorded(self.cross_attn, memory, src_mask, weights)
        )
        return self.residual(x, self.ffn_norm, self.ffn), weights[0], weights[1]

    def _self_attend(
        self, h: Tensor, cache: LayerCache | None, mask: Tensor | None, bias: Tensor | None
    ) -> Tensor:
        if cache is None:
            # Right-padded targets: the causal triangle already hides trailing pads from every
            # real position and the loss ignores pad positions, so no padding mask is needed.
            if mask is not None:
                return self.self_attn(h, h, mask, attn_bias=bias)[0]
            return self.self_attn(h, h, is_causal=True, attn_bias=bias)[0]
        past = 0 if cache.self_attn is None else cache.self_attn.length
        # (B, Hkv, t, Dh) keys and values; latent attention: [c ‖ k^R] (B, 1, t, r + d_R), None
        keys, values = cache.stored(*self.self_attn.project_kv(h, past))
        if cache.self_attn is None:
            cache.self_attn = KVCache.empty(keys, keys_only=values is None)
        keys, values, valid = cache.self_attn.append(keys, values)  # (B, Hkv, past + t, Dh)
        # One new query sees the whole cache: no mask. Several need a lower-right triangle.
        if mask is None and h.size(1) > 1:
            mask = causal_mask(h.size(1), keys.size(2), h.device)
        if valid is not None:
            mask = valid if mask is None else mask & valid
        if bias is not None and bias.size(-1) < keys.size(2):
            # A paged cache's rows end in slots not yet written (masked): no bias for them.
            bias = F.pad(bias, (0, keys.size(2) - bias.size(-1)))
        kernel = cache.self_attn.kernel(self.self_attn.kernel)
        return self.self_attn.attend(
            h, keys, values, mask, offset=past, attn_bias=bias, kernel=kernel
        )

    def _cross_attend(
        self,
        h: Tensor,
        memory: Tensor,
        src_mask: Tensor | None,
        cache: LayerCache | None,
        sources: SourceRows | None,
    ) -> Tensor:
        if cache is None:
            return self.cross_attn(h, memory, src_mask)[0]
        if sources is None:
            raise ValueError("a cached decoding step needs the source of each row")
        if cache.cross_attn is None:
            cache.cross_attn = cache.stored_cross(*self.cross_attn.project_kv(memory))  # once
        keys, values = cache.cross_attn  # (N, Hkv, S, Dh): one row per source
        b, t, d = h.shape
        n, slots = keys.size(0), sources.slots
        if slots is not None:  # rows into their sources' query slots, the empty ones zero
            h = h.new_zeros(n * sources.group, t, d).index_copy_(0, slots, h)
        # The rows of one source (its beams) see the same keys: attend as one row with
        # G * t queries, one attention call for the whole group.
        out = self.cross_attn.attend(h.reshape(n, -1, d), keys, values, src_mask)
        out = out.reshape(-1, t, d)
        return out if slots is None else out.index_select(0, slots)
