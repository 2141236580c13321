"""A model too large to train on the device is refused at start, in one line, before the
tokenizer, the corpus or the run directory."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from transformer_mt.cli import main
from transformer_mt.config import ExperimentConfig, load_config
from transformer_mt.errors import TmtError
from transformer_mt.model import build_model
from transformer_mt.training import footprint
from transformer_mt.training.footprint import (
    BYTES_PER_PARAMETER,
    check_fits,
    parameter_count,
)

VARIANTS = [
    {},
    {"positions": "rope", "n_kv_heads": 1},
    {"positions": "shaw", "relative_values": True},
    {"positions": "learned", "share_embeddings": False, "tie_output": False},
    {"attention": "mla", "mla_kv_rank": 8, "mla_rope_dim": 4, "positions": "rope"},
    {"activation": "swiglu", "n_decoder_layers": 3, "output_bias": True},
]


@pytest.mark.parametrize("changes", VARIANTS, ids=lambda c: "-".join(map(str, c.values())))
def test_the_count_is_the_built_models(changes):
    """Counted without storage, the same as the model built for real."""
    config = ExperimentConfig()
    model_cfg = dataclasses.replace(
        config.model, d_model=32, n_heads=4, n_layers=2, d_ff=64, **changes
    )
    config = dataclasses.replace(
        config, model=model_cfg, tokenizer=dataclasses.replace(config.tokenizer, vocab_size=96)
    )
    built = build_model(model_cfg, 96, 96)
    assert parameter_count(config, None) == sum(p.numel() for p in built.parameters())


def test_a_checkpoints_weights_are_counted_as_they_are():
    weights = {"a": torch.zeros(3, 4), "b": torch.zeros(5)}
    assert parameter_count(ExperimentConfig(), weights) == 17


def test_the_bound_is_the_memory_available(tiny_experiment, monkeypatch):
    """Refused with one byte too few, accepted with exactly what the parameters need."""
    config = load_config(tiny_experiment, [])
    need = parameter_count(config, None) * BYTES_PER_PARAMETER + 200 * 60 * 4
    cpu = torch.device("cpu")
    monkeypatch.setattr(footprint, "available_memory", lambda device: need)
    check_fits(config, None, cpu)
    monkeypatch.setattr(footprint, "available_memory", lambda device: need - 1)
    with pytest.raises(
        TmtError,
        match=r"^the model has [\d,]+ parameters and [\d,]+ target pieces: training it needs",
    ):
        check_fits(config, None, cpu)
    monkeypatch.setattr(footprint, "available_memory", lambda device: None)
    check_fits(config, None, cpu)  # where the memory is not known, nothing is refused


def test_tmt_train_refuses_a_model_no_machine_holds(tiny_experiment, tmp_path, capsys):
    """About 3e11 parameters (5 TB to train): one line, and no run directory made."""
    run_dir = tmp_path / "run"
    wide = ["model.d_model=65536", "model.d_ff=1048576"]
    args = ["train", "--config", str(tiny_experiment), "--run-dir", str(run_dir), "--set", *wide]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: the model has ") and err.count("\n") == 1, err
    assert "make model.d_model, model.d_ff, the layers, the vocabulary or train.max_tokens" in err
    assert not run_dir.exists()


def test_a_vocabulary_whose_logits_no_machine_holds_is_refused(tiny_experiment, tmp_path, capsys):
    """3M pieces of width 8 are 24M parameters (0.4 GB with Adam), but a batch of 4096 tokens
    has 49 GB of logits with their gradient: the kernel killed such a run at its first update."""
    run_dir = tmp_path / "run"
    sizes = ["model.d_model=8", "model.n_heads=1", "model.d_ff=8", "train.max_tokens=4096"]
    big = [*sizes, "tokenizer.vocab_size=3000000"]
    args = ["train", "--config", str(tiny_experiment), "--run-dir", str(run_dir), "--set", *big]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: the model has ") and " and 3,000,000 target pieces: " in err
    assert "4 a token and piece for the logits of a batch of train.max_tokens=4096" in err
    assert not run_dir.exists()
