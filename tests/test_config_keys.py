"""Every ConfigError carries the dotted keys it blames, and blame is decided from them: the
loader names the override or the file that set those keys without reading the message."""

import ast
import math
import pickle
import re
from pathlib import Path

import pytest

from transformer_mt.config import (
    ConfigError,
    DataConfig,
    DecodeConfig,
    ExperimentConfig,
    ModelConfig,
    TrainConfig,
    TrainSource,
    apply_overrides,
    config_from_dict,
    load_config,
)

PACKAGE = Path(__file__).resolve().parents[1] / "transformer_mt"


def _config_error_calls(path: Path) -> list[ast.Call]:
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    return [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and getattr(node.func, "id", getattr(node.func, "attr", None)) == "ConfigError"
    ]


def test_every_config_error_raised_in_the_package_passes_its_keys():
    calls = {path: _config_error_calls(path) for path in sorted(PACKAGE.rglob("*.py"))}
    missing = [
        f"{path.relative_to(PACKAGE.parent)}:{call.lineno}"
        for path, found in calls.items()
        for call in found
        if not any(keyword.arg == "keys" for keyword in call.keywords)
    ]
    assert not missing, f"ConfigError raised without keys=: {', '.join(missing)}"
    assert sum(len(found) for found in calls.values()) >= 70  # the walk saw the raise sites


