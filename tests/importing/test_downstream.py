"""Every command after `tmt import`, on OPUS-MT-shaped Marian checkpoints (multilingual with
`>>xxx<<` tags, and bilingual with separate vocabularies): translate (file, stdin, n-best,
prefixes, int8, --tgt-lang) and evaluate, attention maps, averaging, the serving engine, and
the exports to Hugging Face and CTranslate2, which must reproduce the original model.

Random weights never end a sentence, so the fixture raises the original model's logits bias
at EOS before importing (`end_half_the_sentences`): searches then stop at many lengths.
"""

import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.testing import assert_close

from tests.corpora import slice_lines
from tests.importing.builders import build_marian, end_half_the_sentences
from transformer_mt.artifacts import load_checkpoint, save_checkpoint
from transformer_mt.cli import main
from transformer_mt.inference.attention_maps import CELL_INCHES, DPI, draw_attention
from transformer_mt.inference.line_settings import LineSettings
from transformer_mt.inference.requests import Texts
from transformer_mt.inference.translator import Translator

transformers = pytest.importorskip("transformers")

SOURCES = slice_lines("test2016", "de")[:12]
REFERENCES = slice_lines("test2016", "en")[:12]
STEPS = 24  # tokens each greedy search may produce (CTranslate2 comparison)


@dataclasses.dataclass
class Imported:
    """An original Marian model, its directory and its `tmt import`."""

    directory: Path
    checkpoint: Path
    hf_model: Any  # MarianMTModel
    hf_tokenizer: Any  # MarianTokenizer
    tgt_lang: str | None  # the language to ask a multilingual model for

    def language_flags(self) -> list[str]:
        return [] if self.tgt_lang is None else ["--tgt-lang", self.tgt_lang]

    def tagged(self, lines: list[str]) -> list[str]:
        """`lines` as transformers' Marian takes them: a multilingual model's tag in front."""
        return [line if self.tgt_lang is None else f">>{self.tgt_lang}<< {line}" for line in lines]

    def translator(self, **decode_changes: object) -> Translator:
        return Translator.from_checkpoint(
            str(self.checkpoint), **decode_changes, lines=LineSettings(tgt_lang=self.tgt_lang)
        )


@pytest.fixture(scope="module", params=["multilingual", "separate"])
def imported(request, tmp_path_factory) -> Imported:
    root = tmp_path_factory.mktemp(request.param)
    separate = request.param == "separate"
    model, tokenizer = build_marian(root / "hf", separate=separate)
    found = Imported(
        root / "hf", root / "imported.pt", model, tokenizer, None if separate else "fra"
    )
    # The searches the imported checkpoint defaults to (its generation settings): beam 5 that
    # ends a sentence once 5 hypotheses have finished (searching on, a beam of this greedily
    # tuned model would find hypotheses cut at the limit), no translation ends before its
    # first token (as the margins of `end_half_the_sentences` assume), and room for STEPS
    # tokens.
    settings = dict(num_beams=5, early_stopping=True, min_length=2, max_length=STEPS + 1)
    for key, value in settings.items():
        setattr(model.generation_config, key, value)
    end_half_the_sentences(model, tokenizer, found.tagged(SOURCES), STEPS)
    model.save_pretrained(found.directory)
    assert main(["import", str(found.directory), "--out", str(found.checkpoint)]) == 0
    return found


def write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    return path


def translate(imported: Imported, tmp_path: Path, *args: str) -> list[str]:
    """The output lines of `tmt translate` of the imported checkpoint with `args`."""
    out = tmp_path / "out.txt"
    out.unlink(missing_ok=True)
    command = ["translate", "--checkpoint", str(imported.checkpoint), "--output", str(out)]
    assert main([*command, *imported.language_flags(), *args]) == 0
    return out.read_text(encoding="utf-8").splitlines()


# --- translate and evaluate ------------------------------------------------------------------


