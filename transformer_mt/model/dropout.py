"""Dropout (Srivastava et al., 2014) with a cheaper random mask on the CPU.

On the CPU, `torch.nn.Dropout` draws its mask with `bernoulli_`, about 10 ns an element on the
development machine: in a bf16 training step of the quickstart model that was 7% of the time
(docs/results.md). Here each element instead takes 16 random bits, a quarter of one 64-bit
draw of the generator, and is kept when they are at least a threshold: the keep probability is
1 - q / 65536 with q = round(p * 65536), p to within 2^-17, and kept elements are scaled by
65536 / (65536 - q) so the expectation is unchanged. The mask is built in the input's dtype, as
`torch.nn.Dropout` does on the CPU (in bf16 the scale rounds to 8 bits, as there). Other devices
use `torch.nn.functional.dropout`, whose fused kernels are already cheap. The generator is
torch's default one, so `torch.manual_seed` and saved RNG states reproduce the masks.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

_LEVELS = 1 << 16  # 16 random bits an element


def dropout(x: Tensor, p: float, training: bool) -> Tensor:
    """x with each element zeroed with probability p and the rest scaled, when training."""
    if not training or p == 0.0:
        return x
    if x.device.type != "cpu":
        return F.dropout(x, p, training=True)
    # q of the module docstring; a p within 2^-17 of 1 keeps one level (not a division by 0)
    dropped = min(round(p * _LEVELS), _LEVELS - 1)
    n = x.numel()
    # int64 over the whole range (randint's high is exclusive: one value of 2^64 is missing),
    # four 16-bit lanes per draw; an int16 lane is uniform over [-32768, 32767].
    words = torch.randint(-(2**63), 2**63 - 1, ((n + 3) // 4,), dtype=torch.int64)
    lanes = words.view(torch.int16)[:n].view(x.shape)
    keep = lanes >= dropped - _LEVELS // 2
    # Through uint8 (the same 0/1 bytes): torch converts bool to a float type element by
    # element, uint8 with vector instructions (a tenth of the time at 2M elements).
    mask = keep.view(torch.uint8).to(x.dtype)
    return x * mask.mul_(_LEVELS / (_LEVELS - dropped))


class Dropout(nn.Module):
    """`dropout` as a module: a drop-in for `torch.nn.Dropout(p)` (training mode from .train())."""

    def __init__(self, p: float) -> None:
        super().__init__()
        self.p = p

    def forward(self, x: Tensor) -> Tensor:
        return dropout(x, self.p, self.training)

    def extra_repr(self) -> str:
        return f"p={self.p}"
