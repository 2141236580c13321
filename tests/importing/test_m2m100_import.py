"""`tmt import` of an NLLB-shaped M2M100 model built here with transformers: the source starts
with its language's code, the decoder with </s> and then the target language's code (forced),
pieces numbered by the tokenizer's own table past fairseq's specials."""

import pytest
import torch
from torch.testing import assert_close

from tests.corpora import SHARED_DATA, slice_lines
from tests.importing.builders import best_ids, build_nllb, generated_ids
from transformer_mt.artifacts import load_for_inference
from transformer_mt.cli import main
from transformer_mt.inference.line_settings import LineSettings
from transformer_mt.inference.translator import Translator

transformers = pytest.importorskip("transformers")

STEPS = 12


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    root = tmp_path_factory.mktemp("nllb")
    model, tokenizer = build_nllb(root / "hf")
    out = root / "imported.pt"
    assert main(["import", str(root / "hf"), "--out", str(out)]) == 0
    return model, tokenizer, out


def sentences(lang, n):
    if lang in ("de", "en"):
        return slice_lines("test2016", lang)[:n]
    shared = SHARED_DATA / "multi30k" / f"test2016.{lang}"
    return shared.read_text("utf-8").splitlines()[:n] if shared.is_file() else []


def test_token_ids_equal_nllb_tokenizer(imported):
    _, tokenizer, out = imported
    bundle = load_for_inference(out)
    assert (bundle.config.data.src_lang, bundle.config.data.tgt_lang) == ("deu_Latn", "eng_Latn")
    specials = bundle.specials
    assert set(specials.language_tags) == {"deu_Latn", "eng_Latn", "fra_Latn", "ces_Latn"}
    for lang in ("de", "en", "fr", "cs"):
        for line in sentences(lang, 40):
            tokenizer.src_lang = "fra_Latn"
            expected = tokenizer(line).input_ids
            tokenizers = (bundle.src_tokenizer, bundle.tgt_tokenizer)
            translator = Translator(
                bundle.model, tokenizers, bundle.config.decode, specials=specials,
                lines=LineSettings(src_lang="fra_Latn", tgt_lang="eng_Latn"),
            )  # fmt: skip
            assert translator.encoding.source_ids(line) + [specials.eos] == expected, line


