"""Ensembles: each step the mean of the members' log-probs, against full forward passes; a model
ensembled with itself translates as it does alone; members of other vocabularies are refused."""

from __future__ import annotations

import os
import shutil

import pytest
import torch

from transformer_mt.artifacts import load_for_inference
from transformer_mt.cli import main
from transformer_mt.data.tokenizer import BOS_ID, EOS_ID
from transformer_mt.data.tokenizer_adopt import renumbered_model
from transformer_mt.errors import SettingError, TmtError
from transformer_mt.inference.ensemble import Ensemble
from transformer_mt.inference.line_settings import LineSettings
from transformer_mt.inference.translator import Translator

from ..conftest import save_tiny_checkpoint

LINES = ["ein mann fährt rad", "zwei hunde spielen im schnee", "", "das buch"]


@pytest.fixture(scope="module")
def wider(tmp_path_factory):
    """A second model of the same vocabulary, of another width (its memory splits apart)."""
    return save_tiny_checkpoint(tmp_path_factory.mktemp("wider"), d_model=24, n_layers=2)


def test_each_step_is_the_mean_of_the_members_full_forward_log_probs(checkpoint, wider):
    members = [load_for_inference(str(p)).model for p in (checkpoint, wider)]
    ensemble = Ensemble(members).eval()
    src = torch.tensor([[5, 9, 12, EOS_ID], [7, 8, EOS_ID, 0]])
    src_mask = (src != 0)[:, None, None, :]
    tgt = torch.tensor([[BOS_ID, 5, 9, 12, 20], [BOS_ID, 7, 8, 30, 4]])
    with torch.no_grad():
        memory = ensemble.encode(src, src_mask)
        sources = ensemble.source_rows(torch.arange(2), 2)
        cache = None
        for t in range(tgt.size(1)):
            got, cache = ensemble.decode_step(tgt[:, t], memory, src_mask, sources, cache)
            full = [
                torch.log_softmax(m(src, tgt[:, : t + 1], src_mask)[:, -1], -1) for m in members
            ]
            torch.testing.assert_close(got, torch.stack(full).mean(0), atol=1e-5, rtol=0)


@pytest.mark.parametrize("beam_size", [1, 3])
def test_a_model_ensembled_with_itself_translates_as_alone(checkpoint, beam_size, tmp_path):
    alone = Translator.from_checkpoint(str(checkpoint), beam_size=beam_size, n_best=beam_size)
    copy = tmp_path / "copy.pt"  # the same weights in another file (one file twice is refused)
    shutil.copyfile(checkpoint, copy)
    twice = Translator.from_checkpoint(
        [str(checkpoint), str(copy)], beam_size=beam_size, n_best=beam_size
    )
    assert isinstance(twice.model, Ensemble)
    assert twice.translate(LINES) == alone.translate(LINES)


def test_two_models_translate_with_every_decode_setting(checkpoint, wider):
    both = Translator.from_checkpoint([str(checkpoint), str(wider)], beam_size=3, n_best=2)
    found = both.translate(LINES)
    assert [len(t.texts) for t in found] == [2] * len(LINES) and found[2].texts == ["", ""]
    greedy = Translator.from_checkpoint([str(checkpoint), str(wider)], beam_size=1)
    assert len(greedy.translate(LINES)) == len(LINES)


def test_members_of_another_vocabulary_are_refused_by_name(
    checkpoint, multilingual_checkpoint, wider
):
    paths = [str(checkpoint), str(multilingual_checkpoint)]
    with pytest.raises(SettingError, match="differs from .*must share tokenizers and special ids"):
        Translator.from_checkpoint(paths)
    with pytest.raises(TmtError, match="an ensemble of 2 checkpoints gives no alignments"):
        Translator.from_checkpoint(
            [str(checkpoint), str(wider)], lines=LineSettings(alignment_layer=-1), n_best=1
        )
    with pytest.raises(SettingError, match="^shortlist: an ensemble of 2 takes none"):
        Translator.from_checkpoint([str(checkpoint), str(wider)], shortlist="any.vmap")


