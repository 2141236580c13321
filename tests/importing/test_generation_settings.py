"""An imported model searches as its own generation settings say (those `generate` uses
without arguments): the import maps them onto the checkpoint's decode section
(`interop.import_generation`), and `tmt translate` without flags then equals `generate`."""

import json

import pytest
import torch

from tests.corpora import slice_lines
from tests.importing.builders import build_marian_searching, build_nllb
from transformer_mt.artifacts import load_checkpoint
from transformer_mt.cli import main
from transformer_mt.config import DecodeConfig
from transformer_mt.interop.import_generation import read_generation

transformers = pytest.importorskip("transformers")

LINES = slice_lines("valid", "de")[:50]
MAPPED = ("beam_size", "length_norm", "length_penalty", "max_len_a", "max_len_b", "min_len")


def mapped(decode):
    return {key: getattr(decode, key) if isinstance(decode, DecodeConfig) else decode[key]
            for key in MAPPED}  # fmt: skip


def write_json(path, values):
    path.write_text(json.dumps(values), "utf-8")


@pytest.mark.parametrize(
    "files, decode",
    [
        pytest.param({}, (1, "average", 1.0, 0.0, 20, 0), id="transformers-defaults"),
        pytest.param(
            {"generation_config.json": {"num_beams": 4, "length_penalty": 0.0, "max_length": 20,
                                        "min_length": 2, "early_stopping": True}},
            (4, "none", 0.0, 0.0, 19, 1),
            id="generation_config",
        ),
        pytest.param(
            {"config.json": {"num_beams": 5, "max_length": 200, "early_stopping": True}},
            (5, "average", 1.0, 0.0, 199, 0),
            id="config-only",
        ),
        pytest.param(
            {"generation_config.json": {"max_length": 50, "max_new_tokens": 7,
                                        "min_new_tokens": 3}},
            (1, "average", 1.0, 0.0, 7, 3),
            id="new-tokens",
        ),
    ],
)  # fmt: skip
def test_settings_map_onto_the_decode_section(tmp_path, files, decode):
    """generation_config.json alone when present, else config.json, else transformers'
    defaults (20 new tokens); lengths without the decoder's start token."""
    write_json(tmp_path / "config.json", {"model_type": "marian"})
    for name, values in files.items():
        write_json(tmp_path / name, values)
    generation = read_generation(tmp_path, pad=9, rows=10)
    assert mapped(generation.decode) == dict(zip(MAPPED, decode, strict=True))
    assert generation.never == (9,)
    assert generation.notes == ()


def test_what_our_search_does_otherwise_is_noted(tmp_path):
    settings = {"num_beams": 4, "length_penalty": 0.6, "bad_words_ids": [[5], [6, 7]]}
    write_json(tmp_path / "config.json", {"model_type": "marian"})
    write_json(tmp_path / "generation_config.json", settings)
    generation = read_generation(tmp_path, pad=9, rows=10)
    assert generation.never == (9, 5)
    assert mapped(generation.decode)["length_norm"] == "average"  # |y| ** 1, the nearer
    notes = [note.split(": ", 1)[1] for note in generation.notes]
    assert [note.split(":")[0] for note in notes] == [
        "length_penalty=0.6", "early_stopping=false", "bad_words_ids of several tokens"
    ]  # fmt: skip


def test_a_bad_setting_is_named(tmp_path):
    from transformer_mt.errors import TmtError

    write_json(tmp_path / "config.json", {"model_type": "marian"})
    write_json(tmp_path / "generation_config.json", {"num_beams": 0})
    with pytest.raises(TmtError, match="generation_config.json: num_beams must be a positive"):
        read_generation(tmp_path, pad=9, rows=10)


@pytest.fixture(scope="module", params=[0.0, 1.0], ids=["length_penalty=0", "length_penalty=1"])
def searching(request, tmp_path_factory):
    """A Marian whose generation config sets beam 4, a length penalty, max_length 20,
    min_length 2 and early_stopping, imported: (model as transformers loads it, tokenizer,
    checkpoint)."""
    root = tmp_path_factory.mktemp("searching")
    settings = dict(num_beams=4, length_penalty=request.param, max_length=20, min_length=2)
    _, tokenizer = build_marian_searching(root / "hf", LINES, early_stopping=True, **settings)
    assert main(["import", str(root / "hf"), "--out", str(root / "imported.pt")]) == 0
    model = transformers.MarianMTModel.from_pretrained(root / "hf").eval()
    return model, tokenizer, root / "imported.pt"


def translate(checkpoint, tmp_path, *flags):
    source, out = tmp_path / "in.de", tmp_path / "out.en"
    source.write_text("".join(f"{line}\n" for line in LINES), "utf-8")
    args = ["translate", "--checkpoint", str(checkpoint), "--input", str(source)]
    assert main([*args, "--output", str(out), *flags]) == 0
    return out.read_text("utf-8").splitlines()


def generated(model, tokenizer, **changes):
    inputs = tokenizer(LINES, padding=True, return_tensors="pt")
    with torch.no_grad():
        return tokenizer.batch_decode(model.generate(**inputs, **changes), skip_special_tokens=True)


def test_the_checkpoint_holds_the_mapped_settings(searching):
    model, _, checkpoint = searching
    penalty = model.generation_config.length_penalty
    decode = load_checkpoint(checkpoint).config["decode"]
    norm = "none" if penalty == 0 else "average"
    assert mapped(decode) == dict(zip(MAPPED, (4, norm, penalty, 0.0, 19, 1), strict=True))


def test_translate_equals_generate_with_the_models_defaults(searching, tmp_path):
    model, tokenizer, checkpoint = searching
    theirs = generated(model, tokenizer)
    assert len({len(text.split()) for text in theirs}) > 3  # not all at the length limit
    assert translate(checkpoint, tmp_path) == theirs
    # A flag still overrides the checkpoint's setting.
    assert translate(checkpoint, tmp_path, "--beam-size", "1") == generated(
        model, tokenizer, num_beams=1
    )


@pytest.mark.parametrize("settings", [{}, {"num_beams": 5, "early_stopping": True}])
def test_nllb_translates_as_generate_with_its_defaults(tmp_path, settings):
    """Greedy for 20 new tokens (transformers' defaults), or beam 5; the target language's code
    is forced first, as `forced_bos_token_id` does."""
    model, tokenizer = build_nllb(tmp_path / "hf")
    for key, value in settings.items():
        setattr(model.generation_config, key, value)
    model.save_pretrained(tmp_path / "hf")
    assert main(["import", str(tmp_path / "hf"), "--out", str(tmp_path / "nllb.pt")]) == 0
    tokenizer.src_lang = "deu_Latn"
    forced = tokenizer.convert_tokens_to_ids("eng_Latn")
    assert translate(tmp_path / "nllb.pt", tmp_path) == generated(
        model, tokenizer, forced_bos_token_id=forced
    )


def test_tmt_import_says_each_setting_our_search_follows_otherwise(tmp_path, capsys):
    settings = dict(num_beams=4, length_penalty=0.6, max_length=20, early_stopping=False)
    build_marian_searching(tmp_path / "hf", LINES[:4], **settings)
    assert main(["import", str(tmp_path / "hf"), "--out", str(tmp_path / "imported.pt")]) == 0
    notes = [line for line in capsys.readouterr().err.splitlines() if line.startswith("note: ")]
    said = [note.removeprefix("note: ").split(": ", 1)[1].split(":")[0] for note in notes]
    assert said == ["length_penalty=0.6", "early_stopping=false"]
