"""Linear layers through oneDNN with their weights packed once, for float32 inference on CPUs
where that is not slower than torch's own product.

On x86, torch runs a float32 `nn.Linear` through MKL's sgemm. oneDNN, given a weight laid out
once for its kernels (`torch.ops.mkldnn._reorder_linear_weight`, what torch.compile's CPU
freezing uses), computes the same products; on 2-core AMD EPYCs with AVX-512 it ran the
decoding shapes 1.0-2.5x faster (the vocabulary projection most), on an AVX2-only one the
vocabulary projection 1.3-1.5x and the feed-forward one about as fast (docs/benchmarks.md,
docs/results.md). Which of the two is faster depends on the CPU, its BLAS and the shape, so
`packing_pays` times both for each shape of the model, once per machine (`timed_choices`), and
`pack_linears` is applied to the layers whose shape is not slower packed. The model's own
`nn.Linear` is the slow twin the tests compare against. The first layer of a ReLU feed-forward
network is packed with the ReLU applied inside the product (`FeedForward.fuse_relu`), timed
against the layer and a separate ReLU.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from transformer_mt import timed_choices
from transformer_mt.model.layers import FeedForward
from transformer_mt.timed_choices import TimedChoices

log = logging.getLogger(__name__)

# Measured speed-up from which inference switches to packed layers: any, as a shape timed
# alone understates what packing gains in a search, where the products run between other
# work (Zen 4, AVX-512: 256x256 timed 1.03-1.09x alone, yet packing it too made beam-5 steps
# ~10% and greedy ones ~8% faster than packing only the shapes from 1.1x; docs/results.md).
PACKING_SPEEDUP = 1.0
# Rows the packed layout is prepared for: about a decoding batch's hypotheses (64 sentences
# x 5 beams). Any number of rows runs; the layout only favours sizes near it.
ROWS_HINT = 320
# Multiply-adds of one timed product at most: fewer rows than ROWS_HINT for wide layers, so
# that timing a model's shapes (12 products each) stays within a few tenths of a second at
# load, vocabulary projections of 32k included.
MAX_TIMED_MACS = 2**27


# A linear layer as packing sees it: (in_features, out_features, relu), relu True for the
# first layer of a ReLU feed-forward network, which is packed with its ReLU.
Kind = tuple[int, int, bool]


class PackedLinear(nn.Module):
    """`nn.Linear`'s inference through oneDNN with a packed copy of its weight (frozen), and
    with `relu`, relu(linear(x)) with the ReLU applied inside the product.

    `dtype` bfloat16 packs the weight and bias in bfloat16 and computes each product in it
    (`quantize_bf16`): the input is rounded to bfloat16 and the output, rounded by the
    product, returned as float32 for the rest of the model."""

    def __init__(
        self,
        linear: nn.Linear,
        rows_hint: int = ROWS_HINT,
        relu: bool = False,
        dtype: torch.dtype = torch.float32,
    ):
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.dtype = dtype
        weight = linear.weight.detach().to(dtype)
        self.packed = torch.ops.mkldnn._reorder_linear_weight(weight, rows_hint)
        self.bias = None if linear.bias is None else linear.bias.detach().to(dtype)
        self.post_op = "relu" if relu else "none"

    def forward(self, x: Tensor) -> Tensor:
        if self.dtype == torch.float32:
            return on_bucketed_rows(self._product, x)
        return on_bucketed_rows(self._product, x.to(self.dtype)).to(x.dtype)

    def _product(self, rows: Tensor) -> Tensor:
        return torch.ops.mkldnn._linear_pointwise(
            rows, self.packed, self.bias, self.post_op, [], ""
        )


def packed_product(rows: Tensor, bias: Tensor | None) -> Callable[[Tensor], Tensor]:
    """`model.output_subset.Product` through oneDNN: `rows` packed once (a shortlist's rows of
    a batch, ~1-2 ms for 2,000 x 192), each step's product then 2.3x `F.linear`'s (0.39 against
    0.91 ms at 128 rows, Zen 5 EPYC, one thread).

    Each batch brings its own number of rows (the union of its sentences' ids), and oneDNN
    keeps kernels for every output width as it does for every row count (`on_bucketed_rows`):
    the rows are padded with zeros to `bucketed_rows` of their number too, and the padded
    columns of each product dropped."""
    width = rows.size(0)
    padding = (0, 0, 0, bucketed_rows(width) - width)
    packed = torch.ops.mkldnn._reorder_linear_weight(
        torch.constant_pad_nd(rows, padding), ROWS_HINT
    )
    bias = None if bias is None else torch.constant_pad_nd(bias, padding[2:])

    def project(x: Tensor) -> Tensor:
        out = on_bucketed_rows(
            lambda rows: torch.ops.mkldnn._linear_pointwise(rows, packed, bias, "none", [], ""), x
        )
        return out[:, :width]

    return project


def on_bucketed_rows(product: Callable[[Tensor], Tensor], x: Tensor) -> Tensor:
    """`product` of `x` (..., in) as rows (`product`: (N, in) -> (N, out)), computed on its
    N rows padded with zeros to `bucketed_rows(N)`; (..., out).

    The CPU libraries behind the packed products (oneDNN here, fbgemm and oneDNN for int8,
    `quantize`) build and keep kernels and buffers for each row count they meet: about 0.6 MB
    for a packed 256 x 8,000 projection, up to 2 GB over 400 row counts for its int8 twin
    through fbgemm. A beam search whose finished rows are pruned meets hundreds of row counts,
    and resident memory grew by gigabytes over a long `tmt translate` (docs/results.md,
    2026-12-05). Padded, a layer meets a few dozen. The padded rows' products are thrown away;
    the real rows' equal the unpadded product bit for bit where measured (every row count from
    1 to 400, AVX-512 EPYC; int8 too, since its dynamic scale always spans zero), but for
    oneDNN's int8 product of 1-5 rows on an Intel Xeon with AMX, whose last bit differs: a
    translation only ever sees the padded product, so it does not depend on which.
    """
    flat = x.reshape(-1, x.size(-1))
    rows = flat.size(0)
    padded = bucketed_rows(rows)
    if padded == rows:
        out = product(flat)
    else:
        out = product(torch.constant_pad_nd(flat, (0, 0, 0, padded - rows)))[:rows]
    return out.view(*x.shape[:-1], out.size(-1))


def bucketed_rows(rows: int) -> int:
    """`rows` rounded up to a multiple of 8 and of an eighth of its power of two: 1-127 rows
    in steps of 8, 128-255 in steps of 16, 256-511 of 32 and so on (8 row counts in each
    doubling past 64), so that rows past 64 are padded by less than 12.5%."""
    step = max(8, 1 << max(0, rows.bit_length() - 4))
    return -(-rows // step) * step


def packing_available() -> bool:
    """oneDNN is built into this torch and the packing ops exist."""
    return torch.backends.mkldnn.is_available() and hasattr(
        torch.ops.mkldnn, "_reorder_linear_weight"
    )


def packing_pays(linear: nn.Linear, repeats: int = 10, relu: bool = False) -> float:
    """How many times faster `linear`'s product (with `relu`, followed by a ReLU) over
    `timing_input` ran packed than as it is, best of `repeats` each (0.0: packing
    unavailable)."""
    if not packing_available():
        return 0.0
    x = timing_input(linear.in_features, linear.out_features)
    packed = PackedLinear(linear, relu=relu)
    with torch.inference_mode():
        plain = (lambda: F.relu(linear(x))) if relu else (lambda: linear(x))
        plain_time, packed_time = best_times([plain, lambda: packed(x)], repeats)
    return plain_time / packed_time


def timing_input(in_features: int, out_features: int) -> Tensor:
    """The input a layer's product is timed on: ROWS_HINT rows, or fewer (at least 16) where
    that would exceed MAX_TIMED_MACS; the same random rows every time."""
    rows = max(16, min(ROWS_HINT, MAX_TIMED_MACS // (in_features * out_features)))
    return torch.randn(rows, in_features, generator=torch.Generator().manual_seed(0))


def kind_label(kind: Kind) -> str:
    """How the logs name a kind of linear layer: "256x1024 relu"."""
    in_features, out_features, relu = kind
    return f"{in_features}x{out_features}{' relu' * relu}"


def _packable(model: nn.Module) -> list[tuple[nn.Module, str, nn.Linear, Kind]]:
    """(parent, attribute, layer, kind) of every float32 `nn.Linear` of `model` on the CPU."""
    return [
        (parent, name, child, (child.in_features, child.out_features, _has_relu(parent, name)))
        for parent in model.modules()
        for name, child in parent.named_children()
        if type(child) is nn.Linear
        and child.weight.dtype == torch.float32
        and child.weight.device.type == "cpu"
    ]


def _has_relu(parent: nn.Module, name: str) -> bool:
    """Whether layer `name` of `parent` is the first layer of a ReLU feed-forward network."""
    return isinstance(parent, FeedForward) and name == "fc1" and parent.can_fuse_relu


def pack_linears(
    model: nn.Module, kinds: set[Kind] | None = None, dtype: torch.dtype = torch.float32
) -> int:
    """Replace the float32 `nn.Linear`s of `model` (on the CPU, for inference only: the packed
    weights are copies) by `PackedLinear`s computing in `dtype`: all of them, or those whose
    `Kind` is in `kinds` (a feed-forward network's first layer with its ReLU); returns how
    many were replaced."""
    replaced = 0
    for parent, name, child, kind in _packable(model):
        if kinds is None or kind in kinds:
            if kind[2]:
                parent.fuse_relu(PackedLinear(child, relu=True, dtype=dtype))
            else:
                setattr(parent, name, PackedLinear(child, dtype=dtype))
            replaced += 1
    return replaced


def pack_where_it_pays(model: nn.Module, choices: TimedChoices | None = None) -> set[Kind]:
    """Pack the linear layers of `model` whose `Kind` runs faster packed on this machine;
    returns the kinds packed.

    Each kind is timed on its own (`packing_pays`): which library wins depends on the shape
    as well as the CPU (on an AVX2-only AMD EPYC, oneDNN ran the vocabulary projection 1.5x
    faster and the feed-forward one no faster than MKL). The two round differently, so the
    answer is timed once per machine and kept (`choices`, by default
    `timed_choices.machine_choices()`): a busy core at one load must not change the numbers.
    """
    choices = choices or timed_choices.machine_choices()
    layers = {kind: child for _, _, child, kind in reversed(_packable(model))}
    paying = {
        kind
        for kind in sorted(layers)
        if choices.choose(
            f"float32 linear {kind_label(kind)}",
            lambda kind=kind: (
                "packed" if _speedup(layers[kind], kind) >= PACKING_SPEEDUP else "plain"
            ),
            ("packed", "plain"),
        )
        == "packed"
    }
    if paying:
        n_packed = pack_linears(model, paying)
        log.info(
            "linear layers: %d through oneDNN with packed weights (%s)",
            n_packed,
            ", ".join(kind_label(kind) for kind in sorted(paying)),
        )
    return paying


def _speedup(layer: nn.Linear, kind: Kind) -> float:
    """`packing_pays` for a layer of `kind`, logged: the answer is kept for the machine."""
    speedup = packing_pays(layer, relu=kind[2])
    log.info("timed %s: %.2fx packed", kind_label(kind), speedup)
    return speedup


def best_times(runs: list, repeats: int) -> list[float]:
    """Best wall time of each of `runs` over `repeats` rounds that call them in turn, so that a
    machine slowing down or speeding up meanwhile affects all alike."""
    for run in runs:
        run()  # first call: kernel selection, page faults
    best = [float("inf")] * len(runs)
    for _ in range(repeats):
        for i, run in enumerate(runs):
            start = time.perf_counter()
            run()
            best[i] = min(best[i], time.perf_counter() - start)
    return best
