"""Run artifacts: the checkpoint format and everything that reads or writes checkpoint files.

This module owns the format; training (`Trainer`, `training/run.py`) and inference
(`inference/`) both go through it. A checkpoint file is one dict written with `torch.save`
and read with `weights_only=True`; `Checkpoint` is its typed view, field for key:

    model         state_dict of the unwrapped module (no DDP / torch.compile prefixes)
    ema           EMA weights, or None (train.ema_decay 0); inference and averaging prefer them
    config        the resolved config as a plain dict (`config_to_dict`)
    tokenizers    {"src": bytes, "tgt": bytes}: serialized SentencePiece models, and for an
                  imported model "src_pieces" / "tgt_pieces": its `PieceTable`s (JSON)
    specials      the special token ids (`SpecialTokens.to_dict`); absent from files that
                  predate the key, which hold this toolkit's own ids
    step          optimizer updates taken
    version       transformer_mt version that wrote it (None in files that predate the key)
    training      the keys of `TrainingState`, stored at the top level of the dict; absent
                  from averaged and other inference-only checkpoints
    averaged_from the averaged files (`tmt average` only)
    imported_from the model `tmt import` read, a hub name or a directory as given (`tmt import`
                  only; absent from files that predate the key)
    workdir       the directory `tmt train` ran in, which the config's relative paths (its
                  corpus, tokenizer files) are relative to; an average keeps its newest
                  member's (absent from imports and from files that predate the key)
    checksums     {"tensors": {path: SHA-256}, "values": SHA-256}: every tensor of the dict by
                  its path ("model/encoder.embed.weight", "optimizer/state/0/exp_avg") and all
                  other values together, written by `save_checkpoint` and checked on loading,
                  so that damage inside the file (which torch does not notice) refuses it by
                  name; files that predate the key load unchecked

Files are written to a temporary name, flushed to disk and renamed, so a crash while saving
leaves the previous file intact; a run's own set of them is training/checkpoints.py's.
"""

from __future__ import annotations

import errno
import logging
import math
import shutil
from dataclasses import MISSING, dataclass, fields
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from transformer_mt import __version__, kernels
from transformer_mt.checkpoint_checks import (
    check_checkpoint_file,
    check_weights,
    why_unreadable,
)
from transformer_mt.checkpoint_checksums import CHECKSUMS_KEY, check_checksums, checksums
from transformer_mt.config import ExperimentConfig, config_from_dict
from transformer_mt.data.specials import SpecialTokens
from transformer_mt.data.tokenizer import PieceTable, Tokenizer
from transformer_mt.errors import TmtError, one_line, shown_value
from transformer_mt.files import atomic_open, atomic_path
from transformer_mt.model import Seq2SeqTransformer, build_model

log = logging.getLogger(__name__)

REQUIRED_KEYS = ("model", "config", "tokenizers", "step")


@dataclass
class TrainingState:
    """What a run needs besides its weights to continue exactly where it stopped."""

    optimizer: dict[str, Any]  # the optimizer's state_dict
    scaler: dict[str, Any]  # the GradScaler's state_dict
    rng: list[dict[str, Any]]  # generator states, one per rank (`training.rng`)
    # The next batch to read, {"epoch", "batch_index"} (streaming adds "chunk", "world_size");
    # with several ranks {"ranks": [one such position per rank]}.
    data_position: dict[str, Any]
    best_score: float | None  # best validation score so far, higher is better
    bad_validations: int  # validations since the best one (early stopping)
    stats: dict[str, float]  # {"skipped_updates", "elapsed_seconds"}
    # The key of the validation text best_score was measured on (`TrainData.valid_key`); None:
    # unknown (a checkpoint of an earlier release, which a resume takes on trust).
    scored_on: str | None = None


# The one list of training-state keys (`TRAINING_STATE_KEYS`: a checkpoint holding all of them
# can resume a run; `OPTIONAL_TRAINING_KEYS`: read where present).
TRAINING_STATE_KEYS = tuple(f.name for f in fields(TrainingState) if f.default is MISSING)
OPTIONAL_TRAINING_KEYS = tuple(f.name for f in fields(TrainingState) if f.default is not MISSING)


def stored_position(positions: list[dict[str, int]]) -> dict[str, Any]:
    """A checkpoint's `data_position`: the one rank's position, or {"ranks": [rank 0's,
    rank 1's, ...]} for several (streaming ranks stand at different batches)."""
    return positions[0] if len(positions) == 1 else {"ranks": positions}


