"""`tmt export`: the exported Marian / CTranslate2 models reproduce ours."""

import dataclasses
import errno
import os

import pytest
import sentencepiece as spm
import torch
from torch.testing import assert_close

from transformer_mt.artifacts import load_for_inference
from transformer_mt.cli import main
from transformer_mt.config import ModelConfig, TokenizerConfig, config_to_dict
from transformer_mt.data.tokenizer import BOS_ID, EOS_ID, UNK_ID
from transformer_mt.data.tokenizer_training import train_tokenizers
from transformer_mt.errors import TmtError
from transformer_mt.interop.export_ct2 import CT2, export_ctranslate2
from transformer_mt.interop.limits import check_expressible
from transformer_mt.model import build_model
from transformer_mt.search import SearchOptions, max_output_lengths, search

from ..conftest import WORDS, fit_tiny_checkpoint, without_notes


def test_hf_export_matches_logits_and_tokenization(checkpoint, tmp_path):
    transformers = pytest.importorskip("transformers")
    out = tmp_path / "hf"
    assert main(["export", str(checkpoint), str(out), "--format", "hf"]) == 0
    ours = load_for_inference(checkpoint)
    hf = transformers.MarianMTModel.from_pretrained(out).eval()
    tokenizer = transformers.MarianTokenizer.from_pretrained(out)
    sentences = ["ein mann fährt rad", "das buch"]
    batch = tokenizer(sentences, return_tensors="pt", padding=True)
    for row, sentence in zip(batch.input_ids.tolist(), sentences, strict=True):
        expected = ours.src_tokenizer.encode(sentence) + [EOS_ID]
        assert row[: len(expected)] == expected
    tgt = torch.tensor([[BOS_ID, 5, 6, 7], [BOS_ID, 8, 9, 10]])
    with torch.no_grad():
        theirs = hf(
            input_ids=batch.input_ids, attention_mask=batch.attention_mask, decoder_input_ids=tgt
        ).logits
        assert_close(theirs, ours.model(batch.input_ids, tgt), atol=1e-4, rtol=1e-4)


def test_hf_export_of_a_byte_fallback_vocabulary_tokenizes_as_ours(checkpoint, tmp_path):
    """Characters the vocabulary lacks are the same byte pieces in transformers' tokenizer, and
    its decoding of our ids gives our text."""
    transformers = pytest.importorskip("transformers")
    texts = [" ".join(WORDS[i:] + WORDS[:i]) for i in range(len(WORDS))] * 3
    cfg = TokenizerConfig(vocab_size=300, byte_fallback=True)
    pair = train_tokenizers(cfg, texts, texts, tmp_path / "spm")
    path, _ = variant_checkpoint(checkpoint, tmp_path / "bytes.pt", {}, (pair.src, pair.tgt))
    assert main(["export", str(path), str(tmp_path / "hf"), "--format", "hf"]) == 0
    tokenizer = transformers.MarianTokenizer.from_pretrained(tmp_path / "hf")
    sentence = "ein mann fährt nach Łódź"  # Ł, ó, ź: never in the training text
    ids = pair.src.encode(sentence)
    assert UNK_ID not in ids
    assert tokenizer(sentence).input_ids == ids + [EOS_ID]
    assert tokenizer(text_target=sentence).input_ids == pair.tgt.encode(sentence) + [EOS_ID]
    assert tokenizer.decode(ids, skip_special_tokens=True) == pair.tgt.decode(ids) == sentence


@pytest.fixture(scope="module")
def separate_tokenizers(tmp_path_factory):
    """Source and target SentencePiece models of different sizes (tokenizer.joint: false)."""
    directory = tmp_path_factory.mktemp("separate")
    english = ["a", "man", "rides", "the", "bike", "two", "dogs", "play", "in", "snow"]
    english += ["one", "woman", "reads", "her", "book"]
    src_texts = [" ".join(WORDS[i:] + WORDS[:i]) for i in range(len(WORDS))] * 3
    tgt_texts = [" ".join(english[i:] + english[:i]) for i in range(len(english))] * 3
    src = train_tokenizers(
        TokenizerConfig(vocab_size=60, joint=False), src_texts, tgt_texts, directory
    )
    tgt = train_tokenizers(
        TokenizerConfig(vocab_size=48, joint=False), src_texts, tgt_texts, directory
    )
    assert src.src.vocab_size != tgt.tgt.vocab_size
    return src.src, tgt.tgt