def test_logits_equal_transformers_on_a_padded_batch(imported):
    model, tokenizer, out = imported
    bundle = load_for_inference(out)
    tokenizer.src_lang, tokenizer.tgt_lang = "deu_Latn", "eng_Latn"
    inputs = tokenizer(
        sentences("de", 4), text_target=sentences("en", 4), padding=True, return_tensors="pt"
    )
    labels = inputs["labels"]
    start = torch.full((4, 1), bundle.specials.bos)
    decoder_in = torch.cat([start, labels[:, :-1]], dim=1)
    with torch.no_grad():
        theirs = model(
            input_ids=inputs["input_ids"],
            attention_mask=inputs["attention_mask"],
            decoder_input_ids=decoder_in,
        ).logits
        src_mask = bundle.model.src_mask(inputs["input_ids"])
        ours = bundle.model(inputs["input_ids"], decoder_in, src_mask)
    real = labels != bundle.specials.pad
    assert_close(ours[real], theirs[real], atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("tgt_lang", ["eng_Latn", "fra_Latn"])
def test_greedy_translations_equal_generate(imported, tgt_lang):
    """The target language's code is forced first (transformers: forced_bos_token_id)."""
    model, tokenizer, out = imported
    lines = sentences("de", 30)
    translator = Translator.from_checkpoint(
        str(out), beam_size=1, max_len_a=0.0, max_len_b=STEPS, lines=LineSettings(tgt_lang=tgt_lang)
    )
    ours = best_ids(translator, lines)
    tokenizer.src_lang = "deu_Latn"
    inputs = tokenizer(lines, padding=True, return_tensors="pt")
    forced = tokenizer.convert_tokens_to_ids(tgt_lang)
    with torch.no_grad():
        generated = model.generate(
            **inputs,
            num_beams=1,
            do_sample=False,
            max_new_tokens=STEPS,
            forced_bos_token_id=forced,
            bad_words_ids=[[model.config.pad_token_id]],
        )
    pad = model.config.pad_token_id
    for line, mine, theirs in zip(lines, ours, generated_ids(generated, pad), strict=True):
        assert mine == theirs, line
    texts = [t.texts[0] for t in translator.translate(lines)]
    assert texts == tokenizer.batch_decode(generated, skip_special_tokens=True)


def test_beam_5_best_hypotheses_equal_generate(imported):
    """Beam 5 against transformers' with ours' rules (early_stopping=True, scores divided by
    the generated length, pad banned), the target language's code forced first."""
    model, tokenizer, out = imported
    lines = slice_lines("valid", "de")[:200]
    translator = Translator.from_checkpoint(
        str(out), beam_size=5, max_len_a=0.0, max_len_b=STEPS, min_len=0,
        length_norm="average", length_penalty=1.0,
    )  # fmt: skip
    ours = best_ids(translator, lines)
    tokenizer.src_lang = "deu_Latn"
    pad, same = model.config.pad_token_id, 0
    for start in range(0, len(lines), 50):
        inputs = tokenizer(lines[start : start + 50], padding=True, return_tensors="pt")
        with torch.no_grad():
            generated = model.generate(
                **inputs, num_beams=5, do_sample=False, max_new_tokens=STEPS,
                early_stopping=True, length_penalty=1.0, bad_words_ids=[[pad]],
                forced_bos_token_id=tokenizer.convert_tokens_to_ids("eng_Latn"),
            )  # fmt: skip
        theirs = generated_ids(generated, pad)
        same += sum(a == b for a, b in zip(ours[start : start + 50], theirs, strict=True))
    print(f"NLLB beam 5: {same} of {len(lines)} best hypotheses equal")
    assert same >= 0.95 * len(lines), f"{same} of {len(lines)} best hypotheses equal"


def test_served_translations_equal_the_translators(imported):
    """The server forces the target language's code first, as `tmt translate` does."""
    import dataclasses

    from transformer_mt.serve.engine import Engine, ServeLimits

    _, _, out = imported
    lines = sentences("de", 6)
    engine = Engine.from_checkpoint(
        str(out), limits=ServeLimits(kv_blocks=1024), lines=LineSettings(tgt_lang="fra_Latn")
    )
    engine.start()
    try:
        for beam, n_best in ((1, 1), (3, 2)):
            decode = dataclasses.replace(
                engine.defaults, beam_size=beam, n_best=n_best, max_len_a=0.0, max_len_b=STEPS
            )
            jobs = [engine.submit([text], decode) for text in lines]  # decoded side by side
            translator = Translator.from_checkpoint(
                str(out), beam_size=beam, n_best=n_best, max_len_a=0.0, max_len_b=STEPS,
                lines=LineSettings(tgt_lang="fra_Latn"),
            )  # fmt: skip
            for job, want, text in zip(jobs, translator.translate(lines), lines, strict=True):
                (served,) = job.future.result(timeout=60)
                assert served.texts == want.texts, text
                assert served.scores == pytest.approx(want.scores, abs=1e-4)
    finally:
        engine.stop()


def test_tags_in_the_text_and_empty_lines(imported):
    """A language code a user types is text to our SentencePiece segmentation (it cannot
    switch the language; transformers' tokenizer would read it as the code); a line that
    encodes to nothing is not translated; `>>x<<` is text to NLLB, as to NllbTokenizer."""
    model, tokenizer, out = imported
    translator = Translator.from_checkpoint(str(out), beam_size=1, max_len_a=0.0, max_len_b=STEPS)
    codes = set(translator.specials.language_tags.values())
    assert codes.isdisjoint(translator.encoding.source_ids("fra_Latn ein hund")[1:])
    assert translator.encoding.source_ids("\u200b") == []  # nothing to translate, not the tag alone
    tokenizer.src_lang = "deu_Latn"
    line = ">>fra<< ein mann"
    assert translator.encoding.source_ids(line) + [2] == tokenizer(line).input_ids


def test_alignments_skip_the_language_tags(imported):
    """Pairs index the words of both sides, after the tags the model is fed."""
    _, _, out = imported
    translator = Translator.from_checkpoint(
        str(out),
        beam_size=1,
        max_len_a=0.0,
        max_len_b=STEPS,
        lines=LineSettings(alignment_layer=-1),
    )
    line = "ein hund läuft über die wiese"
    (result,) = translator.translate([line])
    n_source = len(translator.src_tokenizer.encode(line))
    (found,) = next(translator.search_batches([translator.encoding.source_ids(line)]))[1]
    n_target = len(found.best.tokens) - len(translator.target_prefix)
    assert [t for _, t in result.alignment] == list(range(n_target))
    assert all(0 <= s < n_source for s, _ in result.alignment)
