"""scripts/run_experiment.py stops when training did not finish, instead of scoring it."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from transformer_mt.inference.paragraphs import joined_bleu

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def run_experiment():
    spec = importlib.util.spec_from_file_location(
        "run_experiment", REPO / "scripts/run_experiment.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("status", [143, 130, 2])
def test_stops_when_training_did_not_finish(
    run_experiment, tiny_experiment, tmp_path, monkeypatch, capsys, status
):
    calls = []

    def tmt(argv):  # `tmt train` stopped by SIGTERM (143), Ctrl-C (130) or an error (2)
        calls.append(argv[0])
        return status

    monkeypatch.setattr(run_experiment, "tmt", tmt)
    run_dir = tmp_path / "run"
    argv = ["run_experiment.py", "--config", str(tiny_experiment), "--run-dir", str(run_dir)]
    monkeypatch.setattr(sys, "argv", argv)
    assert run_experiment.main() == status
    assert calls == ["train"]  # neither averaged nor translated
    err = capsys.readouterr().err.strip().splitlines()
    how = "failed" if status == 2 else "was stopped"
    resume = "" if status == 2 else "; run the same command again to resume"
    assert err == [
        f"run_experiment: training {how} (exit status {status}); not scoring {run_dir}{resume}"
    ]
    assert not (run_dir / "results.json").exists()


def test_a_missing_test_file_stops_before_training(
    run_experiment, tiny_experiment, tmp_path, monkeypatch, capsys
):
    """data.test is scored after training, so its file is checked before the first update."""
    calls = []
    monkeypatch.setattr(run_experiment, "tmt", lambda argv: calls.append(argv) or 0)
    argv = ["run_experiment.py", "--config", str(tiny_experiment), "--run-dir",
            str(tmp_path / "run"), "--set", f"data.test={tmp_path}/no_such_test.tsv"]  # fmt: skip
    monkeypatch.setattr(sys, "argv", argv)
    assert run_experiment.main() == 2
    assert calls == []  # training never started
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: data.test=")
    assert "no_such_test.tsv" in err[0]


class _EchoTranslator:
    """Translates every line into itself; one subword per word."""

    def __init__(self):
        self.encoding = SimpleNamespace(source_ids=lambda line: list(range(len(line.split()))))

    def translate(self, lines):
        return [SimpleNamespace(texts=[line]) for line in lines]


def test_joined_bleu_scores_lines_of_n_sentences_against_joined_references():
    sources = ["a small dog runs", "two men talk", "the red car", "a girl reads a book", "end"]
    references = [*sources[:4], "something else"]
    # Pairs (1, 2) and (3, 4) joined: the echo equals the joined references; the fifth is left
    # out, so its wrong reference does not count.
    bleu, length = joined_bleu(_EchoTranslator(), sources, references, 2)
    assert bleu == 100.0
    assert length == (7 + 8) / 2
    wrong = ["x y z w", "v u t", "s r q", "p o n m l", "k"]
    assert joined_bleu(_EchoTranslator(), sources, wrong, 2)[0] < 1.0


@pytest.mark.parametrize("cuda", [False, True])
def test_without_a_config_the_recipe_follows_the_machine(
    run_experiment, tmp_path, monkeypatch, capsys, cuda
):
    """`make quickstart` passes no --config: the GPU recipe where torch sees CUDA, else the
    CPU one, named in one line with the reason; both recipes load."""
    calls = []
    monkeypatch.setattr(run_experiment, "tmt", lambda argv: calls.append(argv) or 2)
    monkeypatch.setattr(run_experiment.torch.cuda, "is_available", lambda: cuda)
    monkeypatch.setattr(run_experiment.torch.cuda, "get_device_name", lambda: "NVIDIA H200")
    monkeypatch.setattr(run_experiment, "check_sources", lambda data: None)
    argv = ["run_experiment.py", "--run-dir", str(tmp_path / "run")]
    monkeypatch.setattr(sys, "argv", argv)
    assert run_experiment.main() == 2
    recipe = "configs/multi30k_de_en_gpu.yaml" if cuda else "configs/multi30k_de_en.yaml"
    assert calls[0][:3] == ["train", "--config", str(REPO / recipe)]
    note = capsys.readouterr().err.strip().splitlines()[0]
    why = "torch sees a CUDA device (NVIDIA H200)" if cuda else "torch sees no CUDA device"
    assert note.startswith(f"run_experiment: {recipe}: {why}")