@pytest.mark.parametrize(
    "options, joint",
    [
        ({}, True),
        ({"activation": "gelu", "n_decoder_layers": 2, "max_positions": 32}, True),
        ({"share_embeddings": False}, True),
        ({"tie_output": False}, True),
        ({"share_embeddings": False}, False),
        ({"share_embeddings": False, "tie_output": False, "activation": "gelu"}, False),
    ],
)
def test_hf_export_of_every_accepted_option_matches_our_logits(
    checkpoint, separate_tokenizers, tmp_path, options, joint
):
    """Each ModelConfig option Marian can hold: same logits, same source and target ids."""
    transformers = pytest.importorskip("transformers")
    tokenizers = None if joint else separate_tokenizers
    path, _ = variant_checkpoint(checkpoint, tmp_path / "variant.pt", options, tokenizers)
    out = tmp_path / "hf"
    assert main(["export", str(path), str(out), "--format", "hf"]) == 0
    ours = load_for_inference(path)
    hf = transformers.MarianMTModel.from_pretrained(out).eval()
    tokenizer = transformers.MarianTokenizer.from_pretrained(out)
    source, target = "ein mann fährt rad", "das buch" if joint else "a man reads the book"
    batch = tokenizer([source], text_target=[target], return_tensors="pt")
    assert batch.input_ids[0].tolist() == ours.src_tokenizer.encode(source) + [EOS_ID]
    assert batch.labels[0].tolist() == ours.tgt_tokenizer.encode(target) + [EOS_ID]
    tgt_in = torch.tensor([[BOS_ID, *batch.labels[0, :-1].tolist()]])
    with torch.no_grad():
        theirs = hf(input_ids=batch.input_ids, decoder_input_ids=tgt_in).logits
        assert_close(theirs, ours.model(batch.input_ids, tgt_in), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize(
    "fmt, options, named",
    [
        ("hf", {"layer_norm_eps": 0.5}, "model.layer_norm_eps=0.5 (Marian's LayerNorm eps is"),
        ("hf", {"pre_norm": True}, "model.pre_norm=true (Marian is post-norm)"),
        ("ctranslate2", {"positions": "alibi"}, "model.positions=alibi"),
    ],
)
def test_refused_export_names_the_option_and_leaves_nothing(
    checkpoint, tmp_path, capsys, fmt, options, named
):
    pytest.importorskip("transformers" if fmt == "hf" else "ctranslate2")
    path, _ = variant_checkpoint(checkpoint, tmp_path / "variant.pt", options)
    out = tmp_path / "exports" / "model"
    assert main(["export", str(path), str(out), "--format", fmt]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and named in err and err.count("\n") == 1
    assert not (tmp_path / "exports").exists()


@pytest.mark.parametrize("earlier", [False, True], ids=["user-folder", "earlier-export-too"])
def test_export_refuses_a_folder_holding_other_files_and_keeps_them(
    checkpoint, tmp_path, capsys, monkeypatch, earlier
):
    """A folder of the user's files is refused before the model is converted; one that holds
    an earlier export too, once the new one shows which files are not its."""
    pytest.importorskip("transformers")
    out = tmp_path / "models"
    out.mkdir()
    (out / "notes.txt").write_text("mine\n", encoding="utf-8")
    if earlier:
        assert main(["export", str(checkpoint), str(tmp_path / "old"), "--format", "hf"]) == 0
        (tmp_path / "old" / "config.json").rename(out / "config.json")
    else:
        converted = []
        monkeypatch.setattr("transformer_mt.interop.export.to_marian", converted.append)
    assert main(["export", str(checkpoint), str(out), "--format", "hf"]) == 2
    err = capsys.readouterr().err
    assert "holds notes.txt, which would be lost" in err
    if not earlier:
        assert converted == []  # refused before the conversion
    assert {p.name for p in tmp_path.iterdir()} - {"old"} == {"models"}  # no temporary left
    assert (out / "notes.txt").read_text(encoding="utf-8") == "mine\n"


def _full_disk_in_safetensors(*args, **kwargs):
    from safetensors import SafetensorError

    raise SafetensorError(
        "Error while serializing: I/O error: No space left on device (os error 28)"
    )


def _full_disk_at(path):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))


