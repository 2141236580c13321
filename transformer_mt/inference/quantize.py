"""Linear layers in fewer bits for CPU translation (`--quantize`): dynamic int8 quantisation,
or bfloat16 products where the CPU computes bfloat16 natively."""

from __future__ import annotations

import contextlib
import copy
import logging
import warnings
from collections.abc import Iterator

import torch
from torch import Tensor, nn
from torch.ao.nn.intrinsic import LinearReLU
from torch.ao.nn.intrinsic.quantized.dynamic import LinearReLU as QuantizedLinearReLU
from torch.ao.nn.quantized.dynamic import Linear as QuantizedLinear
from torch.ao.quantization import quantize_dynamic

from transformer_mt import timed_choices
from transformer_mt.inference.packed import (
    Kind,
    best_times,
    kind_label,
    on_bucketed_rows,
    pack_linears,
    packing_available,
    timing_input,
)
from transformer_mt.machine import cpu_has, native_bf16
from transformer_mt.model.layers import FeedForward
from transformer_mt.timed_choices import TimedChoices

log = logging.getLogger(__name__)

QUANTIZE_OPTIONS = ("int8", "bf16")


def quantize_int8(model: nn.Module, choices: TimedChoices | None = None) -> nn.Module:
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

    The GEMM library is the one a layer's weights are packed for (the engine in force when the
    model runs does not matter), chosen per kind of layer by `fastest_engine`: torch's default
    (fbgemm's kernels on x86), or oneDNN where it ran that product at least
    ONEDNN_INT8_SPEEDUP times as fast on this machine.
    The two round differently, so the choice is timed once per machine and kept (`choices`, by
    default `timed_choices.machine_choices()`): a busy core at one load must not change the
    translations.
    oneDNN uses a CPU's AMX int8 tiles (beam 5, batch 64, one core of an Intel Xeon: 1.45x
    fp32 with it throughout, 1.21x with torch's default); on a Zen 4 EPYC with VNNI it ran the
    vocabulary projection faster (3.4 against 4.8 ms at 320 rows) and the small products slower.

    The decoding cache of such a model is best stored in `int8_cache_dtype()`.
    """
    fused = copy.deepcopy(model)
    for ffn in fused.modules():
        if isinstance(ffn, FeedForward) and ffn.can_fuse_relu:
            ffn.fuse_relu(LinearReLU(ffn.fc1, nn.ReLU()))
    choices = choices or timed_choices.machine_choices()
    engines: dict[Kind, str] = {}
    for parent, name, layer in _float_layers(fused):
        kind = _kind(layer)
        if kind not in engines:
            engines[kind] = choices.choose(
                engine_choice(kind),
                lambda layer=layer: fastest_engine(layer),
                int8_engines(),
            )
        setattr(parent, name, Int8Linear(_quantized(layer, engines[kind]), engines[kind]))
    log.info(
        "int8 linear layers: %s",
        ", ".join(f"{kind_label(kind)} {engine}" for kind, engine in sorted(engines.items())),
    )
    return fused.eval()


def quantize_bf16(model: nn.Module) -> nn.Module:
    """A copy of `model` whose nn.Linear layers compute in bfloat16 (`PackedLinear`): weights
    rounded to bfloat16 once and packed for oneDNN, each input rounded as it comes, the output
    of each product rounded to bfloat16 and handed on as float32, so that LayerNorm, softmax,
    attention and the search stay float32.

    Where the CPU computes bfloat16 natively (AMX tiles, avx512_bf16) a product costs a
    fraction of its float32 twin (256 x 8,000 at 64 rows: 0.60 against 2.29 ms, one core of
    an Intel Xeon with AMX), and the half-size weights halve what each decoding step reads
    from memory. Elsewhere bfloat16 is emulated through float32 and many times slower, so
    the caller refuses it there (`bf16_refusal`).
    """
    reduced = copy.deepcopy(model)
    pack_linears(reduced, dtype=torch.bfloat16)
    return reduced.eval()


def bf16_refusal() -> str | None:
    """Why `quantize_bf16` would not pay on this machine (emulated bfloat16, no oneDNN);
    None where it runs natively."""
    native = native_bf16()
    if not native.value:
        return f"this CPU has no native bfloat16 ({native.reason}), so it would run slower"
    if not packing_available():
        return "this torch has no oneDNN to compute the bfloat16 products"
    return None


# How much faster oneDNN must run a layer's int8 product to be taken over torch's default. The
# engines round differently (121 of 1,000 beam-5 translations of the tiny model changed with
# the engine of one layer), and on a quiet core of an AVX2-only AMD EPYC the times of its
# 128x512 layer came out 0.95-1.02 of each other from one timing to the next: with no margin,
# a new machine's choice, and so its translations, was a coin toss.
ONEDNN_INT8_SPEEDUP = 1.1


def engine_choice(kind: Kind) -> str:
    """The name the int8 engine of a kind of layer is kept under; it names the margin, so
    that a choice made by another rule is timed again."""
    return f"int8 engine by {ONEDNN_INT8_SPEEDUP}x {kind_label(kind)}"


def fastest_engine(layer: nn.Module, repeats: int = 10) -> str:
    """The quantised engine for `layer` (an `nn.Linear`, or a `LinearReLU`): oneDNN where its
    packing ran the int8 product over `timing_input` at least ONEDNN_INT8_SPEEDUP times as
    fast as torch's default, best of `repeats` each in turns; else the default (also where
    oneDNN is not built in)."""
    engines = int8_engines()
    if len(engines) == 1:
        return engines[0]
    quantized = [Int8Linear(_quantized(layer, engine), engine) for engine in engines]
    x = timing_input(*_kind(layer)[:2])
    with torch.inference_mode():
        default_time, onednn_time = best_times([lambda m=m: m(x) for m in quantized], repeats)
    return engines[1] if default_time >= ONEDNN_INT8_SPEEDUP * onednn_time else engines[0]


def int8_engines() -> list[str]:
    """The quantised engines `fastest_engine` chooses from: torch's default, and oneDNN where
    this torch has it."""
    default = torch.backends.quantized.engine
    supported = torch.backends.quantized.supported_engines
    return [default] + (["onednn"] if default != "onednn" and "onednn" in supported else [])


def _float_layers(model: nn.Module) -> list[tuple[nn.Module, str, nn.Module]]:
    """(parent, attribute, layer) of every `nn.Linear` and fused `LinearReLU` of `model` (not
    the linear layer inside a `LinearReLU`)."""
    return [
        (parent, name, child)
        for parent in model.modules()
        if not isinstance(parent, LinearReLU)
        for name, child in parent.named_children()
        if type(child) in (nn.Linear, LinearReLU)
    ]


def _kind(layer: nn.Module) -> Kind:
    """(in_features, out_features, relu) of an `nn.Linear` or a `LinearReLU`."""
    linear = layer[0] if isinstance(layer, LinearReLU) else layer
    return linear.in_features, linear.out_features, isinstance(layer, LinearReLU)


def _quantized(layer: nn.Module, engine: str) -> QuantizedLinear:
    """`layer` (`nn.Linear` or `LinearReLU`) dynamically quantised to int8, its weights packed
    for `engine`; `layer` itself is left as it is."""
    with warnings.catch_warnings(), _quantized_engine(engine):
        warnings.simplefilter("ignore", category=DeprecationWarning)
        warnings.simplefilter("ignore", category=FutureWarning)
        warnings.filterwarnings("ignore", message=".*quantize.*deprecated", category=UserWarning)
        holder = nn.Sequential(layer)
        return quantize_dynamic(holder, {type(layer)}, dtype=torch.qint8, inplace=True)[0]


class Int8Linear(nn.Module):
    """A dynamically quantised linear layer (torch's `quantized.dynamic.Linear`, or the same
    with its ReLU) called through its operator directly.

    torch's module looks up the weight's dtype and checks its arguments for script objects on
    every call; with the small products of a decoding step that was 3-5% of a greedy step at
    batch 64 (docs/results.md). Same operator, packed weight and `reduce_range` as the module,
    so the same outputs (the tests compare them). `engine` names the library the weight was
    packed for.
    """

    def __init__(self, layer: QuantizedLinear, engine: str):
        super().__init__()
        self.in_features, self.out_features = layer.in_features, layer.out_features
        self.relu = isinstance(layer, QuantizedLinearReLU)
        self.engine = engine
        ops = torch.ops.quantized
        self.op = (ops.linear_relu_dynamic if self.relu else ops.linear_dynamic).default
        self.packed = layer._packed_params._packed_params

    def forward(self, x: Tensor) -> Tensor:
        return on_bucketed_rows(self._product, x)

    def _product(self, rows: Tensor) -> Tensor:
        return self.op(rows, self.packed, True)  # reduce_range, as torch's module passes

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            f"relu={self.relu}, engine={self.engine}"
        )


def int8_cache_dtype() -> torch.dtype | None:
    """The dtype to store an int8 model's decoding keys and values in (None: as computed).

    Once the matrix products are int8, beam search spends much of its time moving the
    decoding cache: reordering it after every step and reading it in attention, both bound by
    memory bandwidth. bfloat16 keys and values halve those bytes but cost conversions, as
    attention of one query computes in float32 whatever the cache stores. Where the CPU has
    AMX tiles the two balance: on one core of an Intel Xeon the bfloat16 cache decoded
    Multi30k test2016 within 3% of a float32 one at beam 5 and 3-13% slower greedy, at the
    same BLEU (docs/results.md), so it is kept there for its half of the memory, which
    `tmt serve`'s cache budget counts. On an AMD EPYC with avx512_bf16 but no AMX the float32
    cache was faster (greedy 4%, beam 5 6%), and where bfloat16 is emulated it is slower still.
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
