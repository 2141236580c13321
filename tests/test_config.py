from pathlib import Path

import pytest

from transformer_mt.config import (
    ConfigError,
    ExperimentConfig,
    config_to_dict,
    dump_config,
    load_config,
)

CONFIGS = sorted((Path(__file__).resolve().parents[1] / "configs").glob("*.yaml"))


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "exp.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_empty_file_gives_defaults(tmp_path):
    assert load_config(write(tmp_path, "")) == ExperimentConfig()


def test_unknown_key_names_dotted_path_and_suggests(tmp_path):
    path = write(tmp_path, "train:\n  warmup_step: 10\n")
    with pytest.raises(ConfigError, match=r"train\.warmup_step: unknown key") as err:
        load_config(path)
    assert "did you mean 'warmup_steps'?" in str(err.value)
    assert str(path) in str(err.value)


def test_unknown_section_suggests(tmp_path):
    with pytest.raises(ConfigError, match="did you mean 'model'"):
        load_config(write(tmp_path, "modle:\n  d_model: 8\n"))


def test_wrong_type(tmp_path):
    with pytest.raises(ConfigError, match=r"model\.d_model: expected an integer, got 'big'"):
        load_config(write(tmp_path, "model:\n  d_model: big\n"))
    with pytest.raises(ConfigError, match=r"train\.lr: expected a number"):
        load_config(write(tmp_path, "train:\n  lr: fast\n"))


def test_floats_accept_ints_and_exponent_strings(tmp_path):
    cfg = load_config(write(tmp_path, "train:\n  lr: 1e-4\n  clip_norm: 1\n"))
    assert cfg.train.lr == 1e-4 and cfg.train.clip_norm == 1.0


def test_bad_choice(tmp_path):
    with pytest.raises(ConfigError, match=r"train\.schedule: 'noan' is not one of") as err:
        load_config(write(tmp_path, "train:\n  schedule: noan\n"))
    assert "did you mean 'noam'" in str(err.value)


def test_cross_field_rule(tmp_path):
    with pytest.raises(ConfigError, match="not divisible"):
        load_config(write(tmp_path, "model:\n  d_model: 30\n  n_heads: 4\n"))
    with pytest.raises(ConfigError, match=r"tokenizer\.bpe_dropout needs model_type bpe"):
        load_config(write(tmp_path, "tokenizer: {model_type: unigram, bpe_dropout: 0.1}\n"))
    with pytest.raises(ConfigError, match=r"tokenizer\.bpe_dropout=1\.0 must be in \[0, 1\)"):
        load_config(write(tmp_path, "tokenizer: {bpe_dropout: 1.0}\n"))


def test_overrides_apply_and_are_checked(tmp_path):
    path = write(tmp_path, "train:\n  lr: 1e-3\n")
    cfg = load_config(path, ["train.lr=5e-4", "train.max_steps=20", "train.warmup_steps=5"])
    assert (cfg.train.lr, cfg.train.max_steps, cfg.train.warmup_steps) == (5e-4, 20, 5)
    with pytest.raises(ConfigError, match="did you mean 'max_steps'"):
        load_config(path, ["train.max_step=20"])
    with pytest.raises(ConfigError, match="expected key=value"):
        load_config(path, ["train.lr"])
    with pytest.raises(ConfigError, match="expected an integer"):
        load_config(path, ["train.seed=abc"])
    with pytest.raises(ConfigError, match="is not a section"):
        load_config(path, ["train.lr.x=1"])


def test_dump_load_round_trip(tmp_path):
    cfg = load_config(
        write(tmp_path, "model:\n  d_model: 32\n  n_heads: 4\ntrain:\n  adam_betas: [0.9, 0.99]\n")
    )
    out = tmp_path / "resolved.yaml"
    dump_config(cfg, out)
    again = load_config(out)
    assert again == cfg
    assert config_to_dict(again) == config_to_dict(cfg)


def test_missing_file_and_bad_yaml(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "nope.yaml")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(write(tmp_path, "train: [\n"))


@pytest.mark.parametrize("path", CONFIGS, ids=[p.name for p in CONFIGS])
def test_every_config_file_loads(path):
    load_config(path)