def test_a_member_with_a_tokenizer_adopted_from_the_others_file_is_accepted(checkpoint, tmp_path):
    """`tokenizer.model_file` naming another run's tokenizer gives a model of the same
    vocabulary, whose file spells out what the trained one leaves implicit."""
    state = torch.load(checkpoint, weights_only=True)
    trained = tmp_path / "trained.model"
    trained.write_bytes(state["tokenizers"]["src"])
    adopted = renumbered_model("tokenizer.model_file", str(trained)).SerializeToString()
    assert adopted != state["tokenizers"]["src"]
    state["tokenizers"] = {"src": adopted, "tgt": adopted}
    torch.save(state, tmp_path / "adopted.pt")
    pair = Translator.from_checkpoint([str(checkpoint), str(tmp_path / "adopted.pt")])
    alone = Translator.from_checkpoint(str(checkpoint))
    assert pair.translate(LINES) == alone.translate(LINES)  # the same weights twice


@pytest.mark.parametrize(
    "flags, named",
    [
        (["--report", "report.jsonl"], "--report"),
        (["--format", "html"], "--format html"),
        (["--format", "markdown"], "--format markdown"),
        (["--alignments"], "--alignments"),
        (["--shortlist", "any.vmap"], "--shortlist"),
    ],
)
def test_what_needs_one_model_is_refused_for_an_ensemble_before_translating(
    checkpoint, wider, tmp_path, capsys, monkeypatch, flags, named
):
    """The dropped-content report and documents' markup read one model's cross-attention."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "in.txt").write_text("das buch\n", encoding="utf-8")
    args = ["translate", "--checkpoint", str(checkpoint), str(wider), "--input", "in.txt"]
    assert main([*args, *flags]) == 2
    assert capsys.readouterr().err == (
        f"error: {named}: needs one model (its cross-attention or its output rows), and 2 "
        "checkpoints make an ensemble; give one checkpoint\n"
    )


def test_an_ensemble_has_no_cross_attention_to_read(checkpoint, wider):
    from transformer_mt.inference.cross_attention import cross_attention

    ensemble = Translator.from_checkpoint([str(checkpoint), str(wider)]).model
    with pytest.raises(TmtError, match="an ensemble of checkpoints has no one cross-attention"):
        cross_attention(ensemble, [[5, EOS_ID]], [[5]], layer=-1, bos=BOS_ID)


def test_members_of_the_other_direction_are_refused_by_name(checkpoint, tmp_path):
    """The same joint vocabulary both ways: averaged, de->en and en->de would write neither."""
    state = torch.load(checkpoint, weights_only=False)
    data = state["config"]["data"]
    data["src_lang"], data["tgt_lang"] = data["tgt_lang"], data["src_lang"]
    torch.save(state, tmp_path / "reversed.pt")
    paths = [str(checkpoint), str(tmp_path / "reversed.pt")]
    with pytest.raises(SettingError) as refused:
        Translator.from_checkpoint(paths)
    assert str(refused.value) == (
        f"checkpoint={paths[1]}: translates {data['src_lang']}->{data['tgt_lang']}, {paths[0]} "
        f"{data['tgt_lang']}->{data['src_lang']}: an ensemble's models must translate the same "
        "direction"
    )


def test_a_checkpoint_given_twice_is_refused_before_loading(checkpoint, tmp_path, capsys):
    link = tmp_path / "link.pt"
    os.link(checkpoint, link)
    for second in (checkpoint, link):
        with pytest.raises(SettingError) as refused:
            Translator.from_checkpoint([str(checkpoint), str(second)])
        assert refused.value.setting == "checkpoint" and refused.value.value == str(second)
        assert f"given twice (also as {checkpoint})" in refused.value.reason
    source = tmp_path / "in.txt"
    source.write_text("das buch\n", encoding="utf-8")
    args = ["translate", "--checkpoint", str(checkpoint), "--checkpoint", str(link)]
    assert main([*args, "--input", str(source)]) == 2
    assert capsys.readouterr().err.startswith(f"error: --checkpoint {link}: given twice")


def test_tmt_translate_takes_several_checkpoints(checkpoint, wider, tmp_path):
    source, out = tmp_path / "in.txt", tmp_path / "out.txt"
    source.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    args = ["translate", "--checkpoint", str(checkpoint), str(wider), "--beam-size", "2"]
    assert main([*args, "--input", str(source), "--output", str(out)]) == 0
    both = Translator.from_checkpoint([str(checkpoint), str(wider)], beam_size=2)
    assert out.read_text(encoding="utf-8").splitlines() == [
        t.texts[0] for t in both.translate(LINES)
    ]
