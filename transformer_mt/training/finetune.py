"""Fine-tuning: a run that starts from a checkpoint (`train.init_from`), one of ours or one
`tmt import` wrote.

The child is the parent's model: its `model` and `tokenizer` sections are the parent's, so a
config need not repeat them, and a key it sets to another value is refused by name (changing
the architecture or the vocabulary would leave weights without a place, or places without
weights). Training-only settings (dropout, BPE-dropout, the attention backend;
`config.changes.TRAINING_ONLY_SETTINGS`) may differ. Languages and data are the child's own: a
fr->en parent fine-tuned on de->en pairs is the classic transfer for a small language pair.

The parent gives the first weights, the tokenizers and the special ids, and the defaults of
the `decode` section (the search `tmt import` wrote for an imported model, which the config's
own decode keys override); optimizer, schedule and step start afresh. The child's checkpoints
hold all of it, so it resumes like any run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from transformer_mt import artifacts
from transformer_mt.artifacts import Checkpoint
from transformer_mt.config import ConfigError, ExperimentConfig, config_from_dict, config_to_dict
from transformer_mt.config.changes import TRAINING_ONLY_SETTINGS, normalized_config
from transformer_mt.errors import TmtError

INHERITED_SECTIONS = ("model", "tokenizer")


def resolve(
    config: ExperimentConfig, given: set[str], found: tuple[Path, Checkpoint] | None
) -> tuple[ExperimentConfig, Checkpoint | None]:
    """The fine-tuning run's config (`inherit`), and the parent to start from: None when the
    run resumes from its own checkpoint (`found`, `checkpoints.resume_checkpoint`'s answer),
    which holds all the parent gave (the parent file is then neither needed nor read).

    Raises:
        TmtError: the parent cannot be read, or the config changes its architecture.
    """
    if found is not None:
        return inherit(config, given, found[1]), None
    parent = _load_parent(str(config.train.init_from))
    return inherit(config, given, parent), parent


def _load_parent(path: str) -> Checkpoint:
    try:
        return artifacts.load_checkpoint(path)
    except TmtError as err:
        raise TmtError(f"train.init_from: {err}") from None


def inherit(config: ExperimentConfig, given: set[str], parent: Checkpoint) -> ExperimentConfig:
    """`config` with the parent's model and tokenizer sections, and its decode settings where
    the config sets none; `given` are the keys the user's file and overrides set
    (`config.given_keys`).

    Raises:
        TmtError: a given key of those sections differs from the parent's, naming both values.
    """
    source = str(config.train.init_from)
    stored = normalized_config(parent.config, f"{source} (stored config)")
    current = config_to_dict(config)
    merged: dict[str, Any] = dict(current)
    for section in INHERITED_SECTIONS:
        merged[section] = dict(stored[section])
        for key, value in current[section].items():
            dotted = f"{section}.{key}"
            if dotted not in given or value == stored[section].get(key):
                continue
            if dotted not in TRAINING_ONLY_SETTINGS:
                raise TmtError(
                    f"train.init_from {source}: {dotted} is {value!r} here and "
                    f"{stored[section].get(key)!r} in the checkpoint; fine-tuning keeps the "
                    "model's architecture and vocabulary (remove the key)"
                )
            merged[section][key] = value
    # The parent's search (for an import, the one its authors configured) unless the config
    # sets its own: the child is the same kind of model.
    merged["decode"] = {
        key: value if f"decode.{key}" in given else stored["decode"].get(key, value)
        for key, value in current["decode"].items()
    }
    child = config_from_dict(merged, f"{Path(source).name} + the fine-tuning config")
    _check_child(child, parent, source)
    return child


def _check_child(child: ExperimentConfig, parent: Checkpoint, source: str) -> None:
    """What a run from scratch is refused at loading, checked against the parent's model: a
    position table too short for the child's pairs, and several target languages the parent
    has no tags for (the model could not tell which to write).

    Raises:
        TmtError: naming the setting and the parent.
    """
    try:
        child.check_positions(table_fixed=True)
    except ConfigError as err:
        raise TmtError(f"train.init_from {source}: {err}") from None
    targets = dict.fromkeys(tgt for _, tgt in child.data.directions())
    tags = parent.special_tokens(source).language_tags
    untagged = [code for code in targets if code not in tags]
    if len(targets) > 1 and untagged:
        raise TmtError(
            f"train.init_from {source}: data.train translates into {', '.join(targets)}, and "
            f"the model has no language tag for {', '.join(untagged)}: it could not tell which "
            "language to write; fine-tune a multilingual model, or train one direction"
        )
