"""`tmt info`: what a training checkpoint, an average and a never-trained model hold, in text
and JSON, from the file alone; a file that is no checkpoint is one line."""

import json
import sys

import pytest
import torch

from transformer_mt.artifacts import load_for_inference
from transformer_mt.checkpoint_info import describe
from transformer_mt.cli import main

from .conftest import trained_run


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A tiny model trained for 8 updates, validated every 4 with BLEU."""
    return trained_run(tmp_path_factory.mktemp("info"), seed=2)


def info_lines(capsys, *args) -> dict[str, str]:
    assert main(["info", *map(str, args)]) == 0
    lines = capsys.readouterr().out.splitlines()
    return {line[:11].strip(): line[12:] for line in lines}


def test_a_training_checkpoint(run, capsys):
    last = run / "checkpoints" / "last.pt"
    shown = info_lines(capsys, last)
    assert shown["made by"] == "training, update 8 (resumable)"
    assert shown["translates"] == "de-en"
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    best = max(row["bleu"] for row in metrics if row.get("bleu") is not None)
    assert f"best validation BLEU {best:.2f}" in shown["training"]
    assert shown["training"].startswith("epoch ")
    model = load_for_inference(last).model  # the weights themselves, tied matrices once
    assert shown["model"] == (
        "2+2 layers, d_model 32, 4 heads, d_ff 64, relu, post-norm, sinusoidal positions; "
        f"{sum(p.numel() for p in model.parameters()):,} parameters"
    )
    assert shown["vocabulary"] == "one SentencePiece model for both sides, 60 pieces"
    assert shown["decode"].startswith("beam 5, length_norm gnmt")


def test_an_average_and_json(run, tmp_path, capsys):
    out = tmp_path / "avg.pt"
    assert main(["average", str(run), "--last", "2", "--out", str(out)]) == 0
    capsys.readouterr()
    shown = info_lines(capsys, out)
    assert shown["made by"].startswith("averaging 2 checkpoints (")
    assert "training" not in shown  # an average does not resume
    assert main(["info", str(out), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data == describe(out).to_dict()
    assert data["made_by"] == "averaging" and len(data["averaged_from"]) == 2
    assert data["size_bytes"] == out.stat().st_size and data["training"] is None


def test_a_never_trained_checkpoint(checkpoint, capsys):
    shown = info_lines(capsys, checkpoint)
    assert shown["made by"] == "tmt import, or a model never trained (step 0)"
    state = torch.load(checkpoint, weights_only=True)
    assert str(state["config"]["model"]["d_model"]) in shown["model"]


def test_a_file_that_is_no_checkpoint_is_one_line(tmp_path, capsys):
    bad = tmp_path / "notes.pt"
    bad.write_text("not a checkpoint")
    assert main(["info", str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: {bad}: ") and "\n" not in err


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("config", {}, "weights do not match the stored config (Missing key(s)"),
        ("model", {}, "weights do not match the stored config (Missing key(s)"),
        ("specials", {"pad": "x"}, "special tokens"),
    ],
)
def test_what_translate_refuses_info_refuses(checkpoint, tmp_path, capsys, key, value, message):
    """A config of defaults described a 6+6-layer model of 44M parameters that the 16-wide
    weights are not; a file without weights was described as sound."""
    from transformer_mt.checkpoint_checksums import CHECKSUMS_KEY, checksums

    state = torch.load(checkpoint, weights_only=True)
    state[key] = value
    state.pop(CHECKSUMS_KEY, None)
    state[CHECKSUMS_KEY] = checksums(state)
    odd = tmp_path / "odd.pt"
    torch.save(state, odd)
    assert main(["info", str(odd)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {odd}: ") and message in err and err.count("\n") == 1
    assert main(["translate", "--checkpoint", str(odd), "--input", str(odd)]) == 2
    assert message in capsys.readouterr().err


def test_a_tagged_model_lists_what_translate_accepts(multilingual_checkpoint):
    """Its trained directions, and the zero-shot ones its tags can name (`Languages.of`), as
    `tmt translate` sees them; an imported model with target tags only listed its data's
    labels ("de-en"), which translate refused."""
    from transformer_mt.inference.translator import Translator

    found = describe(multilingual_checkpoint)
    languages = Translator.from_checkpoint(str(multilingual_checkpoint)).languages
    assert found.directions == ["de-en", "en-de", "fr-en", "en-fr"]
    assert found.zero_shot == ["de-fr", "fr-de"]
    assert [tuple(d.split("-")) for d in found.directions + found.zero_shot] == list(
        languages.directions
    )


def test_a_checkpoint_of_several_ranks_shows_the_epoch_of_the_rank_behind(run, tmp_path, capsys):
    """Its position is one per rank ({"ranks": [...]}): info had shown `epoch None`."""
    import dataclasses

    from transformer_mt.artifacts import load_checkpoint, save_checkpoint

    checkpoint = load_checkpoint(run / "checkpoints" / "last.pt")
    ranks = [{"epoch": 4, "batch_index": 2}, {"epoch": 3, "batch_index": 9}]
    training = dataclasses.replace(checkpoint.training, data_position={"ranks": ranks})
    save_checkpoint(dataclasses.replace(checkpoint, training=training), tmp_path / "two.pt")
    assert info_lines(capsys, tmp_path / "two.pt")["training"].startswith("epoch 3, ")
    assert main(["info", str(tmp_path / "two.pt"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["training"]["epoch"] == 3


def test_an_imported_name_cannot_write_lines_of_its_own(run, tmp_path, capsys):
    import dataclasses

    from transformer_mt.artifacts import load_checkpoint, save_checkpoint

    checkpoint = load_checkpoint(run / "checkpoints" / "last.pt")
    forged = "opus\x1b[31m\nfake     line"
    save_checkpoint(dataclasses.replace(checkpoint, imported_from=forged), tmp_path / "odd.pt")
    shown = info_lines(capsys, tmp_path / "odd.pt")
    assert shown["made by"] == "tmt import of opus\\x1b[31m\\nfake     line"
    assert "fake" not in shown


def test_a_model_of_many_languages_counts_its_zero_shot_directions(
    multilingual_checkpoint, tmp_path, capsys
):
    """NLLB-200's 202 tags make 40,602 zero-shot directions: `tmt info` and `tmt import`
    printed every one on one line (771 KB), `--json` too. Listed up to LISTED (12);
    beyond, a count and a sample, and the JSON keeps the languages and the count."""
    from transformer_mt.checkpoint_checksums import CHECKSUMS_KEY, checksums
    from transformer_mt.checkpoint_info import ZERO_SHOT_SAMPLE

    state = torch.load(multilingual_checkpoint, weights_only=True)
    tags = state["specials"]["language_tags"]
    codes = [f"x{i:02d}" for i in range(20)]  # 3 + 20 languages, 506 - 4 directions
    tags.update({code: 20 + i for i, code in enumerate(codes)})  # ids of ordinary pieces
    state.pop(CHECKSUMS_KEY, None)
    state[CHECKSUMS_KEY] = checksums(state)
    many = tmp_path / "many.pt"
    torch.save(state, many)
    shown = info_lines(capsys, many)["translates"]
    assert shown == (
        "de-en, en-de, fr-en, en-fr; zero-shot: 502 directions between its 23 languages, "
        "such as de-fr, de-x00, de-x01, ..."
    )
    assert main(["info", str(many), "--json"]) == 0
    found = json.loads(capsys.readouterr().out)
    assert found["zero_shot_count"] == 502 and len(found["zero_shot"]) == ZERO_SHOT_SAMPLE
    assert found["languages"] == sorted(["de", "en", "fr", *codes])
    small = describe(multilingual_checkpoint)  # a short list stays whole
    assert (small.zero_shot, small.zero_shot_count) == (["de-fr", "fr-de"], 2)


def test_a_fine_tuned_checkpoint_names_its_parent(run, tmp_path, capsys):
    """Its stored config's train.init_from: info had said "training" alone."""
    import dataclasses

    from transformer_mt.artifacts import load_checkpoint, save_checkpoint

    checkpoint = load_checkpoint(run / "checkpoints" / "last.pt")
    config = {**checkpoint.config, "train": {**checkpoint.config["train"]}}
    config["train"]["init_from"] = "runs/parent/checkpoints/best.pt"
    save_checkpoint(dataclasses.replace(checkpoint, config=config), tmp_path / "child.pt")
    shown = info_lines(capsys, tmp_path / "child.pt")
    assert shown["made by"] == (
        "training, fine-tuned from runs/parent/checkpoints/best.pt, update 8 (resumable)"
    )
    assert describe(tmp_path / "child.pt").fine_tuned_from == "runs/parent/checkpoints/best.pt"