def test_translate_a_file_and_stdin_then_evaluate(imported, tmp_path, monkeypatch, capsys):
    lines = [*SOURCES[:6], "", *SOURCES[6:]]
    source = write_lines(tmp_path / "in.de", lines)
    expected = [t.texts[0] for t in imported.translator().translate(lines)]
    from_file = translate(imported, tmp_path, "--input", str(source))
    assert from_file == expected and from_file[6] == ""
    lengths = {len(text.split()) for text in from_file}
    assert len(lengths) > 3  # sentences end at many lengths, not all at the length limit
    with source.open("rb") as stdin:
        monkeypatch.setattr(sys, "stdin", stdin)
        assert translate(imported, tmp_path, "--input", "-") == expected

    hyp = write_lines(tmp_path / "hyp.en", from_file[:6] + from_file[7:])
    ref = write_lines(tmp_path / "ref.en", REFERENCES)
    capsys.readouterr()
    assert main(["evaluate", "--hyp", str(hyp), "--ref", str(ref), "--json"]) == 0
    scores = {s["name"]: s["score"] for s in json.loads(capsys.readouterr().out)}
    sacrebleu = pytest.importorskip("sacrebleu")
    bleu = sacrebleu.corpus_bleu(from_file[:6] + from_file[7:], [REFERENCES]).score
    assert scores["BLEU"] == pytest.approx(bleu)


def test_the_target_language_flag_chooses_the_tag(imported, tmp_path):
    if imported.tgt_lang is None:
        pytest.skip("a bilingual model has no languages to choose")
    source = write_lines(tmp_path / "in.de", SOURCES)
    french = translate(imported, tmp_path, "--input", str(source))
    german = translate(imported, tmp_path, "--input", str(source), "--tgt-lang", "deu")
    assert french != german
    # What the flag puts in front is the tag piece a transformers user writes.
    translator = Translator.from_checkpoint(
        str(imported.checkpoint), lines=LineSettings(tgt_lang="deu")
    )
    for line in SOURCES:
        tagged = translator.src_tokenizer.encode(f">>deu<< {line}")
        assert translator.encoding.source_ids(line) == tagged
        assert tagged == imported.hf_tokenizer(f">>deu<< {line}").input_ids[:-1]  # no EOS


def test_nbest_lists_three_hypotheses_per_line_best_first(imported, tmp_path):
    lines = [SOURCES[0], "", *SOURCES[1:5]]
    source = write_lines(tmp_path / "in.de", lines)
    rows = translate(imported, tmp_path, "--input", str(source), "--beam-size", "3", "--nbest", "3")
    assert len(rows) == 3 * len(lines)
    fields = [row.split(" ||| ") for row in rows]
    assert [int(f[0]) for f in fields] == [i for i in range(len(lines)) for _ in range(3)]
    assert rows[3:6] == ["1 |||  ||| 0.0000"] * 3
    expected = imported.translator(beam_size=3, n_best=3).translate(lines)
    best = imported.translator(beam_size=3).translate(lines)
    for i, (translation, one) in enumerate(zip(expected, best, strict=True)):
        group = fields[3 * i : 3 * i + 3]
        assert [f[1] for f in group] == translation.texts
        scores = [float(f[2]) for f in group]
        assert scores == sorted(scores, reverse=True)
        assert group[0][1] == one.texts[0]
        if lines[i]:
            assert len(set(translation.texts)) == 3


def test_each_translation_begins_with_its_prefix(imported, tmp_path):
    prefixes = [" ".join(ref.split()[:2]) if i % 3 else "" for i, ref in enumerate(REFERENCES)]
    source = write_lines(tmp_path / "in.de", SOURCES)
    prefix_file = write_lines(tmp_path / "prefixes.en", prefixes)
    rows = translate(imported, tmp_path, "--input", str(source), "--prefix", str(prefix_file))
    expected = imported.translator().translate(Texts.of(SOURCES, prefixes=prefixes))
    assert rows == [t.texts[0] for t in expected]
    plain = [t.texts[0] for t in imported.translator().translate(SOURCES)]
    for row, prefix, free in zip(rows, prefixes, plain, strict=True):
        assert row.startswith(prefix)
        if not prefix:
            assert row == free


def test_int8_translations_stay_close_to_float32(imported, tmp_path):
    """Same output on most lines, scores of the same output a little off (int8 did act)."""
    source = write_lines(tmp_path / "in.de", SOURCES)
    args = ["--input", str(source), "--beam-size", "1"]
    exact = translate(imported, tmp_path, *args)
    int8 = translate(imported, tmp_path, *args, "--quantize", "int8")
    same = [i for i, (a, b) in enumerate(zip(exact, int8, strict=True)) if a == b]
    assert len(same) >= 2 / 3 * len(SOURCES), list(zip(exact, int8, strict=True))
    quantized = Translator.from_checkpoint(
        str(imported.checkpoint),
        quantize="int8",
        beam_size=1,
        lines=LineSettings(tgt_lang=imported.tgt_lang),
    ).translate(SOURCES)
    assert [t.texts[0] for t in quantized] == int8
    float_scores = imported.translator(beam_size=1).translate(SOURCES)
    differences = [abs(quantized[i].scores[0] - float_scores[i].scores[0]) for i in same]
    assert 0 < max(differences) < 0.1