def _full_disk_without_a_name(*args):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


@pytest.mark.parametrize(
    "fmt, writer, fail",
    [
        ("hf", "transformers.modeling_utils.safe_save_file", _full_disk_in_safetensors),
        ("hf", "transformers.modeling_utils.safe_save_file", _full_disk_without_a_name),
        ("ctranslate2", "ctranslate2.specs.model_spec.ModelSpec._serialize", _full_disk_at),
        (
            "ctranslate2",
            "ctranslate2.specs.model_spec.ModelSpec._serialize",
            _full_disk_without_a_name,
        ),
    ],
)
def test_a_full_disk_is_one_line_and_leaves_nothing(
    checkpoint, tmp_path, capsys, monkeypatch, fmt, writer, fail
):
    """Whichever library meets ENOSPC, and however it reports it (safetensors: an error of
    its own quoting the OS error), the export ends with status 1 and one line."""
    pytest.importorskip("transformers" if fmt == "hf" else "ctranslate2")
    monkeypatch.setattr(writer, lambda self_or_state, path, *rest, **kw: fail(path))
    out = tmp_path / "exports" / "model"
    assert main(["export", str(checkpoint), str(out), "--format", fmt]) == 1
    err = without_notes(capsys.readouterr().err).splitlines()[-1]
    assert err == f"error: {out}: cannot write (No space left on device)"
    assert list((tmp_path / "exports").iterdir()) == []


def test_export_replaces_an_earlier_export_of_the_same_format(checkpoint, tmp_path):
    transformers = pytest.importorskip("transformers")
    out = tmp_path / "hf"
    assert main(["export", str(checkpoint), str(out), "--format", "hf"]) == 0
    path, _ = variant_checkpoint(checkpoint, tmp_path / "gelu.pt", {"activation": "gelu"})
    assert main(["export", str(path), str(out), "--format", "hf"]) == 0
    assert transformers.MarianConfig.from_pretrained(out).activation_function == "gelu"


def test_export_refuses_quantized_hf(checkpoint, tmp_path, capsys):
    assert (
        main(["export", str(checkpoint), str(tmp_path), "--format", "hf", "--quantize", "int8"])
        == 2
    )
    assert "ctranslate2 only" in capsys.readouterr().err


# --- CTranslate2 -----------------------------------------------------------------------------

SENTENCES = ["ein mann fährt rad", "das buch", "zwei hunde spielen im schnee", "frau liest", "mann"]


# Models the search and scoring parity tests run on: the fixture's (sinusoidal, post-norm,
# relu, 2 heads), the relative and rotary positions, grouped (GQA) and multi-query (MQA)
# key/value heads, and rotary with grouped heads in a pre-norm SwiGLU model.
SEARCH_MODELS = {
    "sinusoidal": {},
    "shaw": {"positions": "shaw", "max_relative_position": 3, "relative_values": True},
    "t5": {"positions": "t5", "relative_buckets": 8, "relative_max_distance": 12},
    "rope": {"positions": "rope"},
    "gqa": {"n_heads": 4, "n_kv_heads": 2},
    "mqa": {"n_heads": 4, "n_kv_heads": 1},
    "rope-gqa-swiglu": {
        "positions": "rope",
        "n_heads": 4,
        "n_kv_heads": 2,
        "pre_norm": True,
        "activation": "swiglu",
    },
}


@pytest.fixture(scope="module", params=list(SEARCH_MODELS.values()), ids=list(SEARCH_MODELS))
def trained_checkpoint(checkpoint, tmp_path_factory, request):
    """A tiny model (the fixture's, with SEARCH_MODELS options) after 60 full-batch Adam steps
    on reversing word sequences.

    Untrained, the model never emits EOS and every search ends at max_len; a little training
    gives hypotheses that end in EOS at different lengths, which is what beam search and the
    length normalisation have to agree on.
    """
    directory = tmp_path_factory.mktemp("trained")
    variant, _ = variant_checkpoint(checkpoint, directory / "variant.pt", request.param)
    tokenizer = load_for_inference(variant).src_tokenizer
    texts = [" ".join(WORDS[i : i + 3 + i % 3]) for i in range(len(WORDS))]
    pairs = [(tokenizer.encode(t), tokenizer.encode(t)[::-1]) for t in texts]
    return fit_tiny_checkpoint(variant, pairs, 3e-2, 60, directory / "model.pt")


