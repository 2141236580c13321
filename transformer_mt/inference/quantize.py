"""Dynamic int8 quantisation of a model's linear layers for CPU translation (`--quantize int8`)."""

from __future__ import annotations

import contextlib
import copy
import warnings
from collections.abc import Iterator

import torch
from torch import Tensor, nn
from torch.ao.nn.intrinsic import LinearReLU
from torch.ao.nn.intrinsic.quantized.dynamic import LinearReLU as QuantizedLinearReLU
from torch.ao.nn.quantized.dynamic import Linear as QuantizedLinear
from torch.ao.quantization import quantize_dynamic

from transformer_mt.machine import cpu_has, native_bf16
from transformer_mt.model.layers import FeedForward

QUANTIZE_OPTIONS = ("int8",)


def quantize_int8(model: nn.Module) -> nn.Module:
    """A copy of `model` whose nn.Linear layers run with int8 weights and int8 activations.

    Dynamic quantisation: weights are quantised once (symmetric, one scale per matrix) and
    activations per call at run time, so no calibration data is needed; embeddings, LayerNorm
    and softmax stay float32. Linear layers hold ~all of a Transformer's multiply-adds, which is
    where int8 GEMMs save time. The output projection tied to the target embedding becomes its
    own int8 copy of that matrix; the embedding itself stays float32, so input embeddings are
    unchanged. The first layer of a ReLU feed-forward network runs with its ReLU applied inside
    the int8 product (`FeedForward.fuse_relu`), saving a pass over the hidden states. Each
    quantised layer is then called through its operator directly (`Int8Linear`).

    `torch.ao.quantization.quantize_dynamic` is deprecated in favour of torchao's `quantize_`
    API (its warning announces removal in 2.10), but it is still present and working in torch
    2.13 and needs no extra dependency; its deprecation warnings are silenced here.
    It moves to torchao once torchao is a dependency.

    The GEMM library is the one the weights are packed for at quantisation time (the engine in
    force when the model runs does not matter): oneDNN where the CPU has AMX int8 tiles, whose
    matrix units it uses (beam 5, batch 64, one core of an Intel Xeon: 1.45x fp32 vs 1.21x
    with torch's default x86/fbgemm engine), else torch's default.

    The decoding cache of such a model is best stored in `int8_cache_dtype()`.
    """
    engine = torch.backends.quantized.engine
    if cpu_has("amx_tile") and "onednn" in torch.backends.quantized.supported_engines:
        engine = "onednn"
    with warnings.catch_warnings(), _quantized_engine(engine):
        warnings.simplefilter("ignore", category=DeprecationWarning)
        warnings.simplefilter("ignore", category=FutureWarning)
        warnings.filterwarnings("ignore", message=".*quantize.*deprecated", category=UserWarning)
        fused = copy.deepcopy(model)
        for ffn in fused.modules():
            if isinstance(ffn, FeedForward) and ffn.can_fuse_relu:
                ffn.fuse_relu(LinearReLU(ffn.fc1, nn.ReLU()))
        quantize_dynamic(fused, {nn.Linear, LinearReLU}, dtype=torch.qint8, inplace=True)
    for parent in list(fused.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, QuantizedLinear):  # QuantizedLinearReLU included
                setattr(parent, name, Int8Linear(child))
    return fused.eval()


class Int8Linear(nn.Module):
    """A dynamically quantised linear layer (torch's `quantized.dynamic.Linear`, or the same
    with its ReLU) called through its operator directly.

    torch's module looks up the weight's dtype and checks its arguments for script objects on
    every call; with the small products of a decoding step that was 3-5% of a greedy step at
    batch 64 (docs/results.md). Same operator, packed weight and `reduce_range` as the module,
    so the same outputs (the tests compare them).
    """

    def __init__(self, layer: QuantizedLinear):
        super().__init__()
        self.in_features, self.out_features = layer.in_features, layer.out_features
        self.relu = isinstance(layer, QuantizedLinearReLU)
        ops = torch.ops.quantized
        self.op = (ops.linear_relu_dynamic if self.relu else ops.linear_dynamic).default
        self.packed = layer._packed_params._packed_params

    def forward(self, x: Tensor) -> Tensor:
        return self.op(x, self.packed, True)  # reduce_range, as torch's module passes

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, relu={self.relu}"


def int8_cache_dtype() -> torch.dtype | None:
    """The dtype to store an int8 model's decoding keys and values in (None: as computed).

    Once the matrix products are int8, beam search spends much of its time moving the
    decoding cache: reordering it after every step and reading it in attention, both bound by
    memory bandwidth. bfloat16 keys and values halve those bytes but cost conversions, as
    attention of one query computes in float32 whatever the cache stores. Where the CPU has
    AMX tiles the halving won (beam 5, batch 64, one core of an Intel Xeon: int8
    with the bfloat16 cache 1.60-1.68x fp32, at -0.27 BLEU on Multi30k test2016 en-de); on an
    AMD EPYC with avx512_bf16 but no AMX the float32 cache was faster (greedy 4%, beam 5 6%,
    docs/results.md), and where bfloat16 is emulated it is slower still.
    """
    return torch.bfloat16 if cpu_has("amx_tile") and native_bf16().value else None


@contextlib.contextmanager
def _quantized_engine(engine: str) -> Iterator[None]:
    """Pack quantised weights for `engine`, leaving the global setting as it was."""
    before = torch.backends.quantized.engine
    torch.backends.quantized.engine = engine
    try:
        yield
    finally:
        torch.backends.quantized.engine = before