# --- attention maps and averaging -----------------------------------------------------------


def test_attention_maps_of_an_imported_model(imported, tmp_path):
    pytest.importorskip("matplotlib")
    cell = int(CELL_INCHES * DPI)
    # One head of one layer (matplotlib takes a second a panel): encoder, decoder, cross.
    out = draw_attention(
        imported.checkpoint,
        SOURCES[0],
        tmp_path / "maps.png",
        layer=1,
        head=3,
        languages=(None, imported.tgt_lang),
    )
    assert png_size(out) == (cell, 3 * cell)
    args = ["attention", "--checkpoint", str(imported.checkpoint), "--src", SOURCES[1]]
    args += ["--tgt", REFERENCES[1], "--layer", "0", "--head", "0"]
    if imported.tgt_lang is not None:
        args += ["--tgt-lang", imported.tgt_lang]
    assert main([*args, "--out", str(tmp_path / "cli.png")]) == 0
    assert png_size(tmp_path / "cli.png") == (cell, 3 * cell)


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


def test_average_of_two_imports_keeps_specials_and_tables(imported, tmp_path):
    checkpoint = load_checkpoint(imported.checkpoint)
    generator = torch.Generator().manual_seed(0)
    noise = {
        name: 1e-3 * torch.randn(tensor.shape, generator=generator)
        for name, tensor in checkpoint.model.items()
        if tensor.is_floating_point()
    }
    for sign, name in ((1, "a.pt"), (-1, "b.pt")):
        weights = {n: t + sign * noise[n] if n in noise else t for n, t in checkpoint.model.items()}
        save_checkpoint(dataclasses.replace(checkpoint, model=weights), tmp_path / name)
    out = tmp_path / "averaged.pt"
    assert main(["average", str(tmp_path / "a.pt"), str(tmp_path / "b.pt"), "--out", str(out)]) == 0
    averaged = load_checkpoint(out)
    assert averaged.specials == checkpoint.specials
    assert averaged.tokenizers == checkpoint.tokenizers
    assert {"src_pieces", "tgt_pieces"} <= averaged.tokenizers.keys()
    for name, tensor in checkpoint.model.items():
        assert_close(averaged.model[name], tensor, atol=1e-6, rtol=1e-6)
    lines = SOURCES[:6]
    want = [t.texts for t in imported.translator(beam_size=3).translate(lines)]
    got = Translator.from_checkpoint(
        str(out), beam_size=3, lines=LineSettings(tgt_lang=imported.tgt_lang)
    )
    assert [t.texts for t in got.translate(lines)] == want


# --- serving ---------------------------------------------------------------------------------


def test_served_translations_equal_the_translators(imported):
    from transformer_mt.serve.engine import Engine, ServeLimits

    lines = LineSettings(tgt_lang=imported.tgt_lang)
    engine = Engine.from_checkpoint(
        str(imported.checkpoint), limits=ServeLimits(kv_blocks=1024), lines=lines
    )
    engine.start()
    try:
        for beam, n_best in ((1, 1), (3, 2)):
            decode = dataclasses.replace(engine.defaults, beam_size=beam, n_best=n_best)
            jobs = [engine.submit([text], decode) for text in SOURCES]  # decoded side by side
            offline = imported.translator(beam_size=beam, n_best=n_best).translate(SOURCES)
            for job, want, text in zip(jobs, offline, SOURCES, strict=True):
                (served,) = job.future.result(timeout=60)
                assert served.texts == want.texts, text
                assert served.scores == pytest.approx(want.scores, abs=1e-4)
    finally:
        engine.stop()


# --- exports ---------------------------------------------------------------------------------


