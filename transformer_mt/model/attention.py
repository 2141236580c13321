"""Scaled dot-product and multi-head attention.

Vaswani et al. (2017), section 3.2: Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V, run in
parallel over H heads whose outputs are concatenated and projected.

Grouped-query attention (Ainslie et al. 2023) gives keys and values Hkv <= H heads, each
shared by H / Hkv consecutive query heads (Hkv = 1: multi-query, Shazeer 2019); the cache holds
only the Hkv heads.

Shape legend: B batch, S source length, T target length, Tq/Tk query/key length, D d_model,
H heads, Hkv key/value heads, Dh head size (D / H), F feed-forward size, V vocabulary,
K beam size.

One mask convention everywhere: a boolean tensor, True = this query may attend to this key,
broadcastable to (B, H, Tq, Tk) (the convention of `F.scaled_dot_product_attention`).
Relative positions (model/relative.py) come as a separate float `attn_bias`, added to the
scaled scores: softmax(Q K^T / sqrt(Dh) + bias) V.

The attention modules compute that through a kernel chosen outside them (`AttentionKernel`):
the one they were built with, `attention` (SDPA, flex for sparse patterns) unless the caller
passes another, such as the CPU kernels that transformer_mt/kernels.py chooses by a table;
or, for one call, the kernel a decoding cache gives for the keys it holds
(`SelfAttentionCache.kernel`). `attention_with_weights`, the plain math, is the reference
every kernel is tested against.
"""

from __future__ import annotations

import functools
import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from transformer_mt.model.dropout import dropout
from transformer_mt.model.relative import RelativeEmbeddings
from transformer_mt.model.rope import RotaryEmbedding

try:  # torch >= 2.5
    from torch.nn.attention.flex_attention import BlockMask, flex_attention
except ImportError:  # pragma: no cover - an older torch has no flex backend (config refuses it)
    BlockMask = flex_attention = None


def padding_mask(ids: Tensor, pad_id: int) -> Tensor:
    """Keep-mask for keys: (B, L) token ids -> (B, 1, 1, L) bool, True at real tokens."""
    return (ids != pad_id)[:, None, None, :]


def causal_mask(n_queries: int, n_keys: int, device: torch.device | None = None) -> Tensor:
    """Lower-right aligned causal keep-mask, (Tq, Tk) bool.

    Query i (the last Tq positions of a length-Tk sequence) may attend to key j iff
    j <= (Tk - Tq) + i. With Tq == Tk this is the usual lower triangle; with a cache holding
    Tk - Tq past tokens it still lets every new query see the whole past, which SDPA's
    `is_causal=True` (anchored top-left) would not.
    """
    offset = n_keys - n_queries
    rows = torch.arange(n_queries, device=device)[:, None]
    cols = torch.arange(n_keys, device=device)[None, :]
    return cols <= rows + offset


def _rows_with_keys(mask: Tensor | None) -> Tensor | None:
    """(…, Tq, 1) bool: False where a query row has no key to attend to (would give NaN).

    None when there is no mask, or on the CPU when every row has a key (the usual case: only
    an empty source has none): asking costs no device sync there, and it spares `attention`
    a pass over its output (an encoder layer's for 64 sentences of 40 tokens: ~3 ms). Not
    asked under torch.compile, where the answer would break the graph."""
    if mask is None:
        return None
    keep = mask.any(dim=-1, keepdim=True)
    eager_cpu = keep.device.type == "cpu" and not torch.compiler.is_compiling()
    return None if eager_cpu and bool(keep.all()) else keep


# What the attention modules call for softmax(Q K^T / sqrt(Dh) + attn_bias) V: a function with
# the arguments and result of `attention`, which is the model's own. A model is built with one
# (`build_model(..., kernel=)`); transformer_mt/kernels.py offers CPU kernels chosen by a table.
AttentionKernel = Callable[..., Tensor]


def attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    mask: Tensor | BlockMask | None = None,
    is_causal: bool = False,
    dropout_p: float = 0.0,
    attn_bias: Tensor | None = None,
) -> Tensor:
    """Scaled dot-product attention through `F.scaled_dot_product_attention` or flex attention.

    SDPA picks the flash or memory-efficient kernel on GPU when the inputs allow it. A
    `BlockMask` (sparse patterns, `model.attention_backend: flex`) goes to flex_attention
    instead, which skips fully hidden blocks.

    Args:
        query: (B, H, Tq, Dh).
        key, value: (B, Hkv, Tk, Dh); Hkv divides H, each key head serves H / Hkv query heads.
        mask: bool, broadcastable to (B, H, Tq, Tk), True = may attend; a flex `BlockMask`
            (causality included; `is_causal` must be False); or None.
        is_causal: apply a top-left causal triangle (only valid when Tq == Tk).
        dropout_p: dropout on the attention weights (pass 0.0 outside training).
        attn_bias: float, broadcastable to (B, H, Tq, Tk), added to the scaled scores
            (relative positions); with a `BlockMask`, through flex's `score_mod`.

    Returns:
        (B, H, Tq, Dh). A query row whose keys are all masked gives zeros, not NaN.
    """
    if BlockMask is not None and isinstance(mask, BlockMask):
        return _flex(query, key, value, mask, dropout_p, attn_bias)
    dense = dense_mask(query, key, mask, is_causal, attn_bias)
    keep = dense.mask if attn_bias is None else _biased_mask(dense.mask, attn_bias, query.dtype)
    gqa = key.size(-3) != query.size(-3)
    out = F.scaled_dot_product_attention(
        query,
        key,
        value,
        attn_mask=keep,
        dropout_p=dropout_p,
        is_causal=dense.is_causal,
        enable_gqa=gqa,
    )
    return dense.zero_empty_rows(out)


@dataclass(frozen=True)
class DenseMask:
    """A dense mask as SDPA wants it (`dense_mask`), and the query rows to zero afterwards."""

    mask: Tensor | None  # bool keep-mask, broadcastable to (B, H, Tq, Tk)
    is_causal: bool
    keep_rows: Tensor | None  # (…, Tq, 1) bool, False at rows with no key; None: none such

    def zero_empty_rows(self, out: Tensor) -> Tensor:
        """`out` (…, Tq, Dv) with the rows that had no key to attend to set to zero."""
        return out if self.keep_rows is None else out.masked_fill(~self.keep_rows, 0.0)


def dense_mask(
    query: Tensor, key: Tensor, mask: Tensor | None, is_causal: bool, attn_bias: Tensor | None
) -> DenseMask:
    """`attention`'s dense mask arguments as a kernel with SDPA's conventions takes them:
    causality folded into the mask when a bias comes with it (SDPA takes no attn_mask with
    is_causal), and query rows with no key to attend to (NaN in SDPA) let attend everywhere,
    to be zeroed after the kernel (`DenseMask.zero_empty_rows`)."""
    if attn_bias is not None and is_causal:
        causal = causal_mask(query.size(-2), key.size(-2), query.device)
        mask, is_causal = (causal if mask is None else mask & causal), False
    keep_rows = _rows_with_keys(mask)
    if keep_rows is not None:
        mask = mask | ~keep_rows  # finite everywhere; the rows are zeroed afterwards
    return DenseMask(mask, is_causal, keep_rows)


def _biased_mask(mask: Tensor | None, attn_bias: Tensor, dtype: torch.dtype) -> Tensor:
    """Keep-mask and bias as one float mask for SDPA: the bias where kept, -inf where not."""
    attn_bias = attn_bias.to(dtype)
    return attn_bias if mask is None else torch.where(mask, attn_bias, float("-inf"))


@functools.cache
def _compiled_flex() -> Callable[..., Tensor]:
    """One compiled flex_attention per process (compiling is what makes it fast)."""
    return torch.compile(flex_attention, dynamic=True)


