"""`tmt import` of OPUS-MT-shaped Marian models built here with transformers: swish, a non-zero
final_logits_bias, pad as the decoder's start, two SentencePiece models trained in the test
with a vocab.json numbering, `>>xxx<<` language tags, and a variant with separate
vocabularies. The imported checkpoint must tokenize, score and translate as transformers does.
"""

import json

import pytest
import torch
from torch.testing import assert_close

from tests.corpora import SHARED_DATA, slice_lines
from tests.importing.builders import best_ids, build_marian, generated_ids
from transformer_mt.artifacts import load_for_inference
from transformer_mt.cli import main
from transformer_mt.inference.line_settings import LineSettings
from transformer_mt.inference.translator import Translator

transformers = pytest.importorskip("transformers")

STEPS = 12  # tokens each greedy search may produce
CODES = ["ces", "deu", "fra"]  # the language tags `build_marian` gives a multilingual model


@pytest.fixture(scope="module", params=["multilingual", "separate"])
def imported(request, tmp_path_factory):
    """(transformers model, its tokenizer, our checkpoint, the target tag to ask for)."""
    root = tmp_path_factory.mktemp("marian")
    separate = request.param == "separate"
    model, tokenizer = build_marian(root / "hf", separate=separate)
    out = root / "imported.pt"
    assert main(["import", str(root / "hf"), "--out", str(out)]) == 0
    return model, tokenizer, out, None if separate else "fra"


def sentences(lang, n):
    lines = slice_lines("test2016", lang) if lang in ("de", "en") else []
    shared = SHARED_DATA / "multi30k" / f"test2016.{lang}"
    if not lines and shared.is_file():
        lines = shared.read_text("utf-8").splitlines()
    return lines[:n]


def test_token_ids_equal_marian_tokenizer(imported):
    _, tokenizer, out, tag = imported
    bundle = load_for_inference(out)
    for lang in ("de", "en", "fr", "cs"):
        for line in sentences(lang, 40):
            assert bundle.src_tokenizer.encode(line) + [bundle.specials.eos] == (
                tokenizer(line).input_ids
            ), line
            assert bundle.tgt_tokenizer.encode(line) + [bundle.specials.eos] == (
                tokenizer(text_target=line).input_ids
            ), line
    if tag is not None:
        tagged = f">>{tag}<< " + sentences("de", 1)[0]
        assert bundle.src_tokenizer.encode(tagged) + [bundle.specials.eos] == (
            tokenizer(tagged).input_ids
        )
    assert set(bundle.specials.language_tags) == (set() if tag is None else {"fra", "deu", "ces"})


def test_logits_equal_transformers_on_a_padded_batch(imported):
    model, tokenizer, out, _ = imported
    bundle = load_for_inference(out)
    lines = sentences("de", 4)
    inputs = tokenizer(lines, text_target=sentences("en", 4), padding=True, return_tensors="pt")
    pad = bundle.specials.pad
    labels = inputs["labels"]
    decoder_in = torch.cat([torch.full((4, 1), bundle.specials.bos), labels[:, :-1]], dim=1)
    with torch.no_grad():
        theirs = model(
            input_ids=inputs["input_ids"],
            attention_mask=inputs["attention_mask"],
            decoder_input_ids=decoder_in,
        ).logits
        ours = bundle.model(
            inputs["input_ids"], decoder_in, bundle.model.src_mask(inputs["input_ids"])
        )
    real = labels != pad
    assert_close(ours[real], theirs[real], atol=1e-4, rtol=1e-4)


def test_greedy_translations_equal_generate(imported):
    """A multilingual model's target tag: ours puts it in front of the source (`tgt_lang`),
    transformers reads it from the text."""
    model, tokenizer, out, tag = imported
    lines = sentences("de", 30)
    translator = Translator.from_checkpoint(
        str(out), beam_size=1, max_len_a=0.0, max_len_b=STEPS, lines=LineSettings(tgt_lang=tag)
    )
    ours = best_ids(translator, lines)
    tagged = [f">>{tag}<< {line}" if tag else line for line in lines]
    inputs = tokenizer(tagged, padding=True, return_tensors="pt")
    with torch.no_grad():
        generated = model.generate(**inputs, num_beams=1, do_sample=False, max_new_tokens=STEPS)
    pad = model.config.pad_token_id
    for line, mine, theirs in zip(lines, ours, generated_ids(generated, pad), strict=True):
        assert mine == theirs, line
    texts = [t.texts[0] for t in translator.translate(lines)]
    assert texts == tokenizer.batch_decode(generated, skip_special_tokens=True)


