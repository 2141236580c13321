"""`tmt attention` heatmaps and `tmt translate --alignments` on the tiny checkpoint."""

import struct

import pytest

from transformer_mt.cli import main
from transformer_mt.errors import TmtError
from transformer_mt.inference.attention_maps import CELL_INCHES, DPI, draw_attention
from transformer_mt.inference.line_settings import LineSettings
from transformer_mt.inference.translator import Translator

CELL = int(CELL_INCHES * DPI)  # pixels per panel side


def png_size(path):
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])  # width, height of the IHDR chunk


@pytest.mark.parametrize(
    "extra, panels",
    [
        ([], (2, 3)),  # 2 heads; 1 layer x (encoder, decoder, cross)
        (["--tgt", "a man rides", "--layer", "0", "--head", "1"], (1, 3)),
    ],
)
def test_attention_png_has_one_panel_per_kind_layer_and_head(checkpoint, tmp_path, extra, panels):
    out = tmp_path / "maps" / "attention.png"
    args = ["attention", "--checkpoint", str(checkpoint), "--src", "ein mann fährt rad"]
    assert main([*args, "--out", str(out), *extra]) == 0
    assert png_size(out) == (panels[0] * CELL, panels[1] * CELL)
    assert [p.name for p in out.parent.iterdir()] == ["attention.png"]  # no temporary file


def test_attention_refuses_a_missing_layer(checkpoint, tmp_path, capsys):
    args = ["attention", "--checkpoint", str(checkpoint), "--src", "ein mann", "--layer", "3"]
    assert main([*args, "--out", str(tmp_path / "a.png")]) == 2
    assert "--layer 3: the encoder has 1 layer(s)" in capsys.readouterr().err


def test_alignments_keep_line_count_and_indices_in_range(checkpoint, tmp_path):
    lines = ["ein mann fährt rad", "", "zwei hunde spielen im schnee", "das buch"]
    source, out = tmp_path / "in.txt", tmp_path / "out.txt"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    args = ["translate", "--checkpoint", str(checkpoint), "--beam-size", "2", "--alignments"]
    assert main([*args, "--input", str(source), "--output", str(out)]) == 0
    rows = out.read_text(encoding="utf-8").split("\n")[:-1]
    assert len(rows) == len(lines)
    plain = Translator.from_checkpoint(str(checkpoint), beam_size=2).translate(lines)
    src_tokenizer = Translator.from_checkpoint(str(checkpoint)).src_tokenizer
    for line, row, expected in zip(lines, rows, plain, strict=True):
        text, sep, pairs = row.partition("\t")
        assert sep == "\t" and text == expected.texts[0]  # the translation itself is unchanged
        pairs = [tuple(map(int, p.split("-"))) for p in pairs.split()]
        assert [t for _, t in pairs] == list(range(len(pairs)))  # one pair per target token
        assert all(0 <= s < len(src_tokenizer.encode(line)) for s, _ in pairs)
        assert bool(pairs) == bool(text)


def test_alignments_refuse_nbest_and_a_missing_layer(checkpoint):
    with pytest.raises(TmtError, match="n_best=2: alignments are of the best translation"):
        Translator.from_checkpoint(
            str(checkpoint), beam_size=2, n_best=2, lines=LineSettings(alignment_layer=-1)
        )
    with pytest.raises(TmtError, match="alignment_layer=1: the model has 1 decoder layer"):
        Translator.from_checkpoint(str(checkpoint), lines=LineSettings(alignment_layer=1))


def test_alignment_errors_name_the_flags_on_the_command_line(checkpoint, tmp_path, capsys):
    source = tmp_path / "in.txt"
    source.write_text("ein mann\n", encoding="utf-8")
    args = ["translate", "--checkpoint", str(checkpoint), "--input", str(source), "--alignments"]
    assert main([*args, "--beam-size", "2", "--nbest", "2"]) == 2
    assert "drop --nbest" in capsys.readouterr().err
    assert main([*args, "--alignment-layer", "1"]) == 2
    assert "--alignment-layer 1: the model has 1 decoder layer" in capsys.readouterr().err
    assert main([*args[:-1], "--alignment-layer", "0"]) == 2  # without --alignments
    said = "error: --alignment-layer 0: goes with --alignments (or a document's --format)"
    assert said in capsys.readouterr().err


def test_attention_errors_name_the_argument_in_the_library(checkpoint, tmp_path):
    out = tmp_path / "a.png"
    with pytest.raises(TmtError, match=r"^layer=3: the encoder has 1 layer\(s\)$"):
        draw_attention(checkpoint, "ein mann", out, layer=3)
    with pytest.raises(TmtError, match=r"^head=2: the model has 2 heads \(0\.\.1\)$"):
        draw_attention(checkpoint, "ein mann", out, head=2)
    with pytest.raises(TmtError, match="^src: the source sentence is empty$"):
        draw_attention(checkpoint, "  ", out)
    assert not out.exists()


def test_an_empty_source_names_the_flag_on_the_command_line(checkpoint, tmp_path, capsys):
    args = ["attention", "--checkpoint", str(checkpoint), "--src", " ", "--out"]
    assert main([*args, str(tmp_path / "a.png")]) == 2
    assert capsys.readouterr().err == "error: --src: the source sentence is empty\n"


def test_an_empty_target_names_the_flag_on_the_command_line(checkpoint, tmp_path, capsys):
    args = ["attention", "--checkpoint", str(checkpoint), "--src", "ein mann", "--tgt", " "]
    assert main([*args, "--out", str(tmp_path / "a.png")]) == 2
    assert capsys.readouterr().err == (
        "error: --tgt: the target sentence is empty; leave it out to draw the model's own "
        "translation\n"
    )


def test_sentences_longer_than_the_positions_are_drawn_cut_with_a_warning(
    checkpoint, tmp_path, caplog
):
    long = " ".join(["ein mann fährt rad"] * 400)
    out = draw_attention(checkpoint, long, tmp_path / "a.png", tgt=long, layer=0, head=0)
    assert out.exists()
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert [w.split(" is longer")[0] for w in warned[:2]] == ["the source", "the target"]
    # 64 positions on an axis: too many labels for a panel, so every other one is named.
    assert warned[2:] == ["3 panels with up to 64 pieces an axis: one piece in 2 is named"]


def test_a_long_axis_names_every_kth_piece():
    from transformer_mt.inference.attention_maps import MAX_LABELS, _every_kth

    labels = [f"p{i}" for i in range(MAX_LABELS * 3 + 1)]
    ticks, shown = _every_kth(labels)
    assert list(ticks) == list(range(0, len(labels), 4)) and shown == labels[::4]
    assert len(shown) <= MAX_LABELS
    assert _every_kth(labels[:MAX_LABELS]) == (range(0, MAX_LABELS), labels[:MAX_LABELS])