def _ids(tokenizer) -> dict[str, int]:
    return {tokenizer.id_to_piece(i): i for i in range(tokenizer.vocab_size)}


@pytest.fixture(scope="module")
def ct2_model(trained_checkpoint, tmp_path_factory):
    ctranslate2 = pytest.importorskip("ctranslate2")
    out = tmp_path_factory.mktemp("ct2") / "model"
    assert main(["export", str(trained_checkpoint), str(out), "--format", "ctranslate2"]) == 0
    assert (out / "source.spm").exists() and (out / "target.spm").exists()
    return ctranslate2.Translator(str(out), device="cpu", inter_threads=1, intra_threads=1)


@pytest.mark.parametrize("beam_size", [1, 4])
def test_ct2_search_matches_ours(trained_checkpoint, ct2_model, beam_size):
    """Same best hypotheses as our search with equivalent settings, sentence by sentence.

    Settings: our `length_norm: average` with length_penalty 1 divides log P by |y| with EOS,
    as CTranslate2's length_penalty=1 does; max_decoding_length is our max_len(x) (one value per
    call, hence one sentence per call); both stop a sentence at K finished hypotheses.

    Scores differ in one principled way: CTranslate2's min_decoding_length=1 removes EOS from
    the first step's softmax (renormalises), while our search sets its log-prob to -inf after
    the softmax. So CTranslate2's score is ours plus -log(1 - P(EOS | BOS)) / |y|, which the
    test adds before comparing. PAD and BOS are not suppressed in CTranslate2 (a suppression
    would renormalise as well); the assertion that both outputs agree shows they were not chosen.
    """
    ours = load_for_inference(trained_checkpoint)
    decode = dataclasses.replace(
        ours.config.decode, beam_size=beam_size, length_norm="average", length_penalty=1.0
    )
    cap = ours.config.model.max_positions
    for sentence in SENTENCES:
        src_ids = torch.tensor([ours.src_tokenizer.encode(sentence) + [EOS_ID]])
        src_mask = (src_ids != 0)[:, None, None, :]
        best = search(ours.model, src_ids, src_mask, decode, SearchOptions(max_len_cap=cap))[0].best
        result = ct2_model.translate_batch(
            [[ours.src_tokenizer.id_to_piece(i) for i in src_ids[0, :-1].tolist()]],
            beam_size=beam_size,
            length_penalty=1.0,
            max_decoding_length=int(max_output_lengths(src_mask, decode, cap)[0]),
            min_decoding_length=decode.min_len,
            return_scores=True,
        )[0]
        theirs = [_ids(ours.tgt_tokenizer)[p] for p in result.hypotheses[0]]
        assert theirs == best.tokens, sentence
        with torch.no_grad():
            first = torch.log_softmax(ours.model(src_ids, torch.tensor([[BOS_ID]])), -1)[0, 0]
        renormalised = best.log_prob - torch.log1p(-first[EOS_ID].exp()).item()
        assert result.scores[0] == pytest.approx(renormalised / best.length, abs=1e-4)


@pytest.fixture(scope="module")
def looping(checkpoint, tmp_path_factory):
    """An untrained model (the fixture's, random weights) and its CTranslate2 export: its
    searches run to max_len repeating themselves, so a rule against repeats decides most of
    their steps."""
    ctranslate2 = pytest.importorskip("ctranslate2")
    directory = tmp_path_factory.mktemp("looping")
    path, _ = variant_checkpoint(checkpoint, directory / "model.pt", {})
    out = directory / "ct2"
    assert main(["export", str(path), str(out), "--format", "ctranslate2"]) == 0
    return path, ctranslate2.Translator(str(out), device="cpu", inter_threads=1, intra_threads=1)


