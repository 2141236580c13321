"""`decode.replace_unk`: unknown pieces replaced by the source pieces they attend to, against
CTranslate2's replace_unknowns on the same hypotheses, through the Translator and the server."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from tests.conftest import WORDS, save_tiny_checkpoint
from tests.importing.builders import build_marian
from transformer_mt.cli import main
from transformer_mt.errors import TmtError
from transformer_mt.inference.cross_attention import cross_attention
from transformer_mt.inference.translator import Translator
from transformer_mt.inference.unknowns import copied_pieces
from transformer_mt.search import search

# Sentences with characters no tiny vocabulary holds (they are unknown on the source side too,
# so only a copy can bring them back), and sentences of known pieces only.
SENTENCES = [
    f"{' '.join(WORDS[i : i + 4])} 🍕 Łódź {' '.join(WORDS[i + 4 : i + 6])}" for i in range(10)
]
KNOWN = [" ".join(WORDS[i : i + 6]) for i in range(10)]
UNK = 1  # the unknown piece's id in both numberings
# Raised on the unknown piece's logit, so that untrained searches write it often, not always.
UNKNOWN_BIAS = {"own": 1.2, "imported": 3.0}


@pytest.fixture(scope="module", params=["own", "imported"])
def unknowing(request, tmp_path_factory):
    """A checkpoint whose searches write unknown pieces: one of ours (a joint SentencePiece
    vocabulary) or an imported OPUS-MT-shaped Marian model (separate vocabularies numbered by
    its table)."""
    root = tmp_path_factory.mktemp(request.param)
    if request.param == "own":
        path = save_tiny_checkpoint(root, n_heads=4, n_layers=2, output_bias=True)
        state = torch.load(path, weights_only=True)
        state["model"]["output_projection.bias"][UNK] += UNKNOWN_BIAS["own"]
        torch.save(state, path)
        return path
    pytest.importorskip("transformers")
    model, _ = build_marian(root / "hf", separate=True)
    with torch.no_grad():
        model.final_logits_bias[0, UNK] += UNKNOWN_BIAS["imported"]
    model.save_pretrained(root / "hf")
    path = root / "imported.pt"
    assert main(["import", str(root / "hf"), "--out", str(path)]) == 0
    return path


def test_copied_pieces_are_ctranslate2s_replace_unknowns(unknowing, tmp_path):
    """On CTranslate2's own hypotheses (greedy and the 4 of a beam of 4) of sources without an
    unknown piece, the pieces copied over unknown ones are those its replace_unknowns writes:
    the same layer, heads and source positions (our export hands it the average over all
    heads)."""
    ctranslate2 = pytest.importorskip("ctranslate2")
    assert main(["export", "--format", "ctranslate2", str(unknowing), str(tmp_path / "ct2")]) == 0
    theirs = ctranslate2.Translator(str(tmp_path / "ct2"), device="cpu", intra_threads=1)
    ours = Translator.from_checkpoint(str(unknowing))
    vocab = ours.tgt_tokenizer
    ids = {vocab.id_to_piece(i): i for i in range(vocab.vocab_size)}
    compared = replaced = 0
    for beam in (1, 4):
        for sentence in KNOWN:
            source, pieces = (
                ours.encoding.source_ids(sentence),
                ours.encoding.source_pieces(sentence),
            )
            assert len(pieces) == len(source)
            options = dict(beam_size=beam, num_hypotheses=beam, max_decoding_length=12)
            (plain,) = theirs.translate_batch([pieces], **options)
            (copied,) = theirs.translate_batch([pieces], replace_unknowns=True, **options)
            hypotheses = [[ids[p] for p in h] for h in plain.hypotheses]
            found = copied_pieces(
                ours.model, [*source, ours.specials.eos], pieces, hypotheses, UNK, ours.specials.bos
            )
            for tokens, at, expected in zip(hypotheses, found, copied.hypotheses, strict=True):
                assert [at.get(k) or vocab.id_to_piece(t) for k, t in enumerate(tokens)] == expected
                assert set(at) == {k for k, t in enumerate(tokens) if t == UNK}
                compared += 1
                replaced += len(at)
    assert compared == 50 and replaced > 50  # the unknown piece was written, and replaced


def test_the_source_unknown_piece_attended_to_most_is_copied(unknowing):
    """A source with unknown pieces: each unknown piece of a hypothesis is written as the one
    of them with the largest cross-attention weight (last layer, mean of heads), whatever
    other source piece it attends to more."""
    ours = Translator.from_checkpoint(str(unknowing), beam_size=4, n_best=4)
    copies = 0
    for sentence in SENTENCES:
        source = [*ours.encoding.source_ids(sentence), ours.specials.eos]
        pieces = ours.encoding.source_pieces(sentence)
        unknown = [j for j, i in enumerate(source[: len(pieces)]) if i == UNK]
        assert {pieces[j] for j in unknown} >= {"🍕"}
        src = torch.tensor([source])
        found = search(ours.model, src, (src != 0)[:, None, None, :], ours.decode, ours.options)
        hypotheses = [h.tokens for h in found[0].hypotheses]
        copied = copied_pieces(ours.model, source, pieces, hypotheses, UNK, ours.specials.bos)
        weights = cross_attention(ours.model, [source] * 4, hypotheses, -1, ours.specials.bos)
        for tokens, at, w in zip(hypotheses, copied, weights, strict=True):
            expected = {
                t: pieces[max(unknown, key=lambda j, t=t: w[t, j].item())]
                for t, token in enumerate(tokens)
                if token == UNK
            }
            assert at == expected
            copies += len(at)
    assert copies > 20


def test_the_translator_writes_copied_pieces_and_searches_as_before(unknowing):
    """The same search (scores), and no ⁇ left: each unknown piece is written as the source
    piece it attends to (an imported model's tokenizer writes nothing for it, as Marian's
    does, so its plain texts lack the piece instead)."""
    texts = [" ".join(SENTENCES[i : i + 2]) for i in range(0, 10, 2)]  # split into sentences
    settings = dict(beam_size=3, n_best=3)
    plain = Translator.from_checkpoint(str(unknowing), **settings).translate(texts)
    copied = Translator.from_checkpoint(str(unknowing), **settings, replace_unk=True).translate(
        texts
    )
    changed = 0
    for before, after in zip(plain, copied, strict=True):
        assert after.scores == before.scores
        assert not any("⁇" in text for text in after.texts)
        changed += sum(a != b for a, b in zip(after.texts, before.texts, strict=True))
    assert changed >= 5


def test_the_server_copies_pieces_as_the_translator_does(unknowing):
    from transformer_mt.serve.engine import Engine

    engine = Engine.from_checkpoint(str(unknowing))
    engine.start()
    try:
        decode = dataclasses.replace(engine.defaults, replace_unk=True)
        served = engine.submit(SENTENCES, decode).future.result(timeout=120)
    finally:
        engine.stop()
    offline = Translator.from_checkpoint(str(unknowing), replace_unk=True).translate(SENTENCES)
    assert [t.texts for t in served] == [t.texts for t in offline]
    assert not any("⁇" in text for t in served for text in t.texts)


def test_a_stream_holds_back_from_the_first_unknown_piece(unknowing):
    """Its copy is chosen once the sentence ends: events had shown ⁇, which the result then
    replaced, so the streamed text was no prefix of the translation."""
    from transformer_mt.serve.engine import Engine

    if unknowing.name == "imported.pt":
        pytest.skip("the imported model's greedy searches write no unknown piece")

    engine = Engine.from_checkpoint(str(unknowing))
    engine.start()
    events: list[tuple[int, str]] = []
    try:
        decode = dataclasses.replace(engine.defaults, beam_size=1, n_best=1, replace_unk=True)
        job = engine.submit(SENTENCES, decode, on_token=lambda i, text: events.append((i, text)))
        served = job.future.result(timeout=120)
    finally:
        engine.stop()
    offline = Translator.from_checkpoint(str(unknowing), beam_size=1, replace_unk=True)
    assert [t.texts for t in served] == [t.texts for t in offline.translate(SENTENCES)]
    plain = Translator.from_checkpoint(str(unknowing), beam_size=1).translate(SENTENCES)
    assert any(a.texts != b.texts for a, b in zip(served, plain, strict=True))  # pieces copied
    assert events and not any("⁇" in text for _, text in events)
    assert all(served[i].texts[0].startswith(text) for i, text in events)


@pytest.mark.parametrize(
    ("copied", "expected"),
    [
        ({}, "ein ⁇ im"),  # nothing copied: as decode writes it
        ({2: "🍕"}, "ein 🍕 im"),  # after the word boundary piece
        ({2: "▁Łódź"}, "ein  Łódź im"),  # a piece that starts a word keeps its space
    ],
)
def test_decode_writes_copied_pieces_in_place(checkpoint, copied, expected):
    tokenizer = Translator.from_checkpoint(str(checkpoint)).tgt_tokenizer
    ids = tokenizer.encode("ein 🍕 im")
    assert [tokenizer.id_to_piece(i) for i in ids] == ["▁ein", "▁", "<unk>", "▁im"]
    assert " ".join(tokenizer.decode(ids, copied).split()) == " ".join(expected.split())
    assert tokenizer.decode(ids, copied).startswith("ein")
    if not copied:
        assert tokenizer.decode(ids, copied) == tokenizer.decode(ids)


def test_a_copied_piece_first_drops_the_word_boundary_space(checkpoint):
    tokenizer = Translator.from_checkpoint(str(checkpoint)).tgt_tokenizer
    ids = tokenizer.encode("🍕 im")
    assert tokenizer.decode(ids, {1: "Ł"}) == "Ł im"
    assert tokenizer.decode(tokenizer.encode("das im"), {0: "▁Łódź"}) == "Łódź im"


def test_an_ensemble_refuses_to_replace_unknown_pieces(checkpoint, tmp_path):
    other = tmp_path / "other.pt"
    other.write_bytes(checkpoint.read_bytes())
    with pytest.raises(TmtError, match="replaces no unknown pieces"):
        Translator.from_checkpoint([str(checkpoint), str(other)], replace_unk=True)