def _flex(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    block_mask: BlockMask,
    dropout_p: float,
    attn_bias: Tensor | None = None,
) -> Tensor:
    """flex_attention, compiled on CUDA (its only fast form); eager elsewhere.

    Eager flex computes the dense scores (it is the reference form, for tests on CPU);
    compiling on the CPU works too but takes ~25 s per shape, so it is left to callers that want it
    (scripts/bench_attention.py). Flex has no attention dropout: the config refuses
    attn_dropout > 0 with this backend. Rows with no visible key come out as zeros.
    `attn_bias` (relative positions) is added to each score by a `score_mod`.
    """
    if dropout_p > 0.0:
        raise ValueError("flex attention has no attention dropout (model.attn_dropout must be 0)")
    gqa = key.size(-3) != query.size(-3)
    score_mod = None if attn_bias is None else _bias_score_mod(attn_bias, query, key)
    run = _compiled_flex() if query.is_cuda else flex_attention
    with warnings.catch_warnings():  # "flex_attention called without torch.compile"
        warnings.simplefilter("ignore", UserWarning)
        return run(query, key, value, score_mod=score_mod, block_mask=block_mask, enable_gqa=gqa)


def _bias_score_mod(attn_bias: Tensor, query: Tensor, key: Tensor) -> Callable[..., Tensor]:
    """flex's `score_mod` adding `attn_bias` (broadcastable to (B, H, Tq, Tk)) to the scaled
    score of each (batch, head, query, key).

    The bias is read from the tensor the stack computed once for all its layers (t5, alibi)
    or the layer for its queries (shaw), rather than recomputed from the indices per layer:
    one definition of each bias for both backends. flex reads only the blocks its mask keeps.
    """
    b, h, tq, _ = query.shape
    bias = attn_bias.to(query.dtype).expand(b, h, tq, key.size(-2))

    def add_bias(score: Tensor, batch: Tensor, head: Tensor, q_idx: Tensor, kv_idx: Tensor):
        return score + bias[batch, head, q_idx, kv_idx]

    return add_bias


def attention_with_weights(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    mask: Tensor | None = None,
    is_causal: bool = False,
    attn_bias: Tensor | None = None,
    dropout_p: float = 0.0,
) -> tuple[Tensor, Tensor]:
    """Plain-math attention that also returns the weights: the oracle for `attention`.

    Used for alignments and attention maps, and by Shaw's relative values, whose term needs
    the weights (`MultiHeadAttention.attend_with_weights`); otherwise never in training or beam
    search. Grouped keys and values, (B, Hkv, Tk, Dh), are repeated up to H heads here.
    Arguments as in `attention`.

    Returns:
        output (B, H, Tq, Dh) and the weights it used (B, H, Tq, Tk), after dropout; an
        all-masked row has zero weights.
    """
    weights, value = _softmax_weights(query, key, value, mask, is_causal, attn_bias)
    weights = dropout(weights.to(value.dtype), dropout_p, training=True)
    return weights @ value, weights


def _softmax_weights(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    mask: Tensor | None,
    is_causal: bool,
    attn_bias: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """softmax(Q K^T / sqrt(Dh) + attn_bias), (B, H, Tq, Tk), zero on all-masked rows, in
    float32 or wider; and the values repeated up to H heads."""
    group = query.size(-3) // key.size(-3)
    if group > 1:  # repeat_interleave copies even one repeat: two copies per call in training
        key, value = key.repeat_interleave(group, -3), value.repeat_interleave(group, -3)
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))  # (B, H, Tq, Tk)
    if attn_bias is not None:
        scores = scores + attn_bias
    if is_causal:
        causal = causal_mask(scores.size(-2), scores.size(-1), scores.device)
        mask = causal if mask is None else mask & causal
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    wide = torch.promote_types(scores.dtype, torch.float32)
    return torch.softmax(scores.to(wide), dim=-1).nan_to_num(0.0), value