def rank_position(stored: dict[str, Any], rank: int, world_size: int) -> dict[str, int]:
    """Rank `rank`'s position in a `stored_position`. A checkpoint of another rank count gives
    the position of the rank furthest behind, which the data cursor's `restore` translates
    to this rank count (so that no batch of the epoch is skipped)."""
    ranks = stored.get("ranks")
    if ranks is None:
        return stored
    if len(ranks) == world_size:
        return ranks[rank]
    return min(ranks, key=lambda p: (p["epoch"], p.get("chunk", 0), p["batch_index"]))


@dataclass
class Checkpoint:
    """The contents of one checkpoint file (the format is in the module docstring)."""

    model: dict[str, Tensor]
    config: dict[str, Any]
    tokenizers: dict[str, bytes]
    step: int
    ema: dict[str, Tensor] | None = None
    version: str | None = __version__
    training: TrainingState | None = None
    averaged_from: list[str] | None = None
    specials: dict[str, Any] | None = None  # `SpecialTokens.to_dict`; None: ours
    imported_from: str | None = None
    workdir: str | None = None

    @property
    def weights(self) -> dict[str, Tensor]:
        """The weights to translate with and to average: the EMA ones when the run kept them."""
        return self.ema or self.model

    def special_tokens(self, source: str | Path) -> SpecialTokens:
        """The model's special ids (`SpecialTokens.from_dict`)."""
        return SpecialTokens.from_dict(self.specials, str(source))

    def unpack_tokenizers(self, source: str | Path) -> tuple[Tokenizer, Tokenizer]:
        """The source and target tokenizers (see `pack_tokenizers`) of the checkpoint file
        `source`, which errors name."""
        if not isinstance(self.tokenizers, dict) or not {"src", "tgt"} <= self.tokenizers.keys():
            raise TmtError(f"{source}: tokenizers: not the source and target models")
        return tuple(  # type: ignore[return-value]
            Tokenizer(
                self.tokenizers[side],
                f"{source}: tokenizers.{side}",
                _table(self.tokenizers, side, str(source)),
            )
            for side in ("src", "tgt")
        )

    def to_dict(self) -> dict[str, Any]:
        """The dict `torch.save` writes: training-state keys at the top level, as ever."""
        state: dict[str, Any] = {
            "model": self.model,
            "ema": self.ema,
            "config": self.config,
            "tokenizers": self.tokenizers,
            "step": self.step,
            "version": self.version,
        }
        if self.training is not None:
            state.update((key, getattr(self.training, key)) for key in TRAINING_STATE_KEYS)
            for key in OPTIONAL_TRAINING_KEYS:  # absent rather than None: as older releases
                if getattr(self.training, key) is not None:
                    state[key] = getattr(self.training, key)
        if self.averaged_from is not None:
            state["averaged_from"] = self.averaged_from
        if self.specials is not None:
            state["specials"] = self.specials
        if self.imported_from is not None:
            state["imported_from"] = self.imported_from
        if self.workdir is not None:
            state["workdir"] = self.workdir
        return state

    @classmethod
    def from_dict(cls, state: object, source: str | Path) -> Checkpoint:
        """Read a dict written by `to_dict` in this or any prior release of this package.

        Raises:
            TmtError: `state` is not a dict holding at least model, config, tokenizers, step.
        """
        if not isinstance(state, dict) or not set(REQUIRED_KEYS) <= state.keys():
            raise TmtError(
                f"{source}: not a transformer_mt checkpoint (no {'/'.join(REQUIRED_KEYS)})"
            )
        _check_values(state, source)
        training = None
        if all(key in state for key in TRAINING_STATE_KEYS):
            known = TRAINING_STATE_KEYS + OPTIONAL_TRAINING_KEYS
            training = TrainingState(**{key: state[key] for key in known if key in state})
        return cls(
            model=state["model"],
            config=state["config"],
            tokenizers=state["tokenizers"],
            step=state["step"],
            ema=state.get("ema"),
            version=state.get("version"),
            training=training,
            averaged_from=state.get("averaged_from"),
            specials=state.get("specials"),
            imported_from=state.get("imported_from"),
            workdir=state.get("workdir"),
        )


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _names(value: object) -> bool:
    return isinstance(value, list) and all(isinstance(item, str) for item in value)