@pytest.mark.parametrize("ngram", [1, 2, 3])
def test_ct2_greedy_search_without_repeats_matches_ours(looping, ngram):
    """With no_repeat_ngram_size and disable_unk, greedy search gives CTranslate2's hypotheses
    with the same settings, and the rule changes them. Greedy only: CTranslate2 removes the
    banned tokens before its softmax (renormalises, as with min_decoding_length), so its beam
    ranks hypotheses by other scores; ours, as transformers' and fairseq's, bans after it
    (beam search against transformers: tests/importing/test_generation_settings.py)."""
    path, ct2_translator = looping
    ours = load_for_inference(path)
    plain = dataclasses.replace(ours.config.decode, beam_size=1)
    decode = dataclasses.replace(plain, no_repeat_ngram_size=ngram, disable_unk=True)
    cap = ours.config.model.max_positions
    options = SearchOptions(max_len_cap=cap)
    for sentence in SENTENCES:
        src_ids = torch.tensor([ours.src_tokenizer.encode(sentence) + [EOS_ID]])
        src_mask = (src_ids != 0)[:, None, None, :]
        best = search(ours.model, src_ids, src_mask, decode, options)[0].best
        result = ct2_translator.translate_batch(
            [[ours.src_tokenizer.id_to_piece(i) for i in src_ids[0, :-1].tolist()]],
            beam_size=1,
            max_decoding_length=int(max_output_lengths(src_mask, decode, cap)[0]),
            min_decoding_length=decode.min_len,
            no_repeat_ngram_size=ngram,
            disable_unk=True,
            suppress_sequences=[["<pad>"], ["<s>"]],  # as docs/deployment.md: ours never emits
        )[0]
        theirs = [_ids(ours.tgt_tokenizer)[p] for p in result.hypotheses[0]]
        assert theirs == best.tokens, sentence
        assert not _repeats(best.tokens, ngram), sentence
        assert _repeats(search(ours.model, src_ids, src_mask, plain, options)[0].best.tokens, ngram)


def _repeats(tokens: list[int], n: int) -> bool:
    """Whether `tokens` holds some n-gram twice."""
    grams = [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]
    return len(set(grams)) < len(grams)


def test_ct2_scores_forced_target_like_our_log_probs(trained_checkpoint, ct2_model):
    ours = load_for_inference(trained_checkpoint)
    sentences, targets = ["ein mann fährt rad", "das buch"], [[5, 9, 12], [7, 8, 30, 4, 6]]
    src = [ours.src_tokenizer.encode(s) + [EOS_ID] for s in sentences]
    results = ct2_model.score_batch(
        [[ours.src_tokenizer.id_to_piece(i) for i in ids[:-1]] for ids in src],
        [[ours.tgt_tokenizer.id_to_piece(i) for i in t] for t in targets],
    )
    for ids, target, result in zip(src, targets, results, strict=True):
        with torch.no_grad():
            logits = ours.model(torch.tensor([ids]), torch.tensor([[BOS_ID, *target]]))
        log_probs = torch.log_softmax(logits, -1)[0]
        expected = log_probs.gather(1, torch.tensor([*target, EOS_ID])[:, None])[:, 0]
        assert result.tokens[-1] == ours.tgt_tokenizer.id_to_piece(EOS_ID)
        assert_close(torch.tensor(result.log_probs), expected, atol=1e-4, rtol=1e-4)


def test_ct2_int8_export_translates(trained_checkpoint, tmp_path):
    ctranslate2 = pytest.importorskip("ctranslate2")
    out = tmp_path / "int8"
    args = ["export", str(trained_checkpoint), str(out), "--format", "ctranslate2"]
    assert main([*args, "--quantize", "int8"]) == 0
    translator = ctranslate2.Translator(str(out), device="cpu", compute_type="int8")
    sp = spm.SentencePieceProcessor(model_file=str(out / "source.spm"))
    # The tiny model may not stop early in int8; CTranslate2's default length cap (256) would
    # then run past its 64-position table.
    results = translator.translate_batch(
        [sp.encode(s, out_type=str) for s in SENTENCES], max_decoding_length=32
    )
    assert len(results) == len(SENTENCES)
    assert all(r.hypotheses[0] for r in results)