def test_a_language_the_model_lacks_or_needs_is_named(imported, tmp_path, capsys):
    _, _, out, tag = imported
    if tag is None:
        pytest.skip("a bilingual model has no languages to choose")
    source = tmp_path / "in.de"
    source.write_text("ein hund\n", "utf-8")
    args = ["translate", "--checkpoint", str(out), "--input", str(source)]
    assert main([*args, "--tgt-lang", "xyz"]) == 2
    known = "it knows ces, deu, fra"
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"error: --tgt-lang xyz: the model has no such language; {known}"
    )
    assert main(args) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]  # after a note on busy cores
    assert last == f"error: --tgt-lang: the model needs it; {known}"


def test_an_imported_model_fine_tunes_and_translates(imported, tmp_path):
    """A few updates on the child's pairs, through its tables and special ids; the loss falls
    and the child translates with the parent's tokenizers."""
    from tests.training.conftest import write_config, write_corpus
    from transformer_mt.artifacts import load_checkpoint
    from transformer_mt.training.metrics import read_metrics

    _, _, out, tag = imported
    write_corpus(tmp_path, n_train=60, n_valid=8)
    train = f"max_steps: 6, warmup_steps: 1, valid_every: 3, init_from: {out}, lr: 1e-3"
    config = write_config(tmp_path, train=train, model="dropout: 0.0")
    text = config.read_text("utf-8").replace("  d_model: 32\n  n_heads: 4\n  n_layers: 2\n", "")
    config.write_text(
        text.replace("  d_ff: 64\n", "").replace("tokenizer:\n  vocab_size: 60\n", "")
    )
    run = tmp_path / "run"
    # A multilingual model is told the target language (its tag frames every pair).
    # The model's 256 positions hold a pair of 200 tokens with its tag and bos or eos.
    settings = ["data.max_len=200"] + ([] if tag is None else [f"data.tgt_lang={tag}"])
    assert main(["train", "--config", str(config), "--run-dir", str(run), "--set", *settings]) == 0
    child = load_checkpoint(run / "checkpoints" / "last.pt")
    assert child.specials == load_checkpoint(out).specials
    losses = [row["loss"] for row in read_metrics(run / "metrics.jsonl") if row["kind"] == "train"]
    assert losses[-1] < losses[0]
    translator = Translator.from_checkpoint(
        str(run / "checkpoints" / "last.pt"), lines=LineSettings(tgt_lang=tag)
    )
    assert all(isinstance(t.texts[0], str) for t in translator.translate(["der hund"]))


@pytest.mark.parametrize("length_norm", ["none", "average"])
def test_beam_5_best_hypotheses_equal_generate(imported, length_norm):
    """Beam 5 against transformers' beam search with the rules ours follows: a sentence ends
    with 5 finished hypotheses (early_stopping=True), scores divided by 1 (none) or by the
    generated length (average, length_penalty=1.0), pad banned, the same token budget."""
    model, tokenizer, out, tag = imported
    lines = slice_lines("valid", "de")[:200]
    translator = Translator.from_checkpoint(
        str(out), beam_size=5, max_len_a=0.0, max_len_b=STEPS, min_len=0,
        length_norm=length_norm, length_penalty=1.0, lines=LineSettings(tgt_lang=tag),
    )  # fmt: skip
    ours = best_ids(translator, lines)
    tagged = [f">>{tag}<< {line}" if tag else line for line in lines]
    pad = model.config.pad_token_id
    same = 0
    for start in range(0, len(lines), 50):
        inputs = tokenizer(tagged[start : start + 50], padding=True, return_tensors="pt")
        with torch.no_grad():
            generated = model.generate(
                **inputs, num_beams=5, do_sample=False, max_new_tokens=STEPS,
                early_stopping=True, length_penalty=1.0 if length_norm == "average" else 0.0,
                bad_words_ids=[[pad]],
            )  # fmt: skip
        theirs = generated_ids(generated, pad)
        same += sum(a == b for a, b in zip(ours[start : start + 50], theirs, strict=True))
    print(f"beam 5, length_norm {length_norm}: {same} of {len(lines)} best hypotheses equal")
    assert same >= 0.95 * len(lines), f"{same} of {len(lines)} best hypotheses equal"