def test_info_with_stdout_closed_says_so(checkpoint, monkeypatch, capsys):
    """Started with `>&-`, it printed nothing and ended with status 0."""
    monkeypatch.setattr(sys, "stdout", None)
    assert main(["info", str(checkpoint)]) == 2
    assert capsys.readouterr().err == "error: <stdout>: is closed; redirect it\n"


@pytest.mark.parametrize(
    "options, shown",
    [
        (
            dict(
                share_embeddings=False, tie_output=False, output_bias=True, scale_embeddings=False
            ),
            ", separate embeddings, untied output, output bias, unscaled embeddings; ",
        ),
        (
            dict(attention_pattern="local_dilated", attention_window=2, attention_dilation=3),
            ", local_dilated attention pattern (window 2, dilation 3); ",
        ),
        (
            dict(attention="mla", positions="rope", mla_kv_rank=8, mla_rope_dim=4),
            ", rope positions, mla attention (latent 8, rotary 4); ",
        ),
        (dict(positions="t5", relative_buckets=8), ", t5 positions, 8 buckets to 128; "),
    ],
)
def test_the_model_line_names_what_makes_another_network(tmp_path, capsys, options, shown):
    """Two models of the same sizes had been described alike (a Marian layout beside a tied
    one; a window of 2 beside one of 16)."""
    from tests.conftest import save_tiny_checkpoint

    checkpoint = save_tiny_checkpoint(tmp_path, **options)
    assert shown in info_lines(capsys, checkpoint)["model"]
