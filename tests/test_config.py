import dataclasses
import math
from pathlib import Path

import pytest
import torch

from transformer_mt.config import (
    DECODE_RANGES,
    ConfigError,
    DataConfig,
    DecodeConfig,
    ExperimentConfig,
    ModelConfig,
    TokenizerConfig,
    config_from_dict,
    config_to_dict,
    decode_field_types,
    dump_config,
    load_config,
)
from transformer_mt.model import build_model
from transformer_mt.search import search

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


def test_duplicate_keys_are_refused_with_both_lines(tmp_path):
    path = write(tmp_path, "train:\n  lr: 1e-3\n  max_steps: 50\n  lr: 2e-3\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert str(err.value) == f"{path}:4: duplicate key train.lr (first at line 2); keep one"
    with pytest.raises(ConfigError, match=r"exp\.yaml:3: duplicate key model \(first at line 1\)"):
        load_config(write(tmp_path, "model:\n  d_model: 32\nmodel:\n  n_heads: 4\n"))
    with pytest.raises(ConfigError, match=r":1: duplicate key decode\.beam_size \(first at line 1"):
        load_config(write(tmp_path, "decode: {beam_size: 4, beam_size: 5}\n"))


def test_keys_are_compared_by_value_and_type_and_aliases_walked_once(tmp_path):
    # A recursive alias must not loop; '1' and 1 are two keys, not one given twice.
    with pytest.raises(ConfigError, match=r"^train\.lr: expected a number"):
        load_config(write(tmp_path, "train: &t {lr: *t}\n"))
    with pytest.raises(ConfigError, match=r"^train\.1: unknown key") as err:
        load_config(write(tmp_path, "train: {'1': 2, 1: 3}\n"))
    assert "duplicate" not in str(err.value)


def test_config_file_not_utf8_folder_or_missing(tmp_path):
    latin1 = tmp_path / "latin1.yaml"
    latin1.write_bytes(b"train:\n  lr: 1e-3  # gr\xfcn\n")
    with pytest.raises(ConfigError) as err:
        load_config(latin1)
    assert str(err.value) == f"{latin1}:2: not UTF-8 text (byte 0xfc); save the file as UTF-8"
    with pytest.raises(ConfigError) as err:
        load_config(tmp_path)
    assert str(err.value) == f"{tmp_path}: is a folder, not a config file; name a .yaml file"
    with pytest.raises(ConfigError) as err:
        load_config(tmp_path / "nope.yaml")
    assert str(err.value) == f"{tmp_path / 'nope.yaml'}: config file not found"


def test_override_errors_name_the_override_not_the_file(tmp_path):
    path = write(tmp_path, "train:\n  lr: 1e-3\n")
    with pytest.raises(ConfigError) as err:
        load_config(path, ["train.lr=abc"])
    assert str(err.value) == "train.lr: expected a number, got 'abc' [override 'train.lr=abc']"
    with pytest.raises(ConfigError, match=r"unknown key .* \[override 'train.max_step=20'\]$"):
        load_config(path, ["train.max_step=20"])
    with pytest.raises(
        ConfigError, match=r"^modle: unknown key .* \[override 'modle.d_model=8'\]$"
    ):
        load_config(path, ["modle.d_model=8"])
    # Among several overrides, the one of the key at fault is blamed.
    with pytest.raises(ConfigError, match=r"\[override 'train.seed=x'\]$"):
        load_config(path, ["train.lr=1", "train.seed=x"])


def test_errors_from_the_file_or_both_say_so(tmp_path):
    path = write(tmp_path, "train:\n  warmup_step: 10\nmodel:\n  d_model: 30\n")
    with pytest.raises(ConfigError) as err:
        load_config(path, ["train.lr=1e-3"])
    assert str(err.value).endswith(f"[in {path}]")
    assert "override" not in str(err.value)
    cross = write(tmp_path, "model:\n  d_model: 30\n")
    with pytest.raises(ConfigError) as err:
        load_config(cross, ["model.n_heads=4"])
    assert "not divisible" in str(err.value)
    assert str(err.value).endswith(f"[in {cross}, override 'model.n_heads=4']")


def test_malformed_overrides_name_the_override_and_no_flag(tmp_path):
    path = write(tmp_path, "train:\n  lr: 1e-3\n")
    with pytest.raises(ConfigError) as err:
        load_config(path, ["train.lr"])
    assert str(err.value) == "override 'train.lr': expected key=value, e.g. train.lr=5e-4"
    with pytest.raises(ConfigError) as err:
        load_config(path, ["train.lr.x=1"])
    assert str(err.value) == "override 'train.lr.x=1': 'train.lr' is not a section"


@pytest.mark.parametrize(
    ("overrides", "said"),
    [
        # the file's other train keys had been dropped without a word
        (["train={lr: 1.0e-3}"], "override 'train={lr: 1.0e-3}': train is a section; set its"),
        (["train=5", "train.lr=1"], "override 'train=5': train is a section; set its keys"),
        (["train.lr=1", "train=5"], "override 'train=5': train is a section; set its keys"),
        # a section the file lacks, made a value by an earlier override: that one is named
        (["decode=5", "decode.beam_size=2"], "override 'decode=5': 'decode' is not a section"),
    ],
)
def test_an_override_of_a_whole_section_is_refused_naming_it(tmp_path, overrides, said):
    path = write(tmp_path, "train:\n  lr: 1e-3\n  max_steps: 20\n  warmup_steps: 2\n")
    with pytest.raises(ConfigError) as err:
        load_config(path, overrides)
    assert str(err.value).startswith(said)


@pytest.mark.parametrize("second", ["train.lr=2e-3", "train.lr=1e-3", " train.lr =2e-3"])
def test_a_key_overridden_twice_is_refused_as_a_file_giving_it_twice(tmp_path, second):
    """`--set train.lr=1e-3 --set train.lr=2e-3`: one would be dropped without a word."""
    path = write(tmp_path, "train:\n  lr: 5e-4\n")
    with pytest.raises(ConfigError) as err:
        load_config(path, ["train.lr=1e-3", "model.d_model=64", second])
    assert str(err.value).startswith(
        f"override {second!r}: train.lr given twice (also 'train.lr=1e-3'); give it once"
    )
    assert err.value.keys == ("train.lr",)


def test_max_positions_below_training_pairs_is_refused_at_load(tmp_path):
    path = write(tmp_path, "model: {max_positions: 100}\ndata: {max_len: 100}\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    message = str(err.value)
    assert message.startswith("model.max_positions=100 is below data.max_len + 1 = 101 ")
    assert "raise model.max_positions to 101 or lower data.max_len" in message
    with pytest.raises(ConfigError, match=r"\[in .*exp\.yaml, override 'data.max_len=200'\]$"):
        load_config(write(tmp_path, "model: {max_positions: 150}\n"), ["data.max_len=200"])


def test_max_positions_below_decoding_length_is_refused_at_load(tmp_path):
    # floor(1.5 * (256 + 1) + 10) = 395 output positions for the longest training source.
    path = write(tmp_path, "model: {max_positions: 394}\ndata: {max_len: 256}\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert (
        "decode.max_len_a * (data.max_len + 1) + decode.max_len_b = 1.5 * 257 + 10 = 395; "
        "raise model.max_positions to 395"
    ) in str(err.value)
    assert load_config(path, ["model.max_positions=395"]).model.max_positions == 395
    # A finished run's stored config still loads: translation truncates and caps instead.
    stored = config_to_dict(ExperimentConfig(model=ModelConfig(max_positions=64)))
    assert config_from_dict(stored).model.max_positions == 64


@pytest.mark.parametrize("max_len_a, max_len_b", [(0.0, 3), (0.0, 7), (1.0, 2), (1.5, 0)])
def test_position_rule_is_the_models_own_limit(max_len_a, max_len_b):
    """The smallest table `check_positions` accepts encodes, trains on and decodes the longest
    training pair; one position fewer is refused, and the model would indeed fail on it."""
    data = DataConfig(max_len=5)
    decode = DecodeConfig(beam_size=1, max_len_a=max_len_a, max_len_b=max_len_b)
    decode_len = max(1, math.floor(max_len_a * (data.max_len + 1) + max_len_b))
    needed = max(data.max_len + 1, decode_len)
    forced = dataclasses.replace(decode, min_len=needed)  # no early EOS: the longest output
    src = torch.full((1, data.max_len + 1), 5)  # x + EOS
    tgt_in = torch.full((1, data.max_len + 1), 5)  # BOS + y
    mask = torch.ones(1, 1, 1, data.max_len + 1, dtype=torch.bool)
    for table in (needed, needed - 1):
        model_cfg = ModelConfig(d_model=16, n_heads=2, n_layers=1, d_ff=32, max_positions=table)
        cfg = ExperimentConfig(model=model_cfg, data=data, decode=decode)
        model = build_model(model_cfg, 20, 20, pad_id=0).eval()
        if table == needed:
            cfg.check_positions()
            model(src, tgt_in, mask)
            assert len(search(model, src, mask, forced)[0].best.tokens) == decode_len
            continue
        with pytest.raises(ConfigError, match=f"model.max_positions={table} is below"):
            cfg.check_positions()
        with pytest.raises(ValueError, match="beyond model.max_positions"):
            search(model, src, mask, forced)
        if table < data.max_len + 1:
            with pytest.raises(ValueError, match="beyond model.max_positions"):
                model(src, tgt_in, mask)


def test_character_coverage_below_sentencepieces_range(tmp_path):
    with pytest.raises(ConfigError, match=r"character_coverage=0\.9 must be in \[0\.98, 1\]"):
        load_config(write(tmp_path, "tokenizer: {character_coverage: 0.9}\n"))


@pytest.mark.parametrize(
    "key", ["train.lr", "train.warmup_init_lr", "decode.length_penalty", "decode.top_p"]
)
@pytest.mark.parametrize("value", [".nan", ".inf", "-.inf", "'nan'"])
def test_float_settings_must_be_finite(tmp_path, key, value):
    """`.nan` / `.inf` in YAML (or a string float parses to NaN) are refused by the loader,
    naming the key, before a run directory or tokenizer is made."""
    section, name = key.split(".")
    path = write(tmp_path, f"{section}: {{{name}: {value}}}\n")
    with pytest.raises(ConfigError, match=f"{key}: expected a finite number"):
        load_config(str(path))


def test_decode_config_built_in_code_is_checked_for_finite_numbers():
    """The API builds decode settings from JSON (which has NaN too), not through the loader."""
    with pytest.raises(ConfigError, match="decode.length_penalty=nan must be a finite number"):
        DecodeConfig(length_penalty=float("nan")).validate()


@pytest.mark.parametrize(
    "key, value",
    [
        ("length_penalty", 1e308),
        ("length_penalty", -1e308),
        ("length_penalty", 10.5),
        ("max_len_a", 1e18),
        ("max_len_b", 10**19),
        ("min_len", 10**7),
        ("temperature", 1e-300),
    ],
)
def test_decode_numbers_are_bounded(key, value):
    """Values that pass as finite numbers but overflow the search (a length penalty of 1e308,
    a max_len_b past 64 bits) are refused with the range."""
    with pytest.raises(ConfigError, match=rf"decode\.{key}=.* must be in \["):
        DecodeConfig(**{key: value}).validate()
    DecodeConfig(**{key: DECODE_RANGES[key][1]}).validate()  # the bound itself is allowed


def test_a_beam_past_any_memory_is_refused():
    """10**30 overflowed the search's row counts (a traceback)."""
    with pytest.raises(ConfigError) as refused:
        DecodeConfig(beam_size=10**30).validate()
    assert str(refused.value) == f"decode.beam_size={10**30} must be at most 65536"
    DecodeConfig(beam_size=65_536).validate()


def test_whole_numbers_and_their_bounds_are_shown_in_full():
    with pytest.raises(ConfigError) as refused:
        DecodeConfig(min_len=10**7).validate()
    assert str(refused.value) == f"decode.min_len={10**7} must be in [0, 1000000]"
    with pytest.raises(ConfigError, match=r"^decode\.temperature=1e-300 must be in \[0\.01, 100\]"):
        DecodeConfig(temperature=1e-300).validate()


@pytest.mark.parametrize(
    "text, message",
    [
        # relative positions (model/relative.py)
        ("{positions: shaw, max_relative_position: 0}", "model.max_relative_position=0 must be"),
        ("{relative_values: true}", "model.relative_values needs model.positions=shaw, not "),
        ("{positions: t5, relative_buckets: 7}", "model.relative_buckets=7 must be even and"),
        ("{positions: t5, relative_buckets: 2}", "model.relative_buckets=2 must be even and"),
        (
            "{positions: t5, relative_max_distance: 16}",
            "model.relative_max_distance=16 must be above model.relative_buckets / 2 = 16",
        ),
        (
            "{positions: shaw, relative_values: true, attention_backend: flex}",
            "model.attention_backend=flex does not take model.relative_values=true",
        ),
        ("{positions: relative}", "model.positions: 'relative' is not one of"),
        # latent attention (model/latent.py)
        ("{attention: mla, n_kv_heads: 2}", "model.attention=mla does not take model.n_kv_heads=2"),
        (
            "{attention: mla, positions: shaw}",
            "model.attention=mla does not take model.positions=shaw",
        ),
        ("{attention: mla, mla_kv_rank: 0}", "model.mla_kv_rank=0 must be >= 1"),
        (
            "{attention: mla, positions: rope, mla_rope_dim: 3}",
            "model.mla_rope_dim=3 must be even and >= 2",
        ),
        ("{mla_encoder: true}", "model.mla_encoder needs model.attention=mla, not mha"),
        ("{mla_kv_rank: 8}", "model.mla_kv_rank needs model.attention=mla, not mha"),
        ("{attention: gqa}", "model.attention: 'gqa' is not one of"),
        # a key nothing reads in this model: it had trained another model without a word
        (
            "{attention_window: 4}",
            "model.attention_window=4 needs model.attention_pattern local or local_dilated",
        ),
        (
            "{attention_pattern: local, attention_dilation: 4}",
            "model.attention_dilation=4 needs model.attention_pattern dilated or local_dilated",
        ),
        (
            "{positions: rope, relative_buckets: 8}",
            "model.relative_buckets=8 needs model.positions=t5",
        ),
        (
            "{positions: t5, max_relative_position: 4}",
            "model.max_relative_position=4 needs model.p",
        ),
        ("{mla_rope_dim: 3}", "model.mla_rope_dim=3 needs model.attention=mla with model.positi"),
        (
            "{attention: mla, positions: t5, mla_rope_dim: 6}",
            "model.mla_rope_dim=6 needs model.attention=mla with model.positions=rope",
        ),
    ],
)
def test_attention_options_are_refused_in_one_line(tmp_path, text, message):
    path = write(tmp_path, f"model: {text}\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert str(err.value).startswith(message)
    assert "\n" not in str(err.value) and str(path) in str(err.value)


def test_decode_field_types_are_the_dataclass_types_and_other_names_are_refused():
    assert decode_field_types(["beam_size", "length_penalty"]) == {
        "beam_size": int,
        "length_penalty": float,
    }
    with pytest.raises(KeyError, match="nbest: not a DecodeConfig field"):
        decode_field_types(["nbest"])


def test_output_settings_are_every_field_but_the_output_neutral_ones():
    changed = DecodeConfig(max_tokens=7)
    assert changed.output_settings() == DecodeConfig().output_settings()
    assert len(DecodeConfig().output_settings()) == len(dataclasses.fields(DecodeConfig)) - 1


@pytest.mark.parametrize(
    "setting, message",
    [
        ("train.max_epochs=0", r"train\.max_epochs=0 must be > 0 \(or null: no limit\)"),
        ("train.valid_max_sentences=-1", r"train\.valid_max_sentences=-1 must be > 0"),
        ("train.max_minutes=0", r"train\.max_minutes=0\.0 must be > 0"),
        ("train.warmup_init_lr=-1", r"train\.warmup_init_lr=-1\.0 must be >= 0"),
        ("train.noam_scale=-1", r"train\.noam_scale=-1\.0 must be > 0"),
        ("train.threads=100000", r"train\.threads=100000 must be in \[0, 1024\]"),
        ("train.seed=99999999999999999999", r"train\.seed=99999999999999999999 must be in \[0, "),
        ("train.seed=-1", r"train\.seed=-1 must be in \[0, 4294967295\]"),
        ("tokenizer.language_tags=[de,de,en]", r"tokenizer\.language_tags lists de more than once"),
        ("data.workers=100000", r"data\.workers=100000 must be in \[0, 64\]"),
        ("data.workers=-1", r"data\.workers=-1 must be in \[0, 64\]"),
        ("tokenizer.language_tags=['',en]", r"tokenizer\.language_tags lists '': a language "),
        ("tokenizer.language_tags=[' ']", r"tokenizer\.language_tags lists ' ': a language "),
        ("model.n_layers=100000", r"model\.n_layers=100000 must be in \[1, 1024\]"),
        ("model.n_decoder_layers=1025", r"model\.n_decoder_layers=1025 must be in \[1, 1024\]"),
        ("model.n_decoder_layers=0", r"model\.n_decoder_layers=0 must be in \[1, 1024\]"),
        (f"model.d_model={10**30}", rf"model\.d_model={10**30} must be in \[1, 1048576\]"),
        ("model.d_ff=2000000", r"model\.d_ff=2000000 must be in \[1, 1048576\]"),
        (
            "model.mla_kv_rank=1000000000",
            r"model\.mla_kv_rank=1000000000 must be in \[1, 1048576\]",
        ),
        ("model.max_relative_position=2000000", r"model\.max_relative_position=2000000 must be in"),
        ("model.relative_buckets=2000000", r"model\.relative_buckets=2000000 must be in"),
        ("model.mla_rope_dim=2000000", r"model\.mla_rope_dim=2000000 must be in"),
        ("model.layer_norm_eps=0", r"model\.layer_norm_eps=0 must be > 0 \(LayerNorm divides"),
        ("model.layer_norm_eps=-1", r"model\.layer_norm_eps=-1 must be > 0"),
        ("tokenizer.vocab_size=3000000000", r"vocab_size=3000000000 must be in \[8, 2147483647\]"),
        ("tokenizer.vocab_size=7", r"tokenizer\.vocab_size=7 must be in \[8, 2147483647\]"),
        (f"model.position_offset={10**40}", r"position_offset=1000+ must be in \[0, 1048576\]"),
        (f"train.pad_to_multiple={10**40}", r"pad_to_multiple=1000+ must be in \[1, 65536\]"),
        ("train.update_freq=1000000000000", r"train\.update_freq=1000000000000 must be in \[1, "),
        (
            f"tokenizer.input_sentence_size={10**40}",
            r"input_sentence_size=1000+ must be in \[101, 9223372036854775807\]",
        ),
        (  # SentencePiece samples more than 100: its own refusal named no key
            "tokenizer.input_sentence_size=50",
            r"input_sentence_size=50 must be in \[101, 9223372036854775807\]",
        ),
    ],
)
def test_settings_that_a_library_would_fail_on_later_are_refused(tmp_path, setting, message):
    with pytest.raises(ConfigError, match=message):
        load_config(write(tmp_path, "train: {}\n"), [setting])


def test_yaml_nested_too_deeply_is_one_line(tmp_path):
    with pytest.raises(ConfigError, match=r"not valid YAML \(nested too deeply\)"):
        load_config(write(tmp_path, "train:\n  lr: " + "[" * 5000 + "\n"))
    with pytest.raises(ConfigError, match=r"train\.lr"):
        load_config(write(tmp_path, "train: {}\n"), ["train.lr=" + "[" * 5000])


def test_an_alias_bomb_is_shown_in_a_line(tmp_path):
    """Nine levels of YAML aliases name one list 9**9 times: the error shows a few items."""
    levels = ['&a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    levels += [f"&a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 9)]
    with pytest.raises(ConfigError, match=r"^model\.d_model: expected an integer, got \[") as err:
        load_config(write(tmp_path, "model:\n  d_model: [" + ", ".join(levels) + "]\n"))
    assert len(str(err.value)) < 400


def test_a_config_that_is_not_a_regular_file_is_refused(tmp_path):
    """A pipe gives its text once, and training reads the config twice: the second read would
    be the defaults."""
    import os

    fifo = tmp_path / "config.yaml"
    os.mkfifo(fifo)
    with pytest.raises(ConfigError, match=r"config\.yaml: is a named pipe \(FIFO\), not a regu"):
        load_config(fifo)
    with pytest.raises(ConfigError, match=r"^/dev/zero: is a character device, not a regular "):
        load_config("/dev/zero")


def test_a_config_file_far_too_large_is_refused_before_parsing(tmp_path):
    """A corpus named as the config would take PyYAML minutes to parse (about 1 MB a second)."""
    from transformer_mt.config.reading import MAX_CONFIG_BYTES

    big = tmp_path / "big.yaml"
    big.write_text("# a comment line\n" * (MAX_CONFIG_BYTES // 17 + 1))
    with pytest.raises(ConfigError, match=r"big\.yaml: over 4 MiB, too large for a config file"):
        load_config(big)
    big.write_text("train: {lr: 0.001}\n" + "#\n" * 1000)  # comments are fine
    assert load_config(big).train.lr == 0.001


def test_many_language_tags_are_checked_at_once():
    codes = tuple(f"l{i}" for i in range(200_000))
    TokenizerConfig(language_tags=codes).validate()  # seconds when each was counted in turn
    with pytest.raises(ConfigError, match="lists l7 more than once"):
        TokenizerConfig(language_tags=(*codes, "l7")).validate()


def test_an_empty_tokenizer_model_file_is_refused():
    with pytest.raises(ConfigError, match=r"tokenizer\.model_file is empty: name a Sentence"):
        TokenizerConfig(model_file="").validate()


def test_a_stored_config_with_a_key_nothing_reads_still_loads(tmp_path):
    """Models trained before the rule hold such keys in their checkpoints: they still load
    (`config_from_dict`), while a config a user writes is refused (`load_config`)."""
    from transformer_mt.config import config_to_dict

    stored = config_to_dict(ExperimentConfig())
    stored["model"]["attention_window"] = 32
    assert config_from_dict(stored, "old.pt").model.attention_window == 32
    path = write(tmp_path, "model: {attention_window: 32}\n")
    with pytest.raises(ConfigError, match="model.attention_window=32 needs"):
        load_config(path)