def test_a_tag_typed_into_the_text_does_not_switch_the_language(imported):
    """`>>deu<<` typed in front of a line is taken out and counted: --tgt-lang decides."""
    _, _, out, tag = imported
    if tag is None:
        pytest.skip("a bilingual model has no tags")
    translator = Translator.from_checkpoint(
        str(out), beam_size=1, lines=LineSettings(tgt_lang="fra")
    )
    plain, typed = translator.translate(["ein hund läuft", ">>deu<< ein hund läuft"])
    assert typed.texts == plain.texts and translator.encoding.tagged_lines == 1
    assert translator.encoding.source_ids(">>deu<<") == []  # the tag alone: nothing to translate


def test_tmt_info_names_what_was_imported(imported, capsys):
    from transformer_mt.checkpoint_info import describe

    _, _, out, _ = imported
    found = describe(out)
    assert found.made_by == "import" and found.imported_from == str(out.parent / "hf")
    assert main(["info", str(out)]) == 0
    assert f"made by     tmt import of {out.parent / 'hf'}\n" in capsys.readouterr().out


def test_tmt_info_lists_the_target_languages_a_tagged_model_takes(imported):
    """Its data's target (en) has no tag: it was trained from de into each of its tags."""
    _, _, out, tag = imported
    if tag is None:
        pytest.skip("a bilingual model has no tags")
    from transformer_mt.checkpoint_info import describe

    found = describe(out)
    assert found.directions == ["de-fra", "de-deu", "de-ces"]
    assert not any(d.endswith("-en") for d in found.zero_shot)  # its data's label, no tag


def test_a_model_into_a_group_translates_from_its_source_into_each_tag(tmp_path, capsys):
    """OPUS-MT's source_lang deu, target_lang ROMANCE, a tag for each member: its directions
    are deu into each (they had been listed as zero-shot), and ROMANCE is no language."""
    build_marian(tmp_path / "hf", separate=False)
    settings = tmp_path / "hf" / "tokenizer_config.json"
    config = json.loads(settings.read_text("utf-8"))
    settings.write_text(json.dumps({**config, "source_lang": "deu", "target_lang": "ROMANCE"}))
    out = tmp_path / "romance.pt"
    assert main(["import", str(tmp_path / "hf"), "--out", str(out)]) == 0
    wrote = capsys.readouterr().err.splitlines()[-1]
    zero_shot = "zero-shot ces-deu, ces-fra, fra-ces, fra-deu"
    assert wrote.startswith(f"wrote {out}: translates deu-fra, deu-ces; {zero_shot}; ")
    assert main(["info", str(out), "--json"]) == 0
    found = json.loads(capsys.readouterr().out)
    assert (found["directions"], found["languages"]) == (["deu-fra", "deu-ces"], CODES)
    languages = Translator.from_checkpoint(str(out), lines=LineSettings(tgt_lang="ces")).languages
    assert languages.trained == (("deu", "fra"), ("deu", "ces"))
    assert "ROMANCE" not in languages.codes


def test_the_import_message_names_what_info_names(imported, tmp_path, capsys):
    """A tagged model's data labels (`de->en`) are no direction translate takes."""
    from transformer_mt.checkpoint_info import describe

    _, _, out, tag = imported
    assert main(["import", str(out.parent / "hf"), "--out", str(tmp_path / "again.pt")]) == 0
    found = describe(out)
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"wrote {tmp_path / 'again.pt'}: translates {found.translates()}; {found.model}"
    )
    if tag is not None:  # its data's labels, de-en: de into each of its tags
        assert found.translates().startswith("de-fra, de-deu, de-ces; zero-shot ")
