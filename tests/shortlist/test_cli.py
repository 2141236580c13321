"""`tmt shortlist`, `tmt translate --shortlist` and `tmt export --shortlist`."""

import pytest

from transformer_mt.artifacts import load_for_inference
from transformer_mt.cli import main
from transformer_mt.inference.translator import Translator
from transformer_mt.shortlist.vmap import read_vmap

from ..conftest import without_notes
from .test_select import SENTENCES


@pytest.fixture
def shortlist(reversing_checkpoint, corpus_config, tmp_path, capsys):
    out = tmp_path / "model.vmap"
    args = ["shortlist", "--checkpoint", str(reversing_checkpoint), "--config", str(corpus_config)]
    assert main([*args, "--out", str(out), "--per-source", "3"]) == 0
    err = without_notes(capsys.readouterr().err)
    assert err.startswith("shortlist: 23 pairs, ") and err.rstrip().endswith(f"wrote {out}")
    return out


def test_shortlist_lists_source_pieces_of_the_corpus(shortlist, reversing_checkpoint):
    entries = read_vmap(shortlist)
    assert entries[0].source == "" and entries[0].targets  # the frequent pieces
    tokenizer = load_for_inference(reversing_checkpoint).src_tokenizer
    pieces = {tokenizer.id_to_piece(i) for i in range(tokenizer.vocab_size)}
    assert len(entries) > 5 and all(e.source in pieces for e in entries[1:])
    # 3 listed, their other case, the piece itself (the vocabulary is joint: always there).
    assert all(e.source in e.targets and len(e.targets) <= 7 for e in entries[1:])


def test_translate_with_the_shortlist_writes_what_the_translator_gives(
    shortlist, reversing_checkpoint, tmp_path
):
    source = tmp_path / "in.txt"
    source.write_text("".join(f"{s}\n" for s in SENTENCES))
    args = ["translate", "--checkpoint", str(reversing_checkpoint), "--input", str(source)]
    out = tmp_path / "out.txt"
    assert (
        main([*args, "--shortlist", str(shortlist), "--beam-size", "2", "--output", str(out)]) == 0
    )
    translator = Translator.from_checkpoint(
        str(reversing_checkpoint), shortlist=shortlist, beam_size=2
    )
    expected = [t.texts[0] for t in translator.translate(SENTENCES)]
    assert out.read_text().splitlines() == expected


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--set", "train.max_steps=1"], "error: --set: overrides --config; give --config too"),
        (["--per-source", "-1"], "error: --per-source -1: must be 0 or more"),
    ],
)
def test_bad_shortlist_arguments_are_one_line(
    reversing_checkpoint, tmp_path, capsys, extra, message
):
    args = ["shortlist", "--checkpoint", str(reversing_checkpoint), "--out", str(tmp_path / "v")]
    assert main([*args, *extra]) == 2
    assert without_notes(capsys.readouterr().err).strip() == message


def test_shortlist_never_writes_over_the_checkpoint(reversing_checkpoint, corpus_config, capsys):
    before = reversing_checkpoint.read_bytes()
    args = ["shortlist", "--checkpoint", str(reversing_checkpoint), "--config", str(corpus_config)]
    assert main([*args, "--out", str(reversing_checkpoint)]) == 2
    assert "the checkpoint" in capsys.readouterr().err
    assert reversing_checkpoint.read_bytes() == before


def test_ctranslate2_export_carries_the_shortlist_and_searches_like_ours(
    shortlist, reversing_checkpoint, tmp_path
):
    """CTranslate2 with use_vmap keeps the listed pieces of the batch, the always line and
    unk/bos/eos; ours the same (bos is never produced by either): the same greedy output."""
    ctranslate2 = pytest.importorskip("ctranslate2")
    out = tmp_path / "ct2"
    args = ["export", str(reversing_checkpoint), str(out), "--format", "ctranslate2"]
    assert main([*args, "--shortlist", str(shortlist)]) == 0
    assert (out / "vmap.txt").read_text() == shortlist.read_text()
    engine = ctranslate2.Translator(str(out), device="cpu", intra_threads=1)
    ours = Translator.from_checkpoint(
        str(reversing_checkpoint),
        shortlist=shortlist,
        beam_size=1,
        length_norm="average",
        length_penalty=1.0,
        max_len_a=0.0,
        max_len_b=30,
        split_sentences=False,
    )
    src = ours.src_tokenizer
    for sentence in SENTENCES:
        pieces = [src.id_to_piece(i) for i in src.encode(sentence)]
        found = engine.translate_batch(
            [pieces], beam_size=1, max_decoding_length=30, min_decoding_length=1, use_vmap=True
        )[0]
        text = ours.tgt_tokenizer.decode(
            [ours.tgt_tokenizer.piece_id(p) for p in found.hypotheses[0]]
        )
        assert text == ours.translate([sentence])[0].texts[0], sentence


def test_hf_export_refuses_a_shortlist(reversing_checkpoint, shortlist, tmp_path, capsys):
    args = ["export", str(reversing_checkpoint), str(tmp_path / "hf"), "--format", "hf"]
    assert main([*args, "--shortlist", str(shortlist)]) == 2
    assert "--shortlist" in capsys.readouterr().err