class MultiHeadAttention(nn.Module):
    """Multi-head attention for all three uses: encoder self-, decoder masked self-, cross-.

    Queries come from one stream, keys and values from another (the same tensor for
    self-attention, the encoder memory for cross-attention). Separate q/k/v/out projections
    keep weight copies from reference implementations obvious.

    `n_kv_heads` (default `n_heads`) below `n_heads` makes k_proj/v_proj smaller: grouped-query
    attention. `rope`, for self-attention only, rotates queries and keys by their positions
    (`offset` is the position of the first one); `relative`, for self-attention only, adds
    Shaw et al.'s relative position terms (model/relative.py). `kernel` computes the heads'
    attention (`attention` unless the caller chooses another; `attend` takes another for one
    call, such as a decoding cache's); when the weights are wanted, `attend_with_weights` runs
    the plain math instead.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        dropout: float = 0.0,
        bias: bool = True,
        n_kv_heads: int | None = None,
        rope: RotaryEmbedding | None = None,
        relative: RelativeEmbeddings | None = None,
        kernel: AttentionKernel = attention,
    ):
        super().__init__()
        n_kv_heads = n_heads if n_kv_heads is None else n_kv_heads
        if d_model % n_heads or n_heads % n_kv_heads:
            raise ValueError(
                f"need d_model={d_model} divisible by n_heads={n_heads}, "
                f"divisible by n_kv_heads={n_kv_heads}"
            )
        self.n_heads = n_heads
        self.n_kv_heads = n_kv_heads
        self.head_dim = d_model // n_heads
        self.dropout = dropout
        self.rope = rope
        self.relative = relative
        self.kernel = kernel
        self.q_proj = nn.Linear(d_model, d_model, bias=bias)
        self.k_proj = nn.Linear(d_model, n_kv_heads * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(d_model, n_kv_heads * self.head_dim, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)

    def split_heads(self, x: Tensor) -> Tensor:
        """(B, L, heads * Dh) -> (B, heads, L, Dh), heads = H (queries) or Hkv (keys, values)."""
        b, length, _ = x.shape
        return x.view(b, length, -1, self.head_dim).transpose(1, 2)

    def project_kv(self, source: Tensor, offset: int = 0) -> tuple[Tensor, Tensor]:
        """Keys and values of `source` (B, Tk, D), each (B, Hkv, Tk, Dh); rotated keys with rope."""
        keys = self.split_heads(self.k_proj(source))  # (B, Hkv, Tk, Dh)
        if self.rope is not None:
            keys = self.rope(keys, offset)
        return keys, self.split_heads(self.v_proj(source))

    def attend(
        self,
        query: Tensor,
        keys: Tensor,
        values: Tensor | None,
        mask: Tensor | None = None,
        is_causal: bool = False,
        offset: int | Tensor = 0,
        attn_bias: Tensor | None = None,
        kernel: AttentionKernel | None = None,
    ) -> Tensor:
        """Attend from `query` (B, Tq, D) to projected `keys`/`values` (B, Hkv, Tk, Dh).

        `offset` is the position of the first query (rope and relative; the cache length when
        decoding). `attn_bias`, (H or B, H, Tq, Tk) float, is added to the scaled scores.
        `kernel` computes the heads' attention for this call (None: the module's own); keys and
        values are whatever it reads (a decoding cache's kernel may read its own layout).
        Attention runs in the dtype of `keys`, which a decoding cache may store in a narrower
        type than the projections compute in (`LayerCache.dtype`); the output is cast back.
        Shaw's relative values need the weights, so with them `attend_with_weights` runs.

        Returns:
            output (B, Tq, D).
        """
        if self._values_need_weights:
            out, _ = self.attend_with_weights(
                query, keys, values, mask, is_causal, offset, attn_bias
            )
            return out
        # 1) project the queries, (B, H, Tq, Dh), into the keys' dtype
        q, dtype, attn_bias = self._queries(query, keys, offset, attn_bias)
        # 2) the kernel, every head at once: (B, H, Tq, Dh)
        kernel = self.kernel if kernel is None else kernel
        out = kernel(q, keys, values, mask, is_causal, self._dropout_p, attn_bias)
        # 3) merge the heads and project: (B, Tq, D)
        return self.merge_heads(out.to(dtype))

    def attend_with_weights(
        self,
        query: Tensor,
        keys: Tensor,
        values: Tensor,
        mask: Tensor | None = None,
        is_causal: bool = False,
        offset: int | Tensor = 0,
        attn_bias: Tensor | None = None,
    ) -> tuple[Tensor, Tensor]:
        """`attend` through the plain math (`attention_with_weights`), which gives the weights
        too: for alignments and attention maps (`forward` with `need_weights`), and for Shaw's
        relative values, whose term sum_j α_ij a^V_ij needs them. Arguments as `attend`'s.

        Returns:
            output (B, Tq, D) and weights (B, H, Tq, Tk).
        """
        # 1) project the queries, (B, H, Tq, Dh), into the keys' dtype
        q, dtype, attn_bias = self._queries(query, keys, offset, attn_bias)
        # 2) the plain math, every head at once: (B, H, Tq, Dh), and the weights
        p = self._dropout_p
        out, weights = attention_with_weights(q, keys, values, mask, is_causal, attn_bias, p)
        if self._values_need_weights:
            out = out + self.relative.value_term(weights, offset)
        # 3) merge the heads and project: (B, Tq, D)
        return self.merge_heads(out.to(dtype)), weights

    def _queries(
        self, query: Tensor, keys: Tensor, offset: int | Tensor, attn_bias: Tensor | None
    ) -> tuple[Tensor, torch.dtype, Tensor | None]:
        """Step 1 of attending: the heads of `query` (B, Tq, D), (B, H, Tq, Dh), rotated with
        rope and cast to the dtype of `keys`; the projections' dtype, which the output is cast
        back to; and `attn_bias` with Shaw's relative key term added (q_i · a^K_ij / sqrt(Dh):
        a bias that depends on the query)."""
        q = self.split_heads(self.q_proj(query))
        if self.rope is not None:
            q = self.rope(q, offset)
        dtype, q = q.dtype, q.to(keys.dtype)
        if self.relative is not None:
            scores = self.relative.scores(q, offset, keys.size(-2))  # (B, H, Tq, Tk)
            attn_bias = scores if attn_bias is None else attn_bias + scores
        return q, dtype, attn_bias

    @property
    def _dropout_p(self) -> float:
        """Dropout on the attention weights: only while training."""
        return self.dropout if self.training else 0.0

    @property
    def _values_need_weights(self) -> bool:
        """Whether Shaw's relative values take part: their term needs the attention weights."""
        return self.relative is not None and self.relative.value_embeddings is not None

    def merge_heads(self, heads: Tensor) -> Tensor:
        """(B, H, Tq, Dh) heads -> concatenated (B, Tq, H * Dh) and projected, (B, Tq, D)."""
        b, _, tq, _ = heads.shape
        return self.out_proj(heads.transpose(1, 2).reshape(b, tq, self.n_heads * self.head_dim))

    def forward(
        self,
        query: Tensor,
        source: Tensor,
        mask: Tensor | None = None,
        is_causal: bool = False,
        need_weights: bool = False,
        attn_bias: Tensor | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """Attention of `query` (B, Tq, D) over `source` (B, Tk, D); see `attend`.

        Returns:
            output (B, Tq, D) and, with `need_weights`, weights (B, H, Tq, Tk), else None.
        """
        keys, values = self.project_kv(source)
        if need_weights:
            return self.attend_with_weights(query, keys, values, mask, is_causal, 0, attn_bias)
        return self.attend(query, keys, values, mask, is_causal, attn_bias=attn_bias), None
