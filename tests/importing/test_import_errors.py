"""`tmt import` refuses what it cannot import with one line, and writes nothing."""

import errno
import json
import os
import pickle
import signal
from pathlib import Path

import pytest
import torch

from tests.conftest import without_notes
from tests.importing.builders import build_marian, build_nllb
from transformer_mt.cli import main

transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def marian_dir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("bad") / "hf"
    build_marian(directory, separate=False)
    return directory


def copy_of(directory, tmp_path):
    """A copy of the model directory to damage."""
    copy = tmp_path / "model"
    copy.mkdir()
    for path in directory.iterdir():
        (copy / path.name).write_bytes(path.read_bytes())
    return copy


def refused(args, capsys, out):
    assert main(["import", *args, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert not out.exists() and not list(out.parent.glob(f"{out.name}*"))
    return err[0]


def test_a_directory_that_is_not_a_model(tmp_path, capsys):
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "readme.txt").write_text("hello")
    line = refused([str(tmp_path / "notes")], capsys, tmp_path / "out.pt")
    assert (
        line == f"error: {tmp_path / 'notes'}: no config.json; not a Hugging Face model directory"
    )


def test_a_model_type_we_do_not_import(marian_dir, tmp_path, capsys):
    model = copy_of(marian_dir, tmp_path)
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config, "model_type": "t5"}))
    line = refused([str(model)], capsys, tmp_path / "out.pt")
    assert line.endswith("model_type 't5' is not one we import (supported: m2m_100, marian)")


def test_a_ctranslate2_export_is_named_as_one(checkpoint, tmp_path, capsys):
    exported = tmp_path / "ct2"
    assert main(["export", "--format", "ctranslate2", str(checkpoint), str(exported)]) == 0
    capsys.readouterr()
    line = refused([str(exported)], capsys, tmp_path / "out.pt")
    assert line == (
        f"error: {exported}: a CTranslate2 model (model.bin), which is not imported; import the "
        "Hugging Face model it was converted from, or translate with the checkpoint it was "
        "exported from"
    )


def test_an_option_we_cannot_compute_is_named(marian_dir, tmp_path, capsys):
    model = copy_of(marian_dir, tmp_path)
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config, "activation_function": "gelu_new"}))
    line = refused([str(model)], capsys, tmp_path / "out.pt")
    assert "activation_function='gelu_new'" in line


def test_a_missing_tokenizer_file_is_named(marian_dir, tmp_path, capsys):
    model = copy_of(marian_dir, tmp_path)
    (model / "target.spm").unlink()
    line = refused([str(model)], capsys, tmp_path / "out.pt")
    assert line == f"error: {model / 'target.spm'}: missing; the model's tokenizer needs it"


def test_a_hub_name_while_offline(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))  # an empty hub cache
    line = refused(["Helsinki-NLP/opus-mt-de-en"], capsys, tmp_path / "out.pt")
    assert line.startswith("error: Helsinki-NLP/opus-mt-de-en: no such directory, and the hub")
    assert line.endswith("pass a local directory holding the model's files")


@pytest.mark.parametrize("kind", ["a symlink loop", "a named pipe (FIFO)", "a file"])
def test_a_source_that_is_no_directory_is_named_for_what_it_is(tmp_path, capsys, kind):
    """Local, so not asked of the hub (which would answer with a network error)."""
    source = tmp_path / "model"
    if kind == "a symlink loop":
        source.symlink_to("model")
    elif kind == "a file":
        source.write_text("")
    else:
        os.mkfifo(source)
    line = refused([str(source)], capsys, tmp_path / "out.pt")
    assert line == f"error: {source}: {kind}, not a directory; pass a Hugging Face model directory"


def test_the_output_may_not_be_the_model(marian_dir, tmp_path, capsys):
    model = copy_of(marian_dir, tmp_path)
    assert main(["import", str(model), "--out", str(model / "config.json")]) == 2
    assert "config.json" in capsys.readouterr().err


def test_without_transformers_the_extra_is_named(tmp_path, capsys, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "transformers" else real(name)
    )
    line = refused([str(tmp_path)], capsys, tmp_path / "out.pt")
    assert line == "error: tmt import needs transformers: pip install 'transformer_mt[hf]'"


