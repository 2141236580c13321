"""Which attention kernel runs where: a table from conditions to kernels, for the CPU.

Why this module exists: the model computes scaled dot-product attention through the kernel it
is built with (`build_model(..., kernel=)`, a `model.attention.AttentionKernel`), and its own,
`model.attention.attention`, is SDPA (flex for a sparse block mask) on every device. On the
CPU, at the sizes this project runs (a decoding step's one query per row, a beam's few
queries over its source, short bf16 training sequences), plainer forms were measured faster
than SDPA's kernel; which one wins depends on the device, dtype, whether a gradient is wanted,
the queries per row, the number of keys and whether the CPU computes bfloat16 natively (a fact
of one machine, `machine.native_bf16`). That choice lives here, in `TABLE`, each threshold next
to the measurement that set it, so that model/ reads as the paper's attention and imports no
facts of a machine. Loading for inference and training build the model with `attention` below.

`attention` takes and returns what `model.attention.attention` does: the first row of `TABLE`
whose condition holds runs (rows are CPU kernels for dense masks), and otherwise the model's
own. Each kernel is tested against SDPA, and the table against the same conditions written
as one if-chain (tests/test_kernels.py).

Shapes as in model/attention.py: B batch, H heads, Hkv key/value heads, Tq/Tk query/key
length, Dh head size.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch
from torch import Tensor

from transformer_mt.machine import native_bf16
from transformer_mt.model.attention import BlockMask, attention_with_weights, dense_mask
from transformer_mt.model.attention import attention as model_attention

# Longest key sequence for which bf16/fp16 training attention on the CPU runs as plain math:
# with SDPA's CPU flash kernel a bf16 forward and backward took ~5x the math's time at 16 keys,
# ~2x at 64, the same at 128 and a third at 256 (`benchmark.py attention --parts training`;
# docs/benchmarks.md) on a CPU with native bf16 (AMX). Where bf16 is emulated the crossover was
# not measured, so SDPA's own choice stands there.
CPU_MATH_MAX_KEYS = 128

# The most elements of `_one_query`'s products of queries and keys, (B, T, H, Dh): 16 MiB of
# float32. Beyond it the products no longer stay in the caches and SDPA, which makes none, is
# faster (320 rows x 4 heads of 64: 0.9x SDPA's time at 40 keys, 1.2x at 80, 4.2x at 160).
ONE_QUERY_MAX_ELEMENTS = 2**22

# The most queries per (row, key head) that `attention` multiplies as batched products: a beam
# search's K beams of one source, or a server's slots of one source. Beyond, SDPA's blocked
# kernel is the better fit. (One cross-attention layer, 64 sources of 20 tokens, 4 heads of
# 64, Zen 4: 409 against 527 µs through SDPA with 5 queries a source, 135 against 337 through
# `_one_query` with one; docs/results.md.)
BATCHED_MAX_QUERIES = 32


class Call(NamedTuple):
    """The arguments of one `attention` call, as the table's conditions and kernels read them:
    those of `model.attention.attention`, in its order and with its defaults."""

    query: Tensor  # (B, H, Tq, Dh)
    key: Tensor  # (B, Hkv, Tk, Dh)
    value: Tensor  # (B, Hkv, Tk, Dv)
    mask: Tensor | BlockMask | None = None
    is_causal: bool = False
    dropout_p: float = 0.0
    attn_bias: Tensor | None = None

    @property
    def plain(self) -> bool:
        """No dropout, causal triangle or bias: what the products below leave out."""
        return self.dropout_p == 0.0 and not self.is_causal and self.attn_bias is None

    @property
    def wants_grad(self) -> bool:
        return torch.is_grad_enabled() and self.query.requires_grad


# --- the conditions ------------------------------------------------------------------------


def _batched_products_fit(call: Call) -> bool:
    """Float32 inference, no dropout, causal triangle or bias, at most BATCHED_MAX_QUERIES
    queries per (row, key head), and keys and values contiguous, (B, Hkv, Tk, Dh) in memory,
    so that the products read them in place (a decoding cache's cross-attention,
    `LayerCache.stored_cross`)."""
    query, key, value = call.query, call.key, call.value
    queries = query.size(-2) * (query.size(-3) // key.size(-3))
    return (
        call.plain
        and not call.wants_grad
        and query.dtype == key.dtype == value.dtype == torch.float32
        and queries <= BATCHED_MAX_QUERIES
        and key.is_contiguous()
        and value.is_contiguous()
    )


def _math_fits(call: Call) -> bool:
    """With dropout (SDPA takes its math path then anyway, with a bernoulli_ mask that cost 2x
    ours in a bf16 forward and backward), or for reduced-precision training on keys no longer
    than CPU_MATH_MAX_KEYS where bf16 is native."""
    if call.dropout_p > 0.0:
        return True
    reduced = call.query.dtype in (torch.bfloat16, torch.float16)
    short = call.key.size(-2) <= CPU_MATH_MAX_KEYS
    return call.wants_grad and reduced and short and _native_bf16_cpu()


def _one_query_fits(call: Call) -> bool:
    """One query per row (a decoding step), no dropout, causal triangle or bias, products of
    at most ONE_QUERY_MAX_ELEMENTS."""
    small = call.query.numel() * call.key.size(-2) <= ONE_QUERY_MAX_ELEMENTS
    return call.plain and small and call.query.size(-2) == 1


def _native_bf16_cpu() -> bool:
    """CPU_MATH_MAX_KEYS was measured where bf16 is native; elsewhere SDPA keeps its default.
    A constant to torch.compile once `constant_for_compile` has run."""
    return _native_bf16_known()


def constant_for_compile() -> None:
    """Mark the machine probe a constant to torch.compile (`train.compile`), which would
    otherwise trace it behind its cache at every compiled step, warning that it ignores the
    cache. Called where a step is compiled: marking it here at import would import Dynamo,
    a second or more at the start of every command that loads a model."""
    torch.compiler.assume_constant_result(_native_bf16_cpu)


@functools.cache
def _native_bf16_known() -> bool:
    return bool(native_bf16().value)


# --- the kernels: each returns what `attention` returns for the call -----------------------


def _batched_products(call: Call) -> Tensor:
    """Attention as two batched matrix products, one pair per (row, key head), the G query
    heads of a key head and their queries stacked as the rows of one product.

    SDPA's CPU kernel packs its operands for every small block it multiplies; with a few
    queries per row that packing costs more than the products. Keys and values contiguous,
    no dropout, causal triangle or bias (`_batched_products_fit`); a query row with no key it
    may attend to gives zeros.
    """
    query, key, value, mask = call.query, call.key, call.value, call.mask
    b, h, tq, d = query.shape
    hkv, tk, dv = key.size(1), key.size(2), value.size(-1)
    rows = (h // hkv) * tq  # queries per (row, key head)
    q = (query / math.sqrt(d)).reshape(b * hkv, rows, d)
    scores = torch.bmm(q, key.view(b * hkv, tk, d).transpose(1, 2)).view(b, hkv, rows, tk)
    if mask is not None:
        keep = mask.expand(b, h, tq, tk).reshape(b, hkv, rows, tk)
        scores.masked_fill_(~keep, float("-inf"))
    weights = torch.softmax(scores, dim=-1).nan_to_num_(0.0)  # no key: NaN -> zero weights
    out = torch.bmm(weights.view(b * hkv, rows, tk), value.view(b * hkv, tk, dv))
    return out.view(b, h, tq, dv)


def _math(call: Call) -> Tensor:
    """The plain math (`attention_with_weights`), with model/dropout.py's dropout mask."""
    query, key, value, mask, is_causal, dropout_p, attn_bias = call
    dense = dense_mask(query, key, mask, is_causal, attn_bias)
    out, _ = attention_with_weights(
        query, key, value, dense.mask, dense.is_causal, attn_bias, dropout_p
    )
    return dense.zero_empty_rows(out)


