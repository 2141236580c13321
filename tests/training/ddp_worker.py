"""Run by test_distributed.py under torchrun (two ranks, on one node or two); also the
single-process twin.

Every rank trains a tiny model for a few updates (STEPS, or the second argument) on synthetic
token batches and writes its final parameters to OUT/rank{R}.pt; rank 0 also writes the run's
checkpoints under OUT/run.
"""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch

from transformer_mt.config import ExperimentConfig, ModelConfig, TrainConfig
from transformer_mt.data.batching import collate
from transformer_mt.data.cursor import BatchIterator
from transformer_mt.data.encoding import EncodedCorpus
from transformer_mt.data.pipeline import TrainData
from transformer_mt.data.token_column import TokenColumn
from transformer_mt.data.tokenizer import PAD_ID
from transformer_mt.model import build_model
from transformer_mt.training.distributed import (
    DistributedContext,
    init_distributed,
    shutdown_distributed,
)
from transformer_mt.training.trainer import Placement, Trainer

VOCAB = 50
STEPS = 3


def tiny_trainer(
    run_dir: Path,
    dist: DistributedContext,
    update_freq: int,
    compile: bool = False,
    max_steps: int = STEPS,
) -> Trainer:
    """Same initial weights and corpus on every call; dropout off so runs can be compared."""
    rng = np.random.default_rng(0)
    rows = [rng.integers(4, VOCAB, rng.integers(3, 12)).tolist() for _ in range(96)]
    corpus = EncodedCorpus(TokenColumn.from_lists(rows), TokenColumn.from_lists(rows[::-1]))
    config = ExperimentConfig(
        model=ModelConfig(d_model=32, n_heads=4, n_layers=2, d_ff=64, dropout=0.0),
        train=TrainConfig(
            max_steps=max_steps,
            max_tokens=64,
            update_freq=update_freq,
            lr=1e-3,
            warmup_steps=1,
            valid_bleu=False,
            log_every=1,
            clip_norm=1.0,
            compile=compile,
            precision="fp32",  # auto would take bf16 on CPUs that have it
        ),
    )
    torch.manual_seed(0)
    model = build_model(config.model, VOCAB, VOCAB, PAD_ID)
    data = TrainData(
        train=BatchIterator(corpus, 64, seed=1, rank=dist.rank, world_size=dist.world_size),
        valid_batches=[collate(corpus, np.arange(8))],
        valid_sources=None,
        valid_references=[],
    )
    # Checkpoints need only the bytes (not empty: torch.load(weights_only=True) refuses b"").
    tokenizer = SimpleNamespace(model_bytes=b"unused", table=None)
    return Trainer(
        config, model, data, (tokenizer, tokenizer), run_dir, place=Placement("cpu", dist)
    )


if __name__ == "__main__":
    out = Path(sys.argv[1])
    dist = init_distributed("cpu")
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else STEPS
    trainer = tiny_trainer(out / "run", dist, update_freq=1, max_steps=steps)
    trainer.train()
    torch.save(trainer.model.state_dict(), out / f"rank{dist.rank}.pt")
    # As run.py leaves: together, or a rank tearing gloo down while rank 0 still saves can
    # abort it (`terminate called without an active exception`; seen once under load).
    dist.barrier()
    shutdown_distributed(dist)


def assert_trained_alike(trained: dict, reference: dict) -> None:
    """Two state dicts trained from the same start by runs that differ only in float rounding."""
    for name, value in reference.items():
        if name.endswith("k_proj.bias"):
            # Softmax ignores a shift shared by all keys, so this gradient is zero up to float
            # noise, which Adam's g / sqrt(v) blows up to full-size steps of random sign.
            continue
        torch.testing.assert_close(trained[name], value, rtol=1e-4, atol=1e-5, msg=name)
