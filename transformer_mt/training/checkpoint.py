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
periodic ones, `checkpoints/step_00001000.pt`, each an independent file (damage to one leaves
the others loadable). Files are written to a temporary name, flushed to disk and renamed, so a
crash while saving leaves the previous file intact.
"""

from __future__ import annotations

import logging
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
from transformer_mt.files import atomic_open, atomic_path, refuse_same_file

log = logging.getLogger(__name__)

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
# The temporary name `files.atomic_path` writes under: ".NAME.tmpPID".
TEMPORARY_PATTERN = re.compile(r"\..+\.tmp(\d+)")


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


def copy_checkpoint(source: str | Path, target: str | Path) -> None:
    """Copy the checkpoint file `source` to `target` atomically and durably.

    best.pt, last.pt and the periodic file of one validation step hold the same checkpoint;
    copies rather than hard links keep them independent, so a file damaged in place (a torn
    copy, a bad sector, an editor) takes only one name with it.
    """
    with atomic_path(target, durable=True) as tmp:
        shutil.copyfile(source, tmp)


def load_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> dict:
    """Read a checkpoint written by `save_checkpoint`.

    `weights_only=True`: a checkpoint holds only tensors and plain Python values, so loading
    one from elsewhere cannot execute code.

    Raises:
        TmtError: the file is missing, unreadable, truncated or not a transformer_mt checkpoint.
    """
    path = Path(path)
    if path.is_dir():
        raise TmtError(f"{path}: is a directory, not a checkpoint file{_file_hint(path)}")
    if not path.is_file():
        raise TmtError(f"{path}: checkpoint not found")
    try:
        state = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as err:  # torch raises many types for truncated or foreign files
        raise TmtError(f"{path}: not a readable checkpoint ({type(err).__name__})") from None
    if not isinstance(state, dict) or not {"model", "config", "step"} <= state.keys():
        raise TmtError(f"{path}: not a transformer_mt checkpoint (no model/config/step)")
    return state


def _file_hint(directory: Path) -> str:
    """Suggest the checkpoint a user probably meant when they named a run or checkpoints dir."""
    for candidate in (directory / "checkpoints" / "best.pt", directory / "best.pt"):
        if candidate.is_file():
            return f"; did you mean {candidate}?"
    return "; name a .pt file"


def has_training_state(state: dict[str, Any]) -> bool:
    """True for a checkpoint training can continue from (not an averaged/inference one)."""
    return all(key in state for key in TRAINING_STATE_KEYS)


def resume_checkpoint(directory: str | Path) -> tuple[Path, dict[str, Any]] | None:
    """The checkpoint a run continues from: last.pt, else the newest step_*.pt that loads.

    last.pt is renamed into place after every other file of a save (`Trainer.save`), so it is
    the newest complete save; a newer step file belongs to a save cut short, which the resumed
    run redoes. A step file exists only once best.pt agrees with it, so it is a consistent
    fallback. A missing or unreadable file is skipped with a warning naming it and why.
    Temporaries of writers killed mid-save are deleted first: they are never a resume point.

    A readable checkpoint without training state (an averaged one copied over last.pt) is an
    error rather than skipped: it is a file the user made on purpose, and a resumed run would
    overwrite it at its next save.

    Returns:
        (path, state), or None when `directory` holds no checkpoint (a fresh run).

    Raises:
        TmtError: the chosen file is an averaged/inference checkpoint, or checkpoints exist
            and none of them can be read.
    """
    directory = Path(directory)
    remove_stale_temporaries(directory)
    candidates = [directory / "last.pt", *reversed(periodic_checkpoints(directory))]
    skipped = []
    for i, path in enumerate(candidates):
        if not path.exists():
            skipped.append(f"{path.name} is missing")
            continue
        try:
            state = load_checkpoint(path)
        except TmtError as err:
            skipped.append(str(err))
            continue
        if not has_training_state(state):
            raise TmtError(_not_resumable(path, state, candidates[i + 1 :]))
        if i > 0:
            log.warning("resuming from %s (skipped: %s)", path, "; ".join(skipped))
        return path, state
    if len(candidates) > 1 or candidates[0].exists():
        raise TmtError(
            f"{directory}: no readable training checkpoint ({'; '.join(skipped)}); move the "
            "damaged files away to start the run afresh"
        )
    return None


def _not_resumable(path: Path, state: dict[str, Any], older: list[Path]) -> str:
    kind = "an averaged" if "averaged_from" in state else "an inference"
    then = f"resume from {older[0].name}" if older else "start the run afresh"
    return (
        f"{path}: {kind} checkpoint (no optimizer state) cannot resume training; move it out "
        f"of {path.parent} to {then}"
    )


def remove_stale_temporaries(directory: str | Path) -> list[Path]:
    """Delete `.NAME.tmpPID` files in `directory` whose writing process no longer runs.

    A SIGKILL or power loss during a save leaves one behind (as large as a checkpoint). The
    check needs POSIX process ids; elsewhere nothing is deleted. Returns the deleted paths.
    """
    removed = []
    for path in Path(directory).glob(".*.tmp*"):
        match = TEMPORARY_PATTERN.fullmatch(path.name)
        if match and path.is_file() and not _running(int(match.group(1))):
            path.unlink(missing_ok=True)
            removed.append(path)
    if removed:
        log.info("removed %d temporary file(s) of an interrupted save", len(removed))
    return removed


def _running(pid: int) -> bool:
    """Whether another process `pid` runs (True when unknown, so that nothing is deleted)."""
    if os.name != "posix":
        return True
    if pid == os.getpid():
        return False  # a temporary of an earlier process that had this id; this one is not saving
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # exists, owned by another user
    return True


def periodic_checkpoints(directory: str | Path) -> list[Path]:
    """`step_*.pt` files of a checkpoints directory (or a run directory), oldest first."""
    directory = Path(directory)
    if (directory / "checkpoints").is_dir():
        directory = directory / "checkpoints"
    found = [p for p in directory.glob("step_*.pt") if PERIODIC_PATTERN.fullmatch(p.name)]
    return sorted(found, key=_step)


def _step(path: Path) -> int:
    return int(PERIODIC_PATTERN.fullmatch(path.name).group(1))


def prune_checkpoints(
    directory: str | Path, keep_last: int, up_to: int | None = None
) -> list[Path]:
    """Delete all but the newest `keep_last` periodic checkpoints; returns the deleted paths.

    Called only after the new checkpoint is on disk and never touches last.pt or best.pt, so
    the run always keeps a file to resume from. Files after step `up_to` are left alone: they
    come from a save cut short before last.pt was written, and counting them could delete the
    file just saved.
    """
    old = [p for p in periodic_checkpoints(directory) if up_to is None or _step(p) <= up_to]
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
