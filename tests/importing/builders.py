"""Small public-shaped models built with transformers for the import tests: an OPUS-MT-shaped
Marian (swish, a non-zero final_logits_bias, pad as the decoder's start, two SentencePiece
models trained here on the shipped Multi30k slice with a vocab.json numbering; multilingual with
`>>xxx<<` tags, or bilingual with separate vocabularies)."""

import json

import pytest
import sentencepiece as spm
import torch

from tests.corpora import slice_lines

transformers = pytest.importorskip("transformers")

TAGS = [">>fra<<", ">>deu<<", ">>ces<<"]
# The sizes of every model built here: two layers a side, width 32, four heads.
TINY_STACKS = dict(
    d_model=32,
    encoder_layers=2,
    decoder_layers=2,
    encoder_attention_heads=4,
    decoder_attention_heads=4,
    encoder_ffn_dim=64,
    decoder_ffn_dim=64,
    max_position_embeddings=256,
    scale_embedding=True,
    dropout=0.0,
)


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
        **TINY_STACKS,
        activation_function="swish",
        pad_token_id=pad,
        eos_token_id=0,
        decoder_start_token_id=pad,
        forced_eos_token_id=None,
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


CODES = ["deu_Latn", "eng_Latn", "fra_Latn", "ces_Latn"]


def build_nllb(directory):
    """Save a random NLLB-shaped M2M100 model (pre-norm, scaled embeddings, positions from
    pad + 1) with an NllbTokenizer over a SentencePiece BPE model trained here, language
    codes as added tokens, into `directory`; German into English by default."""
    directory.mkdir()
    texts = [*slice_lines("train", "de"), *slice_lines("train", "en")]
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(texts),
        model_prefix=str(directory / "sentencepiece.bpe"),
        vocab_size=300,
        model_type="bpe",
        character_coverage=1.0,
        unk_id=0,
        bos_id=1,
        eos_id=2,
        pad_id=-1,
        minloglevel=2,
    )
    (directory / "tokenizer_config.json").write_text(
        json.dumps({"tokenizer_class": "NllbTokenizer"}), "utf-8"
    )
    tokenizer = transformers.NllbTokenizer.from_pretrained(
        directory, extra_special_tokens=CODES, src_lang="deu_Latn", tgt_lang="eng_Latn"
    )
    tokenizer.save_pretrained(directory)
    config = transformers.M2M100Config(
        vocab_size=len(tokenizer) + 2,  # rows numbering no piece, as NLLB-200's
        **TINY_STACKS,
        activation_function="relu",
        pad_token_id=1,
        bos_token_id=0,
        eos_token_id=2,
        decoder_start_token_id=2,
        tie_word_embeddings=True,
    )
    torch.manual_seed(0)
    model = transformers.M2M100ForConditionalGeneration(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "embed_positions" not in name:
                p.mul_(4.0)  # peaked distributions, so searches do not hinge on near-ties
    model.save_pretrained(directory)
    return model, tokenizer


def end_half_the_sentences(model, tokenizer, sources, steps):
    """Raise `model`'s final_logits_bias at EOS so that its greedy translations of about half
    of `sources` end with EOS within `steps` tokens, at many lengths.

    Raising EOS's logit by delta changes no other choice, so a greedy translation ends at its
    first step (after the first, where min_len forbids EOS) whose margin, the best allowed
    logit less EOS's, is below delta. Delta halfway between two sentences' smallest margins
    keeps every decision clear of a near-tie that rounding could flip.
    """
    inputs = tokenizer(sources, padding=True, return_tensors="pt")
    eos = model.config.eos_token_id
    with torch.no_grad():
        generated = model.generate(**inputs, num_beams=1, do_sample=False, max_new_tokens=steps)
        logits = model(**inputs, decoder_input_ids=generated[:, :-1]).logits  # (N, steps, V)
        others = logits.clone()
        others[..., [eos, *(ids[0] for ids in model.generation_config.bad_words_ids)]] = -1e9
        margins = (others.max(-1).values - logits[..., eos])[:, 1:].min(-1).values.sort().values
        half = len(sources) // 2
        model.final_logits_bias[0, eos] += (margins[half - 1] + margins[half]) / 2


def end_half_the_searches(model, tokenizer, sources, steps, rounds=8):
    """Raise `model`'s EOS bias further until at most half of `generate`'s translations of
    `sources` with its own generation config are cut at `steps` tokens without EOS.

    A beam that searches on after K hypotheses have finished (early_stopping false or
    "never"), with a length penalty that rewards length, finds a longer hypothesis cut at the
    limit for nearly every sentence of a model tuned for greedy search; its rules would then
    be tried on cut hypotheses only. Bisection over the extra bias in [0, 4]: the share cut
    falls as EOS rises.
    """
    inputs = tokenizer(sources, padding=True, return_tensors="pt")
    eos, pad = model.config.eos_token_id, model.config.pad_token_id
    base = float(model.final_logits_bias[0, eos])
    low, high = 0.0, 4.0
    for _ in range(rounds):
        extra = (low + high) / 2
        model.final_logits_bias[0, eos] = base + extra
        with torch.no_grad():
            generated = model.generate(**inputs)[:, 1:]
        ended = ((generated == eos) | (generated == pad)).any(dim=1)
        low, high = (extra, high) if int((~ended).sum()) > len(sources) // 2 else (low, extra)
    model.final_logits_bias[0, eos] = base + high


def build_marian_searching(directory, sources, **generation):
    """`build_marian` (bilingual) with `generation` as its generation config (num_beams,
    length_penalty, ...), EOS raised so that about half of its greedy translations of
    `sources` end before its length limit (`end_half_the_sentences`), and, with beams, about
    half of its translations by its own settings (`end_half_the_searches`)."""
    model, tokenizer = build_marian(directory, separate=True)
    for key, value in generation.items():
        setattr(model.generation_config, key, value)
    steps = generation.get("max_length", 21) - 1
    end_half_the_sentences(model, tokenizer, sources, steps)
    if model.generation_config.num_beams > 1:
        end_half_the_searches(model, tokenizer, sources, steps)
    model.save_pretrained(directory)
    return model, tokenizer


def best_ids(translator, lines):
    """Each line's best hypothesis from our search, in input order, as `generate` returns it
    after the decoder's start token: the ids, eos included where the hypothesis ended."""
    sources = [translator.encoding.source_ids(line) for line in lines]
    best = {}
    for batch, found in translator.search_batches(sources):
        for index, result in zip(batch.indices.tolist(), found, strict=True):
            eos = [translator.specials.eos] * result.best.has_eos
            best[index] = result.best.tokens + eos
    return [best[i] for i in range(len(lines))]


def generated_ids(generated, pad):
    """`generate`'s rows without the start token and the padding after a finished one."""
    return [[t for t in row[1:] if t != pad] for row in generated.tolist()]