def test_hf_export_reproduces_the_original_model(imported, tmp_path):
    out = tmp_path / "hf"
    assert main(["export", str(imported.checkpoint), str(out), "--format", "hf"]) == 0
    original, tokenizer = imported.hf_model, imported.hf_tokenizer
    exported = transformers.MarianMTModel.from_pretrained(out).eval()
    exported_tokenizer = transformers.MarianTokenizer.from_pretrained(out)
    for key in ("pad_token_id", "eos_token_id", "decoder_start_token_id", "vocab_size"):
        assert getattr(exported.config, key) == getattr(original.config, key), key
    assert exported.config.decoder_vocab_size == original.config.decoder_vocab_size
    assert exported.generation_config.bad_words_ids == original.generation_config.bad_words_ids
    vocab_files = ["vocab.json"] + ([] if imported.tgt_lang else ["target_vocab.json"])
    for name in vocab_files:
        assert json.loads((out / name).read_text("utf-8")) == json.loads(
            (imported.directory / name).read_text("utf-8")
        )
    assert (out / "target_vocab.json").exists() == (imported.tgt_lang is None)
    sources = imported.tagged(SOURCES[:6])
    for line, target in zip(sources, REFERENCES[:6], strict=True):
        assert exported_tokenizer(line).input_ids == tokenizer(line).input_ids
        assert (
            exported_tokenizer(text_target=target).input_ids
            == tokenizer(text_target=target).input_ids
        )
    batch = tokenizer(sources, text_target=REFERENCES[:6], padding=True, return_tensors="pt")
    with torch.no_grad():
        assert_close(exported(**batch).logits, original(**batch).logits, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("scale_embeddings", [True, False])
def test_ctranslate2_greedy_output_equals_ours(imported, tmp_path, scale_embeddings):
    """float32, greedy, the same length limit; also with the model's embeddings unscaled
    (Marian's scale_embedding: false), which CTranslate2 must not scale either."""
    ctranslate2 = pytest.importorskip("ctranslate2")
    checkpoint = imported.checkpoint
    if not scale_embeddings:
        checkpoint = tmp_path / "unscaled.pt"
        stored = load_checkpoint(imported.checkpoint)
        model_config = {**stored.config["model"], "scale_embeddings": False}
        config = {**stored.config, "model": model_config}
        save_checkpoint(dataclasses.replace(stored, config=config), checkpoint)
    out = tmp_path / "ct2"
    assert main(["export", str(checkpoint), str(out), "--format", "ctranslate2"]) == 0
    translator = Translator.from_checkpoint(
        str(checkpoint),
        beam_size=1,
        max_len_a=0.0,
        max_len_b=STEPS,
        lines=LineSettings(tgt_lang=imported.tgt_lang),
    )
    sources = [translator.encoding.source_ids(line) for line in SOURCES]  # with the language tag
    ours = {}
    for batch, found in translator.search_batches(sources):
        for index, result in zip(batch.indices.tolist(), found, strict=True):
            ours[index] = result.best.tokens
    if scale_embeddings:
        assert any(len(tokens) < STEPS for tokens in ours.values())  # some ended with EOS
    src_tokenizer, tgt_tokenizer = translator.src_tokenizer, translator.tgt_tokenizer
    ct2 = ctranslate2.Translator(str(out), device="cpu", intra_threads=1)
    results = ct2.translate_batch(
        [[src_tokenizer.id_to_piece(i) for i in ids] for ids in sources],
        beam_size=1,
        max_decoding_length=STEPS,
        min_decoding_length=translator.decode.min_len,
        # What our search never produces (the pad id), as the exporter's docstring says.
        suppress_sequences=[[tgt_tokenizer.id_to_piece(i)] for i in translator.specials.never],
    )
    ids = tgt_tokenizer.pieces
    for i, result in enumerate(results):
        assert [ids[piece] for piece in result.hypotheses[0]] == ours[i], SOURCES[i]


def test_a_multilingual_import_is_evaluated_and_distilled_in_the_direction_named(
    imported, tmp_path, capsys
):
    """It has no direction of its own: `evaluate --directions` and a distill config name one
    (both refused it, asking for a --tgt-lang neither command has)."""
    if imported.tgt_lang is None:
        pytest.skip("a bilingual model has its own direction")
    write_lines(tmp_path / "test.de", SOURCES)
    write_lines(tmp_path / "test.fra", REFERENCES)
    evaluate = ["evaluate", "--checkpoint", str(imported.checkpoint), "--test"]
    evaluate += [str(tmp_path / "test"), "--no-off-target", "--json"]
    assert main([*evaluate, "--directions", "de-fra"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert (row["src_lang"], row["tgt_lang"], row["sentences"]) == ("de", "fra", len(SOURCES))
    assert main(evaluate) == 2
    assert "has no direction of its own" in capsys.readouterr().err

    config = tmp_path / "distill.yaml"
    config.write_text(f"data: {{src_lang: de, tgt_lang: fra, train: {tmp_path / 'test'}}}\n")
    distill = ["distill", "--checkpoint", str(imported.checkpoint), "--config", str(config)]
    assert main([*distill, "--run-dir", str(tmp_path / "run"), "--beam-size", "1"]) == 0
    assert (tmp_path / "run" / "train.fra").exists()
