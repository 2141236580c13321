"""Checkpoint averaging (Vaswani et al., 2017, section 6.1): the mean of several checkpoints'
weights, refused for checkpoints of different models or a file counted twice."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch
from torch import Tensor

from transformer_mt.artifacts import Checkpoint, load_checkpoint
from transformer_mt.config.changes import model_setting_changes, normalized_config
from transformer_mt.errors import TmtError


def average_checkpoints(paths: Sequence[str | Path]) -> Checkpoint:
    """Average the model weights of several checkpoints (Vaswani et al., 2017, section 6.1).

    Floating-point tensors are summed in float64 and cast back; integer buffers are taken from
    the newest checkpoint (the highest step; of equal steps, the greatest path), so that the
    order of `paths` changes nothing. The result is an inference checkpoint: the newest's
    config, tokenizers and step, without optimizer or other training state. The checkpoints
    must be of one model (`MODEL_SETTINGS` and the tokenizers alike); training settings may
    differ.

    Raises:
        TmtError: a file is unreadable, the checkpoints are of different models or hold
            different parameter sets, or two hold the same weights (a copy would count twice).
    """
    if not paths:
        raise TmtError("no checkpoints to average")
    sums: dict[str, Tensor] = {}
    first: Checkpoint | None = None
    newest: tuple[int, str, Checkpoint] | None = None  # (step, path, checkpoint)
    steps: dict[int, str | Path] = {}  # the first file of each step, for a copy's step
    for path in paths:
        checkpoint = load_checkpoint(path)
        if first is None:
            first = checkpoint
        _refuse_another_model(first, checkpoint, paths[0], path)
        earlier = steps.setdefault(checkpoint.step, path)
        if earlier is not path and _same_weights(load_checkpoint(earlier), checkpoint):
            raise TmtError(
                f"{path}: the same weights as {earlier} (a copy, as best.pt and last.pt are "
                "of a step_*.pt), which would count twice; average each once"
            )
        _add_weights(sums, checkpoint.weights, path, paths[0], first)
        if newest is None or (checkpoint.step, str(path)) > newest[:2]:
            newest = (checkpoint.step, str(path), checkpoint)
    latest = newest[2]
    averaged = {
        name: (total / len(paths)).to(latest.model[name].dtype)
        if total.is_floating_point()
        else latest.weights[name]
        for name, total in sums.items()
    }
    return Checkpoint(
        model=averaged,
        config=latest.config,
        tokenizers=latest.tokenizers,
        step=latest.step,
        version=latest.version,
        averaged_from=[str(p) for p in paths],
        specials=latest.specials,
        workdir=latest.workdir,
    )


def _add_weights(
    sums: dict[str, Tensor],
    weights: dict[str, Tensor],
    path: str | Path,
    first_path: str | Path,
    first: Checkpoint,
) -> None:
    """Add a checkpoint's floating-point `weights` to `sums` in float64 (its integer buffers
    are set, not added).

    Raises:
        TmtError: its parameters, a shape or a dtype's kind differ from the first file's.
    """
    if sums and weights.keys() != sums.keys():
        raise TmtError(f"{path}: parameters differ from {first_path}; cannot average")
    for name, tensor in weights.items():
        if name in sums and sums[name].shape != tensor.shape:
            raise TmtError(
                f"{path}: {name} has shape {list(tensor.shape)}, {list(sums[name].shape)} "
                f"in {first_path}; cannot average"
            )
        if name in sums and sums[name].is_floating_point() != tensor.is_floating_point():
            kinds = (str(t.dtype).removeprefix("torch.") for t in (tensor, first.weights[name]))
            raise TmtError(
                f"{path}: {name} is {' and '.join(kinds)} in {first_path}; cannot average"
            )
        sums[name] = (sums.get(name, 0) + tensor.double()) if tensor.is_floating_point() else tensor


def _same_weights(a: Checkpoint, b: Checkpoint) -> bool:
    return a.weights.keys() == b.weights.keys() and all(
        x.shape == y.shape and torch.equal(x, y)
        for x, y in zip(a.weights.values(), (b.weights[k] for k in a.weights), strict=True)
    )


def _refuse_another_model(
    first: Checkpoint, other: Checkpoint, first_path: str | Path, path: str | Path
) -> None:
    """Raise when `other` is not the model `first` is (settings or vocabularies differ)."""
    differ = model_setting_changes(
        normalized_config(first.config, f"{first_path} (stored config)"),
        normalized_config(other.config, f"{path} (stored config)"),
    )
    if other.tokenizers != first.tokenizers:
        differ.append("the tokenizers' vocabularies")
    if other.special_tokens(path) != first.special_tokens(first_path):
        differ.append("the special tokens")
    if differ:
        raise TmtError(
            f"{path}: another model than {first_path} (differs in {', '.join(differ)}); "
            "average checkpoints of one model"
        )
