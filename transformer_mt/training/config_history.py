"""A run's config.yaml and config_history.yaml: the settings a run uses now, and each change
made on resuming it.

A resumed run may change settings that do not define its model or corpus (a learning rate, a
budget). config.yaml is always the config in use; the history keeps the config the run started
with and, for each resume that changed something, the step it resumed from and each changed
key as [old, new], so that a run's curves can be read against the settings that made them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from transformer_mt.artifacts import Checkpoint
from transformer_mt.config import ExperimentConfig, config_to_dict, dump_config
from transformer_mt.config.changes import config_changes, normalized_config
from transformer_mt.errors import TmtError
from transformer_mt.files import atomic_open, atomic_path
from transformer_mt.run_layout import CONFIG_NAME, HISTORY_NAME

HISTORY_HEADER = """\
# Settings changed on resuming this run. original: the config it started with. changes: for
# each resume that changed something, the checkpoint step it resumed from (the new values hold
# for every update after it) and each changed key as [old, new]. config.yaml: the config now.
"""


def record_config(run_dir: Path, config: ExperimentConfig, resume: Checkpoint | None) -> None:
    """Write config.yaml (the config the run uses now) and keep the history of changes.

    config_history.yaml appears with the first resume that changes a setting: it holds the
    config the run started with and, for each such resume, the step it resumed from and each
    changed key as [old, new]. The base of a change is the config the history says was in use,
    not the checkpoint's copy, so that a changed run killed before its first save and resumed
    with the old settings records the change back. A fresh run drops a history left behind.
    """
    history_path = run_dir / HISTORY_NAME
    recorded = None if resume is None else _read_history(history_path)  # refused: nothing written
    in_use = None if recorded is None else _config_in_use(recorded, history_path)  # likewise
    with atomic_path(run_dir / CONFIG_NAME) as tmp:
        dump_config(config, tmp)
    if resume is None:
        history_path.unlink(missing_ok=True)
        return
    history = recorded or {
        "original": normalized_config(resume.config, f"{history_path.parent} (stored config)"),
        "changes": [],
    }
    if in_use is None:
        in_use = _config_in_use(history, history_path)
    changes = config_changes(in_use, config_to_dict(config))
    if not changes:
        return
    history["changes"].append({"step": resume.step, "changes": changes})
    with atomic_open(history_path) as f:
        f.write(HISTORY_HEADER)
        yaml.safe_dump({"original": history["original"]}, f, sort_keys=False)
        # Flow style for the innermost lists: each change on one line, `key: [old, new]`.
        yaml.safe_dump({"changes": history["changes"]}, f, sort_keys=False, default_flow_style=None)


def _config_in_use(history: dict[str, Any], path: Path) -> dict[str, Any]:
    """The original config with every recorded change applied in order, checked as a config
    (a hand-edited change of a key no config has, or of a wrong type, would make the next
    record wrong).

    Raises:
        ConfigError: the changes make no valid config, naming the key and the file.
    """
    config = normalized_config(history["original"], f"{path} (original)")
    for entry in history["changes"]:
        for dotted, (_, value) in entry["changes"].items():
            section, key = dotted.split(".", 1)
            config.setdefault(section, {})[key] = value
    return normalized_config(config, f"{path} (its changes applied)")


def _read_history(path: Path) -> dict[str, Any] | None:
    """The parsed config history, or None when the run has none yet.

    Raises:
        TmtError: the file is not a history this module wrote.
    """
    if not path.exists():
        return None
    try:
        history = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as err:
        raise TmtError(f"{path}: unreadable config history ({type(err).__name__})") from None
    if not isinstance(history, dict) or {"original", "changes"} - history.keys():
        raise TmtError(f"{path}: not a config history (needs 'original' and 'changes')")
    if not isinstance(history["changes"], list) or not all(map(_is_change, history["changes"])):
        raise TmtError(
            f"{path}: not a config history (each change needs a step and `section.key: "
            "[old, new]` pairs); restore it, or delete it to start the history afresh"
        )
    return history


def _is_change(entry: object) -> bool:
    """Whether `entry` is one resume's record as `record_config` writes it."""
    if not isinstance(entry, dict) or not isinstance(entry.get("changes"), dict):
        return False
    step = entry.get("step")
    if not isinstance(step, int) or isinstance(step, bool) or step < 0:
        return False
    return all(
        isinstance(key, str) and "." in key and isinstance(pair, list) and len(pair) == 2
        for key, pair in entry["changes"].items()
    )
