"""A training run's own checkpoints: which one a run resumes from, which periodic ones it keeps,
and which ones `tmt average` averages.

Run directories keep `checkpoints/last.pt`, `checkpoints/best.pt` and the last `keep_last`
periodic ones, `checkpoints/step_00001000.pt`, each an independent file (damage to one leaves
the others loadable). The format of each file is `artifacts`'; the names of a run's files are
`run_layout`'s.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

from transformer_mt.artifacts import Checkpoint, load_checkpoint
from transformer_mt.config import load_config
from transformer_mt.errors import TmtError
from transformer_mt.files import check_output, repeated_file
from transformer_mt.input_files import checkpoint_input_files
from transformer_mt.run_layout import (
    BEST_NAME,
    CHECKPOINTS_DIR,
    CONFIG_NAME,
    LAST_NAME,
    periodic_checkpoints,
    periodic_step,
)
from transformer_mt.temporaries import remove_stale_temporaries

log = logging.getLogger(__name__)


def resume_checkpoint(directory: str | Path) -> tuple[Path, Checkpoint] | None:
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
        (path, checkpoint), or None when `directory` holds no checkpoint (a fresh run).

    Raises:
        TmtError: the chosen file is an averaged/inference checkpoint, or checkpoints exist
            and none of them can be read.
    """
    directory = Path(directory)
    if directory.is_dir() and remove_stale_temporaries(directory):
        log.info("removed the temporary files of an interrupted save in %s", directory)
    candidates = [directory / LAST_NAME, *reversed(periodic_checkpoints(directory))]
    skipped = []
    for i, path in enumerate(candidates):
        if not path.exists():
            skipped.append(f"{path.name} is missing")
            continue
        try:
            checkpoint = load_checkpoint(path)
        except TmtError as err:
            skipped.append(str(err))
            continue
        if checkpoint.training is None:
            raise TmtError(_not_resumable(path, checkpoint, candidates[i + 1 :]))
        if i > 0:
            log.warning("resuming from %s (skipped: %s)", path, "; ".join(skipped))
        return path, checkpoint
    if len(candidates) > 1 or candidates[0].exists():
        raise TmtError(
            f"{directory}: no readable training checkpoint ({'; '.join(skipped)}); move the "
            "damaged files away to start the run afresh"
        )
    return None


def _not_resumable(path: Path, checkpoint: Checkpoint, older: list[Path]) -> str:
    kind = "an averaged" if checkpoint.averaged_from is not None else "an inference"
    then = f"resume from {older[0].name}" if older else "start the run afresh"
    return (
        f"{path}: {kind} checkpoint (no optimizer state) cannot resume training; move it out "
        f"of {path.parent} to {then}"
    )


def prune_checkpoints(
    directory: str | Path, keep_last: int, up_to: int | None = None
) -> list[Path]:
    """Delete all but the newest `keep_last` periodic checkpoints; returns the deleted paths.

    Called only after the new checkpoint is on disk and never touches last.pt or best.pt, so
    the run always keeps a file to resume from. Files after step `up_to` are left alone: they
    come from a save cut short before last.pt was written, and counting them could delete the
    file just saved.
    """
    old = [p for p in periodic_checkpoints(directory) if up_to is None or periodic_step(p) <= up_to]
    old = old[: max(len(old) - keep_last, 0)]
    for p in old:
        p.unlink(missing_ok=True)
    return old


def resolve_average_inputs(
    inputs: Sequence[str | Path], last: int | None, out: str | Path | None = None
) -> list[Path]:
    """Expand run or checkpoint directories into their periodic checkpoints; keep the last N.

    Everything is checked before any weights are read. With `out`, the average must not land
    on an input, on a file an input was made from (`checkpoint_input_files`) or on a file a
    run reads back (`files.check_output`): an averaged checkpoint has no optimizer state, so
    the next resume would fail, and a step file would be averaged again. Finding fewer than
    `last` is not an error; the caller can compare and say so.

    Raises:
        TmtError: `last` is below 1, an input does not exist, one of several directories
            holds no periodic checkpoint, a checkpoint is given twice, nothing is left to
            average, or `out` names a run's checkpoint, an input or a directory.
    """
    if last is not None and last < 1:
        raise TmtError(f"cannot average the newest {last} checkpoints: the count must be 1 or more")
    paths: list[Path] = []
    for item in map(Path, inputs):
        if item.is_dir():
            found = periodic_checkpoints(item)
            if not found and len(inputs) > 1:  # alone, it is said below with its reason
                raise TmtError(
                    f"{item}: no periodic checkpoints (step_*.pt) in it{_keeps_none(item)}"
                )
            paths.extend(found)
        elif item.exists():  # a file, or something `load_checkpoint` will say is not one
            paths.append(item)
        else:
            raise TmtError(f"{item}: no such checkpoint or directory")
    twice = repeated_file(paths)  # the same file twice would count twice in the mean
    if twice is not None:
        raise TmtError(f"{twice[0]}: given twice (also as {twice[1]}); average each once")
    if out is not None:
        check_output(
            out, [f for path in paths for f in checkpoint_input_files(path, "input checkpoint")]
        )
    if last is not None:
        paths = paths[-last:]
    if not paths:
        raise TmtError(
            f"no periodic checkpoints (step_*.pt) found in {', '.join(map(str, inputs))}"
            + "".join(_keeps_none(Path(item)) for item in inputs)
        )
    return paths


def _keeps_none(directory: Path) -> str:
    """Why run `directory` (or its checkpoints directory) holds no periodic checkpoints, when
    its config says so ("": it does not, or there is no config to read)."""
    run = directory.parent if directory.name == CHECKPOINTS_DIR else directory
    if not (run / CONFIG_NAME).is_file():
        return ""
    try:
        keep_last = load_config(run / CONFIG_NAME).train.keep_last
    except TmtError:  # an edited config: its own command says what is wrong with it
        return ""
    if keep_last > 0:
        return ""
    return (
        f": {run / CONFIG_NAME} has train.keep_last: 0, so the run keeps none besides "
        f"{BEST_NAME} and {LAST_NAME}; set train.keep_last above 0 (e.g. 5) and train again, or "
        "name the checkpoint files to average"
    )
