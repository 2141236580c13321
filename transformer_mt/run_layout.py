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
    path = Path(path).absolute()
    folder, name = path.parent, path.name
    if folder.name == CHECKPOINTS_DIR and (
        name in (LAST_NAME, BEST_NAME) or PERIODIC_PATTERN.fullmatch(name)
    ):
        return f"a training checkpoint of {folder.parent}"
    if not is_run_dir(folder):
        return None
    if name == METRICS_NAME:
        return f"the metrics log of {folder}"
    if name in (CONFIG_NAME, HISTORY_NAME, LOCK_NAME):
        return f"the {name} of {folder}"
    if name.startswith(TOKENIZER_PREFIX):
        return f"a tokenizer of {folder}"
    return None