def test_too_little_memory_to_load_the_weights_is_the_machines_failure(
    marian_dir, tmp_path, capsys, monkeypatch
):
    """Exit 1 and the out-of-memory line, as for training: the files are fine."""
    import transformers

    def no_memory(*args, **kwargs):
        raise RuntimeError(
            "[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate "
            "memory: you tried to allocate 6400000000 bytes. Error code 12"
        )

    monkeypatch.setattr(transformers.MarianMTModel, "from_pretrained", no_memory)
    out = tmp_path / "out.pt"
    assert main(["import", str(marian_dir), "--out", str(out)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: out of memory: the work asked for 6.0 GiB in one allocation")
    assert not out.exists()


# --- every value read from a model directory is checked, and named when refused ---------------


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory):
    """The directories the refusals below damage copies of: name -> directory."""
    root = tmp_path_factory.mktemp("models")
    build_marian(root / "marian", separate=False)
    build_marian(root / "marian_separate", separate=True)
    build_nllb(root / "nllb")
    return {name: root / name for name in ("marian", "marian_separate", "nllb")}


def one_refusal(directory, tmp_path, capsys):
    """The one `error:` line of a refused `tmt import` of `directory`, which wrote nothing."""
    out = tmp_path / "out.pt"
    assert main(["import", str(directory), "--out", str(out)]) == 2
    captured = capsys.readouterr()
    err = without_notes(captured.err)
    assert "Traceback" not in err and err.startswith("error: ") and err.count("\n") == 1, err
    assert captured.out == ""
    assert not out.exists() and not list(tmp_path.glob(f"*{out.name}*"))
    return err.strip()


def set_json(path, key, value):
    data = json.loads(path.read_text(encoding="utf-8"))
    data[key] = value
    path.write_text(json.dumps(data), encoding="utf-8")


C, G, T = "config.json", "generation_config.json", "tokenizer_config.json"
IDS = "must be one token id (an integer >= 0), got"


def setting(model, file, key, value, message):
    return pytest.param(model, file, key, value, message, id=f"{model}-{key}={value!r}")


SETTINGS = [
    setting("marian", C, "eos_token_id", None, "eos_token_id is null; the model needs"),
    setting("marian", C, "eos_token_id", 1.5, f"eos_token_id {IDS} 1.5"),
    setting("marian", C, "eos_token_id", -1, f"eos_token_id {IDS} -1"),
    setting("marian", C, "eos_token_id", "0", f'eos_token_id {IDS} "0"'),
    setting("marian", C, "eos_token_id", [0, 1], f"eos_token_id {IDS} [0, 1]"),
    setting("marian", C, "eos_token_id", True, f"eos_token_id {IDS} true"),
    setting("marian", C, "eos_token_id", 9999, "eos_token_id=9999 is outside the vocabulary"),
    setting("marian", C, "eos_token_id", 3, "in vocab.json, where </s> is 0"),
    setting("marian", C, "pad_token_id", None, "pad_token_id is null"),
    setting("marian", C, "pad_token_id", 2, "in vocab.json, where <pad> is"),
    setting("marian", C, "decoder_start_token_id", 9999, "decoder_start_token_id=9999 is outside"),
    setting("marian", C, "decoder_start_token_id", -2, f"decoder_start_token_id {IDS} -2"),
    setting(
        "marian", C, "d_model", "32", 'd_model must be a positive integer <= 1048576, got "32"'
    ),
    # Wider than any model: transformers would build it (overflowing) before a weight is read.
    setting("marian", C, "d_model", 2 * 10**9, "d_model must be a positive integer <= 1048576"),
    setting("marian", C, "max_position_embeddings", 2 * 10**9, "max_position_embeddings must"),
    setting("marian", C, "decoder_ffn_dim", 2 * 10**9, "decoder_ffn_dim must be a positive"),
    setting(
        "marian", C, "d_model", 30, "d_model=30 is not a multiple of encoder_attention_heads=4"
    ),
    setting(
        "marian",
        C,
        "encoder_layers",
        0,
        "encoder_layers must be a positive integer below 2**31, got 0",
    ),
    setting("marian", C, "decoder_attention_heads", 0, "decoder_attention_heads must be a"),
    setting("marian", C, "encoder_ffn_dim", -1, "encoder_ffn_dim must be a positive integer"),
    setting("marian", C, "max_position_embeddings", 2.5, "max_position_embeddings must be a"),
    setting("marian", C, "max_position_embeddings", 10**30, "max_position_embeddings must be a"),
    setting(
        "marian", C, "vocab_size", 0, "vocab_size must be a positive integer below 2**31, got 0"
    ),
    setting("marian", C, "decoder_vocab_size", "a", "decoder_vocab_size must be a positive"),
    setting("marian", C, "activation_function", ["relu"], "activation_function must be a"),
    setting(
        "marian", C, "scale_embedding", "yes", 'scale_embedding must be true or false, got "yes"'
    ),
    setting("marian", C, "tie_word_embeddings", 1, "tie_word_embeddings must be true or false"),
    setting("marian", C, "share_encoder_decoder_embeddings", "no", "must be true or false"),
    setting("marian", C, "dropout", "0.1", 'dropout must be a number in [0, 1), got "0.1"'),
    setting("marian", C, "encoder_layerdrop", 2, "encoder_layerdrop must be a number in [0, 1]"),
    setting("marian", C, "normalize_before", "no", "normalize_before must be true or false"),
    setting("marian", C, "init_std", "x", "init_std"),  # not ours: transformers' own check
    setting("marian", G, "bad_words_ids", 5, "bad_words_ids must be a list of non-empty lists"),
    setting("marian", G, "bad_words_ids", [5], "bad_words_ids must be a list of non-empty lists"),
    setting("marian", G, "bad_words_ids", [[]], "bad_words_ids must be a list of non-empty lists"),
    setting("marian", G, "bad_words_ids", [["a"]], "bad_words_ids[0][0] must be a token id"),
    setting("marian", G, "bad_words_ids", [[1.5]], "bad_words_ids[0][0] must be a token id"),
    setting("marian", G, "bad_words_ids", [[-1]], "bad_words_ids[0][0] must be a token id"),
    setting("marian", G, "bad_words_ids", [[True]], "bad_words_ids[0][0] must be a token id"),
    setting("marian", G, "bad_words_ids", [[1], [9999]], "bad_words_ids[1][0]=9999 is outside"),
    setting(
        "marian",
        G,
        "num_beams",
        0,
        "num_beams must be a positive integer below 2**31, or null, got 0",
    ),
    setting("marian", G, "length_penalty", "1", "length_penalty must be a number in [-10, 10]"),
    setting("marian", G, "early_stopping", "yes", 'early_stopping must be true, false, "never"'),
    setting("nllb", G, "max_length", 2.5, "max_length must be a positive integer below 2**31, or"),
    setting("marian", T, "separate_vocabs", "no", "separate_vocabs must be true, false or null"),
    setting("marian", T, "source_lang", 5, "source_lang must be a string or null, got 5"),
    setting("marian", T, "target_lang", ["en"], "target_lang must be a string or null"),
    setting("nllb", C, "eos_token_id", None, "eos_token_id is null"),
    setting("nllb", C, "eos_token_id", 999, "eos_token_id=999 is outside the vocabulary"),
    setting("nllb", C, "eos_token_id", 5, "in tokenizer.json, where </s> is 2"),
    setting("nllb", C, "pad_token_id", -1, f"pad_token_id {IDS} -1"),
    setting("nllb", C, "pad_token_id", 3, '"<unk>" in tokenizer.json, where <pad> is 1'),
    setting("nllb", C, "decoder_start_token_id", None, "decoder_start_token_id is null"),
    setting("nllb", C, "decoder_start_token_id", 999, "decoder_start_token_id=999 is outside"),
    setting("nllb", G, "bad_words_ids", [[-1]], "bad_words_ids[0][0] must be a token id"),
    setting("nllb", T, "src_lang", "xx_Yyyy", 'src_lang "xx_Yyyy" is not one of the model'),
    setting("nllb", T, "tgt_lang", 7, "tgt_lang must be a string or null, got 7"),
    setting("nllb", T, "tokenizer_class", "Foo", 'tokenizer_class "Foo" is not NLLB'),
]


@pytest.mark.parametrize("model, file, key, value, message", SETTINGS)
def test_a_bad_setting_is_named_by_its_file_and_key(
    model_dirs, tmp_path, capsys, model, file, key, value, message
):
    directory = copy_of(model_dirs[model], tmp_path)
    set_json(directory / file, key, value)
    line = one_refusal(directory, tmp_path, capsys)
    assert line.startswith(f"error: {directory / file}: ") and message in line, line


def piece_at(vocab, token):
    return next(piece for piece, i in vocab.items() if i == token)


def vocab_edit(model, file, edit, message, name):
    return pytest.param(model, file, edit, message, id=f"{model}-{file}-{name}")


def set_id(token, value):
    return lambda vocab: vocab.update({piece_at(vocab, token): value})


def tokenizer_json_edit(edit):
    """An edit of the numbering inside tokenizer.json (NLLB's)."""

    def apply(data):
        edit(data["model"]["vocab"])

    return apply


VOCABS = [
    vocab_edit("marian", "vocab.json", set_id(3, 3.5), "must be an integer >= 0, got 3.5", "float"),
    vocab_edit("marian", "vocab.json", set_id(3, 3.0), "must be an integer >= 0, got 3.0", "3.0"),
    vocab_edit(
        "marian", "vocab.json", set_id(3, -3), "must be an integer >= 0, got -3", "negative"
    ),
    vocab_edit(
        "marian", "vocab.json", set_id(3, "3"), 'must be an integer >= 0, got "3"', "string"
    ),
    vocab_edit(
        "marian", "vocab.json", set_id(3, True), "must be an integer >= 0, got true", "bool"
    ),
    vocab_edit(
        "marian", "vocab.json", set_id(3, 4), "share id 4; each id must stand for", "shared"
    ),
    vocab_edit(
        "marian", "vocab.json", set_id(3, 999), "has id 999; the model's embeddings", "past"
    ),
    vocab_edit("marian", "vocab.json", lambda v: v.pop("<unk>"), "no <unk> piece", "no-unk"),
    vocab_edit("marian", "vocab.json", lambda v: v.pop("<pad>"), "no <pad> piece", "no-pad"),
    vocab_edit("marian", "vocab.json", lambda v: v.pop("</s>"), "no </s> piece", "no-eos"),
    vocab_edit("marian_separate", "target_vocab.json", set_id(3, 4), "share id 4", "shared"),
    vocab_edit("marian_separate", "target_vocab.json", set_id(3, 3.5), "got 3.5", "float"),
    vocab_edit("marian_separate", "target_vocab.json", set_id(0, 1), "share id 1", "eos-unk"),
    vocab_edit(
        "nllb", "tokenizer.json", tokenizer_json_edit(set_id(10, 11)), "share id 11", "shared"
    ),
]


@pytest.mark.parametrize("model, file, edit, message", VOCABS)
def test_a_vocabulary_numbers_each_piece_once_within_the_model(
    model_dirs, tmp_path, capsys, model, file, edit, message
):
    directory = copy_of(model_dirs[model], tmp_path)
    data = json.loads((directory / file).read_text(encoding="utf-8"))
    edit(data)
    (directory / file).write_text(json.dumps(data), encoding="utf-8")
    line = one_refusal(directory, tmp_path, capsys)
    assert line.startswith(f"error: {directory / file}: ") and message in line, line


def write(name, content):
    return lambda directory: (directory / name).write_bytes(content)


def fifo(name):
    def damage(directory):
        (directory / name).unlink()
        os.mkfifo(directory / name)

    return damage


def damage_case(model, file, damage, message, name):
    return pytest.param(model, file, damage, message, id=f"{model}-{file}-{name}")


TOKENIZER_FILES = [
    damage_case(
        "marian", "vocab.json", write("vocab.json", b"[1, 2]"), "expected a JSON object", "list"
    ),
    damage_case(
        "marian", "vocab.json", write("vocab.json", b'{"a": 1, "a": 2}'), "appears twice", "twice"
    ),
    damage_case("marian", G, write(G, b"{oops"), "not readable JSON", "garbage"),
    damage_case("marian", G, write(G, b"[]"), "expected a JSON object, got list", "list"),
    damage_case("marian", C, write(C, b"{oops"), "not readable JSON", "garbage"),
    damage_case(
        "marian", C, write(C, b"[" * 100_000 + b"]" * 100_000), "nested too deeply", "deep"
    ),
    damage_case(
        "marian", "source.spm", write("source.spm", b"garbage"), "not a SentencePiece", "junk"
    ),
    damage_case(
        "nllb",
        "sentencepiece.bpe.model",
        write("sentencepiece.bpe.model", b"x"),
        "not a Sen",
        "junk",
    ),
    *[
        damage_case(model, name, fifo(name), "a named pipe (FIFO), not a regular file", "fifo")
        for model, name in [
            ("marian", C),
            ("marian", G),
            ("marian", T),
            ("marian", "vocab.json"),
            ("marian", "source.spm"),
            ("nllb", "tokenizer.json"),
            ("nllb", "sentencepiece.bpe.model"),
        ]
    ],
]


# --- a damaged or unsafe weights file is refused by name, never with a traceback -----------


@pytest.fixture
def no_hang():
    """Fail, instead of waiting for ever, a test whose command blocks (opening a FIFO)."""

    def interrupt(signum, frame):
        raise TimeoutError("the command blocked")

    previous = signal.signal(signal.SIGALRM, interrupt)
    signal.alarm(60)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


SAFETENSORS = "model.safetensors"
BIN = "pytorch_model.bin"


class RunsCode:
    """Unpickled, would create the file `marker`: what a hostile pickle does."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def weights_state(directory):
    from safetensors.torch import load_file

    return load_file(directory / SAFETENSORS)


def as_bin(make):
    """The weights as pytorch_model.bin (what `make(state, path)` writes), no safetensors."""

    def damage(directory):
        state = weights_state(directory)
        (directory / SAFETENSORS).unlink()
        make(state, directory / BIN)

    return damage


def save_safetensors(edit):
    def damage(directory):
        from safetensors.torch import save_file

        state = weights_state(directory)
        edit(state)
        save_file(state, directory / SAFETENSORS, metadata={"format": "pt"})

    return damage


def cut(name):
    def damage(directory):
        data = (directory / name).read_bytes()
        (directory / name).write_bytes(data[: len(data) // 2])

    return damage


def unreadable(name, monkeypatch):
    """chmod 000; root reads such files all the same, so for root the open is refused."""

    def damage(directory):
        path = directory / name
        path.chmod(0)
        if os.geteuid() == 0:
            real_open = os.open

            def refuse(file, flags, *args, **kwargs):
                if Path(file) == path:
                    raise PermissionError(errno.EACCES, "Permission denied", str(file))
                return real_open(file, flags, *args, **kwargs)

            monkeypatch.setattr(os, "open", refuse)

    return damage


def directory_instead(name):
    def damage(directory):
        (directory / name).unlink()
        (directory / name).mkdir()

    return damage


def symlink_loop(name):
    def damage(directory):
        if (directory / name).exists():
            (directory / name).unlink()
        (directory / name).symlink_to(name)

    return damage


def missing(name):
    return lambda directory: (directory / name).unlink()


def sharded(edit_map=None, drop=None):
    """The weights in two safetensors shards and an index; `edit_map` changes the index's
    weight_map, `drop` removes a shard."""

    def damage(directory):
        from safetensors.torch import save_file

        state = weights_state(directory)
        (directory / SAFETENSORS).unlink()
        keys = sorted(state)
        weight_map = {}
        for name, part in (("model-1.safetensors", keys[::2]), ("model-2.safetensors", keys[1::2])):
            save_file({k: state[k] for k in part}, directory / name, metadata={"format": "pt"})
            weight_map.update(dict.fromkeys(part, name))
        if edit_map is not None:
            edit_map(weight_map)
        if drop is not None:
            (directory / drop).unlink()
        index = {"metadata": {}, "weight_map": weight_map}
        (directory / "model.safetensors.index.json").write_text(json.dumps(index))

    return damage


def torch_save(**kwargs):
    return as_bin(lambda state, path: torch.save(state, path, **kwargs))


def weights_case(file, damage, message, name, model="marian"):
    return pytest.param(model, file, damage, message, id=f"{model}-{name}")


FIRST_LAYER = "model.encoder.layers.0.fc1.weight"
JUNK = b"not weights at all\n" * 200
WEIGHTS = [
    weights_case(SAFETENSORS, write(SAFETENSORS, b""), "empty; the model's weights", "empty"),
    weights_case(SAFETENSORS, cut(SAFETENSORS), "not a safetensors file, or cut short", "cut"),
    weights_case(SAFETENSORS, cut(SAFETENSORS), "not a safetensors file", "cut", model="nllb"),
    weights_case(SAFETENSORS, write(SAFETENSORS, JUNK), "not a safetensors", "junk"),
    weights_case(SAFETENSORS, missing(SAFETENSORS), "missing, and so is pytorch_model.bin", "gone"),
    weights_case(SAFETENSORS, fifo(SAFETENSORS), "a named pipe (FIFO), not a regular file", "fifo"),
    weights_case(SAFETENSORS, fifo(SAFETENSORS), "a named pipe (FIFO)", "fifo", model="nllb"),
    weights_case(SAFETENSORS, symlink_loop(SAFETENSORS), "a symlink loop", "loop"),
    weights_case(SAFETENSORS, directory_instead(SAFETENSORS), "a directory, not a regular", "dir"),
    weights_case(BIN, as_bin(lambda s, p: p.write_bytes(b"")), "empty", "bin-empty"),
    weights_case(BIN, as_bin(lambda s, p: p.write_bytes(JUNK)), "refused", "bin-junk"),
    weights_case(
        BIN,
        as_bin(lambda s, p: (torch.save(s, p), p.write_bytes(p.read_bytes()[:5000]))),
        "not a PyTorch weights file, or cut short",
        "bin-cut",
    ),
    weights_case(BIN, as_bin(lambda s, p: torch.save(list(s.values()), p)), "holds a list", "list"),
    weights_case(
        BIN,
        as_bin(lambda s, p: torch.save({**s, FIRST_LAYER: None}, p)),
        "not tensors by name",
        "bin-none",
    ),
    weights_case(
        BIN,
        as_bin(lambda s, p: torch.save({k: v for k, v in s.items() if k != FIRST_LAYER}, p)),
        f"lacks {FIRST_LAYER}, which transformers would fill with random values",
        "bin-lacks-a-tensor",
    ),
    weights_case(
        SAFETENSORS,
        save_safetensors(lambda s: s.pop(FIRST_LAYER)),
        f"lacks {FIRST_LAYER}",
        "lacks-a-tensor",
    ),
    weights_case(
        SAFETENSORS,
        save_safetensors(lambda s: s.update({"model.encoder.extra.weight": torch.zeros(2)})),
        "holds model.encoder.extra.weight, which config.json has no place for",
        "extra-tensor",
    ),
    weights_case(
        SAFETENSORS,
        save_safetensors(lambda s: s.update({FIRST_LAYER: torch.zeros(3, 3)})),
        f"{FIRST_LAYER} has shape [3, 3], config.json gives it [64, 32]",
        "shape",
    ),
    weights_case(
        SAFETENSORS,
        save_safetensors(lambda s: [s.pop(k) for k in list(s) if ".layers.1." in k]),
        "holds 1 encoder layers, config.json's encoder_layers is 2",
        "a-layer-short",
    ),
    weights_case(
        "model.safetensors.index.json",
        sharded(edit_map=lambda m: m.update({FIRST_LAYER: "../model-1.safetensors"})),
        "weight_map names '../model-1.safetensors', not a file of this directory",
        "index-escapes",
    ),
    weights_case(
        "model-2.safetensors",
        sharded(drop="model-2.safetensors"),
        "missing; model.safetensors.index.json names it",
        "shard-gone",
    ),
]


@pytest.mark.parametrize("model, file, damage, message", [*TOKENIZER_FILES, *WEIGHTS])
def test_a_damaged_settings_tokenizer_or_weights_file_is_named(
    model_dirs, tmp_path, capsys, no_hang, model, file, damage, message
):
    directory = copy_of(model_dirs[model], tmp_path)
    damage(directory)
    line = one_refusal(directory, tmp_path, capsys)
    assert line.startswith(f"error: {directory / file}: ") and message in line, line


@pytest.mark.parametrize("name", [SAFETENSORS, BIN, C, "vocab.json"])
def test_an_unreadable_file_is_named_as_unreadable(model_dirs, tmp_path, capsys, monkeypatch, name):
    directory = copy_of(model_dirs["marian"], tmp_path)
    if name == BIN:
        torch_save()(directory)
    unreadable(name, monkeypatch)(directory)
    line = one_refusal(directory, tmp_path, capsys)
    assert line == f"error: {directory / name}: unreadable (permission denied)"


@pytest.mark.parametrize("zipped", [True, False], ids=["torch.save", "plain-pickle"])
def test_a_pickle_that_would_run_code_is_refused_unrun(model_dirs, tmp_path, capsys, zipped):
    directory = copy_of(model_dirs["marian"], tmp_path)
    marker = tmp_path / "it-ran"
    (directory / SAFETENSORS).unlink()
    hostile = {FIRST_LAYER: RunsCode(marker)}
    if zipped:
        torch.save(hostile, directory / BIN)
    else:
        (directory / BIN).write_bytes(pickle.dumps(hostile, protocol=2))
    line = one_refusal(directory, tmp_path, capsys)
    assert line.startswith(f"error: {directory / BIN}: refused: ")
    assert "weights_only=True" in line and not marker.exists()
    if zipped:  # torch names what it would call
        assert "would call" in line and "system" in line


def test_a_symlink_loop_anywhere_in_the_directory_is_named(model_dirs, tmp_path, capsys):
    directory = copy_of(model_dirs["marian"], tmp_path)
    (directory / "notes").symlink_to("notes")
    line = one_refusal(directory, tmp_path, capsys)
    assert line == f"error: {directory / 'notes'}: a symlink loop"


@pytest.mark.parametrize("settings", [None, {}], ids=["missing", "no-tokenizer_class"])
def test_an_nllb_directory_whose_tokenizer_class_is_not_named_names_the_file(
    model_dirs, tmp_path, capsys, settings
):
    """Without NllbTokenizer named, transformers reads the tokenizer as M2M100's (config.json's
    model_type), which needs vocab.json: NLLB's directory has none."""
    directory = copy_of(model_dirs["nllb"], tmp_path)
    path = directory / "tokenizer_config.json"
    path.unlink()
    if settings is not None:
        path.write_text(json.dumps(settings))
    state = "missing" if settings is None else "names no tokenizer_class"
    assert one_refusal(directory, tmp_path, capsys) == (
        f"error: {path}: {state}, so transformers reads the tokenizer as M2M100's, which needs "
        "vocab.json (missing too); NLLB's names NllbTokenizer"
    )


def test_an_m2m100_tokenizer_without_its_vocab_json_names_it(model_dirs, tmp_path, capsys):
    directory = copy_of(model_dirs["nllb"], tmp_path)
    set_json(directory / "tokenizer_config.json", "tokenizer_class", "M2M100Tokenizer")
    assert one_refusal(directory, tmp_path, capsys) == (
        f"error: {directory / 'vocab.json'}: missing; M2M100Tokenizer, tokenizer_config.json's "
        "tokenizer_class, numbers the pieces with it"
    )


@pytest.mark.parametrize(
    "damage",
    [torch_save(), torch_save(_use_new_zipfile_serialization=False), sharded()],
    ids=["pytorch_model.bin", "legacy-pytorch_model.bin", "sharded-safetensors"],
)
def test_weights_in_every_format_transformers_writes_import(model_dirs, tmp_path, damage):
    directory = copy_of(model_dirs["marian"], tmp_path)
    damage(directory)
    out = tmp_path / "out.pt"
    assert main(["import", str(directory), "--out", str(out)]) == 0
    assert out.is_file()
