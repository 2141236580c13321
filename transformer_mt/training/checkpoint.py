"""Checkpoints: atomic save, friendly load, averaging, and loading a model for inference.

A checkpoint is one dict written with `torch.save` (see docs/dev/interfaces.md):

    "model"       state_dict of the unwrapped module (no DDP / torch.compile prefixes)
    "ema"         EMA weights (only when train.ema_decay > 0); inference prefers them
    "config"      the resolved config as a plain dict (`config_to_dict`)
    "tokenizers"  {"src": bytes, "tgt": bytes}: serialized SentencePiece models
    "step"        optimizer updates taken
    "version"     transformer_mt version that wrote it
    training state (absent from averaged checkpoints): "optimizer", "scaler", "rng",
    "data_position" {"epoch", "batch_index"}, "best_score", "bad_validations", "stats"

Run directories keep `checkpoints/last.pt`, `checkpoints/best.pt` and the last `keep_last`
periodic ones, `checkpoints/step_00001000.pt`. Files are written to a temporary name, flushed
to disk and renamed, so a crash while saving leaves the previous file intact.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from transformer_mt.config import ExperimentConfig, config_from_dict
from transformer_mt.errors import TmtError
from transformer_mt.files import atomic_open, fsync_directory, refuse_same_file

PERIODIC_PATTERN = re.compile(r"step_(\d+)\.pt")
TRAINING_STATE_KEYS = (
    "optimizer",
    "scaler",
    "rng",
    "data_position",
    "best_score",
    "bad_validations",
    "stats",
)


def periodic_name(step: int) -> str:
    return f"step_{step:08d}.pt"


def save_checkpoint(state: dict[str, Any], path: str | Path) -> None:
    """Write `state` atomically: temporary file in the same directory, fsync, rename.

    The rename is atomic on POSIX and Windows, so readers see the old file or the new one,
    never a half-written one; a failure (disk full, crash, exception) removes the temporary
    file and leaves the previous checkpoint untouched.
    """
    with atomic_open(path, "wb", durable=True) as f:
        torch.save(state, f)


def link_checkpoint(source: str | Path, target: str | Path) -> None:
    """Make `target` hold the same bytes as `source` (a hard link, else a copy), atomically.

    best.pt, last.pt and the periodic file of one validation step are the same checkpoint, so
    it is serialized once; replacing one name later does not disturb the others.
    """
    source, target = Path(source), Path(target)
    tmp = target.with_name(f".{target.name}.tmp{os.getpid()}")
    tmp.unlink(missing_ok=True)
    try:
        try:
            os.link(source, tmp)
        except OSError:
            shutil.copyfile(source, tmp)
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    fsync_directory(target.parent)


def load_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> dict:
    """Read a checkpoint written by `save_checkpoint`.

    `weights_only=True`: a checkpoint holds only tensors and plain Python values, so loading
    one from elsewhere cannot execute code.

    Raises:
        TmtError: the file is missing, unreadable, truncated or not a transformer_mt checkpoint.
    """
    path = Path(path)
    if not path.is_file():
        raise TmtError(f"{path}: checkpoint not found")
    try:
        state = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as err:  # torch raises many types for truncated or foreign files
        raise TmtError(f"{path}: not a readable checkpoint ({type(err).__name__})") from None
    if not isinstance(state, dict) or not {"model", "config", "step"} <= state.keys():
        raise TmtError(f"{path}: not a transformer_mt checkpoint (no model/config/step)")
    return state


def periodic_checkpoints(directory: str | Path) -> list[Path]:
    """`step_*.pt` files of a checkpoints directory (or a run directory), oldest first."""
    directory = Path(directory)
    if (directory / "checkpoints").is_dir():
        directory = directory / "checkpoints"
    found = [p for p in directory.glob("step_*.pt") if PERIODIC_PATTERN.fullmatch(p.name)]
    return sorted(found, key=lambda p: int(PERIODIC_PATTERN.fullmatch(p.name).group(1)))


def prune_checkpoints(directory: str | Path, keep_last: int) -> list[Path]:
    """Delete all but the newest `keep_last` periodic checkpoints; returns the deleted paths."""
    old = periodic_checkpoints(directory)
    old = old[: max(len(old) - keep_last, 0)]
    for p in old:
        p.unlink(missing_ok=True)
    return old


def resolve_average_inputs(
    inputs: Sequence[str | Path], last: int | None, out: str | Path | None = None
) -> list[Path]:
    """Expand run or checkpoint directories into their periodic checkpoints; keep the last N.

    Everything is checked before any checkpoint is read. With `out`, the average must not land
    on an input or on a name a run reads back (checkpoints/last.pt, best.pt, step_*.pt): an
    averaged checkpoint has no optimizer state, so the next resume would fail, and a step file
    would be averaged again. Finding fewer than `last` is not an error; the caller can compare
    and say so.

    Raises:
        TmtError: `last` is below 1, an input does not exist, nothing is left to average, or
            `out` names a run's checkpoint, an input or a directory.
    """
    if last is not None and last < 1:
        raise TmtError(f"cannot average the newest {last} checkpoints: the count must be 1 or more")
    if out is not None:
        _refuse_average_output(Path(out))
    paths: list[Path] = []
    for item in map(Path, inputs):
        if item.is_dir():
            paths.extend(periodic_checkpoints(item))
        elif item.is_file():
            paths.append(item)
        else:
            raise TmtError(f"{item}: no such checkpoint or directory")
    if out is not None:
        for path in paths:
            refuse_same_file(path, out, "input checkpoint")
    if last is not None:
        paths = paths[-last:]
    if not paths:
        raise TmtError(
            f"no periodic checkpoints (step_*.pt) found in {', '.join(map(str, inputs))}"
        )
    return paths


def _refuse_average_output(out: Path) -> None:
    if out.is_dir():
        raise TmtError(f"{out}: is a directory; name the averaged checkpoint file")
    for name in (out, out.resolve()):
        own = name.name in ("last.pt", "best.pt") or PERIODIC_PATTERN.fullmatch(name.name)
        if own and name.parent.name == "checkpoints":
            raise TmtError(
                f"{out}: is a training checkpoint of {name.parent.parent}, which resuming and "
                f"averaging read back; write the average elsewhere, e.g. "
                f"{name.parent.parent / 'averaged.pt'}"
            )


def average_checkpoints(paths: Sequence[str | Path]) -> dict[str, Any]:
    """Average the model weights of several checkpoints (Vaswani et al., 2017, section 6.1).

    Floating-point tensors are summed in float64 and cast back; integer buffers are taken from
    the newest checkpoint. The result is an inference checkpoint: model, config, tokenizers and
    the newest step, without optimizer or other training state.

    Raises:
        TmtError: a file is unreadable or the checkpoints hold different parameter sets.
    """
    if not paths:
        raise TmtError("no checkpoints to average")
    sums: dict[str, torch.Tensor] = {}
    newest: dict[str, Any] = {}
    for path in paths:
        newest = load_checkpoint(path)
        weights = newest.get("ema") or newest["model"]
        if sums and weights.keys() != sums.keys():
            raise TmtError(f"{path}: parameters differ from {paths[0]}; cannot average")
        for name, tensor in weights.items():
            if tensor.is_floating_point():
                sums[name] = sums.get(name, 0) + tensor.double()
            else:
                sums[name] = tensor
    averaged = {
        name: (total / len(paths)).to(newest["model"][name].dtype)
        if total.is_floating_point()
        else total
        for name, total in sums.items()
    }
    result = {k: v for k, v in newest.items() if k not in TRAINING_STATE_KEYS and k != "ema"}
    result["model"] = averaged
    result["averaged_from"] = [str(p) for p in paths]
    return result


@dataclass
class InferenceBundle:
    """Everything `tmt translate` needs, rebuilt from a checkpoint alone."""

    model: torch.nn.Module
    config: ExperimentConfig
    src_tokenizer: Any  # transformer_mt.data.tokenizer.Tokenizer
    tgt_tokenizer: Any


def load_for_inference(path: str | Path, device: str | torch.device = "cpu") -> InferenceBundle:
    """Rebuild model (eval mode), config and tokenizers from a checkpoint file.

    The model is built from the checkpoint's own config copy, not from a YAML file that may
    have changed since, and loaded with strict=True. EMA weights are used when present.

    Raises:
        TmtError: missing or corrupt file, or weights that do not fit the stored config.
    """
    from transformer_mt.data.tokenizer import PAD_ID, Tokenizer
    from transformer_mt.model import build_model

    state = load_checkpoint(path, map_location="cpu")
    config = config_from_dict(state["config"], source=f"{path} (stored config)")
    src_tokenizer = Tokenizer.from_bytes(state["tokenizers"]["src"])
    tgt_tokenizer = Tokenizer.from_bytes(state["tokenizers"]["tgt"])
    model = build_model(config.model, src_tokenizer.vocab_size, tgt_tokenizer.vocab_size, PAD_ID)
    try:
        model.load_state_dict(state.get("ema") or state["model"], strict=True)
    except RuntimeError as err:
        first = str(err).splitlines()[0]
        raise TmtError(f"{path}: weights do not match the stored config ({first})") from None
    model.to(device).eval()
    return InferenceBundle(model, config, src_tokenizer, tgt_tokenizer)