def _one_query(call: Call) -> Tensor:
    """Attention of one query per (row, head) as elementwise products and sums over the keys.

    SDPA's CPU kernel runs two small matrix products per (row, head): at a decoding step's
    sizes (320 rows x 4 heads, 20 keys) its per-pair cost outweighs the arithmetic, and with
    the quickstart model beam-5 steps took 5% longer, greedy ones 7-10%; with an int8 model's
    bfloat16 cache 11-16% and 21-24% (docs/results.md). Here each step is one vectorised pass
    over all rows and heads, in the keys' own layout (a decoding cache is (B, T, Hkv, Dh) in
    memory), in float32 at least whatever the cache stores. Tq = 1, no dropout, causal
    triangle or bias (`_one_query_fits`). Values may have another head size than queries and
    keys (latent attention).
    """
    query, key, value = call.query, call.key, call.value
    dense = dense_mask(query, key, call.mask, call.is_causal, call.attn_bias)
    mask = dense.mask  # every query row has a key it may attend to
    b, h, _, d = query.shape
    hkv, t = key.size(1), key.size(2)
    wide = torch.promote_types(query.dtype, torch.float32)
    q = query.to(wide).reshape(b, 1, hkv, h // hkv, d)  # (B, 1, Hkv, G, Dh): G heads per key head
    scores = (q * key.transpose(1, 2).unsqueeze(3)).sum(-1) / math.sqrt(d)  # (B, T, Hkv, G)
    if mask is not None:
        keep = mask.expand(b, h, 1, t)[:, :, 0].transpose(1, 2).reshape(b, t, hkv, h // hkv)
        scores = scores.masked_fill_(~keep, float("-inf"))
    weights = torch.softmax(scores, dim=1)  # over the keys
    out = (weights.unsqueeze(-1) * value.transpose(1, 2).unsqueeze(3)).sum(1)  # (B, Hkv, G, Dv)
    return dense.zero_empty_rows(out.reshape(b, h, 1, value.size(-1)).to(query.dtype))


# --- the table -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Kernel:
    """One row of `TABLE`: a kernel, and the condition on the call under which it runs."""

    name: str
    fits: Callable[[Call], bool]
    run: Callable[[Call], Tensor]


# Rows in order, the first whose condition holds runs; all are CPU kernels for a dense mask
# (or none).
TABLE: tuple[Kernel, ...] = (
    Kernel("batched_products", _batched_products_fit, _batched_products),
    Kernel("math", _math_fits, _math),
    Kernel("one_query", _one_query_fits, _one_query),
)

# Everything else: SDPA (or flex for a block mask), as every other device runs it.
MODEL = Kernel("model", fits=lambda call: True, run=lambda call: model_attention(*call))


def choose(call: Call) -> Kernel:
    """The row of `TABLE` that `attention` runs for `call`, or `MODEL`."""
    if call.query.device.type == "cpu" and (call.mask is None or isinstance(call.mask, Tensor)):
        for row in TABLE:
            if row.fits(call):
                return row
    return MODEL


def attention(*args: Any, **kwargs: Any) -> Tensor:
    """`model.attention.attention` through the kernel `choose` picks: the same arguments (the
    fields of `Call`, which names them once and refuses others) and the same result to within
    rounding."""
    call = Call(*args, **kwargs)
    return choose(call).run(call)
