"""What `tmt` says about itself and about the small mistakes of a first run."""

import argparse
from pathlib import Path

import pytest

from transformer_mt.cli import build_parser, main
from transformer_mt.config import ExperimentConfig, TrainConfig, dump_config, load_config

CONFIGS = Path(__file__).resolve().parents[1] / "configs"


def test_help_names_every_command(capsys):
    parser = build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    assert "shortlist" in sub.choices
    with pytest.raises(SystemExit):
        main(["--help"])
    shown = " ".join(capsys.readouterr().out.split())
    described = shown.split("positional arguments")[0]
    for command in sub.choices:
        assert command in described, command


@pytest.mark.parametrize("keep_last, why", [(0, True), (5, False)])
def test_average_of_a_run_that_keeps_no_step_files_says_why(tmp_path, capsys, keep_last, why):
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    config = ExperimentConfig(train=TrainConfig(keep_last=keep_last))
    dump_config(config, run / "config.yaml")
    for given in (run, run / "checkpoints"):
        assert main(["average", str(given), "--last", "5", "--out", str(tmp_path / "a.pt")]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: no periodic checkpoints") and err.count("\n") == 1, err
        said = "train.keep_last: 0" in err and "set train.keep_last above 0" in err
        assert said == why, err


def test_a_smoke_run_refused_for_its_warmup_is_told_the_override_it_needs(tmp_path, capsys):
    config = str(CONFIGS / "multi30k_tiny.yaml")
    argv = ["train", "--config", config, "--run-dir", str(tmp_path / "run")]
    assert main([*argv, "--set", "train.max_steps=5"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "must be < train.max_steps=5" in err, err
    fix = err.split("e.g. ")[1].split()[0]
    assert load_config(config, ["train.max_steps=5", fix]).train.warmup_steps == 0
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    "device, quantize, cuda, expected",
    [
        ("auto", None, False, "cpu"),
        ("auto", None, True, "cuda"),
        ("auto", "int8", True, "cpu"),  # a CPU setting
        ("cpu", None, True, "cpu"),
    ],
)
def test_the_device_follows_the_machine_unless_given(monkeypatch, device, quantize, cuda, expected):
    """Inference commands had run on the CPU unless told otherwise, where training takes
    the GPU it finds."""
    import argparse

    import torch

    from transformer_mt.cli.common import device_of

    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    args = argparse.Namespace(device=device, quantize=quantize)
    assert device_of(args) == expected and args.device == expected


def test_every_command_that_writes_a_file_takes_out_and_output_alike():
    """Some commands had only --out and some only --output: `tmt plot --output` was refused."""
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    writers = {}
    for name, command in sub.choices.items():
        for action in command._actions:
            if action.dest in ("out", "output"):
                writers[name] = set(action.option_strings)
    assert len(writers) >= 8
    for name, flags in writers.items():
        assert flags == {"--out", "--output"}, name
    args = build_parser().parse_args(["plot", "runs/x", "--output", "c.svg"])
    assert args.out == "c.svg"
    args = build_parser().parse_args(["translate", "--checkpoint", "a.pt", "--out", "o.txt"])
    assert args.output == "o.txt"


def test_translating_a_tsv_of_pairs_says_so(checkpoint, tmp_path, capsys):
    """Every line holding one TAB: the target column had been translated as source text,
    without a word."""
    pairs, plain = tmp_path / "test.tsv", tmp_path / "test.de"
    pairs.write_text("ein hund\tA dog\nzwei katzen\tTwo cats\n", encoding="utf-8")
    plain.write_text("ein hund\tA dog\nzwei katzen\n", encoding="utf-8")
    for path, warned in ((pairs, True), (plain, False)):
        argv = ["translate", "--checkpoint", str(checkpoint), "--input", str(path), "--quiet"]
        assert main([*argv, "--output", str(tmp_path / "out.en")]) == 0
        said = capsys.readouterr().err
        assert (f"warning: every line of {path} held one TAB, as a TSV" in said) is warned
