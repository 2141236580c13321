"""`tmt export` of an imported NLLB-shaped M2M100 model (built here with transformers): the
Hugging Face export must reproduce the original model and tokenizer, the CTranslate2 export
our greedy translations, with the target language's code forced first in both."""

import dataclasses
from pathlib import Path

import pytest
import torch
from torch.testing import assert_close

from tests.conftest import save_tiny_checkpoint
from tests.corpora import slice_lines
from tests.importing.builders import build_nllb
from transformer_mt.artifacts import load_checkpoint, save_checkpoint
from transformer_mt.cli import main
from transformer_mt.data.tokenizer import PieceTable
from transformer_mt.inference.line_settings import LineSettings
from transformer_mt.inference.translator import Translator

transformers = pytest.importorskip("transformers")

SOURCES = slice_lines("test2016", "de")[:20]
TARGETS = slice_lines("test2016", "en")[:20]
STEPS = 16  # tokens each greedy search may produce, the forced language code included


@dataclasses.dataclass
class Imported:
    """An original NLLB-shaped model, its tokenizer and its `tmt import`."""

    hf_model: object  # M2M100ForConditionalGeneration
    hf_tokenizer: object  # NllbTokenizer
    checkpoint: Path


@pytest.fixture(scope="module")
def imported(tmp_path_factory) -> Imported:
    root = tmp_path_factory.mktemp("nllb_export")
    model, tokenizer = build_nllb(root / "hf")
    checkpoint = root / "imported.pt"
    assert main(["import", str(root / "hf"), "--out", str(checkpoint)]) == 0
    return Imported(model, tokenizer, checkpoint)


