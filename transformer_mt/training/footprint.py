"""Whether a model can be trained in the memory the device has, asked before any work.

A model too large for the machine does not fail cleanly by itself: with Linux's overcommit the
allocations succeed, the first update touches the pages, and the kernel kills the process
(no message, no exit code a script can read) after the tokenizer and the corpus took their
minutes. The parameters are counted on torch's meta device (shapes, no storage), so the count
is the model's own for every attention and position variant, and a model of any size costs
nothing to count.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import Tensor

from transformer_mt.config import ExperimentConfig
from transformer_mt.data.tokenizer_adopt import model_sizes
from transformer_mt.errors import TmtError
from transformer_mt.machine import available_memory, gib, memory_left
from transformer_mt.model import build_model

# Training with Adam keeps, for every parameter, its float32 value, its gradient and Adam's
# two moments; bfloat16 autocast keeps the float32 values too. Activations come on top, so
# this is the least a training run needs.
BYTES_PER_PARAMETER = 16
# A batch's logits (train.max_tokens x target pieces) and their gradient, 2 bytes each in
# bfloat16 or float16 (4 in float32): a vocabulary of millions needs more than its weights.
BYTES_PER_LOGIT = 4


def parameter_count(config: ExperimentConfig, weights: Mapping[str, Tensor] | None) -> int:
    """Parameters of the model a run trains: those of `weights` (a checkpoint's, for a run
    that resumes or fine-tunes), else of `config.model` with `tokenizer.vocab_size` pieces
    (the tokenizer is not trained yet) or the given tokenizer models' pieces."""
    if weights is not None:
        return sum(tensor.numel() for tensor in weights.values())
    with torch.device("meta"):
        model = build_model(config.model, *model_sizes(config.tokenizer))
    return sum(p.numel() for p in model.parameters())


def target_pieces(config: ExperimentConfig, weights: Mapping[str, Tensor] | None) -> int:
    """Rows of the output layer: the checkpoint's, else the target vocabulary's to be."""
    if weights is not None and "output_projection.weight" in weights:
        return weights["output_projection.weight"].shape[0]
    return model_sizes(config.tokenizer)[1]


def check_fits(
    config: ExperimentConfig, weights: Mapping[str, Tensor] | None, device: torch.device
) -> None:
    """Refuse a model whose parameters (with their gradients and Adam's moments) and one
    batch's logits (with their gradient) need more memory to train than `device` has
    available (a lower bound: one that passes may still run out in its activations, which
    `cli.common` then reports).

    Raises:
        TmtError: naming the parameters, the target pieces, the memory they need and the
            memory there is.
    """
    available = available_memory(device)
    if available is None:
        return
    count, pieces = parameter_count(config, weights), target_pieces(config, weights)
    need = count * BYTES_PER_PARAMETER + config.train.max_tokens * pieces * BYTES_PER_LOGIT
    if need <= available:
        return
    raise TmtError(
        f"the model has {count:,} parameters and {pieces:,} target pieces: training it needs at "
        f"least {gib(need)} ({BYTES_PER_PARAMETER} bytes a parameter for weights, gradients and "
        f"Adam's moments, {BYTES_PER_LOGIT} a token and piece for the logits of a batch of "
        f"train.max_tokens={config.train.max_tokens}), and {memory_left(device, available)}; "
        "make model.d_model, model.d_ff, the layers, the vocabulary or train.max_tokens smaller"
    )
