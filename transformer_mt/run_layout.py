"""The files of a run directory, named once: what training writes and reads back.

`tmt train` keeps everything of a run in one directory (README, "train"). Training, resuming,
averaging and every command that writes a file a user names (`files.check_output`) read the
names from here, so that no command can write over a file a run depends on.
"""

from __future__ import annotations

import re
from pathlib import Path

CONFIG_NAME = "config.yaml"  # the resolved config the run trains with
HISTORY_NAME = "config_history.yaml"  # settings changed on resuming
LOCK_NAME = "train.lock"  # held by the one process training the run
METRICS_NAME = "metrics.jsonl"  # one JSON row per log and validation
LOG_NAME = "train.log"  # every line training logs, run after run (progress, warnings, stops)
CHECKPOINTS_DIR = "checkpoints"
LAST_NAME = "last.pt"  # where a resume starts
BEST_NAME = "best.pt"  # best validation BLEU
PERIODIC_PATTERN = re.compile(r"step_(\d+)\.pt")  # kept for averaging and as resume fallbacks
TOKENIZER_PREFIX = "spm-"  # spm-<role>-<hash>.model / .vocab


def is_run_dir(directory: Path) -> bool:
    """Whether `directory` holds a run: its config beside a checkpoints folder or a metrics
    log (a run that stopped before its first checkpoint has no checkpoints folder yet)."""
    return (directory / CONFIG_NAME).is_file() and (
        (directory / CHECKPOINTS_DIR).is_dir() or (directory / METRICS_NAME).is_file()
    )


def run_artifact(path: str | Path) -> str | None:
    """What `path` is to the run that holds it, or None when it is no run's file.

    Files a user may replace inside a run directory (a plot, an averaged checkpoint, a
    translation) are not run artifacts: nothing the run does reads them back.
    """
    given = Path(path)
    folder = given.absolute().parent
    if folder.name == CHECKPOINTS_DIR and _is_checkpoint_name(given.name):
        return f"a training checkpoint of {_as_given(given.parent.parent)}"
    return run_file(given.parent, given) if is_run_dir(folder) else None


def run_file(run_dir: str | Path, path: str | Path) -> str | None:
    """What `path` is to a run in `run_dir` (a run there or one `tmt train` would start),
    or None when training never writes it: what no input of that run may be."""
    shown = _as_given(Path(run_dir))
    run_dir, path = Path(run_dir).absolute(), Path(path).absolute()
    name = path.name
    if path.parent == run_dir / CHECKPOINTS_DIR and _is_checkpoint_name(name):
        return f"a training checkpoint of {shown}"
    if path.parent != run_dir:
        return None
    if name == METRICS_NAME:
        return f"the metrics log of {shown}"
    if name in (CONFIG_NAME, HISTORY_NAME, LOCK_NAME, LOG_NAME):
        return f"the {name} of {shown}"
    if name.startswith(TOKENIZER_PREFIX):
        return f"a tokenizer of {shown}"
    return None


def _as_given(folder: Path) -> Path:
    """A run directory as messages name it: as the user wrote it (`runs/x`), but for the
    current directory, which `.` would not name."""
    return folder.absolute() if str(folder) == "." else folder


def _is_checkpoint_name(name: str) -> bool:
    """last.pt, best.pt or a periodic checkpoint: the names training writes (and prunes)."""
    return name in (LAST_NAME, BEST_NAME) or PERIODIC_PATTERN.fullmatch(name) is not None


def periodic_name(step: int) -> str:
    """The file name of the periodic checkpoint of `step` (PERIODIC_PATTERN)."""
    return f"step_{step:08d}.pt"


def periodic_checkpoints(directory: str | Path) -> list[Path]:
    """`step_*.pt` files of a checkpoints directory (or a run directory), oldest first."""
    directory = Path(directory)
    if (directory / CHECKPOINTS_DIR).is_dir():
        directory = directory / CHECKPOINTS_DIR
    found = [p for p in directory.glob("step_*.pt") if PERIODIC_PATTERN.fullmatch(p.name)]
    return sorted(found, key=periodic_step)


def periodic_step(path: Path) -> int:
    """The step of a periodic checkpoint's file name."""
    return int(PERIODIC_PATTERN.fullmatch(path.name).group(1))