@pytest.fixture(scope="module")
def hf_export(imported, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("hf_export") / "hf"
    assert main(["export", str(imported.checkpoint), str(out), "--format", "hf"]) == 0
    return out


def test_hf_export_is_m2m100_with_the_original_ids(imported, hf_export):
    original = imported.hf_model
    exported = transformers.M2M100ForConditionalGeneration.from_pretrained(hf_export)
    for key in ("pad_token_id", "eos_token_id", "bos_token_id", "decoder_start_token_id"):
        assert getattr(exported.config, key) == getattr(original.config, key), key
    assert exported.config.vocab_size == original.config.vocab_size
    assert exported.config.tie_word_embeddings
    generation = exported.generation_config
    assert generation.decoder_start_token_id == original.config.decoder_start_token_id
    assert generation.forced_bos_token_id is None  # the target language is per request
    assert generation.bad_words_ids == [[original.config.pad_token_id]]


def test_hf_tokenizer_numbers_and_frames_as_the_original(imported, hf_export):
    tokenizer = imported.hf_tokenizer
    exported = transformers.AutoTokenizer.from_pretrained(hf_export)
    assert type(exported).__name__ == "NllbTokenizer"
    assert exported.get_vocab() == tokenizer.get_vocab()
    assert (exported.src_lang, exported.tgt_lang) == ("deu_Latn", "eng_Latn")
    for src_lang, tgt_lang in (("deu_Latn", "eng_Latn"), ("fra_Latn", "ces_Latn")):
        tokenizer.src_lang, tokenizer.tgt_lang = src_lang, tgt_lang
        exported.src_lang, exported.tgt_lang = src_lang, tgt_lang
        for source, target in zip(SOURCES[:8], TARGETS[:8], strict=True):
            assert exported(source).input_ids == tokenizer(source).input_ids
            theirs = tokenizer(text_target=target).input_ids
            assert exported(text_target=target).input_ids == theirs
            assert exported.decode(theirs, skip_special_tokens=True) == tokenizer.decode(
                theirs, skip_special_tokens=True
            )


def test_hf_export_logits_and_generate_equal_the_original(imported, hf_export):
    original, tokenizer = imported.hf_model, imported.hf_tokenizer
    exported = transformers.M2M100ForConditionalGeneration.from_pretrained(hf_export).eval()
    tokenizer.src_lang, tokenizer.tgt_lang = "deu_Latn", "eng_Latn"
    batch = tokenizer(SOURCES[:6], text_target=TARGETS[:6], padding=True, return_tensors="pt")
    start = torch.full((6, 1), original.config.decoder_start_token_id)
    decoder_in = torch.cat([start, batch["labels"][:, :-1]], dim=1)
    inputs = {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}
    with torch.no_grad():
        theirs = original(**inputs, decoder_input_ids=decoder_in).logits
        ours = exported(**inputs, decoder_input_ids=decoder_in).logits
        assert_close(ours, theirs, atol=1e-4, rtol=1e-4)
        forced = tokenizer.convert_tokens_to_ids("fra_Latn")
        options = dict(num_beams=1, do_sample=False, max_new_tokens=8, forced_bos_token_id=forced)
        pad = original.config.pad_token_id
        want = original.generate(**inputs, **options, bad_words_ids=[[pad]])
        assert exported.generate(**inputs, **options).tolist() == want.tolist()


def greedy(checkpoint: Path, tgt_lang: str) -> tuple[Translator, dict[int, list[int]]]:
    """Our greedy translations of SOURCES into `tgt_lang` (the forced code first), by index."""
    translator = Translator.from_checkpoint(
        str(checkpoint),
        beam_size=1,
        max_len_a=0.0,
        max_len_b=STEPS,
        lines=LineSettings(tgt_lang=tgt_lang),
    )
    sources = [translator.encoding.source_ids(line) for line in SOURCES]
    ours = {}
    for batch, found in translator.search_batches(sources):
        for index, result in zip(batch.indices.tolist(), found, strict=True):
            ours[index] = result.best.tokens
    return translator, ours


@pytest.fixture(scope="module")
def ending(imported, tmp_path_factory) -> Path:
    """The imported model with a logits bias at EOS (`model.output_bias`, which CTranslate2
    holds) that ends about half of the greedy English translations within STEPS tokens.

    Random weights never end a sentence. Raising EOS's logit by delta changes no other choice,
    so a translation ends at its first free step (after the forced code) whose margin, the
    best other logit less EOS's, is below delta; delta halfway between two sentences'
    smallest margins keeps every decision clear of a near-tie.
    """
    translator, ours = greedy(imported.checkpoint, "eng_Latn")
    specials, model = translator.specials, translator.model
    src = [translator.encoding.source_ids(line) + [specials.eos] for line in SOURCES]
    width = max(map(len, src))
    src_ids = torch.tensor([ids + [specials.pad] * (width - len(ids)) for ids in src])
    tgt_in = torch.tensor([[specials.bos, *ours[i][:-1]] for i in range(len(SOURCES))])
    with torch.no_grad():
        logits = model(src_ids, tgt_in, model.src_mask(src_ids))  # (N, STEPS, V)
    others = logits.clone()
    others[..., [specials.eos, *specials.never]] = float("-inf")
    margins = (others.max(-1).values - logits[..., specials.eos])[:, 1:].min(-1).values.sort()
    half = len(SOURCES) // 2
    bias = torch.zeros(logits.size(-1))
    bias[specials.eos] = (margins.values[half - 1] + margins.values[half]) / 2
    stored = load_checkpoint(imported.checkpoint)
    config = {**stored.config, "model": {**stored.config["model"], "output_bias": True}}
    weights = {**stored.model, "output_projection.bias": bias}
    path = tmp_path_factory.mktemp("ending") / "ending.pt"
    save_checkpoint(dataclasses.replace(stored, config=config, model=weights), path)
    return path


@pytest.mark.parametrize("tgt_lang", ["eng_Latn", "fra_Latn"])
def test_ctranslate2_greedy_output_equals_ours(ending, tmp_path, tgt_lang):
    """float32, greedy, the same length limit, on one right-padded batch of 20 sources: the
    source starts with its language's code, the target's is forced as target_prefix."""
    ctranslate2 = pytest.importorskip("ctranslate2")
    out = tmp_path / "ct2"
    assert main(["export", str(ending), str(out), "--format", "ctranslate2"]) == 0
    translator, ours = greedy(ending, tgt_lang)
    code = translator.specials.language_tags[tgt_lang]
    assert {tokens[0] for tokens in ours.values()} == {code}
    if tgt_lang == "eng_Latn":  # the fixture ends about half of them early
        assert 5 <= sum(len(tokens) < STEPS for tokens in ours.values()) <= 15
    tokenizer = translator.tgt_tokenizer
    ct2 = ctranslate2.Translator(str(out), device="cpu", intra_threads=1)
    results = ct2.translate_batch(
        [
            [tokenizer.id_to_piece(i) for i in translator.encoding.source_ids(line)]
            for line in SOURCES
        ],
        target_prefix=[[tgt_lang]] * len(SOURCES),
        beam_size=1,
        max_decoding_length=STEPS,
        min_decoding_length=translator.decode.min_len,
        # What our search never produces (the pad id), as the exporter's docstring says.
        suppress_sequences=[[tokenizer.id_to_piece(i)] for i in translator.specials.never],
    )
    ids = tokenizer.pieces
    for i, result in enumerate(results):
        assert [ids[piece] for piece in result.hypotheses[0]] == ours[i], SOURCES[i]


def test_ctranslate2_refuses_a_model_that_may_generate_pad(imported, tmp_path, capsys):
    """Our pad tokens have no position, CTranslate2's have one: they would differ after a pad."""
    pytest.importorskip("ctranslate2")
    stored = load_checkpoint(imported.checkpoint)
    path = tmp_path / "pad_allowed.pt"
    specials = {**stored.specials, "never": []}
    save_checkpoint(dataclasses.replace(stored, specials=specials), path)
    out = tmp_path / "exports" / "ct2"
    assert main(["export", str(path), str(out), "--format", "ctranslate2"]) == 2
    err = capsys.readouterr().err
    assert "model.positions=sinusoidal_fairseq gives pad tokens no position" in err
    assert err.count("\n") == 1 and not (tmp_path / "exports").exists()


@pytest.mark.parametrize("offset", [1, 0])
def test_hf_export_refuses_a_tokenizer_nllb_does_not_number(tmp_path, capsys, offset):
    """A pre-norm fairseq-position model trained here is M2M100-shaped, but its SentencePiece
    ids are not NllbTokenizer's numbering: refused, nothing written. The tokenizer is named
    first: with position_offset 0 the refusal had named only that, and the model retrained
    with 1 was then refused for its tokenizer."""
    checkpoint = save_tiny_checkpoint(
        tmp_path, pre_norm=True, positions="sinusoidal_fairseq", position_offset=offset
    )
    out = tmp_path / "exports" / "hf"
    assert main(["export", str(checkpoint), str(out), "--format", "hf"]) == 2
    err = capsys.readouterr().err
    assert "cannot export to Hugging Face M2M100: the tokenizer numbers pieces by" in err
    assert err.count("\n") == 1 and not (tmp_path / "exports").exists()


def test_hf_tokenizer_keeps_nllb_200s_order_of_added_tokens(imported, tmp_path):
    """NLLB-200 numbers its language codes before <mask> (the model built here after it): the
    exported tokenizer adds them in the table's id order, whichever it is."""
    stored = load_checkpoint(imported.checkpoint)
    table = PieceTable.from_json(stored.tokenizers["src_pieces"], "src_pieces")
    mask = table.ids["<mask>"]
    moved = {p: i - (i > mask) for p, i in table.ids.items() if p != "<mask>"}
    moved["<mask>"] = max(table.ids.values())
    assert moved != table.ids
    pieces = dataclasses.replace(table, ids=moved).to_json()
    tokenizers = {**stored.tokenizers, "src_pieces": pieces, "tgt_pieces": pieces}
    tags = {code: moved[code] for code in stored.specials["language_tags"]}
    specials = {**stored.specials, "language_tags": tags}
    path = tmp_path / "nllb_200_order.pt"
    save_checkpoint(dataclasses.replace(stored, tokenizers=tokenizers, specials=specials), path)
    out = tmp_path / "hf"
    assert main(["export", str(path), str(out), "--format", "hf"]) == 0
    exported = transformers.AutoTokenizer.from_pretrained(out)
    assert exported.get_vocab() == moved
    exported.src_lang = "ces_Latn"
    assert exported("Ein Mann.").input_ids[0] == moved["ces_Latn"]