# The values a checkpoint's other keys must hold (absent keys, or None where allowed, are
# fine): a hand-made or foreign file with the right keys otherwise reached the commands that
# read it as a traceback or as a wrong description (step "12", averaged_from "abc").
_VALUE_CHECKS: dict[str, tuple[Any, str]] = {
    "step": (_whole, "a whole number >= 0"),
    "version": (lambda v: v is None or isinstance(v, str), "a version string"),
    "averaged_from": (lambda v: v is None or _names(v), "a list of file names"),
    "imported_from": (lambda v: v is None or isinstance(v, str), "a model's name"),
    "workdir": (lambda v: v is None or isinstance(v, str), "a directory's name"),
    "specials": (lambda v: v is None or isinstance(v, dict), "a dict of special ids"),
    "optimizer": (lambda v: isinstance(v, dict), "an optimizer's state dict"),
    "scaler": (lambda v: isinstance(v, dict), "a gradient scaler's state dict"),
    "rng": (lambda v: isinstance(v, list | dict), "generator states"),
    "data_position": (lambda v: isinstance(v, dict), "a dict of the next batch's position"),
    "best_score": (lambda v: v is None or _number(v), "a finite number or None"),
    "bad_validations": (_whole, "a whole number >= 0"),
    "scored_on": (lambda v: v is None or isinstance(v, str), "a corpus key"),
    "stats": (
        lambda v: isinstance(v, dict) and all(_number(x) and x >= 0 for x in v.values()),
        "a dict of finite numbers >= 0",
    ),
}


def _check_values(state: dict, source: str | Path) -> None:
    """Refuse a value of the wrong kind under a key the format defines (`_VALUE_CHECKS`).

    Raises:
        TmtError: naming the file, the key and what it holds.
    """
    for key, (valid, wanted) in _VALUE_CHECKS.items():
        if key in state and not valid(state[key]):
            shown = shown_value(repr(state[key]))
            raise TmtError(f"{source}: {key} is {shown}, not {wanted}")


def pack_tokenizers(src: Tokenizer, tgt: Tokenizer) -> dict[str, bytes]:
    """The `tokenizers` field: both serialized models (and tables), so a checkpoint needs no
    other file."""
    packed = {"src": src.model_bytes, "tgt": tgt.model_bytes}
    for side, tokenizer in (("src", src), ("tgt", tgt)):
        if tokenizer.table is not None:
            packed[f"{side}_pieces"] = tokenizer.table.to_json()
    return packed


def _table(tokenizers: dict[str, bytes], side: str, source: str) -> PieceTable | None:
    table = tokenizers.get(f"{side}_pieces")
    return (
        None
        if table is None
        else PieceTable.from_json(table, f"{source}: tokenizers.{side}_pieces")
    )


def save_checkpoint(checkpoint: Checkpoint, path: str | Path) -> None:
    """Write `checkpoint` atomically: temporary file in the same directory, fsync, rename.

    The rename is atomic on POSIX and Windows, so readers see the old file or the new one,
    never a half-written one; a failure (disk full, crash, exception) removes the temporary
    file and leaves the previous checkpoint untouched. The file carries the checksums of its
    contents (`checksums`, checked by `load_checkpoint`).

    Raises:
        TmtError: writing failed, naming the file (`MachineError` for a full disk), as
            `files.atomic_path` reports it.
    """
    state = checkpoint.to_dict()
    state[CHECKSUMS_KEY] = checksums(state)
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


def load_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> Checkpoint:
    """Read a checkpoint written by `save_checkpoint`, in this or any prior release.

    `weights_only=True`: a checkpoint holds only tensors and plain Python values, so loading
    one from elsewhere cannot execute code. Its checksums, when it has them, must match.

    Raises:
        TmtError: the file is missing, not a regular file, unreadable, truncated, damaged or
            not a transformer_mt checkpoint.
    """
    path = Path(path)
    check_checkpoint_file(path)
    try:
        state = torch.load(path, map_location=map_location, weights_only=True)
    except OSError as err:
        if err.errno != errno.EINVAL:  # torch's zip reader says EINVAL of some cut files
            raise TmtError(f"{path}: cannot read ({err.strerror or one_line(err)})") from None
        raise TmtError(f"{path}: not a readable checkpoint ({why_unreadable(path, err)})") from None
    except Exception as err:  # torch raises many types for truncated or foreign files
        raise TmtError(f"{path}: not a readable checkpoint ({why_unreadable(path, err)})") from None
    checkpoint = Checkpoint.from_dict(state, path)
    check_checksums(state, path)
    check_weights({"model": checkpoint.model, "ema": checkpoint.ema}, path)
    return checkpoint


