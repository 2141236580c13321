"""Why a file named as a checkpoint is refused, in words: not a regular file (a run directory,
with the checkpoint the user probably meant), not a file `torch.save` writes, truncated, holding
pickled objects, or holding weights no command can use (NaN from a diverged run).

torch's own messages name zip records and pickle opcodes; these say what the file is, so that
every command that reads a checkpoint refuses a bad one in one line naming it.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

import torch
from torch import Tensor

from transformer_mt.errors import TmtError, one_line, shown_value
from transformer_mt.run_layout import BEST_NAME, CHECKPOINTS_DIR
from transformer_mt.text_files import path_kind


def check_weights(weight_sets: dict[str, object], path: Path) -> None:
    """Refuse weights no command can use (`weight_sets`: a checkpoint's `model` and `ema`, by
    name): an entry that is not a tensor (a damaged or foreign file whose checksums were made
    after), or a floating one holding NaN or inf (a run that diverged: its translations are
    empty, its average NaN). One pass over the weights."""
    for field, weights in weight_sets.items():
        if weights is None:
            continue
        if not isinstance(weights, dict):
            raise TmtError(f"{path}: {field} is a {type(weights).__name__}, not a dict of tensors")
        for name, tensor in weights.items():
            if not isinstance(tensor, Tensor):
                kind = type(tensor).__name__
                raise TmtError(f"{path}: {field}/{name} is a {kind}, not a tensor")
            if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
                raise TmtError(
                    f"{path}: {field}/{name} holds NaN or infinite values (a run that "
                    "diverged); take an earlier checkpoint"
                )


# How the files `torch.save` writes begin: a zip archive (since torch 1.6), or a pickle.
_TORCH_FILE_STARTS = (b"PK\x03\x04", b"\x80")
# How torch's weights-only loader names an object it refuses to build (a whole nn.Module saved).
_UNSAFE_GLOBAL = re.compile(r"Unsupported global: GLOBAL ([\w.]+)")


def why_unreadable(path: Path, err: Exception) -> str:
    """Why `torch.load` failed on `path`, in words: its own message names a zip record or a
    pickle opcode, which says little about what the file is."""
    with open(path, "rb") as f:
        start = f.read(4)
    if not start:
        return "an empty file"
    if not start.startswith(_TORCH_FILE_STARTS):
        return "not a file that torch.save writes"
    foreign = _UNSAFE_GLOBAL.search(str(err))
    if foreign is not None:  # intact, but holding objects weights_only does not build
        return (
            f"it holds a pickled {foreign.group(1)}: a checkpoint holds tensors and plain "
            "values only, and objects, which run code as they load, are not loaded"
        )
    first_sentence = one_line(err).split(". ")[0]  # torch goes on with advice about pickles
    return f"truncated or damaged: {shown_value(first_sentence)}"


def check_checkpoint_file(path: Path) -> None:
    """Refuse a name that is not a regular file, saying what it is instead.

    Raises:
        TmtError: a directory, a device, a pipe, a socket, a dangling link or nothing.
    """
    if path.is_dir():
        raise TmtError(f"{path}: is a directory, not a checkpoint file{_file_hint(path)}")
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        if path.is_symlink():
            target = os.readlink(path)
            raise TmtError(
                f"{path}: checkpoint not found (a link to {target}, which does not exist)"
            ) from None
        raise TmtError(f"{path}: checkpoint not found") from None
    except OSError as err:
        raise TmtError(f"{path}: cannot read ({err.strerror or one_line(err)})") from None
    if not stat.S_ISREG(mode):
        raise TmtError(f"{path}: is {path_kind(path)}, not a checkpoint file; name a .pt file")


def _file_hint(directory: Path) -> str:
    """Suggest the checkpoint a user probably meant when they named a run or checkpoints dir."""
    for candidate in (directory / CHECKPOINTS_DIR / BEST_NAME, directory / BEST_NAME):
        if candidate.is_file():
            return f"; did you mean {candidate}?"
    return "; name a .pt file"
