"""Linear layers through oneDNN with their weights packed once, for float32 inference on CPUs
where that is faster than torch's own product.

On x86, torch runs a float32 `nn.Linear` through MKL's sgemm. oneDNN, given a weight laid out
once for its kernels (`torch.ops.mkldnn._reorder_linear_weight`, what torch.compile's CPU
freezing uses), computes the same products; on a 2-core AMD EPYC with AVX-512 it ran the
decoding shapes 2-2.5x faster (docs/benchmarks.md). Which of the two is faster depends on the
CPU and its BLAS, so `packing_pays` times both on this machine, and `pack_linears` is applied
only where it pays. The model's own `nn.Linear` is the slow twin the tests compare against.
"""

from __future__ import annotations

import logging
import time

import torch
from torch import Tensor, nn

from transformer_mt.model import Seq2SeqTransformer

log = logging.getLogger(__name__)

# Measured speed-up from which inference switches to packed layers: below it the difference
# is within a measurement's noise.
PACKING_SPEEDUP = 1.2
# Rows the packed layout is prepared for: about a decoding batch's hypotheses (64 sentences
# x 5 beams). Any number of rows runs; the layout only favours sizes near it.
ROWS_HINT = 320


class PackedLinear(nn.Module):
    """`nn.Linear`'s inference through oneDNN with a packed copy of its weight (frozen)."""

    def __init__(self, linear: nn.Linear, rows_hint: int = ROWS_HINT):
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        weight = linear.weight.detach()
        self.packed = torch.ops.mkldnn._reorder_linear_weight(weight, rows_hint)
        self.bias = None if linear.bias is None else linear.bias.detach()

    def forward(self, x: Tensor) -> Tensor:
        flat = x.reshape(-1, self.in_features)
        out = torch.ops.mkldnn._linear_pointwise(flat, self.packed, self.bias, "none", [], "")
        return out.view(*x.shape[:-1], self.out_features)


def packing_available() -> bool:
    """oneDNN is built into this torch and the packing ops exist."""
    return torch.backends.mkldnn.is_available() and hasattr(
        torch.ops.mkldnn, "_reorder_linear_weight"
    )


def packing_pays(d_model: int, d_ff: int, repeats: int = 5) -> float:
    """How many times faster a packed (ROWS_HINT x d_model) @ (d_model x d_ff) product ran
    than `F.linear` here, best of `repeats` each (0.0: packing unavailable). About 10 ms."""
    if not packing_available():
        return 0.0
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(ROWS_HINT, d_model, generator=generator)
    linear = nn.Linear(d_model, d_ff)
    packed = PackedLinear(linear)
    with torch.inference_mode():
        plain = _best_time(lambda: linear(x), repeats)
        fast = _best_time(lambda: packed(x), repeats)
    return plain / fast


def pack_linears(model: nn.Module) -> int:
    """Replace every float32 `nn.Linear` of `model` (on the CPU, for inference only: the
    packed weights are copies) by a `PackedLinear`; returns how many were replaced."""
    targets = [
        (parent, name, child)
        for parent in model.modules()
        for name, child in parent.named_children()
        if type(child) is nn.Linear
        and child.weight.dtype == torch.float32
        and child.weight.device.type == "cpu"
    ]
    for parent, name, child in targets:
        setattr(parent, name, PackedLinear(child))
    return len(targets)


def pack_where_it_pays(model: Seq2SeqTransformer) -> float:
    """Pack `model`'s linear layers when `packing_pays` at least PACKING_SPEEDUP at its
    feed-forward shape; returns the measured speed-up."""
    speedup = packing_pays(model.cfg.d_model, model.cfg.d_ff)
    if speedup >= PACKING_SPEEDUP:
        pack_linears(model)
        log.info("linear layers: oneDNN with packed weights (%.1fx torch's product here)", speedup)
    return speedup


def _best_time(run, repeats: int) -> float:
    run()  # first call: kernel selection, page faults
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
    return best
