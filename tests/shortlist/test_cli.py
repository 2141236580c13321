"""`tmt shortlist`, `tmt translate --shortlist` and `tmt export --shortlist`."""

import pytest

from transformer_mt.artifacts import load_for_inference
from transformer_mt.cli import main
from transformer_mt.inference.line_settings import LineSettings
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
    entries = read_vmap(shortlist).entries
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
        (["--frequent", "-5"], "error: --frequent -5: must be 0 or more"),
        (["--min-prob", "2"], "error: --min-prob 2.0: must be within [0, 1]"),
    ],
)
def test_bad_shortlist_arguments_are_one_line(
    reversing_checkpoint, tmp_path, capsys, extra, message
):
    args = ["shortlist", "--checkpoint", str(reversing_checkpoint), "--out", str(tmp_path / "v")]
    assert main([*args, *extra]) == 2
    assert without_notes(capsys.readouterr().err).strip() == message


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
    assert shortlist.read_text().startswith("#vocabularies\tsource=")  # CTranslate2 reads it too
    engine = ctranslate2.Translator(str(out), device="cpu", intra_threads=1)
    ours = Translator.from_checkpoint(
        str(reversing_checkpoint),
        shortlist=shortlist,
        beam_size=1,
        length_norm="average",
        length_penalty=1.0,
        max_len_a=0.0,
        max_len_b=30,
        lines=LineSettings(split_sentences=False),
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


def _shortlist_args(checkpoint, config, out):
    return [
        "shortlist",
        "--checkpoint",
        str(checkpoint),
        "--config",
        str(config),
        "--out",
        str(out),
    ]


def test_a_shortlist_names_its_vocabularies_and_another_model_refuses_it(
    multilingual_checkpoint, reversing_checkpoint, corpus_config, tmp_path, capsys
):
    """Made for a model of other vocabularies whose pieces all exist in this model's too: the
    pieces alone would pass; the vocabularies line refuses it by name."""
    other = tmp_path / "other.vmap"
    assert main(_shortlist_args(multilingual_checkpoint, corpus_config, other)) == 0
    bundle = load_for_inference(reversing_checkpoint)
    src, tgt = bundle.src_tokenizer, bundle.tgt_tokenizer
    vmap = read_vmap(other)
    assert vmap.vocabularies is not None
    assert all(src.id_to_piece(src.piece_id(e.source)) == e.source for e in vmap.entries[1:])
    assert all(tgt.id_to_piece(tgt.piece_id(p)) == p for e in vmap.entries for p in e.targets)
    capsys.readouterr()
    source = tmp_path / "in.txt"
    source.write_text("".join(f"{s}\n" for s in SENTENCES))
    args = ["translate", "--checkpoint", str(reversing_checkpoint), "--input", str(source)]
    assert main([*args, "--shortlist", str(other)]) == 2
    assert without_notes(capsys.readouterr().err) == (
        f"error: {other}: a shortlist for another model (its source and target vocabularies "
        "are not this model's); make one for this model with tmt shortlist\n"
    )
    export = ["export", str(reversing_checkpoint), str(tmp_path / "ct2"), "--format"]
    assert main([*export, "ctranslate2", "--shortlist", str(other)]) == 2
    assert "a shortlist for another model" in capsys.readouterr().err
    assert not (tmp_path / "ct2").exists()


def test_a_model_of_the_same_vocabularies_takes_the_shortlist(
    checkpoint, reversing_checkpoint, corpus_config, tmp_path
):
    """`checkpoint` and the reversing model share their tokenizer (a student that kept its
    teacher's): one shortlist serves both."""
    path = tmp_path / "shared.vmap"
    assert main(_shortlist_args(checkpoint, corpus_config, path)) == 0
    translator = Translator.from_checkpoint(str(reversing_checkpoint), shortlist=path)
    assert translator.translate(SENTENCES[:1])[0].texts


def test_a_shortlist_naming_no_vocabularies_is_used_with_a_warning(
    reversing_checkpoint, tmp_path, caplog
):
    """A hand-written file, or one of an older tmt shortlist: its pieces are checked."""
    path = tmp_path / "hand.vmap"
    path.write_text("\t▁das\n")
    translator = Translator.from_checkpoint(str(reversing_checkpoint), shortlist=path)
    assert translator.translate(SENTENCES[:1])[0].texts
    assert f"{path}: names no vocabularies" in caplog.text
    assert "tmt shortlist makes one that names them" in caplog.text


@pytest.mark.parametrize(
    "target", ["corpus/train.de", "corpus/train.en", "config.yaml", "checkpoint"]
)
def test_shortlist_never_writes_over_what_it_reads(
    reversing_checkpoint, corpus_config, tmp_path, capsys, target
):
    """The corpus it learns from, the config naming it, the checkpoint: refused by name."""
    path = reversing_checkpoint if target == "checkpoint" else tmp_path / target
    before = path.read_bytes()
    assert main(_shortlist_args(reversing_checkpoint, corpus_config, path)) == 2
    err = without_notes(capsys.readouterr().err)
    assert err.startswith(f"error: {path}: is the ") and err.count("\n") == 1, err
    assert path.read_bytes() == before


def test_a_corpus_of_the_other_direction_is_refused(reversing_checkpoint, corpus_config, capsys):
    """The lists of an en->de corpus for a de->en model keep the wrong pieces; a joint
    vocabulary's digest cannot tell."""
    text = corpus_config.read_text(encoding="utf-8")
    src, tgt = (line.split(": ")[1] for line in text.splitlines()[1:3])
    corpus_config.write_text(
        text.replace(f"src_lang: {src}", "src_lang: X")
        .replace(f"tgt_lang: {tgt}", f"tgt_lang: {src}")
        .replace("src_lang: X", f"src_lang: {tgt}"),
        encoding="utf-8",
    )
    out = corpus_config.parent / "model.vmap"
    assert main(_shortlist_args(reversing_checkpoint, corpus_config, out)) == 2
    err = without_notes(capsys.readouterr().err)
    assert err.startswith(
        f"error: {reversing_checkpoint}: translates {src}->{tgt}, not {tgt}->{src}"
    )
    assert not out.exists()


def test_progress_counts_the_pairs_read_and_each_pass_over_them(
    reversing_checkpoint, corpus_config, tmp_path, capsys, monkeypatch
):
    from transformer_mt import progress

    monkeypatch.setattr(progress, "PROGRESS_SECONDS", 0.0)  # a line at every count
    args = ["shortlist", "--checkpoint", str(reversing_checkpoint), "--config", str(corpus_config)]
    assert main([*args, "--out", str(tmp_path / "model.vmap")]) == 0
    lines = [line for line in capsys.readouterr().err.splitlines() if "pairs/s" in line]
    assert lines[0].startswith("shortlist: read 23 pairs, ")
    passes = [line.split(" (")[0] for line in lines[1:]]
    assert passes == [f"shortlist: aligned {23 * n}/138 pairs over 6 passes" for n in range(1, 7)]
    assert lines[-1].split(", ")[0].endswith("(100%)")


def test_a_full_temporary_folder_is_named(
    reversing_checkpoint, corpus_config, tmp_path, capsys, monkeypatch
):
    """The encoded corpus goes to a temporary folder (TMPDIR): a full one had been `a file:
    No space left on device`."""
    import errno
    import os

    import numpy as np

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(np, "savez", full)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr("tempfile.tempdir", None)  # read TMPDIR again
    out = tmp_path / "model.vmap"
    assert main(_shortlist_args(reversing_checkpoint, corpus_config, out)) == 1
    err = without_notes(capsys.readouterr().err)
    assert err.startswith(f"error: {tmp_path}/tmt-shortlist-")
    assert err.endswith(": cannot write (No space left on device)\n") and not out.exists()
