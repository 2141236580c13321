"""Loading and writing configs: YAML file and `key=value` overrides in, ExperimentConfig out,
and back to plain data. Every refusal is a one-line ConfigError naming the dotted key and
where it was set:

    train.warmup_step: unknown key (did you mean 'warmup_steps'?) [in configs/x.yaml]
    train.lr: expected a number, got 'abc' [override 'train.lr=abc']
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import yaml

from transformer_mt.config.coercion import from_dict
from transformer_mt.config.errors import ConfigError
from transformer_mt.config.experiment import ExperimentConfig
from transformer_mt.config.reading import read_yaml
from transformer_mt.config.tokenizer import TRAINING_KEYS, refuse_training_keys
from transformer_mt.errors import string_items


def load_config(path: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> ExperimentConfig:
    """Read a YAML file, apply `key=value` overrides, check every key and value.

    Also holds the config to `ModelConfig.check_read` (no key set that nothing reads) and to
    `ExperimentConfig.check_positions`, as a run about to train must;
    a fine-tuning config is checked with its parent's model and search instead
    (`training.finetune`), which its own sections do not hold.

    Raises:
        ConfigError: one line naming the dotted key and where it was set: the file (with the
            line, for a key given twice) or the override.
    """
    path = Path(path)
    data = apply_overrides(read_yaml(path), overrides)
    try:
        config = _parse(data)
        written = data.get("tokenizer")  # a key at its default would be ignored too
        if config.tokenizer.model_file is not None and isinstance(written, dict):
            refuse_training_keys([key for key in TRAINING_KEYS if key in written])
        config.model.check_read()
        if config.train.init_from is None:
            config.check_positions()
    except ConfigError as err:
        origin = _origin(err.keys, path, overrides)
        raise ConfigError(f"{err} [{origin}]", keys=err.keys) from None
    return config


def config_from_dict(data: dict[str, Any], source: str = "<dict>") -> ExperimentConfig:
    """Check and build a config from plain data (a checkpoint's copy), named `source` in
    errors."""
    try:
        return _parse(data)
    except ConfigError as err:
        raise ConfigError(f"{err} [in {source}]", keys=err.keys) from None


def given_keys(path: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> set[str]:
    """The dotted keys ("model.d_model") that the file and the overrides set; every other key
    of the config holds its default."""
    data = apply_overrides(read_yaml(Path(path)), overrides)
    return {
        f"{section}.{key}"
        for section, values in data.items()
        if isinstance(values, dict)
        for key in values
    }


def apply_overrides(data: dict[str, Any], overrides: list[str] | tuple[str, ...]) -> dict:
    """Apply `section.key=value` strings (values parsed as YAML scalars) to a copy of `data`."""
    overrides = string_items(overrides, "overrides")  # a lone "train.lr=5e-4" is one, not 12
    data = {k: (dict(v) if isinstance(v, dict) else v) for k, v in data.items()}
    given: dict[str, str] = {}  # key -> its override, as a config file gives a key once
    for item in overrides:
        key, sep, raw = item.partition("=")
        name = key.strip()
        if not sep or not key:
            raise ConfigError(
                f"override {item!r}: expected key=value, e.g. train.lr=5e-4",
                keys=(name,) if name else (),
            )
        if name in given:
            raise ConfigError(
                f"override {item!r}: {name} given twice (also {given[name]!r}); give it once",
                keys=(name,),
            )
        given[name] = item
        try:
            value = yaml.safe_load(raw)
        except (yaml.YAMLError, RecursionError):  # kept as text, which the key's type refuses
            value = raw
        *parents, leaf = name.split(".")
        node = data
        for depth, part in enumerate(parents, 1):
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                section = ".".join(parents[:depth])
                culprit = given.get(section, item)  # an earlier override may have set it
                raise ConfigError(
                    f"override {culprit!r}: '{section}' is not a section", keys=(section,)
                )
        if isinstance(node.get(leaf), dict):  # replaced whole, the file's other keys would go
            raise ConfigError(
                f"override {item!r}: {name} is a section; set its keys one by one "
                f"({name}.KEY=VALUE)",
                keys=(name,),
            )
        node[leaf] = value
    return data


def config_to_dict(config: Any) -> dict[str, Any]:
    """Plain nested dict (tuples as lists) that `config_from_dict` reads back unchanged."""
    return {f.name: _plain(getattr(config, f.name)) for f in dataclasses.fields(config)}


def _plain(value: Any) -> Any:
    """A config value as YAML data: a dataclass as a dict, a tuple as a list, at any depth."""
    if dataclasses.is_dataclass(value):
        return config_to_dict(value)
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    return value


def dump_config(config: ExperimentConfig, path: str | Path) -> None:
    """Write `config` as YAML that `load_config` reads back unchanged."""
    Path(path).write_text(yaml.safe_dump(config_to_dict(config), sort_keys=False), "utf-8")


def _parse(data: dict[str, Any]) -> ExperimentConfig:
    config = from_dict(ExperimentConfig, data, "")
    config.validate()
    return config


def _origin(keys: tuple[str, ...], path: Path, overrides: list[str] | tuple[str, ...]) -> str:
    """Where `keys` (an error's blamed keys) were set: the overrides that set them, the file,
    or both (a rule across fields may blame one key of each). An error that blames no key is
    blamed on the file."""
    named = set(keys)
    blamed = []
    for item in reversed(overrides):  # the last override of a key is the one that holds
        key = item.partition("=")[0].strip()
        hits = {n for n in named if _within(n, key) or _within(key, n)}
        if hits:
            blamed.insert(0, f"override {item!r}")
            named -= hits
    if named or not blamed:
        blamed.insert(0, f"in {path}")
    return ", ".join(blamed)


def _within(name: str, key: str) -> bool:
    """True when dotted `name` is `key` or lies inside it (`train.lr` inside `train`)."""
    return name == key or name.startswith((key + ".", key + "["))