def test_the_config_package_reads_no_message_back():
    for path in sorted((PACKAGE / "config").glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        imported = {
            alias.name
            for node in ast.walk(tree)
            if isinstance(node, (ast.Import, ast.ImportFrom))
            for alias in node.names
        } | {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
        assert "re" not in imported, f"{path.name} imports re"


def model(**values):
    return {"model": values}


def section(name, **values):
    return {name: values}


def two_sources(second: dict) -> dict:
    return {"data": {"train": [{"path": "a"}, {"path": "b", **second}]}}


# What triggers each rule (plain data read by `config_from_dict`, or a call for the rules that
# only code can reach) and the keys the error must carry, in the order the message names them.
RULES = [
    # model
    (model(d_model=0), ("model.d_model",)),
    (model(d_model=30, n_heads=4), ("model.d_model", "model.n_heads")),
    (model(n_decoder_layers=0), ("model.n_decoder_layers",)),
    (model(attn_dropout=1.0), ("model.attn_dropout",)),
    (model(d_model=9, n_heads=3), ("model.d_model",)),
    (
        model(d_model=2, n_heads=1, positions="sinusoidal_fairseq"),
        ("model.d_model", "model.positions"),
    ),
    (model(position_offset=-1), ("model.position_offset",)),
    (model(position_offset=2, positions="learned"), ("model.position_offset", "model.positions")),
    (
        model(d_model=12, n_heads=4, positions="rope"),
        ("model.positions", "model.d_model", "model.n_heads"),
    ),
    (model(max_relative_position=0), ("model.max_relative_position",)),
    (model(relative_values=True), ("model.relative_values", "model.positions")),
    (model(relative_buckets=7), ("model.relative_buckets",)),
    (
        model(positions="t5", relative_max_distance=16),
        ("model.relative_max_distance", "model.relative_buckets"),
    ),
    (model(mla_encoder=True), ("model.mla_encoder", "model.attention")),
    (model(mla_kv_rank=8), ("model.mla_kv_rank", "model.attention")),
    (model(attention="mla", mla_kv_rank=0), ("model.mla_kv_rank",)),
    (model(attention="mla", positions="rope", mla_rope_dim=3), ("model.mla_rope_dim",)),
    (model(attention="mla", n_kv_heads=2), ("model.attention", "model.n_kv_heads")),
    (model(attention="mla", positions="shaw"), ("model.attention", "model.positions")),
    (model(n_kv_heads=3), ("model.n_kv_heads", "model.n_heads")),
    (model(attention_window=0), ("model.attention_window",)),
    (model(attention_dilation=1), ("model.attention_dilation",)),
    (
        model(attention_backend="flex", attn_dropout=0.1),
        ("model.attention_backend", "model.attn_dropout"),
    ),
    (
        model(attention_backend="flex", positions="shaw", relative_values=True),
        ("model.attention_backend", "model.relative_values"),
    ),
    # data
    (section("data", tgt_lang="de"), ("data.src_lang", "data.tgt_lang")),
    (section("data", format="hub"), ("data.hub_name", "data.format")),
    (section("data", max_len_ratio=0), ("data.max_len_ratio",)),
    (section("data", temperature=0), ("data.temperature",)),
    (section("data", workers=-1), ("data.workers",)),
    (section("data", train=[]), ("data.train",)),
    (section("data", train=[{"path": " "}]), ("data.train[0].path",)),
    (two_sources({"weight": 0}), ("data.train[1].weight",)),
    (
        lambda: DataConfig(train=(TrainSource("a", weight=math.inf),)).validate(),
        ("data.train[0].weight",),
    ),
    (two_sources({"src_lang": "en"}), ("data.train[1]",)),
    (section("data", src_lang=""), ("data.src_lang",)),
    (two_sources({"tgt_lang": "../de"}), ("data.train[1].tgt_lang",)),
    (
        section("data", train=[{"path": "a", "src_lang": "fr"}]),
        ("data.src_lang", "data.tgt_lang", "data.train"),
    ),
    # tokenizer
    (section("tokenizer", bpe_dropout=1.0), ("tokenizer.bpe_dropout",)),
    (
        section("tokenizer", model_type="unigram", bpe_dropout=0.1),
        ("tokenizer.bpe_dropout", "tokenizer.model_type"),
    ),
    (section("tokenizer", vocab_size=4), ("tokenizer.vocab_size",)),
    (
        section("tokenizer", language_tags=["en"], joint=False),
        ("tokenizer.language_tags", "tokenizer.joint"),
    ),
    (section("tokenizer", language_tags=["en", "a/b"]), ("tokenizer.language_tags",)),
    (section("tokenizer", character_coverage=0.9), ("tokenizer.character_coverage",)),
    (section("tokenizer", input_sentence_size=0), ("tokenizer.input_sentence_size",)),
    # train
    (section("train", lr=0), ("train.lr",)),
    (section("train", max_minutes=0), ("train.max_minutes",)),
    (section("train", max_steps=10, warmup_steps=10), ("train.warmup_steps", "train.max_steps")),
    (section("train", ema_decay=1.0), ("train.ema_decay",)),
    (section("train", adam_betas=[0.9, 1.0]), ("train.adam_betas",)),
    (section("train", patience=-1), ("train.patience",)),
    # numbers past float's range and integers past a 64-bit counter: an OverflowError had
    # escaped as a traceback, at load or (max_steps) at the first metrics row
    (section("train", lr=10**400), ("train.lr",)),
    (section("train", max_steps=10**400), ("train.max_steps",)),
    # decode
    (lambda: DecodeConfig(top_p=math.nan).validate(), ("decode.top_p",)),
    (section("decode", length_penalty=11), ("decode.length_penalty",)),
    (section("decode", beam_size=0, n_best=0), ("decode.beam_size",)),
    (section("decode", beam_size=2, n_best=3), ("decode.n_best", "decode.beam_size")),
    (section("decode", top_p=0), ("decode.top_p",)),
    (section("decode", top_k=-1), ("decode.top_k",)),
    # across sections
    (
        {"model": {"share_embeddings": True}, "tokenizer": {"joint": False}},
        ("model.share_embeddings", "tokenizer.joint"),
    ),
    (two_sources({"tgt_lang": "fr"}), ("data.train", "tokenizer.language_tags")),
    (
        {"data": {"streaming": True}, "tokenizer": {"bpe_dropout": 0.1}},
        ("tokenizer.bpe_dropout", "data.streaming"),
    ),
    (
        lambda: ExperimentConfig(model=ModelConfig(max_positions=8)).check_positions(),
        ("model.max_positions", "data.max_len"),
    ),
    (
        lambda: ExperimentConfig(
            model=ModelConfig(max_positions=300), decode=DecodeConfig(max_len_a=2.0)
        ).check_positions(),
        ("model.max_positions", "decode.max_len_a", "data.max_len", "decode.max_len_b"),
    ),
    # types and keys, from the loader
    (section("train", warmup_step=10), ("train.warmup_step",)),
    ({"modle": {}}, ("modle",)),
    ({"train": 3}, ("train",)),
    (section("data", train=[{"weight": 1}]), ("data.train[0].path",)),
    (section("model", d_model="big"), ("model.d_model",)),
    (section("model", pre_norm="yes"), ("model.pre_norm",)),
    (section("data", valid=3), ("data.valid",)),
    (section("train", lr="fast"), ("train.lr",)),
    (section("train", lr=True), ("train.lr",)),
    (section("train", lr=math.inf), ("train.lr",)),
    (section("train", schedule="noan"), ("train.schedule",)),
    (section("train", adam_betas=[0.9]), ("train.adam_betas",)),
    (section("train", adam_betas=[0.9, "x"]), ("train.adam_betas[1]",)),
    (section("data", train=3), ("data.train",)),
    (section("data", train=[{"path": "a", "weight": "x"}]), ("data.train[0].weight",)),
]


@pytest.mark.parametrize(
    "trigger, keys", RULES, ids=lambda v: ",".join(v) if isinstance(v, tuple) else None
)
def test_each_rule_blames_the_keys_it_read(trigger, keys):
    with pytest.raises(ConfigError) as err:
        trigger() if callable(trigger) else config_from_dict(trigger)
    assert err.value.keys == keys, str(err.value)
    for key in keys:  # a blamed key is one the message names, if not always dotted
        assert key.rpartition(".")[2] in str(err.value), (key, str(err.value))


def test_errors_of_the_file_itself_blame_no_key(tmp_path):
    for path in (tmp_path / "nope.yaml", tmp_path):
        with pytest.raises(ConfigError) as err:
            load_config(path)
        assert err.value.keys == ()
    for text in ("train: [\n", "- 1\n"):
        (tmp_path / "exp.yaml").write_text(text, encoding="utf-8")
        with pytest.raises(ConfigError) as err:
            load_config(tmp_path / "exp.yaml")
        assert err.value.keys == ()
    with pytest.raises(ConfigError, match="^config: expected a mapping") as err:
        config_from_dict([])  # type: ignore[arg-type]
    assert err.value.keys == ()


def test_duplicate_keys_and_malformed_overrides_blame_the_key(tmp_path):
    path = tmp_path / "exp.yaml"
    path.write_text("train:\n  lr: 1e-3\n  lr: 2e-3\n", encoding="utf-8")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert err.value.keys == ("train.lr",)
    for overrides, keys in [
        (["train.lr"], ("train.lr",)),
        (["=3"], ()),
        (["train.lr.x=1"], ("train.lr",)),
    ]:
        with pytest.raises(ConfigError) as err:
            apply_overrides({"train": {"lr": 1e-3}}, overrides)
        assert err.value.keys == keys


def test_keys_survive_the_loaders_wording_and_pickling(tmp_path):
    path = tmp_path / "exp.yaml"
    path.write_text("decode:\n  n_best: 3\n", encoding="utf-8")
    with pytest.raises(ConfigError) as err:
        load_config(path, ["decode.beam_size=2"])
    assert err.value.keys == ("decode.n_best", "decode.beam_size")
    assert str(err.value).endswith(f"[in {path}, override 'decode.beam_size=2']")
    again = pickle.loads(pickle.dumps(err.value))
    assert (str(again), again.keys) == (str(err.value), err.value.keys)


def test_a_rule_blames_an_override_of_a_key_it_names_without_a_dot(tmp_path):
    """`tokenizer.bpe_dropout needs model_type bpe` reads tokenizer.model_type too."""
    path = tmp_path / "exp.yaml"
    path.write_text("tokenizer:\n  bpe_dropout: 0.1\n", encoding="utf-8")
    with pytest.raises(ConfigError) as err:
        load_config(path, ["tokenizer.model_type=unigram"])
    assert str(err.value) == (
        "tokenizer.bpe_dropout needs model_type bpe, not 'unigram' "
        f"[in {path}, override 'tokenizer.model_type=unigram']"
    )


def test_a_value_that_reads_like_a_key_is_not_blamed(tmp_path):
    """The message quotes the value 'model.d_model'; only the key it was given to is blamed."""
    path = tmp_path / "exp.yaml"
    path.write_text("", encoding="utf-8")
    with pytest.raises(ConfigError) as err:
        load_config(path, ["model.d_model=32", "train.schedule=model.d_model"])
    assert str(err.value).endswith(
        "is not one of 'inverse_sqrt', 'noam', 'linear' [override 'train.schedule=model.d_model']"
    )


@pytest.mark.parametrize(
    "changes",
    [
        {"length_penalty": math.nan},
        {"max_len_b": 10**7},
        {"temperature": 0.0},
        {"beam_size": 2, "n_best": 3},
        {"top_p": 1.5},
        {"top_k": -1},
    ],
)
def test_decode_errors_carry_the_fields_their_message_names_in_its_order(changes):
    """What the server needs to name a request's field, without reading the message."""
    with pytest.raises(ConfigError) as err:
        DecodeConfig(**changes).validate()
    named = re.findall(r"\bdecode\.(\w+)", str(err.value))
    assert [key.removeprefix("decode.") for key in err.value.keys] == named


def test_a_section_whose_keys_are_all_commented_out_is_empty(tmp_path):
    """YAML reads `train:` alone as null: it had been refused as no mapping."""
    path = tmp_path / "exp.yaml"
    path.write_text("train:\n  # lr: 1e-3\nmodel: {d_model: 64, n_heads: 4}\n", encoding="utf-8")
    config = load_config(path)
    assert config.train == TrainConfig() and config.model.d_model == 64
