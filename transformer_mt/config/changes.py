"""Stored configs compared: which settings of a checkpoint's config and another config differ,
and which of those make another model.

A resumed run, a fine-tuned child and an average all ask the same two questions of two configs
(what changed; does it change the model), so the answers live here once. Stored configs are
parsed and dumped again first (`normalized_config`): a key added to the schema since a file was
written then compares at its default instead of counting as a change.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from transformer_mt.config.loading import config_from_dict, config_to_dict

# The settings that make a model what it is: its architecture, its vocabularies and the
# languages it translates between, as "section" (every key of it) or "section.key". Two
# checkpoints that differ in one of them are two models: averaging them gives a model that
# matches neither, and resuming one with the other's settings trains another model on top.
MODEL_SETTINGS = ("model", "tokenizer", "data.src_lang", "data.tgt_lang")
# Keys of those sections that only change how a model trains: dropout is off at inference,
# BPE-dropout samples segmentations of the same vocabulary, and the attention backend computes
# the same function with other kernels.
TRAINING_ONLY_SETTINGS = frozenset(
    {
        *("model.dropout", "model.attn_dropout", "model.activation_dropout"),
        *("model.attention_backend", "tokenizer.bpe_dropout", "tokenizer.bpe_dropout_sides"),
    }
)


def normalized_config(data: dict[str, Any], source: str) -> dict[str, Any]:
    """A stored config parsed and dumped again, so that fields added to the config since it was
    written compare at their defaults instead of counting as changes.

    Raises:
        ConfigError: `data` is not a config this release can read (named by `source`).
    """
    return config_to_dict(config_from_dict(data, source=source))


def config_changes(old: dict[str, Any], new: dict[str, Any]) -> dict[str, list[Any]]:
    """`{"section.key": [old value, new value]}` for every setting that differs, sorted.

    Args:
        old, new: configs as `normalized_config` returns them.
    """
    return {
        f"{section}.{key}": [old.get(section, {}).get(key), value]
        for section in sorted(new)
        for key, value in sorted(new[section].items())
        if old.get(section, {}).get(key) != value
    }


def model_setting_changes(
    old: dict[str, Any], new: dict[str, Any], settings: Sequence[str] = MODEL_SETTINGS
) -> list[str]:
    """The keys of `config_changes(old, new)` that `settings` names ("section" or
    "section.key"), training-only ones (`TRAINING_ONLY_SETTINGS`) left out."""
    return [
        key
        for key in config_changes(old, new)
        if (key in settings or key.split(".")[0] in settings) and key not in TRAINING_ONLY_SETTINGS
    ]
