"""`tmt import` of OPUS-MT-shaped Marian models built here with transformers: swish, a non-zero
final_logits_bias, pad as the decoder's start, two SentencePiece models trained in the test
with a vocab.json numbering, `>>xxx<<` language tags, and a variant with separate
vocabularies. The imported checkpoint must tokenize, score and translate as transformers does.
"""

import json

import pytest
import sentencepiece as spm
import torch
from torch.testing import assert_close

from tests.corpora import SHARED_DATA, slice_lines
from transformer_mt.artifacts import load_for_inference
from transformer_mt.cli import main
from transformer_mt.inference.translator import Translator

transformers = pytest.importorskip("transformers")

TAGS = [">>fra<<", ">>deu<<", ">>ces<<"]
STEPS = 12  # tokens each greedy search may produce


def train_spm(texts, path, size):
    """An OPUS-MT-like SentencePiece model: unigram, <unk> 0, <s> 1, </s> 2, no pad."""
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(texts),
        model_prefix=str(path),
        vocab_size=size,
        model_type="unigram",
        character_coverage=1.0,
        bos_id=1,
        eos_id=2,
        unk_id=0,
        pad_id=-1,
        minloglevel=2,
    )
    return path.with_suffix(".model")


def vocabulary(*spm_paths, tags=()):
    """Marian's numbering: </s> 0, <unk> 1, the pieces of every model, tags, <pad> last."""
    vocab = {"</s>": 0, "<unk>": 1}
    for path in spm_paths:
        sp = spm.SentencePieceProcessor(model_file=str(path))
        for i in range(sp.get_piece_size()):
            if not (sp.is_control(i) or sp.is_unknown(i)):
                vocab.setdefault(sp.id_to_piece(i), len(vocab))
    for tag in tags:
        vocab[tag] = len(vocab)
    vocab["<pad>"] = len(vocab)
    return vocab


def build_marian(directory, separate):
    """Save a random OPUS-MT-shaped Marian model with its tokenizer files into `directory`:
    multilingual (`>>xxx<<` tags) with one vocabulary, or bilingual with separate ones."""
    directory.mkdir()
    src_spm = train_spm(slice_lines("train", "de"), directory / "src", 180)
    tgt_spm = train_spm(slice_lines("train", "en"), directory / "tgt", 180)
    if separate:  # each side its own numbering, the special pieces at the same ids
        src_vocab, tgt_vocab = vocabulary(src_spm), vocabulary(tgt_spm)
        if len(src_vocab) != len(tgt_vocab):
            pytest.fail("the two SentencePiece models must number their pieces alike")
    else:
        src_vocab = tgt_vocab = vocabulary(src_spm, tgt_spm, tags=TAGS)
    pad = src_vocab["<pad>"]
    config = transformers.MarianConfig(
        vocab_size=len(src_vocab),
        decoder_vocab_size=len(tgt_vocab),
        share_encoder_decoder_embeddings=not separate,
        d_model=32,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        activation_function="swish",
        max_position_embeddings=256,
        scale_embedding=True,
        pad_token_id=pad,
        eos_token_id=0,
        decoder_start_token_id=pad,
        forced_eos_token_id=None,
        dropout=0.0,
    )
    torch.manual_seed(0)
    model = transformers.MarianMTModel(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "embed_positions" not in name:  # the sinusoids stay as they are
                p.mul_(4.0)  # peaked distributions, so searches do not hinge on near-ties
        model.final_logits_bias.normal_()
    model.generation_config.bad_words_ids = [[pad]]
    model.save_pretrained(directory)
    (directory / "vocab.json").write_text(json.dumps(src_vocab), "utf-8")
    target_vocab = None
    if separate:
        target_vocab = directory / "target_vocab.json"
        target_vocab.write_text(json.dumps(tgt_vocab), "utf-8")
    tokenizer = transformers.MarianTokenizer(
        source_spm=str(src_spm),
        target_spm=str(tgt_spm),
        vocab=str(directory / "vocab.json"),
        target_vocab_file=None if target_vocab is None else str(target_vocab),
        source_lang="de",
        target_lang="en",
        separate_vocabs=separate,
    )
    tokenizer.save_pretrained(directory)
    return model, tokenizer


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
        str(out), beam_size=1, max_len_a=0.0, max_len_b=STEPS, tgt_lang=tag
    )
    ours = {}
    for batch, found in translator.search_batches([translator.source_ids(s) for s in lines]):
        for index, result in zip(batch.indices.tolist(), found, strict=True):
            ours[index] = result.best.tokens + [0] * result.best.has_eos
    tagged = [f">>{tag}<< {line}" if tag else line for line in lines]
    inputs = tokenizer(tagged, padding=True, return_tensors="pt")
    with torch.no_grad():
        generated = model.generate(**inputs, num_beams=1, do_sample=False, max_new_tokens=STEPS)
    pad = model.config.pad_token_id
    for i, row in enumerate(generated.tolist()):
        theirs = [t for t in row[1:] if t != pad]  # after the start token, without padding
        assert ours[i] == theirs, lines[i]
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
    assert capsys.readouterr().err.strip() == (
        f"error: --tgt-lang xyz: the model has no such language; {known}"
    )
    assert main(args) == 2
    assert capsys.readouterr().err.strip() == f"error: --tgt-lang: the model needs it; {known}"
