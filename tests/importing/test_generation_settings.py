"""An imported model searches as its own generation settings say (those `generate` uses
without arguments): the import maps them onto the checkpoint's decode section
(`interop.import_generation`), and `tmt translate` without flags then equals `generate`."""

import json

import pytest
import torch

from tests.corpora import slice_lines
from tests.importing.builders import build_marian, build_marian_searching, build_nllb
from transformer_mt.artifacts import load_checkpoint, save_checkpoint
from transformer_mt.cli import main
from transformer_mt.config import DecodeConfig
from transformer_mt.interop.import_generation import read_generation

transformers = pytest.importorskip("transformers")

LINES = slice_lines("valid", "de")[:50]
MAPPED = (
    "beam_size", "length_norm", "length_penalty", "early_stopping", "max_len_a", "max_len_b",
    "min_len",
)  # fmt: skip


def mapped(decode):
    return {key: getattr(decode, key) if isinstance(decode, DecodeConfig) else decode[key]
            for key in MAPPED}  # fmt: skip


def write_json(path, values):
    path.write_text(json.dumps(values), "utf-8")


@pytest.mark.parametrize(
    "files, decode",
    [
        pytest.param({}, (1, "power", 1.0, "heuristic", 0.0, 20, 0), id="transformers-defaults"),
        pytest.param(
            {"generation_config.json": {"num_beams": 4, "length_penalty": 0.0, "max_length": 20,
                                        "min_length": 2, "early_stopping": True}},
            (4, "power", 0.0, "k_finished", 0.0, 19, 1),
            id="generation_config",
        ),
        pytest.param(
            {"config.json": {"num_beams": 5, "max_length": 200, "early_stopping": "never",
                             "length_penalty": 0.6}},
            (5, "power", 0.6, "never", 0.0, 199, 0),
            id="config-only",
        ),
        pytest.param(
            {"generation_config.json": {"max_length": 50, "max_new_tokens": 7,
                                        "min_new_tokens": 3}},
            (1, "power", 1.0, "heuristic", 0.0, 7, 3),
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
    settings = {"num_beams": 4, "length_penalty": 0.6, "bad_words_ids": [[5], [6, 7]],
                "no_repeat_ngram_size": 3}  # fmt: skip
    write_json(tmp_path / "config.json", {"model_type": "marian"})
    write_json(tmp_path / "generation_config.json", settings)
    generation = read_generation(tmp_path, pad=9, rows=10)
    assert generation.never == (9, 5)
    assert generation.decode.no_repeat_ngram_size == 3  # a rule of ours too: not noted
    notes = [note.split(": ", 1)[1] for note in generation.notes]
    assert [note.split(":")[0] for note in notes] == ["bad_words_ids of several tokens"]


def test_a_bad_setting_is_named(tmp_path):
    from transformer_mt.errors import TmtError

    write_json(tmp_path / "config.json", {"model_type": "marian"})
    write_json(tmp_path / "generation_config.json", {"num_beams": 0})
    with pytest.raises(TmtError, match="generation_config.json: num_beams must be a positive"):
        read_generation(tmp_path, pad=9, rows=10)


# (num_beams, length_penalty, early_stopping) of the Marian models searched below: the rules
# of transformers' beam search, each with the length penalties that tell them apart (False is
# transformers' default and OPUS-MT's). One search per rule runs by default; the other
# penalties in the slow run (each search is a model tuned and imported: 8 s).
SEARCHES = [(4, 0.0, True), (4, 1.0, False), (5, 1.0, "never")]
SLOW_SEARCHES = [(4, 1.0, True), (4, 0.6, False), (5, 0.6, False)]
# What each rule is called in our decode section.
RULES = {True: "k_finished", False: "heuristic", "never": "never"}


@pytest.fixture(
    scope="module",
    params=[
        *SEARCHES,
        *(pytest.param(search, marks=pytest.mark.slow) for search in SLOW_SEARCHES),
    ],
    ids=[
        f"beams={k}-length_penalty={p:g}-early_stopping={e}" for k, p, e in SEARCHES + SLOW_SEARCHES
    ],
)
def searching(request, tmp_path_factory):
    """A Marian whose generation config sets a beam, a length penalty, max_length 20,
    min_length 2 and early_stopping, imported: (model as transformers loads it, tokenizer,
    checkpoint)."""
    root = tmp_path_factory.mktemp("searching")
    beams, penalty, early_stopping = request.param
    settings = dict(num_beams=beams, length_penalty=penalty, max_length=20, min_length=2)
    _, tokenizer = build_marian_searching(
        root / "hf", LINES, early_stopping=early_stopping, **settings
    )
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
    hf = model.generation_config
    decode = load_checkpoint(checkpoint).config["decode"]
    rule = RULES[hf.early_stopping]
    values = (hf.num_beams, "power", hf.length_penalty, rule, 0.0, 19, 1)
    assert mapped(decode) == dict(zip(MAPPED, values, strict=True))


def test_translate_equals_generate_with_the_models_defaults(searching, tmp_path):
    model, tokenizer, checkpoint = searching
    theirs = generated(model, tokenizer)
    assert len({len(text.split()) for text in theirs}) > 3  # not all at the length limit
    ours = translate(checkpoint, tmp_path)
    equal = sum(a == b for a, b in zip(ours, theirs, strict=True))
    assert equal == len(LINES), f"{equal} / {len(LINES)} texts equal"
    # A flag still overrides the checkpoint's setting: the other rules, equal to generate's,
    # of which one at least translates otherwise (the model's own rule is what is tried).
    rule = model.generation_config.early_stopping
    others = {other: generated(model, tokenizer, early_stopping=other) for other in RULES}
    del others[rule]
    for other, texts in others.items():
        assert translate(checkpoint, tmp_path, "--early-stopping", RULES[other]) == texts
    assert any(texts != theirs for texts in others.values())
    assert translate(checkpoint, tmp_path, "--beam-size", "1") == generated(
        model, tokenizer, num_beams=1
    )


def test_no_repeated_ngrams_and_no_unknown_piece_as_generate(searching, tmp_path):
    """--no-repeat-ngram-size N and --disable-unk search as generate's no_repeat_ngram_size and
    bad_words_ids holding the unknown piece besides the model's own, under every beam rule;
    the rule changes translations."""
    model, tokenizer, checkpoint = searching
    banned = [*model.generation_config.bad_words_ids, [tokenizer.unk_token_id]]
    for n in (1, 2):
        theirs = generated(model, tokenizer, no_repeat_ngram_size=n, bad_words_ids=banned)
        flags = ("--no-repeat-ngram-size", str(n), "--disable-unk")
        assert translate(checkpoint, tmp_path, *flags) == theirs, n
    assert theirs != generated(model, tokenizer)
    greedy = generated(model, tokenizer, num_beams=1, no_repeat_ngram_size=2, bad_words_ids=banned)
    flags = ("--beam-size", "1", "--no-repeat-ngram-size", "2", "--disable-unk")
    assert translate(checkpoint, tmp_path, *flags) == greedy


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
    settings = dict(num_beams=4, length_penalty=0.6, max_length=20, repetition_penalty=1.2)
    build_marian_searching(tmp_path / "hf", LINES[:4], **settings)
    assert main(["import", str(tmp_path / "hf"), "--out", str(tmp_path / "imported.pt")]) == 0
    notes = [line for line in capsys.readouterr().err.splitlines() if line.startswith("note: ")]
    said = [note.removeprefix("note: ").split(": ", 1)[1].split(":")[0] for note in notes]
    assert said == ["repetition_penalty=1.2"]


def test_tmt_import_notes_the_training_only_settings_it_leaves_out(tmp_path, capsys):
    build_marian(tmp_path / "hf", separate=True)
    config_file = tmp_path / "hf" / "config.json"
    config = json.loads(config_file.read_text("utf-8"))
    config.update(encoder_layerdrop=0.1, decoder_layerdrop=0.0)
    config_file.write_text(json.dumps(config), "utf-8")
    assert main(["import", str(tmp_path / "hf"), "--out", str(tmp_path / "imported.pt")]) == 0
    notes = [line for line in capsys.readouterr().err.splitlines() if line.startswith("note: ")]
    assert notes == [
        "note: left out encoder_layerdrop=0.1 (LayerDrop skips layers in training only; "
        "ours has none)"
    ]


def test_the_hf_export_searches_as_the_checkpoint(searching, tmp_path, capsys):
    """`tmt export --format hf` writes the decode section back as the generation config: the
    original model's settings come back, and generate() on the export equals tmt translate."""
    original, tokenizer, checkpoint = searching
    out = tmp_path / "hf"
    assert main(["export", str(checkpoint), str(out), "--format", "hf"]) == 0
    assert "note:" not in capsys.readouterr().err  # every setting said
    exported = transformers.MarianMTModel.from_pretrained(out).eval()
    mine, theirs = original.generation_config, exported.generation_config
    for key in ("num_beams", "length_penalty", "early_stopping"):
        assert getattr(theirs, key) == getattr(mine, key), key
    assert (theirs.max_new_tokens, theirs.min_new_tokens) == (19, 1)  # max_length 20, min 2
    assert generated(exported, tokenizer) == translate(checkpoint, tmp_path)


def test_what_generate_cannot_say_is_noted_at_export(searching, tmp_path, capsys):
    """Our own defaults (GNMT penalty, a limit growing with the source) are noted, one line
    each, and written as the nearest settings generate has; replace_unk, which it has none
    for, is noted as left out."""
    _, _, checkpoint = searching
    changed = tmp_path / "gnmt.pt"
    loaded = load_checkpoint(checkpoint)
    decode = dict(length_norm="gnmt", max_len_a=1.5, max_len_b=10, replace_unk=True)
    loaded.config["decode"].update(decode)
    save_checkpoint(loaded, changed)
    assert main(["export", str(changed), str(tmp_path / "hf"), "--format", "hf"]) == 0
    notes = [line for line in capsys.readouterr().err.splitlines() if line.startswith("note:")]
    assert len(notes) == 3
    assert "gnmt" in notes[0] and "max_len_a=1.5" in notes[1] and "replace_unk" in notes[2]
    generation = transformers.GenerationConfig.from_pretrained(tmp_path / "hf")
    assert (generation.length_penalty, generation.max_new_tokens) == (1.0, None)