@dataclass(frozen=True)
class Origin:
    """What a checkpoint file says it was made from (`stored_origin`)."""

    config: ExperimentConfig
    imported_from: str | None  # as given to tmt import: a hub name or a directory
    workdir: str | None  # where its relative paths are relative to (`Checkpoint.workdir`)


def stored_origin(path: Path) -> Origin | None:
    """The config a checkpoint file stores, what it was imported from and the directory it
    was trained in, read without loading its weights (they are memory-mapped, never read)
    and without `load_checkpoint`'s checks: None for a file that is not a readable
    checkpoint, whose loading names why. For a command that must know, before loading, which
    files the checkpoint came from (`input_files`)."""
    try:
        state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        config = config_from_dict(state["config"], source=f"{path} (stored config)")
    except Exception:  # not a checkpoint (not a dict, no config), or damaged
        return None
    imported, workdir = state.get("imported_from"), state.get("workdir")
    return Origin(
        config,
        imported if isinstance(imported, str) else None,
        workdir if isinstance(workdir, str) else None,
    )


@dataclass
class InferenceBundle:
    """Everything `tmt translate` needs, rebuilt from a checkpoint alone."""

    model: Seq2SeqTransformer
    config: ExperimentConfig
    src_tokenizer: Tokenizer
    tgt_tokenizer: Tokenizer
    specials: SpecialTokens


def load_for_inference(path: str | Path, device: str | torch.device = "cpu") -> InferenceBundle:
    """Rebuild model (eval mode), config and tokenizers from a checkpoint file.

    The model is built from the checkpoint's own config copy, not from a YAML file that may
    have changed since, and loaded with strict=True. EMA weights are used when present.

    Raises:
        TmtError: missing or corrupt file, or weights that do not fit the stored config.
    """
    checkpoint, config, (src_tokenizer, tgt_tokenizer), specials = read_for_inference(path)
    vocab_sizes = (src_tokenizer.vocab_size, tgt_tokenizer.vocab_size)
    with torch.random.fork_rng(devices=[]):  # the initial weights, replaced: the caller's draws
        model = build_model(config.model, *vocab_sizes, specials.pad, kernel=kernels.attention)
    fit_weights(model, checkpoint.weights, path)
    model.to(device).eval()
    return InferenceBundle(model, config, src_tokenizer, tgt_tokenizer, specials)


def read_for_inference(
    path: str | Path,
) -> tuple[Checkpoint, ExperimentConfig, tuple[Tokenizer, Tokenizer], SpecialTokens]:
    """A checkpoint with its stored config, tokenizers and special ids, each checked as every
    command that translates with it checks them (`load_for_inference`, `tmt info`).

    Raises:
        TmtError: as `load_checkpoint`, or a stored config, tokenizers or special ids that are
            damaged or do not fit the vocabularies, naming the file.
    """
    checkpoint = load_checkpoint(path, map_location="cpu")
    config = config_from_dict(checkpoint.config, source=f"{path} (stored config)")
    tokenizers = checkpoint.unpack_tokenizers(path)
    specials = checkpoint.special_tokens(path)
    specials.check_vocabulary(tokenizers[0].vocab_size, tokenizers[1].vocab_size, str(path))
    return checkpoint, config, tokenizers, specials


def fit_weights(
    model: Seq2SeqTransformer, weights: dict[str, Tensor], path: str | Path, assign: bool = False
) -> None:
    """Load `weights` into `model`, every key and shape as the model's own (strict); with
    `assign`, the tensors themselves (a model built on the meta device, `tmt info`).

    Raises:
        TmtError: weights that do not fit the stored config, naming the keys.
    """
    try:
        model.load_state_dict(weights, strict=True, assign=assign)
    except RuntimeError as err:  # torch's first line names the model; the next ones the keys
        named = one_line(err).removeprefix(
            f"Error(s) in loading state_dict for {type(model).__name__}:"
        )
        reason = shown_value(named.strip())
        raise TmtError(f"{path}: weights do not match the stored config ({reason})") from None
