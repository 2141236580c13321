"""Typed experiment configuration, loaded strictly from YAML.

Every default lives in one dataclass field, with a comment on what it does and, where it is
not obvious, why. A YAML file holds one experiment's overrides; `--set key=value` overrides go
through the same door, so a typo on the command line fails like a typo in the file:

    train.warmup_step: unknown key (did you mean 'warmup_steps'?) [in configs/x.yaml]
    train.lr: expected a number, got 'abc' [override 'train.lr=abc']

The schema is a module per section (model, data, tokenizer, train, decode), gathered by
`experiment`; `loading` reads files and overrides through `reading` (YAML) and `coercion`
(types); every refusal is a `ConfigError` (`errors`) that carries the keys it blames.
`changes` compares stored configs (what a resume, a fine-tune or an average may change);
`decode_rules` holds what interfaces read off the decode settings (their types); per-text
options and their counts are the request type's (`inference.requests.Texts`).
"""

from transformer_mt.config.data import DataConfig, TrainSource
from transformer_mt.config.decode import (
    DECODE_RANGES,
    GREEDY,
    OUTPUT_NEUTRAL_FIELDS,
    SAMPLING_FIELDS,
    DecodeConfig,
    check_changes_read,
)
from transformer_mt.config.decode_rules import decode_field_types
from transformer_mt.config.errors import ConfigError
from transformer_mt.config.experiment import ExperimentConfig
from transformer_mt.config.loading import (
    apply_overrides,
    config_from_dict,
    config_to_dict,
    dump_config,
    given_keys,
    load_config,
)
from transformer_mt.config.model import ModelConfig
from transformer_mt.config.tokenizer import TokenizerConfig
from transformer_mt.config.train import TrainConfig

__all__ = [
    "DECODE_RANGES",
    "GREEDY",
    "OUTPUT_NEUTRAL_FIELDS",
    "SAMPLING_FIELDS",
    "ConfigError",
    "DataConfig",
    "DecodeConfig",
    "ExperimentConfig",
    "ModelConfig",
    "TokenizerConfig",
    "TrainConfig",
    "check_changes_read",
    "TrainSource",
    "apply_overrides",
    "config_from_dict",
    "config_to_dict",
    "decode_field_types",
    "dump_config",
    "given_keys",
    "load_config",
]