def test_ct2_export_refuses_unknown_quantization(checkpoint, tmp_path):
    pytest.importorskip("ctranslate2")
    with pytest.raises(TmtError, match="CTranslate2 accepts"):
        export_ctranslate2(checkpoint, tmp_path / "x", quantize="int3")


def variant_checkpoint(checkpoint, path, options, tokenizers=None):
    """The fixture checkpoint rebuilt with ModelConfig `options` (and optionally other
    (src, tgt) tokenizers), random weights and non-trivial LayerNorm parameters, so that a
    misplaced norm or a wrong eps shows in the logits."""
    state = torch.load(checkpoint, weights_only=True)
    bundle = load_for_inference(checkpoint)
    src, tgt = tokenizers or (bundle.src_tokenizer, bundle.tgt_tokenizer)
    cfg = dataclasses.replace(bundle.config.model, **options)
    model = build_model(cfg, src.vocab_size, tgt.vocab_size, pad_id=0)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "norm" in name:
                param.add_(0.3 * torch.randn_like(param))
    state["model"] = model.state_dict()
    tokenizer_cfg = dataclasses.replace(
        bundle.config.tokenizer, joint=src.model_bytes == tgt.model_bytes
    )
    config = dataclasses.replace(bundle.config, model=cfg, tokenizer=tokenizer_cfg)
    state["config"] = config_to_dict(config)
    state["tokenizers"] = {"src": src.model_bytes, "tgt": tgt.model_bytes}
    torch.save(state, path)
    return path, model.eval()


@pytest.mark.parametrize(
    "options",
    [
        {"pre_norm": True, "activation": "swiglu"},
        {"positions": "learned", "tie_output": False, "share_embeddings": False},
        {"activation": "gelu", "n_decoder_layers": 2, "layer_norm_eps": 1e-6},
        {"layer_norm_eps": 0.5},
        {"positions": "shaw", "max_relative_position": 3},
        {"positions": "shaw", "relative_values": True, "pre_norm": True},
        {"positions": "t5", "relative_buckets": 8, "relative_max_distance": 12},
        {"positions": "rope"},
        {"positions": "rope", "pre_norm": True, "activation": "gelu", "n_decoder_layers": 2},
        {"positions": "rope", "n_heads": 4, "n_kv_heads": 1, "share_embeddings": False},
        {"n_heads": 4, "n_kv_heads": 2, "positions": "learned", "tie_output": False},
        {"n_heads": 4, "n_kv_heads": 2, "positions": "shaw", "relative_values": True},
        {"n_heads": 4, "n_kv_heads": 1, "positions": "t5", "pre_norm": True},
    ],
)
def test_ct2_export_of_model_variants_scores_like_ours(checkpoint, tmp_path, options):
    """Every option of ModelConfig maps onto the spec: same log-probs for a forced target."""
    ctranslate2 = pytest.importorskip("ctranslate2")
    bundle = load_for_inference(checkpoint)
    path, model = variant_checkpoint(checkpoint, tmp_path / "variant.pt", options)
    out = export_ctranslate2(path, tmp_path / "ct2")
    translator = ctranslate2.Translator(str(out), device="cpu", intra_threads=1)
    src, target = bundle.src_tokenizer.encode("zwei hunde spielen"), [7, 8, 30, 4]
    (result,) = translator.score_batch(
        [[bundle.src_tokenizer.id_to_piece(i) for i in src]],
        [[bundle.tgt_tokenizer.id_to_piece(i) for i in target]],
    )
    with torch.no_grad():
        logits = model(torch.tensor([[*src, EOS_ID]]), torch.tensor([[BOS_ID, *target]]))
    expected = torch.log_softmax(logits, -1)[0].gather(1, torch.tensor([*target, EOS_ID])[:, None])
    assert_close(torch.tensor(result.log_probs), expected[:, 0], atol=1e-4, rtol=1e-4)


def test_ct2_refuses_unknown_options_in_one_line():
    cfg = dataclasses.replace(ModelConfig(), activation="silu", positions="rotary")
    with pytest.raises(TmtError, match=r"^cannot export to CTranslate2: model.activation=silu; "):
        check_expressible(CT2, cfg)
